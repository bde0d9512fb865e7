"""Kubernetes Events on bindings, posted through kopf (which batches and rate-limits them)."""

from __future__ import annotations

import logging
from typing import Callable, Protocol

log = logging.getLogger("sunk_sandbox_operator")

MAX_MESSAGE = 1024


class EventSink(Protocol):
    def __call__(self, body: dict, kind: str, reason: str, message: str) -> None: ...


def kopf_sink(body: dict, kind: str, reason: str, message: str) -> None:
    import kopf

    kopf.event(body, type=kind, reason=str(reason), message=message[:MAX_MESSAGE])


def safe(sink: EventSink) -> Callable[[dict, str, str, str], None]:
    """Events are best effort: a failing sink never breaks a reconcile."""
    def post(body: dict, kind: str, reason: str, message: str) -> None:
        try:
            sink(body, kind, reason, message)
        except Exception:
            log.debug("event %s not posted", reason, exc_info=True)
    return post
