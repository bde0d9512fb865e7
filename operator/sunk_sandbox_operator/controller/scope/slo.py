"""The placement SLO (I/O side): what the three loops saw, into the binding's `PlacementClock`
(core/scope/slo.py); what it returns, into ssb_placement_ready_seconds.

The clock keeps wall-clock seconds (a namespace's creationTimestamp is the start, written by the API
server: one second's resolution). Observe mode writes nothing, so nothing is timed.
"""

from __future__ import annotations

import logging
from typing import Collection

from ...core.scope.grant_loop import GrantState
from ...core.scope.membership import NamespaceInfo
from ...core.scope.roll_loop import RollObservation
from ...core.scope.slo import Placed, running
from ..context import Context
from ..state import BindingState, ScopeMemory

log = logging.getLogger("sunk_sandbox_operator")

POLL_SECONDS = 1.0  # the roll loop looks at the scheduler's rollout this often while a namespace waits for it


def _timed(state: BindingState) -> bool:
    return state.spec is not None and state.admitted_spec.mode != "Observe"


def created(ctx: Context, state: BindingState, mem: ScopeMemory, before: NamespaceInfo | None,
            after: NamespaceInfo | None, belongs: bool) -> None:
    """A namespace event: a new one that belongs starts its clock; one that stopped belonging leaves it."""
    if not belongs or after is None:
        mem.slo.gone(after.name if after is not None else before.name if before is not None else "")
    elif before is None and _timed(state):
        mem.slo.created(after.name, after.created, ctx.wall())


def listed(ctx: Context, state: BindingState, mem: ScopeMemory, values: Collection[str] | None) -> None:
    """The list loop's wake kept the list `values` (None: scope type cluster)."""
    if mem.slo.waiting:
        mem.slo.listed(values, ctx.wall())
        _observe(ctx, state, mem.slo.expire(ctx.wall()))


def granted(ctx: Context, mem: ScopeMemory, g: GrantState) -> bool:
    """The grants loop's wake: where the scheduler may watch and bind pods. True when a namespace
    now waits for the roll stage (the roll loop is to look)."""
    if not mem.slo.awaits("granted"):
        return False
    p = g.permits
    mem.slo.granted(None if p.cluster else frozenset(g.granted or ()) | p.permitted, ctx.wall())
    return mem.slo.awaits("rolled")


def rolled(ctx: Context, state: BindingState, mem: ScopeMemory, obs: RollObservation) -> float | None:
    """The roll loop's wake: namespaces now placeable are observed. Seconds until it should look again
    (the rollout not Ready yet), or None."""
    if not mem.slo.waiting:
        return None
    now = ctx.wall()
    _observe(ctx, state, mem.slo.rolled(running(obs, mem.slo.rolls), now) + mem.slo.expire(now))
    return POLL_SECONDS if mem.slo.awaits("rolled") else None


def rolled_for(mem: ScopeMemory, hash_: str, values: Collection[str] | None) -> None:
    """The roll loop patched the template to `hash_`, the hash of `values`."""
    if mem.slo.waiting and values is not None:
        mem.slo.rolled_for(hash_, values)


def _observe(ctx: Context, state: BindingState, placed: list[Placed]) -> None:
    for p in placed:
        ctx.metrics.placement_ready.labels(p.dominant).observe(p.seconds)
        if p.given_up:
            log.warning("namespace %s is not placeable for %s %.0f s after its creation (waiting for the %s stage)",
                        p.namespace, state.ref, p.seconds, p.dominant)
