"""Kubernetes Events on bindings, posted by the operator itself (core/v1 Events).

Posting does not depend on running inside a kopf handler, so events from the informers'
tasks and the coalescers reach the API like any other. Each post is a background task; a
failure is logged at debug and never breaks a reconcile. Storms are prevented upstream
(hazard events are rate-limited per binding and kind; a condition's first state posts nothing
unless it is False). One event that completes another (api/events.py FOLDS_INTO: the roll after
a scope write), posted on the same binding within FOLD_SECONDS of it, amends that event (its
message and lastTimestamp, one PATCH) instead of adding one: `kubectl describe` shows one line
per thing the operator did.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import os
import socket
import time
from dataclasses import dataclass
from typing import Callable, Protocol

from ..api.events import FOLDS_INTO
from ..core.redact import clean
from . import kube as k

log = logging.getLogger("sunk_sandbox_operator")

MAX_MESSAGE = 1024
COMPONENT = "sunk-sandbox-operator"
FOLD_SECONDS = 5.0   # a roll is made in the sync that wrote the list, after its grants
MAX_FOLDABLE = 1024  # bindings whose last foldable event is remembered (expired ones go first)


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


@dataclass
class _Posted:
    """An event that a later one may amend: its reason, message, when, and the task creating it."""

    reason: str
    message: str
    at: float
    created: asyncio.Task


class KubeEventSink:
    def __init__(self, kube: k.KubeAPI, now_iso: Callable[[], str] | None = None,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.kube = kube
        self.now_iso = now_iso or (lambda: dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"))
        self.monotonic = monotonic
        self.instance = os.environ.get("POD_NAME") or socket.gethostname()
        self._tasks: set[asyncio.Task] = set()
        self._foldable: dict[str, _Posted] = {}  # binding uid -> its last event another may amend

    def __call__(self, body: dict, kind: str, reason: str, message: str) -> None:
        obj = event_object(body, kind, reason, message, self.now_iso(), self.instance)
        uid, now = str((body.get("metadata") or {}).get("uid") or ""), self.monotonic()
        last = self._foldable.get(uid)
        if last is not None and FOLDS_INTO.get(str(reason)) == last.reason and now - last.at <= FOLD_SECONDS:
            del self._foldable[uid]  # one amendment per event
            self._spawn(self._amend(last, obj))
            return
        created = self._spawn(self._post(obj))
        if str(reason) in FOLDS_INTO.values() and uid:
            self._remember(uid, _Posted(str(reason), obj["message"], now, created))

    def _spawn(self, work) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def _remember(self, uid: str, posted: _Posted) -> None:
        self._foldable.pop(uid, None)
        if len(self._foldable) >= MAX_FOLDABLE:
            for key in [key for key, p in self._foldable.items() if posted.at - p.at > FOLD_SECONDS]:
                del self._foldable[key]
            while len(self._foldable) >= MAX_FOLDABLE:  # all recent: the oldest goes
                del self._foldable[next(iter(self._foldable))]
        self._foldable[uid] = posted

    async def _post(self, obj: dict) -> str | None:
        """The created event's name (None: not posted)."""
        try:
            created = await self.kube.create_event(obj["metadata"]["namespace"], obj)
        except Exception:
            log.debug("event %s not posted", obj["reason"], exc_info=True)
            return None
        return str((created.get("metadata") or {}).get("name") or "") or None

    async def _amend(self, first: _Posted, obj: dict) -> None:
        """`first`'s message followed by `obj`'s; `obj` posted on its own when `first` was not."""
        name = await asyncio.shield(first.created)
        if name is None:
            await self._post(obj)
            return
        message = f"{first.message}; {obj['reason']}: {obj['message']}"[:MAX_MESSAGE]
        try:
            await self.kube.merge_patch_event(obj["metadata"]["namespace"], name,
                                              {"message": message, "lastTimestamp": obj["lastTimestamp"]})
        except Exception:
            log.debug("event %s not amended; posted on its own", name, exc_info=True)
            await self._post(obj)

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
