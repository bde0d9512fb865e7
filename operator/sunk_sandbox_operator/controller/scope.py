"""The scope pipeline: keep the scheduler's watched-namespace list equal to the sandbox namespaces.

One sync (`controller.scope_sync`): gather (the target's list, the namespaces that belong) → decide
(`core.scope_plan`) → write with the read's precondition → roll the scheduler and keep grants
(`controller.roll`, `controller.grants`: I/O) → report ScopeSynced and status.scope
(`core.scope_outcome`). This module holds what starts syncs, and Restore.

Signals, per binding, go through one `Coalescer`:
- namespace watch events (`on_namespace`) start a write at once; what arrives while it is in flight
  is folded into the next one (group commit), at most `scope_max_writes_per_second`;
- a Pending sandbox pod naming our scheduler in a matching namespace outside the list
  (`on_sandbox_pod`) syncs at once: that pod is stuck until the scheduler watches its namespace;
- the binding's reconcile loop calls `sync` at every resync (drift correction).
One sync runs at a time per binding (a lock); signals during a sync cause one more after it.
"""

from __future__ import annotations

from ..core.problems import Problem
from ..adapters import targets
from ..api.events import EventReason
from ..api.reasons import ScopeSynced
from ..core.scope import pacing as pacing
from ..core.compose import Part
from ..core.scope.target_ref import TargetRef
from ..core.scope.membership import NamespaceInfo
from . import grants, placement, retry, scope_sync
from . import scope_restore as sr
from .coalescer import Coalescer
from .context import Context
from .state import BindingState, ScopeMemory
from .status_writer import request_flush

POD_RECHECK_SECONDS = 2.0


def memory(ctx: Context, state: BindingState) -> ScopeMemory:
    if state.scope is None:
        section = state.status.get("scope") or {}
        pre = section.get("preexisting")

        async def run() -> None:
            await _signalled_sync(ctx, state)

        recorded = section.get("target")
        rolled_at = section.get("lastRollTime")
        state.scope = ScopeMemory(
            preexisting=sorted(pre) if isinstance(pre, list) else None,
            added=sorted(a for a in section.get("added") or [] if isinstance(a, str)),
            target_ref=TargetRef.from_wire(recorded),
            # A restart (a new leader) keeps rolls rationed: the last one, as status recorded it.
            last_roll=pacing.monotonic_of(rolled_at, ctx.now_iso(), ctx.monotonic()),
            last_roll_at=rolled_at if isinstance(rolled_at, str) else None,
            roll_unread=True,  # ... or as the scheduler's template did, if later (its status flush was lost)
            syncer=Coalescer(run, window=lambda: ctx.config.scope_window_seconds,
                             min_interval=lambda: 1.0 / max(ctx.config.scope_max_writes_per_second, 0.01),
                             clock=ctx.monotonic,
                             sleep=ctx.sleep, name=f"scope sync of {state.ref}"),
        )
    return state.scope


# ---------------------------------------------------------------- signals


def _member(ctx: Context, state: BindingState, info: NamespaceInfo | None) -> tuple[bool, bool]:
    """(matches sandboxNamespaces, belongs: matches and not terminating)."""
    matcher = state.matcher
    if info is None or matcher is None:  # no matcher: not admitted
        return False, False
    match = matcher(info.name, info.labels)
    return match, match and not info.terminating


def on_namespace(ctx: Context, name: str, before: NamespaceInfo | None, after: NamespaceInfo | None,
                 at: float) -> None:
    """A namespace changed (already applied to the cache): signal the bindings whose list it changes."""
    for state in ctx.bindings:
        if state.spec is None or state.deleted:
            continue
        matched_before, was = _member(ctx, state, before)
        matched_now, now = _member(ctx, state, after)
        if state.scope is not None:
            state.scope.pod_signalled.discard(name)  # the watch knows it now (or it is gone)
        if not (matched_before or matched_now):
            continue
        mem = memory(ctx, state)
        if mem.sandbox is not None:  # keep the membership set current: a sync need not scan every namespace
            if now:
                mem.sandbox.add(name)
            else:
                mem.sandbox.discard(name)
        known = mem.known_list
        if was != now or known is None or (now and name not in known) or (not now and name in mem.added):
            mem.syncer.signal(at=at)


def on_sandbox_pod(ctx: Context, state: BindingState, body: dict) -> None:
    """A Pending pod for our scheduler in a matching namespace outside the list: sync at once."""
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
    if mem.cluster or (mem.known_list is not None and namespace in mem.known_list):
        # Watched as far as we know; but someone may have reverted the target: re-read it, at
        # most once per POD_RECHECK_SECONDS per binding (later ones are deferred, not lost),
        # unless the target's watch has delivered nothing since our last write (another writer's
        # change would have woken the binding: a re-read would find what we wrote).
        if not _target_unchanged(ctx, mem):
            _recheck(ctx, mem)
        return
    if info is None:
        mem.pod_signalled.add(namespace)
    mem.syncer.signal(urgent=True)


def _target_unchanged(ctx: Context, mem: ScopeMemory) -> bool:
    ref = mem.target_ref
    return ref is not None and ctx.depends.unchanged_since(ref.writes, mem.parsed.written_version)


def _recheck(ctx: Context, mem: ScopeMemory) -> None:
    now = ctx.monotonic()
    if now >= mem.next_recheck:
        mem.next_recheck = now + POD_RECHECK_SECONDS
        mem.syncer.signal()
    elif mem.recheck_handle is None:
        def later() -> None:
            mem.recheck_handle = None
            _recheck(ctx, mem)
        mem.recheck_handle = ctx.timers.later(mem.next_recheck - now, later, "pod-triggered re-read")


async def _signalled_sync(ctx: Context, state: BindingState) -> None:
    if not ctx.bindings.is_current(state) or not state.active or state.discovery is None:
        return  # not reconciled yet (the first reconcile syncs), gone, or the younger of two bindings
    mem = memory(ctx, state)
    async with mem.lock:
        part = await scope_sync.run(ctx, state, mem, periodic=False)
    if state.deleted:
        return
    state.report(part)
    request_flush(ctx, state, before=placement.report)
    _retry_later(ctx, part, mem)


def _retry_later(ctx: Context, part: Part, mem: ScopeMemory) -> None:
    """Conflict (someone kept writing), unclassified errors and a scheduler not yet permitted (an
    admin or a chart may be granting it now) are retried soon, with backoff."""
    if part.reason not in (ScopeSynced.CONFLICT, ScopeSynced.ERROR, ScopeSynced.SCHEDULER_NOT_PERMITTED):
        mem.failures = 0
        if mem.retry_handle is not None:  # recovered: the pending retry is not needed any more
            mem.retry_handle.cancel()
            mem.retry_handle = None
        return
    delay = retry.FAILURE_BACKOFF.delay(mem.failures)
    mem.failures += 1
    if mem.retry_handle is not None:
        mem.retry_handle.cancel()
    mem.retry_handle = ctx.timers.later(delay, mem.syncer.signal, "scope retry")


# ---------------------------------------------------------------- one sync


async def sync(ctx: Context, state: BindingState) -> Part:
    """One full sync from the binding's reconcile loop (also corrects drift in grants and the roll hash)."""
    mem = memory(ctx, state)
    async with mem.lock:
        part = await scope_sync.run(ctx, state, mem, periodic=True)
    _retry_later(ctx, part, mem)
    return part


# ---------------------------------------------------------------- deletion


async def restore(ctx: Context, state: BindingState, discover) -> None:
    """deletionPolicy Restore: remove the namespaces we added (not alwaysInclude/preexisting) and our RoleBindings."""
    mem = memory(ctx, state)
    state.close()  # no more signalled syncs, retries or rolls while (and after) it restores
    async with mem.lock:
        if state.spec is None:
            return
        if state.discovery is None:
            state.discovery = await discover(ctx, state)
        try:
            spec, d = state.spec, state.discovery
            if d.forbidden:
                raise Problem(ScopeSynced.FORBIDDEN, d.forbidden)
            target = targets.for_spec(ctx.kube, spec, d.namespace, d.configmap_name, mem.parsed)
            if mem.target_ref is not None and mem.target_ref != target.ref():
                await sr.leave(ctx, state, mem, target.ref())  # switched, and deleted before the next sync
            await sr.restore_target(ctx, state, mem, target)
        except (Problem, targets.TargetFailed) as exc:
            ctx.event(state, EventReason.SCOPE_NOT_RESTORED, f"{sr.problem_of(exc).message}; the list was left as is")
        await grants.remove_all(ctx, state, mem)
