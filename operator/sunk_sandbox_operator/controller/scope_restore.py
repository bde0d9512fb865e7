"""Leaving a scope target: Restore there on deletion, and when the list moves to another target.

Our names leave the list unless another live binding claims them (`core.scope.restore_plan`),
and our ledger entry goes in the same write. What we own in a target is its ledger entry (before
the first ledger write, an upgrade: status.scope); `others` is what the other live bindings there
claim.
"""

from __future__ import annotations

from ..core.problems import Problem
from ..api.events import EventReason
from ..adapters import kube as k
from ..adapters import targets
from ..core import scope as sc
from ..core import scope_errors
from ..core.ledger import Entry
from ..core.target_ref import TargetRef
from . import retry
from . import roll as rolling
from .context import Context
from .state import BindingState, ScopeMemory


def problem_of(exc: Problem | targets.TargetFailed) -> Problem:
    """A failure of the scope pipeline as reported: a Problem as it is, what a target could not do
    classified (`core.scope_errors.classify`: the reason and the fix)."""
    return scope_errors.classify(exc.error) if isinstance(exc, targets.TargetFailed) else exc


def ours(state: BindingState, read: targets.TargetRead, mem: ScopeMemory) -> Entry:
    """What this binding owns in the list: the target's ledger; before the first ledger write (an
    upgrade from a version that kept it in status), what status.scope recorded."""
    entry = read.ledger.get(state.ref)
    if entry is not None:
        return entry
    return Entry(tuple(mem.added), tuple(mem.preexisting) if mem.preexisting is not None else None)


def others(ctx: Context, state: BindingState, read: targets.TargetRead) -> frozenset[str]:
    """What the other live bindings on this target added (their ledger entries). An entry is dead
    only when its binding is known gone: not in the binding cache (or refused) and not known here."""
    known = {s.ref for s in ctx.bindings}
    cache = ctx.binding_cache
    live = (lambda ref: True) if not cache.ready else (lambda ref: cache.allowed(ref) or ref in known)
    return frozenset(n for ref, e in read.ledger.entries.items() if ref != state.ref and live(ref) for n in e.added)


async def leave(ctx: Context, state: BindingState, mem: ScopeMemory, new_ref: TargetRef) -> None:
    """The spec (or discovery) moved the list to another target: Restore in the one we kept
    (our names and our ledger entry leave it), then start fresh on the new one. A target the
    binding's namespace may no longer reach is not touched (said in an event)."""
    old = targets.build(ctx.kube, mem.target_ref) if mem.target_ref else None
    if old is not None and not ctx.tenancy.may_reach(state.namespace, old.namespace):
        ctx.event(state, EventReason.SCOPE_NOT_RESTORED, f"the scope target moved from {old.describe()}, which "
                  f"bindings in {state.namespace} may not reach: the names added there were left as they are")
    elif old is not None:
        try:
            await restore_target(ctx, state, mem, old, roll=False)
        except (Problem, targets.TargetFailed) as exc:
            ctx.event(state, EventReason.SCOPE_NOT_RESTORED, f"the scope target moved from {old.describe()}: "
                      f"{problem_of(exc).message}; the names added there were left as they are")
    mem.switch_target(new_ref)


async def restore_target(ctx: Context, state: BindingState, mem: ScopeMemory, target: targets.ScopeTarget,
                          roll: bool = True) -> None:
    spec = state.admitted_spec

    async def attempt(_: int) -> sc.ScopePlan | None:
        read = await target.read()
        if read.list.error or read.list.scope_type == "cluster":
            return None
        mine = ours(state, read, mem)
        p = sc.restore_plan(list(read.list.values or []), spec.scope.always_include, mine.preexisting, mine.added,
                            others(ctx, state, read))
        if p.changed or read.ledger.get(state.ref) is not None:
            ledger = read.ledger.with_entry(state.ref, None)
            rv = await target.write(read, p.new_list if p.changed else None,
                                    ledger.next_generation() if p.changed else ledger)
            ctx.depends.wrote(target.kind, target.namespace, target.name, rv)
        return p

    p = await retry.optimistic(attempt, lost_race=lambda e: isinstance(e, k.Conflict),
                               retries=ctx.config.scope_conflict_retries, sleep=ctx.sleep)
    if p is None or not p.changed:
        return
    mem.added, mem.known_list = [], frozenset(p.new_list)
    ctx.event(state, EventReason.SCOPE_RESTORED, f"{target.describe()}: removed {sc.names(p.diff.removed)}")
    if roll and target.can_roll and spec.scope.restart_scheduler:
        await rolling.roll(ctx, state, p.new_list)
