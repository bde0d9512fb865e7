"""The status writer: compose the parts (pure), compare, patch only what changed.

`flush` writes at once (end of a reconcile); `request_flush` coalesces bursts (pod churn) into
at most one patch per `status_min_interval_seconds`, through the shared Coalescer. One event
per condition whose status (or, while False, reason) changed from a state it had: a condition's
first state (none before, or NotReconciled) is no change, and posts nothing unless it is False (a
Warning that names the fix), so a healthy binding's first reconcile says only what it wrote.
"""

from __future__ import annotations

import logging
from typing import Callable

from ..adapters import kube as k
from ..adapters import logfields
from ..api.reasons import CONDITION_TYPES, Common, ConditionType
from ..core import compose, pause, resync
from ..core import conditions as c
from . import runner_record
from .coalescer import Coalescer
from .context import Context
from .state import BindingState

log = logging.getLogger("sunk_sandbox_operator")


async def flush(ctx: Context, state: BindingState) -> bool:
    """Compose and write the status if it differs from the stored one. True if written."""
    async with state.flush_lock:
        if state.deleted:
            return False
        paused = pause.MESSAGE if state.paused else None  # then only the pause is written (core/pause.py)
        if not paused and any(t not in state.parts for t in CONDITION_TYPES[1:]):
            # Not every concern has been observed since this process started (a restart, a new
            # leader): composing now would flip conditions to NotReconciled and back. Wait.
            return False
        ctx.failpoints.hit("before-status-flush")
        parts = pause.parts() if paused else [state.parts[t] for t in CONDITION_TYPES[1:]]
        # The generation the parts were computed for: a spec edited since is not observed yet.
        generation = state.reconciled_generation if state.reconciled_generation is not None else state.generation
        if paused and state.reconciled_generation is None:  # paused since this process started: not observed
            generation = state.status.get("observedGeneration") or generation
        note = resync.decide(state.spec.resync_interval, ctx.config.min_resync_seconds).note if state.spec else None
        runner = runner_record.section(state)
        new = compose.compose(state.status, parts, generation, ctx.now_iso(), state.handled_request, note,
                              {"runner": runner} if runner is not None else None, paused)
        if compose.without_volatile(new) == compose.without_volatile(state.status):
            return False
        patch = compose.merge_patch(state.status, new)
        if patch is None:
            return False
        try:
            written = await ctx.kube.patch_binding_status(state.namespace, state.name, patch)
        except k.NotFound:
            return False
        said = state.conditions_written
        old_conditions = said if said is not None else state.status.get("conditions") or []
        state.status = dict(written.get("status") or new)
        state.counters.status_patches += 1
        state.conditions_written = list(state.status.get("conditions") or [])
        condition_events(ctx, state, old_conditions, state.conditions_written)
        return True


def request_flush(ctx: Context, state: BindingState,
                  before: Callable[[Context, BindingState], None] | None = None) -> None:
    """Coalesced flush; `before` refreshes parts derived from caches (placement) right before it."""
    if state.deleted:
        return
    if state.flusher is None:
        async def run() -> None:
            if state.deleted:
                return
            if before is not None and state.spec is not None and not state.paused:
                before(ctx, state)
            await flush(ctx, state)

        state.flusher = Coalescer(run, min_interval=lambda: ctx.config.status_min_interval_seconds,
                                  clock=ctx.monotonic, sleep=ctx.sleep, name=f"status flush of {state.ref}",
                                  context=logfields.context_with(binding=state.ref, namespace=state.namespace))
    state.flusher.signal()


def condition_events(ctx: Context, state: BindingState, old: list[dict], new: list[dict]) -> None:
    """One event per condition whose status flipped, or whose reason changed while False; a first
    state only when False. Not into or out of a pause: that has its one event (controller/reconcile.py)."""
    for cond in new:
        if cond["type"] == ConditionType.READY or cond.get("reason") in (Common.NOT_RECONCILED, Common.PAUSED):
            continue
        before = c.find(old, cond["type"])
        if before and before.get("reason") == Common.PAUSED:
            continue
        if (before is None or before.get("reason") == Common.NOT_RECONCILED) and cond["status"] != "False":
            continue
        # True→True reason changes (e.g. DriftCorrected) come with their own explicit event.
        if before and before.get("status") == cond["status"] and (
                cond["status"] != "False" or before.get("reason") == cond["reason"]):
            continue
        kind = "Warning" if cond["status"] == "False" else "Normal"
        ctx.transition(state, kind, cond["reason"], f"{cond['type']}: {cond.get('message', '')}")
