"""Structured fields on log lines: `binding`, `namespace`, `reason`, `pod`, `job`.

The work in progress says whom it is about once: a binding's task binds `binding` and `namespace`
(controller/lifecycle.py), and every line logged while it runs (ours, kopf's, a library's) carries
them, in the tasks it starts too (asyncio copies the context into a new task; a Coalescer keeps the
context it was made in). A call adds its own with `extra={"reason": ...}`, which win over the bound
ones. `ContextFields` (a filter on the root logger's handlers, before `logsafe.SafeRecords`, which
redacts these fields like the message) copies them onto each record; with `--log-format=json`
(kopf's formatter, python-json-logger) every record attribute is a field of the line, so Loki or
Elasticsearch filter by binding. The text formats print the message alone (it names the binding).
"""

from __future__ import annotations

import contextvars
import logging
from typing import Mapping

FIELDS = ("binding", "namespace", "reason", "pod", "job")

_bound: contextvars.ContextVar[Mapping[str, str]] = contextvars.ContextVar("ssb_log_fields", default={})


def _checked(fields: Mapping[str, str | None]) -> dict[str, str]:
    unknown = set(fields) - set(FIELDS)
    if unknown:
        raise ValueError(f"not a log field: {sorted(unknown)} (known: {', '.join(FIELDS)})")
    return {k: v for k, v in fields.items() if v}


def bind(**fields: str | None) -> contextvars.Token:
    """Add `fields` to every line logged from here on in this task (and the tasks it starts)."""
    return _bound.set({**_bound.get(), **_checked(fields)})


def reset(token: contextvars.Token) -> None:
    _bound.reset(token)


def current() -> Mapping[str, str]:
    return _bound.get()


def context_with(**fields: str | None) -> contextvars.Context:
    """A copy of the current context with `fields` bound: for a task started on another's behalf
    (a binding's status flush signalled from the pod informer)."""
    ctx = contextvars.copy_context()
    ctx.run(bind, **fields)
    return ctx


class ContextFields(logging.Filter):
    """Copies the bound fields onto each record that does not carry its own."""

    def filter(self, record: logging.LogRecord) -> bool:
        for key, value in _bound.get().items():
            if key not in record.__dict__:
                setattr(record, key, value)
        return True
