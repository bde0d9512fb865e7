"""e2e tests share the integration fixtures (emulator over loopback, token Secret helpers)."""

from tests.integration.conftest import emulator  # noqa: F401  (fixture)
