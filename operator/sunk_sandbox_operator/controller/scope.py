"""The scope pipeline: keep the scheduler's watched-namespace list equal to the sandbox namespaces.

gather (the target's list, the namespaces that belong) → decide (`core.scope`) → write with the
read's precondition (`retry.optimistic`) → roll the scheduler and keep grants (`controller.grants`)
→ report ScopeSynced and status.scope.

Signals, per binding, go through one `Coalescer`:
- namespace watch events (`on_namespace`) start a write at once; what arrives while it is in flight
  is folded into the next one (group commit), at most `scope_max_writes_per_second`;
- a Pending sandbox pod naming our scheduler in a matching namespace outside the list
  (`on_sandbox_pod`) syncs at once: that pod is stuck until the scheduler watches its namespace;
- the binding's reconcile loop calls `sync` at every resync (drift correction).
One sync runs at a time per binding (a lock); signals during a sync cause one more after it.
"""

from __future__ import annotations

import logging

from ..api.events import EventReason
from ..adapters import kube as k
from ..adapters import targets
from ..api.reasons import ScopeSynced
from ..core import managers
from ..core import roll_pacing as pacing
from ..core.scheduler_conf import parse_go_duration
from ..core import scope as sc
from ..core.compose import Part
from ..core.ledger import Entry
from ..core.scope import NamespaceInfo
from . import grants, placement, retry
from . import scope_restore as sr
from . import roll as rolling
from .coalescer import Coalescer
from .context import Context
from .state import BindingState, ScopeMemory
from .status_writer import request_flush

log = logging.getLogger("sunk_sandbox_operator")

COND = "ScopeSynced"
POD_RECHECK_SECONDS = 2.0


def memory(ctx: Context, state: BindingState) -> ScopeMemory:
    if state.scope is None:
        section = state.status.get("scope") or {}
        pre = section.get("preexisting")

        async def run() -> None:
            await _signalled_sync(ctx, state)

        recorded = section.get("target")
        state.scope = ScopeMemory(
            preexisting=sorted(pre) if isinstance(pre, list) else None,
            added=sorted(a for a in section.get("added") or [] if isinstance(a, str)),
            target_ref=dict(recorded) if isinstance(recorded, dict) else None,
            syncer=Coalescer(run, window=lambda: ctx.config.scope_window_seconds,
                             min_interval=lambda: 1.0 / max(ctx.config.scope_max_writes_per_second, 0.01),
                             clock=ctx.monotonic,
                             sleep=ctx.sleep, name=f"scope sync of {state.ref}"),
        )
    return state.scope


# ---------------------------------------------------------------- signals


def _member(ctx: Context, state: BindingState, info: NamespaceInfo | None) -> tuple[bool, bool]:
    """(matches sandboxNamespaces, belongs: matches and not terminating)."""
    if info is None:
        return False, False
    match = state.matcher(info.name, info.labels)
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
    if not state.matcher(namespace, info.labels if info else {}):
        return
    mem = memory(ctx, state)
    if mem.cluster or (mem.known_list is not None and namespace in mem.known_list):
        # Watched as far as we know; but someone may have reverted the target: re-read it, at
        # most once per POD_RECHECK_SECONDS per binding (later ones are deferred, not lost).
        _recheck(ctx, mem)
        return
    if info is None:
        mem.pod_signalled.add(namespace)
    mem.syncer.signal(urgent=True)


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
        part = await _sync(ctx, state, mem, periodic=False)
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
        part = await _sync(ctx, state, mem, periodic=True)
    _retry_later(ctx, part, mem)
    return part


def _sandbox_set(ctx: Context, state: BindingState, mem: ScopeMemory, full: bool) -> set[str]:
    """The namespaces that belong: kept current by namespace events, recomputed from the whole cache
    at every periodic sync (level-triggered) and whenever the spec's matcher changed."""
    matcher = state.matcher
    if full or mem.sandbox is None or mem.sandbox_for is not matcher:
        mem.sandbox, mem.sandbox_for = ctx.namespaces.belonging(matcher), matcher
    sandbox = set(mem.sandbox)
    for ns in list(mem.pod_signalled):
        if ns in ctx.namespaces or not matcher(ns, {}):
            mem.pod_signalled.discard(ns)  # the watch decides now
        else:
            sandbox.add(ns)
    return sandbox


def _error_part(ctx: Context, state: BindingState, reason: str, message: str, status: str = "False") -> Part:
    return Part(COND, status, reason, message, "scope",
                sc.section(state.section("scope"), None, now=ctx.now_iso(), error=True))


async def _sync(ctx: Context, state: BindingState, mem: ScopeMemory, *, periodic: bool) -> Part:
    started = mem.syncer.take_first_signal()
    try:
        return await _sync_inner(ctx, state, mem, periodic, started)
    except targets.TargetProblem as p:
        return _error_part(ctx, state, p.reason, p.message)
    except retry.RetriesExhausted as exc:
        return _error_part(ctx, state, ScopeSynced.CONFLICT,
                           f"the target changed under us {exc.attempts} times in a row (someone else is editing "
                           "it); nothing was overwritten, retrying with backoff")
    except Exception as exc:  # an API error we do not classify: report, retry with backoff
        log.exception("scope sync of %s failed", state.ref)
        return _error_part(ctx, state, ScopeSynced.ERROR, f"scope sync failed: {exc}; retrying", status="Unknown")


def _observation(ctx: Context, state: BindingState, target: targets.ScopeTarget, read: targets.TargetRead,
                 sandbox: set[str], mem: ScopeMemory) -> sc.ScopeObservation:
    spec = state.spec
    ours = sr.ours(state, read, mem)
    return sc.ScopeObservation(
        target=target.describe(), values=read.list.values, scope_type=read.list.scope_type, error=read.list.error,
        error_reason=read.list.reason,
        sandbox=frozenset(sandbox), always=tuple(spec.scope.always_include),
        preexisting=ours.preexisting, added=ours.added, observe=spec.mode == "Observe",
        others=sr.others(ctx, state, read), own_namespace=state.discovery.namespace if state.discovery else None,
        target_ref=target.ref())


async def _sync_inner(ctx: Context, state: BindingState, mem: ScopeMemory, periodic: bool,
                      started: float | None) -> Part:
    spec, d = state.spec, state.discovery
    if not ctx.namespaces.ready:
        return _error_part(ctx, state, ScopeSynced.NAMESPACES_NOT_LOADED, "namespaces are not listed yet",
                           status="Unknown")
    if state.target_conflict:
        return _error_part(ctx, state, ScopeSynced.SHARED_TARGET_CONFLICT, state.target_conflict)
    if d.forbidden:  # the scheduler namespace is not readable: neither its list nor its roll can be kept
        return _error_part(ctx, state, ScopeSynced.FORBIDDEN, d.forbidden)
    target = targets.for_spec(ctx.kube, spec, d.namespace, d.configmap_name, mem.parsed)
    if mem.target_ref is None:
        mem.target_ref = target.ref()  # the first sync (or status from before targets were recorded)
    elif mem.target_ref != target.ref():
        await sr.leave(ctx, state, mem, target.ref())

    async def attempt(retried: int) -> tuple[sc.ScopeObservation, sc.ListDecision, targets.TargetRead, int]:
        sandbox = _sandbox_set(ctx, state, mem, full=periodic)
        # During a burst, start from the object our last write returned while the target's watch has
        # seen nobody else write it; a resync always reads (level-triggered), and a stale copy can only
        # cost a Conflict (the write's precondition), after which the retry reads.
        reuse = not periodic and not retried and ctx.depends.unchanged_since(
            (target.kind, target.namespace, target.name), target.last_write())
        read = await target.read(reuse=reuse)
        obs = _observation(ctx, state, target, read, sandbox, mem)
        decision = sc.decide_list(obs)
        generation = read.ledger.generation
        if decision.write is not None or decision.claims_changed:
            # The ledger entry travels in the same request as the list: a crash cannot split them.
            entry = Entry(tuple(decision.added), tuple(decision.preexisting or ()))
            ledger = read.ledger.with_entry(state.ref, entry)
            if decision.write is not None and await rolling.rewrites_running_list(ctx, state, target, read, decision):
                ledger = ledger.next_generation()
            rv = await target.write(read, decision.write, ledger)
            ctx.depends.wrote(target.kind, target.namespace, target.name, rv)
            generation = ledger.generation
            ctx.failpoints.hit("after-scope-write")
        return obs, decision, read, generation

    obs, decision, read, generation = await retry.optimistic(
        attempt, lost_race=lambda e: isinstance(e, k.Conflict), retries=ctx.config.scope_conflict_retries,
        sleep=ctx.sleep)
    wrote = decision.write is not None
    manager = _other_manager(ctx, state, mem, target, read)
    if decision.reverted and not obs.observe:
        state.counters.scope_reverts += 1
        log.info("scope of %s: %d namespace(s) the operator added were removed from %s by another writer%s",
                 state.ref, len(decision.reverted), target.describe(),
                 f" ({manager.describe()})" if manager else "")
    managed_by = manager.describe() if manager else None
    if decision.error:
        return Part(COND, *_report(ctx, state, obs, decision, wrote, managed_by=managed_by))
    mem.cluster = decision.cluster
    mem.preexisting = decision.preexisting
    if not obs.observe:
        mem.added = decision.added
    if decision.cluster:
        mem.known_list = None
        return Part(COND, *_report(ctx, state, obs, decision, wrote, managed_by=managed_by))
    mem.known_list = frozenset(decision.final)
    state.counters.scope_namespaces = len(mem.known_list)
    if wrote:
        log.info("scope of %s: %s now lists %d namespace(s) (+%d -%d)", state.ref, target.describe(),
                 len(decision.final), len(decision.diff.added), len(decision.diff.removed))
        state.counters.scope_writes += 1
        if started is not None:
            ctx.metrics.scope_sync_latency.observe(ctx.monotonic() - started)
        restored = f" (put back after another writer removed {sc.names(decision.reverted)})" if decision.reverted else ""
        ctx.event(state, EventReason.SCOPE_UPDATED, sc.change_message(target.describe(), decision.diff) + restored)

    notes: list[str] = []
    problem: tuple[str, str] | None = None
    mine = grants.grantable(ctx, state, decision.final, obs.sandbox)  # the listed namespaces the binding matches
    if not obs.observe:
        mem.roll_due = mem.roll_due or wrote
        # During a burst (more changes already signalled) the roll waits for the burst's last
        # write: one scheduler restart per burst, and the next list write is not delayed by it.
        burst_goes_on = not periodic and mem.syncer.pending
        if target.can_roll and spec.scope.restart_scheduler and (mem.roll_due or periodic) and not burst_goes_on:
            wait = pacing.roll_wait(mem.last_roll, ctx.monotonic(), _min_roll_interval(spec)) if mem.roll_due else 0.0
            if wait > 0:
                _roll_later(ctx, mem, wait)  # folded: one roll at the interval's end carries every change
            else:
                try:
                    note, rolled = await rolling.roll(ctx, state, decision.final, wrote=mem.roll_due,
                                                      generation=generation)
                    mem.roll_due, mem.next_roll_at = False, None
                    if rolled:
                        mem.last_roll, mem.last_roll_at = ctx.monotonic(), ctx.now_iso()
                    if note:
                        notes.append(note)
                except targets.TargetProblem as exc:
                    problem = (exc.reason, exc.message)
        try:
            await grants.sync(ctx, state, mem, mine, refresh=periodic or mem.grants is None)
        except targets.TargetProblem as exc:
            problem = problem or (exc.reason, exc.message)
    try:
        await grants.verify_scheduler(ctx, state, mem, mine, refresh=periodic)
    except targets.TargetProblem as exc:
        problem = problem or (exc.reason, exc.message)
    return Part(COND, *_report(ctx, state, obs, decision, wrote, problem, notes, managed_by=managed_by))


def _min_roll_interval(spec) -> float:
    try:
        return parse_go_duration(spec.scope.min_roll_interval)
    except ValueError:
        return 30.0


def _roll_later(ctx: Context, mem: ScopeMemory, wait: float) -> None:
    """One sync at the end of the roll interval (it finds the roll due and makes it)."""
    if mem.roll_timer is not None and not mem.roll_timer.done():
        return
    mem.next_roll_at = pacing.after(ctx.now_iso(), wait)

    def due() -> None:
        mem.roll_timer = None
        mem.syncer.signal()
    mem.roll_timer = ctx.timers.later(wait, due, "folded scheduler roll")


def _rolls(mem: ScopeMemory | None) -> dict[str, str]:
    if mem is None:
        return {}
    out = {"lastRollTime": mem.last_roll_at} if mem.last_roll_at else {}
    return {**out, "nextRollTime": mem.next_roll_at} if mem.next_roll_at and mem.roll_due else out


def _report(ctx: Context, state: BindingState, obs: sc.ScopeObservation, decision: sc.ListDecision, wrote: bool,
            problem: tuple[str, str] | None = None, notes: list[str] = (), *,
            managed_by: str | None = None) -> tuple[str, str, str, str, dict]:
    r = sc.report(obs, decision, prev=state.section("scope"), now=ctx.now_iso(), wrote=wrote, problem=problem,
                  notes=list(notes), managed_by=managed_by, rolls=_rolls(state.scope))
    return r.status, r.reason, r.message, "scope", r.section


def _other_manager(ctx: Context, state: BindingState, mem: ScopeMemory, target: targets.ScopeTarget,
                   read: targets.TargetRead) -> managers.Manager | None:
    """Helm, Argo CD or Flux rendering a ConfigMap target: said once per binding in a Warning event."""
    if target.kind != "ConfigMap":
        return None
    manager = managers.other_manager(read.obj.get("metadata"), target.describe())
    if manager is not None and mem.manager_warned != manager.describe():
        mem.manager_warned = manager.describe()
        ctx.event(state, EventReason.TARGET_MANAGED_ELSEWHERE, f"{manager.describe()} also writes {target.describe()}: "
                  f"{manager.fix}")
    return manager


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
                raise targets.TargetProblem(ScopeSynced.FORBIDDEN, d.forbidden)
            target = targets.for_spec(ctx.kube, spec, d.namespace, d.configmap_name, mem.parsed)
            if mem.target_ref is not None and mem.target_ref != target.ref():
                await sr.leave(ctx, state, mem, target.ref())  # switched, and deleted before the next sync
            await sr.restore_target(ctx, state, mem, target)
        except targets.TargetProblem as p:
            ctx.event(state, EventReason.SCOPE_NOT_RESTORED, f"{p.message}; the list was left as is")
        await grants.remove_all(ctx, state, mem)
