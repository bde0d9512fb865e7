"""The scope wing: the scheduler's watched-namespace list equal to the sandbox namespaces, the
scheduler rolled onto it, and its RBAC there, kept by three loops, each the single writer of its
objects and coupled to the others only through what is recorded in the cluster:

- the list loop (`list_loop`): the namespaces that belong → the target's list and its ledger (the
  ledger's generation counts the operator's list writes);
- the roll loop (`roll_loop`): the list the running scheduler was rolled for (its pod template's
  hash, generation and `rolled-at`) vs the list now → patch now, at the interval's end, or nothing;
- the grants loop (`grant_loop`): where the binding may grant vs our labelled RoleBindings →
  creates, deletes, SubjectAccessReviews.

Each has its own coalescer and lock (`controller.state.Loop`), decides once per wake in
`core/scope/` and keeps the frozen state that decision returned. A loop wakes the others after its
writes (the list loop both, the grants loop the roll); what they read then is the cluster, never
another loop's memory. After a signalled wake, ScopeSynced is reported from the three latest results
(`core.scope.report`) and a status flush is requested.

Signals, per binding:
- namespace watch events (`on_namespace`) wake the list loop at once; what arrives while it writes
  is folded into its next wake (group commit), at most `scope_max_writes_per_second`;
- a Pending sandbox pod naming our scheduler in a matching namespace outside the list
  (`on_sandbox_pod`) wakes it at once: that pod is stuck until the scheduler watches its namespace;
- the binding's reconcile loop calls `sync` at every resync: the three loops in turn, level-triggered.
"""

from __future__ import annotations

import contextlib
from typing import AsyncIterator, Awaitable, Callable

from ...api.events import EventReason
from ...api.reasons import ScopeSynced
from ...adapters import targets
from ...core.compose import Part
from ...core.problems import Problem
from ...core.scope import pacing
from ...core.scope.grant_loop import GrantState
from ...core.scope.list_loop import ListState, moved
from ...core.scope.membership import NamespaceInfo
from ...core.scope.roll_loop import RollState
from ...core.scope.target_ref import TargetRef
from .. import placement
from ..coalescer import Coalescer
from ..context import Context
from ..state import BindingState, Loop, ScopeMemory
from ..status_writer import request_flush
from . import facts, grant_loop, list_loop, roll_loop, slo

POD_RECHECK_SECONDS = 2.0


def memory(ctx: Context, state: BindingState) -> ScopeMemory:
    """The binding's three loops, made on first use from what its status recorded (a restart)."""
    if state.scope is None:
        section = state.status.get("scope") or {}
        pre, rolled_at = section.get("preexisting"), section.get("lastRollTime")
        added = tuple(sorted(a for a in section.get("added") or [] if isinstance(a, str)))
        listed = ListState(TargetRef.from_wire(section.get("target")),  # an upgrade: what status recorded
                           tuple(sorted(pre)) if isinstance(pre, list) else None, added)
        # A restart (a new leader) keeps rolls rationed: the last one as status recorded it (or the
        # template, if later: its status flush was lost).
        rolls = RollState(pacing.monotonic_of(rolled_at, ctx.now_iso(), ctx.monotonic()),
                          rolled_at if isinstance(rolled_at, str) else None)
        state.scope = ScopeMemory(
            Loop(listed, _runs(ctx, state, "scope list", lambda: list_loop.run(ctx, state, periodic=False),
                               window=lambda: ctx.config.scope_window_seconds, after_list=True)),
            Loop(rolls, _runs(ctx, state, "scheduler roll", lambda: roll_loop.run(ctx, state))),
            Loop(GrantState(), _runs(ctx, state, "scope grants", lambda: grant_loop.run(ctx, state, periodic=False))))
    return state.scope


def _runs(ctx: Context, state: BindingState, name: str, wake: Callable[[], Awaitable[None]],
          window: Callable[[], float] = lambda: 0.0, after_list: bool = False) -> Coalescer:
    async def signalled() -> None:
        if not ctx.bindings.is_current(state) or not state.active or state.discovery is None:
            return  # not reconciled yet (the first reconcile syncs), gone, or the younger of two bindings
        await wake()
        part = None if state.deleted else facts.report(ctx, state, after_list)
        if part is not None:
            state.report(part)
            request_flush(ctx, state, before=placement.report)

    return Coalescer(signalled, window=window, clock=ctx.monotonic, sleep=ctx.sleep, name=f"{name} of {state.ref}",
                     min_interval=lambda: 1.0 / max(ctx.config.scope_max_writes_per_second, 0.01))


@contextlib.asynccontextmanager
async def held(ctx: Context, state: BindingState) -> AsyncIterator[ScopeMemory]:
    """No wake of any of the three loops in flight (a reconcile admitting a new spec, a Restore)."""
    mem = memory(ctx, state)
    async with mem.list_loop.lock, mem.roll_loop.lock, mem.grant_loop.lock:
        yield mem


# ---------------------------------------------------------------- signals


def _member(state: BindingState, info: NamespaceInfo | None) -> tuple[bool, bool]:
    """(matches sandboxNamespaces, belongs: matches and not terminating)."""
    matcher = state.matcher
    if info is None or matcher is None:  # no matcher: not admitted
        return False, False
    match = matcher(info.name, info.labels)
    return match, match and not info.terminating


def on_namespace(ctx: Context, name: str, before: NamespaceInfo | None, after: NamespaceInfo | None,
                 at: float) -> None:
    """A namespace changed (already applied to the cache): wake the list loop of the bindings whose list it changes."""
    for state in ctx.bindings:
        if state.spec is None or state.deleted:
            continue
        matched_before, was = _member(state, before)
        matched_now, now = _member(state, after)
        if state.scope is not None:
            state.scope.pod_signalled.discard(name)  # the watch knows it now (or it is gone)
        if not (matched_before or matched_now):
            continue
        mem = memory(ctx, state)
        slo.created(ctx, state, mem, before, after, now)
        if mem.sandbox is not None:  # keep the membership set current: a wake need not scan every namespace
            if now:
                mem.sandbox.add(name)
            else:
                mem.sandbox.discard(name)
        m = mem.list_loop.latest
        if was != now or m.known is None or (now and name not in m.known) or (not now and name in m.added):
            mem.list_loop.runs.signal(at=at)


def on_sandbox_pod(ctx: Context, state: BindingState, body: dict) -> None:
    """A Pending pod for our scheduler in a matching namespace outside the list: wake the list loop at once."""
    if state.spec is None or state.deleted:
        return
    scheduler_name = state.discovery.name if state.discovery else None
    pod_spec = body.get("spec") or {}
    if not scheduler_name or pod_spec.get("schedulerName") != scheduler_name or pod_spec.get("nodeName"):
        return
    if (body.get("status") or {}).get("phase", "Pending") != "Pending":
        return
    namespace = (body.get("metadata") or {}).get("namespace") or ""
    info = ctx.namespaces.get(namespace)
    if info is not None and info.terminating:
        return
    matcher = state.matcher
    if matcher is None or not matcher(namespace, info.labels if info else {}):
        return
    mem = memory(ctx, state)
    m = mem.list_loop.latest
    if m.cluster or (m.known is not None and namespace in m.known):
        # Watched as far as we know; but someone may have reverted the target: re-read it, at
        # most once per POD_RECHECK_SECONDS per binding (later ones are deferred, not lost),
        # unless the target's watch has delivered nothing since we last read or wrote it (another
        # writer's change would have woken the binding: a re-read would find what we hold).
        if not _target_unchanged(ctx, mem):
            _recheck(ctx, mem)
        return
    if info is None:
        mem.pod_signalled.add(namespace)
    mem.list_loop.runs.signal(urgent=True)


def _target_unchanged(ctx: Context, mem: ScopeMemory) -> bool:
    ref = mem.list_loop.latest.target_ref
    return ref is not None and facts.unchanged(ctx, ref, mem.parsed.held)


def _recheck(ctx: Context, mem: ScopeMemory) -> None:
    now = ctx.monotonic()
    if now >= mem.next_recheck:
        mem.next_recheck = now + POD_RECHECK_SECONDS
        mem.list_loop.runs.signal()
    elif mem.recheck_handle is None:
        def later() -> None:
            mem.recheck_handle = None
            _recheck(ctx, mem)
        mem.recheck_handle = ctx.timers.later(mem.next_recheck - now, later, "pod-triggered re-read")


# ---------------------------------------------------------------- the resync


async def sync(ctx: Context, state: BindingState) -> Part:
    """The binding's resync: each loop wakes in turn, level-triggered (the list read afresh and drift
    corrected, our RoleBindings refreshed and the cluster-wide review asked again, the template
    compared with the list); ScopeSynced from their results."""
    memory(ctx, state)
    await list_loop.run(ctx, state, periodic=True)
    await grant_loop.run(ctx, state, periodic=True)
    await roll_loop.run(ctx, state, periodic=True)
    part = facts.report(ctx, state)
    assert part is not None  # the list loop has kept a result, or its problem
    return part


# ---------------------------------------------------------------- deletion


async def restore(ctx: Context, state: BindingState, discover) -> None:
    """deletionPolicy Restore: the names we added leave the list (not alwaysInclude, not preexisting), the
    scheduler is rolled onto it (the roll decision, as the binding leaving), and our RoleBindings go."""
    memory(ctx, state)
    state.close()  # no more signalled wakes, retries or rolls while (and after) it restores
    async with held(ctx, state) as mem:
        if state.spec is None:
            return
        if state.discovery is None:
            state.discovery = await discover(ctx, state)
        try:
            d = state.discovery
            if d.forbidden:
                raise Problem(ScopeSynced.FORBIDDEN, d.forbidden)
            target = facts.target(ctx, state, mem)
            left = moved(mem.list_loop.latest, target.ref())
            if left is not None:  # switched, and deleted before the next wake
                await list_loop.leave(ctx, state, mem, left)
            values = await list_loop.restore_target(ctx, state, mem, target)
            problem = await roll_loop.restore(ctx, state, target, values) if values is not None else None
            if problem is not None:
                ctx.event(state, EventReason.SCOPE_NOT_RESTORED, f"{problem.message}; the scheduler was not rolled "
                          "onto the restored list")
        except (Problem, targets.TargetFailed) as exc:
            ctx.event(state, EventReason.SCOPE_NOT_RESTORED, f"{facts.problem_of(exc).message}; the list was left as is")
    await grant_loop.remove_all(ctx, state)


async def revoke(ctx: Context, state: BindingState) -> None:
    """A refused binding keeps no grant: remove ours once (not at every refused reconcile)."""
    if state.scope is not None and state.scope.grant_loop.latest.granted == frozenset():
        return
    await grant_loop.remove_all(ctx, state)
