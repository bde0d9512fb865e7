"""Kubernetes Events on bindings, posted by the operator itself (core/v1 Events).

Posting does not depend on running inside a kopf handler, so events from the informers'
tasks and the coalescers reach the API like any other. Each post is a background task; a
failure is logged at debug and never breaks a reconcile. Storms are prevented upstream
(hazard events are rate-limited per binding and kind).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import os
import socket
from typing import Callable, Protocol

from ..core.redact import clean
from . import kube as k

log = logging.getLogger("sunk_sandbox_operator")

MAX_MESSAGE = 1024
COMPONENT = "sunk-sandbox-operator"


class EventSink(Protocol):
    def __call__(self, body: dict, kind: str, reason: str, message: str) -> None: ...


def event_object(body: dict, kind: str, reason: str, message: str, now: str, instance: str) -> dict:
    meta = body.get("metadata") or {}
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{meta.get('name', 'binding')}.", "namespace": meta.get("namespace")},
        "involvedObject": {"apiVersion": body.get("apiVersion"), "kind": body.get("kind"), "name": meta.get("name"),
                           "namespace": meta.get("namespace"), "uid": meta.get("uid")},
        "type": kind,
        "reason": str(reason),
        "message": message[:MAX_MESSAGE],
        "source": {"component": COMPONENT},
        "reportingComponent": COMPONENT,
        "reportingInstance": instance,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }


class KubeEventSink:
    def __init__(self, kube: k.KubeAPI, now_iso: Callable[[], str] | None = None) -> None:
        self.kube = kube
        self.now_iso = now_iso or (lambda: dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"))
        self.instance = os.environ.get("POD_NAME") or socket.gethostname()
        self._tasks: set[asyncio.Task] = set()

    def __call__(self, body: dict, kind: str, reason: str, message: str) -> None:
        obj = event_object(body, kind, reason, message, self.now_iso(), self.instance)
        task = asyncio.get_running_loop().create_task(self._post(obj))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _post(self, obj: dict) -> None:
        try:
            await self.kube.create_event(obj["metadata"]["namespace"], obj)
        except Exception:
            log.debug("event %s not posted", obj["reason"], exc_info=True)

    async def drain(self) -> None:
        """Until every posted event has been sent (shutdown, tests)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)


def safe(sink: EventSink, redact: Callable[[str], str] = lambda text: text) -> Callable[[dict, str, str, str], None]:
    """Events are best effort: a failing sink never breaks a reconcile. Each message is one line,
    bounded, and `redact`ed (a known secret value replaced: core/redact.py) before it leaves."""
    def post(body: dict, kind: str, reason: str, message: str) -> None:
        try:
            sink(body, kind, reason, redact(clean(message, MAX_MESSAGE)))
        except Exception:
            log.debug("event %s not posted", reason, exc_info=True)
    return post
