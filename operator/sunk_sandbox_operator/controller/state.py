"""Per-binding runtime state and the status writer (imperative shell).

Each binding has one `BindingState`: its latest body, the `Part` each concern last reported, and
a wake event for its reconcile loop. Status is written by `flush`, which composes the parts
(pure), compares with what the API server holds, and patches only when something changed;
`request_flush` coalesces bursts (pod churn) into at most one patch per interval.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from . import conditions as c
from . import kube, metrics
from . import model as m
from . import status as st
from .config import Config

log = logging.getLogger("sunk_sandbox_operator")

Key = tuple[str, str]  # (namespace, name)


def now_iso() -> str:
    return dt.datetime.now(dt.timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def not_reconciled(condition: str) -> st.Part:
    return st.Part(condition, "Unknown", "NotReconciled", "not reconciled yet")


@dataclass
class BindingState:
    namespace: str
    name: str
    body: dict
    spec: m.BindingSpec | None = None
    spec_error: str | None = None
    status: dict = field(default_factory=dict)          # as last read from / written to the API
    parts: dict[str, st.Part] = field(default_factory=dict)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    extras: dict[str, Any] = field(default_factory=dict)  # per-concern scratch (trackers, caches)
    deleted: bool = False
    _flush_task: asyncio.Task | None = None
    _last_flush: float = 0.0
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    @property
    def key(self) -> Key:
        return (self.namespace, self.name)

    @property
    def generation(self) -> int | None:
        return self.body.get("metadata", {}).get("generation")

    @property
    def created(self) -> str:
        return self.body.get("metadata", {}).get("creationTimestamp", "")

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"

    def update_body(self, body: dict) -> None:
        self.body = body
        self.status = dict(body.get("status") or {})
        try:
            self.spec, self.spec_error = m.parse_spec(body.get("spec") or {}), None
        except Exception as exc:  # the CRD validates first; this only catches schema drift
            self.spec, self.spec_error = None, str(exc)

    def report(self, part: st.Part) -> None:
        self.parts[part.condition] = part


class Registry:
    """All bindings this process knows, by (namespace, name)."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.bindings: dict[Key, BindingState] = {}
        self.event_sink: Callable[[dict, str, str, str], None] = _post_event
        # Refreshes parts derived from watch caches (placement) right before a coalesced write.
        self.before_flush: Callable[[BindingState], None] | None = None

    def ensure(self, body: dict) -> BindingState:
        meta = body["metadata"]
        key = (meta["namespace"], meta["name"])
        state = self.bindings.get(key)
        if state is None or state.body.get("metadata", {}).get("uid") != meta.get("uid"):
            state = BindingState(meta["namespace"], meta["name"], body)
            self.bindings[key] = state
        state.update_body(body)
        return state

    def forget(self, key: Key) -> None:
        state = self.bindings.pop(key, None)
        if state is not None:
            state.deleted = True
            if state._flush_task:
                state._flush_task.cancel()
            metrics.forget_binding(state.ref)

    # ------------------------------------------------------------ status

    async def flush(self, state: BindingState) -> bool:
        """Compose and write the status if it differs from the stored one. True if written."""
        async with state._lock:
            if state.deleted:
                return False
            parts = [state.parts.get(t) or not_reconciled(t) for t in m.CONDITION_TYPES if t != "Ready"]
            new = st.compose(state.status, parts, state.generation, now_iso())
            if st.without_volatile(new) == st.without_volatile(state.status):
                return False
            patch = st.merge_patch(state.status, new)
            if patch is None:
                return False
            try:
                written = await kube.patch_binding_status(state.namespace, state.name, patch)
            except kube.NotFound:
                return False
            old_conditions = state.status.get("conditions") or []
            state.status = dict(written.get("status") or new)
            state._last_flush = time.monotonic()
            metrics.STATUS_PATCHES.inc(binding=state.ref)
            self._condition_events(state, old_conditions, state.status.get("conditions") or [])
            metrics.set_conditions(state.ref, state.status.get("conditions") or [])
            return True

    def request_flush(self, state: BindingState) -> None:
        """Coalesce: one flush at most every `status_min_interval_seconds`.

        A request arriving while a flush is already writing is not lost: the task flushes again.
        """
        state.extras["flush_requested"] = True
        if state._flush_task is not None and not state._flush_task.done():
            return

        async def later() -> None:
            while state.extras.get("flush_requested") and not state.deleted:
                delay = max(0.0, state._last_flush + self.config.status_min_interval_seconds - time.monotonic())
                await asyncio.sleep(delay)
                state.extras["flush_requested"] = False
                try:
                    if self.before_flush is not None and state.spec is not None:
                        self.before_flush(state)
                    await self.flush(state)
                except Exception:
                    log.exception("status flush of %s failed", state.ref)
                    await asyncio.sleep(self.config.status_min_interval_seconds)
                # Paced by the last attempt, not the last write: composing the placement summary
                # is one pass over the binding's pods, and most pod events change nothing.
                state._last_flush = time.monotonic()

        state._flush_task = asyncio.create_task(later())

    def _condition_events(self, state: BindingState, old: list[dict], new: list[dict]) -> None:
        """One event per condition whose status or reason changed (Warning when it turned False)."""
        for cond in new:
            if cond["type"] == "Ready" or cond.get("reason") == "NotReconciled":
                continue
            before = c.find(old, cond["type"])
            # Status flips, and a new reason while False; True→True reason changes (e.g. DriftCorrected)
            # come with their own explicit event.
            if before and before.get("status") == cond["status"] and (
                    cond["status"] != "False" or before.get("reason") == cond["reason"]):
                continue
            kind = "Warning" if cond["status"] == "False" else "Normal"
            self.event(state, kind, cond["reason"], f"{cond['type']}: {cond.get('message', '')}")

    def event(self, state: BindingState, kind: str, reason: str, message: str) -> None:
        try:
            self.event_sink(state.body, kind, reason, message)
        except Exception:  # events are best effort; never break a reconcile
            log.debug("event %s on %s not posted", reason, state.ref, exc_info=True)


def _post_event(body: dict, kind: str, reason: str, message: str) -> None:
    import kopf

    kopf.event(body, type=kind, reason=reason, message=message[:1024])
