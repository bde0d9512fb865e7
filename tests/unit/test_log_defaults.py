"""At the shipped level (no --verbose) libraries that log one INFO line per request or object event
are quiet; their warnings still show, and --verbose shows everything."""

from __future__ import annotations

import logging

import httpx
import pytest

from sunk_sandbox_operator.__main__ import CHATTY_LOGGERS, quiet_by_default


@pytest.fixture(autouse=True)
def restore_levels():
    saved = {name: logging.getLogger(name).level for name in CHATTY_LOGGERS}
    yield
    for name, level in saved.items():
        logging.getLogger(name).setLevel(level)


async def call(caplog) -> list[logging.LogRecord]:
    caplog.clear()
    with caplog.at_level(logging.DEBUG):
        async with httpx.AsyncClient(transport=httpx.MockTransport(lambda r: httpx.Response(200))) as client:
            await client.post("http://127.0.0.1:1/coreweave.sandbox.v1.RunnerManagementService/GetManagedRunner")
        logging.getLogger("httpx").warning("a warning")
    return [r for r in caplog.records if r.name.startswith("httpx")]


async def test_no_line_per_runner_api_call_at_the_shipped_level(caplog) -> None:
    for name in CHATTY_LOGGERS:
        logging.getLogger(name).setLevel(logging.NOTSET)
    assert any(r.levelno == logging.INFO for r in await call(caplog))  # httpx does log each request at INFO
    quiet_by_default(verbose=False)
    records = await call(caplog)
    assert [r.getMessage() for r in records] == ["a warning"]
    assert not logging.getLogger("kopf.objects").isEnabledFor(logging.INFO)


async def test_verbose_shows_every_request(caplog) -> None:
    for name in CHATTY_LOGGERS:
        logging.getLogger(name).setLevel(logging.NOTSET)
    quiet_by_default(verbose=True)
    assert any(r.levelno == logging.INFO for r in await call(caplog))
