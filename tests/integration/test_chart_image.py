"""The chart's image reference (`helm template`): by tag by default (the chart's appVersion), by digest
when `image.digest` is set and `image.tag` is not (what the released chart pins: tests/e2e/test_release.py)."""

from __future__ import annotations

import pytest

from sunk_sandbox_operator import __version__
from tests.integration.test_helm_chart import container, render

pytestmark = [pytest.mark.integration, pytest.mark.needs_tool("helm")]

REPOSITORY = "ghcr.io/sunksandbox/sunk-sandbox-operator"
DIGEST = "sha256:" + "0123456789abcdef" * 4


@pytest.mark.parametrize(("sets", "image"), [
    ([], f"{REPOSITORY}:{__version__}"),
    ([f"image.digest={DIGEST}"], f"{REPOSITORY}@{DIGEST}"),
    ([f"image.digest={DIGEST}", "image.repository=mirror.example:5000/ssb"], f"mirror.example:5000/ssb@{DIGEST}"),
    ([f"image.digest={DIGEST}", "image.tag=dev"], f"{REPOSITORY}:dev"),  # a tag asked for wins over the pin
    (["image.tag=dev"], f"{REPOSITORY}:dev"),
], ids=["default", "digest", "digest on a mirror", "tag over digest", "tag"])
def test_the_image_is_pulled_by_tag_or_by_the_pinned_digest(sets, image):
    args = [a for s in sets for a in ("--set", s)]
    assert container(render(*args))["image"] == image
