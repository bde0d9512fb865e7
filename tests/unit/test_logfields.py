"""Structured log fields (adapters/logfields.py): every line logged for a binding carries `binding` and
`namespace` as JSON fields, an event's line its `reason` (and `pod`), known secret values are replaced
in the fields as in the message; and the log level (`--log-level`, SSB_LOG_LEVEL)."""

from __future__ import annotations

import asyncio
import json
import logging

import pytest

from sunk_sandbox_operator.__main__ import LOG_LEVELS, log_level
from sunk_sandbox_operator.adapters import logfields, logsafe
from sunk_sandbox_operator.api.events import EventReason
from sunk_sandbox_operator.controller.coalescer import Coalescer
from sunk_sandbox_operator.controller.status_writer import request_flush
from sunk_sandbox_operator.core.redact import REDACTED, Redactor

from tests.unit.fakes import harness_fixture  # noqa: F401 (fixture)

OPERATOR = "sunk_sandbox_operator"


class JsonLines(logging.Handler):
    """The root's handler as `--log-format=json` makes it (kopf's JSON formatter), keeping the objects."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        import kopf._core.actions.loggers as kopf_loggers

        self.setFormatter(kopf_loggers.make_formatter(kopf_loggers.LogFormat.JSON))
        self.lines: list[dict] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(json.loads(self.format(record)))


@pytest.fixture
def json_log():
    """The operator's logger writing JSON lines through the filters `lifecycle.start` installs on the root's
    handlers (here on a logger of the test's own, so pytest's capture is left alone)."""
    handler, logger = JsonLines(), logging.getLogger(OPERATOR)
    saved = logger.handlers, logger.propagate, logger.level
    logger.handlers, logger.propagate = [handler], False
    logger.setLevel(logging.DEBUG)
    redactor = Redactor()
    logsafe.install(redactor, logger)
    try:
        yield handler.lines, redactor
    finally:
        logger.handlers, logger.propagate = saved[0], saved[1]
        logger.setLevel(saved[2])


def test_every_line_of_a_bound_task_carries_the_binding_and_an_explicit_field_wins(json_log) -> None:
    lines, _ = json_log
    log = logging.getLogger(OPERATOR)

    async def binding_task() -> None:
        logfields.bind(binding="ns/b", namespace="ns")
        log.info("reconcile of %s failed", "ns/b")
        await asyncio.create_task(child())  # a task it starts inherits the fields
        log.info("with a reason", extra={"reason": "Forbidden", "namespace": "other"})

    async def child() -> None:
        log.warning("from a child task")

    async def other_task() -> None:
        log.info("leader election: acquired")

    async def main() -> None:
        await asyncio.gather(binding_task(), other_task())
    asyncio.run(main())
    by_message = {line["message"]: line for line in lines}
    assert by_message["reconcile of ns/b failed"] | {"binding": "ns/b", "namespace": "ns"} == \
        by_message["reconcile of ns/b failed"]
    assert by_message["from a child task"]["binding"] == "ns/b"
    assert (by_message["with a reason"]["reason"], by_message["with a reason"]["namespace"]) == ("Forbidden", "other")
    assert "binding" not in by_message["leader election: acquired"]  # another task's line: none
    assert all(line["severity"] in ("info", "warn") and line["timestamp"] for line in lines)


def test_a_secret_value_in_a_field_is_replaced(json_log) -> None:
    lines, redactor = json_log
    redactor.remember("tok-very-secret-value")
    token = logfields.bind(binding="ns/tok-very-secret-value")
    try:
        logging.getLogger(OPERATOR).info("x", extra={"reason": "tok-very-secret-value", "pod": ValueError("y")})
    finally:
        logfields.reset(token)
    (line,) = lines
    assert line["binding"] == f"ns/{REDACTED}" and line["reason"] == REDACTED and line["pod"] == "ValueError: y"
    assert "tok-very-secret-value" not in json.dumps(line)


def test_only_the_known_fields_can_be_bound() -> None:
    with pytest.raises(ValueError, match="not a log field"):
        logfields.bind(token="x")


async def test_a_coalescer_runs_in_the_context_it_was_made_in(json_log) -> None:
    """A status flush signalled from the pod informer's task logs with the binding's fields."""
    lines, _ = json_log

    async def run() -> None:
        logging.getLogger(OPERATOR).info("flushing")
    made = Coalescer(run, context=logfields.context_with(binding="ns/b", namespace="ns"), name="flush")
    made.signal()  # from this (unbound) task
    await made.wait_idle()
    assert [(line["message"], line.get("binding")) for line in lines] == [("flushing", "ns/b")]


async def test_events_are_logged_with_their_reason_and_pod(harness, json_log) -> None:
    lines, _ = json_log
    h = harness()
    state = h.binding()
    h.ctx.event(state, EventReason.GRACE_TOO_LONG, "pod ds-a/p uses 600 s", pod="ds-a/p")
    h.ctx.transition(state, "Normal", "Synced", "PolicySynced: routed")
    hazard, synced = [line for line in lines if line.get("reason")]
    assert hazard | {"binding": state.ref, "namespace": state.namespace, "reason": "GraceTooLong", "pod": "ds-a/p",
                     "severity": "warn"} == hazard
    assert (synced["reason"], synced["binding"], synced["severity"]) == ("Synced", state.ref, "info")
    assert "pod" not in synced


async def test_the_status_flusher_carries_its_binding(harness, json_log) -> None:
    lines, _ = json_log
    h = harness()
    state = h.binding()

    def before(ctx, st) -> None:
        logging.getLogger(OPERATOR).info("refreshing placement")
    request_flush(h.ctx, state, before)
    await h.run_until_idle()
    assert [line.get("binding") for line in lines if line["message"] == "refreshing placement"] == [state.ref]


def test_the_log_level_flag_the_variable_and_verbose(monkeypatch) -> None:
    errors: list[str] = []
    monkeypatch.delenv("SSB_LOG_LEVEL", raising=False)
    assert log_level(None, False, errors.append) == "info"
    assert log_level("warning", False, errors.append) == "warning"
    assert log_level(None, True, errors.append) == "debug"
    monkeypatch.setenv("SSB_LOG_LEVEL", "ERROR")
    assert log_level(None, False, errors.append) == "error"
    assert log_level("debug", False, errors.append) == "debug"  # the flag wins
    monkeypatch.setenv("SSB_LOG_LEVEL", "loud")
    log_level(None, False, errors.append)
    assert errors == ["SSB_LOG_LEVEL: 'loud' is not one of " + ", ".join(LOG_LEVELS)]
