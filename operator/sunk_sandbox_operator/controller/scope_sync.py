"""One scope sync, the executor of `core.scope_plan`: gather → decide → write → grant, roll, ask → report.

1. gather the target's list and the namespaces that belong (and the scheduler's workloads when the
   revert rule asks); `decide_write`: the list and the ledger in one request, with the read's
   precondition (`retry.optimistic`: a lost race gathers and decides again; another writer's change
   is never overwritten);
2. keep the memory the list leaves (`after_write`) and say what changed (events, log, metrics);
3. gather what `late_needs` asks (a burst going on, the workloads, our RoleBindings, the grantable
   namespaces); `decide_sync`: the roll, the grants, the reviews, the wake;
4. delete and create RoleBindings, then patch (the rolled scheduler finds its RBAC), ask; `outcome`:
   the memory and ScopeSynced (the chain's first problem: roll → grants → the scheduler's RBAC, else
   the list's state). Nothing is decided here. Which comes first: the list (what a burst waits for),
   then the grants (deferred to a burst's last write, and a round the plan lets yield stops creating
   when a newer change is signalled: its list write goes first), then the roll.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from ..core.problems import Problem
from ..adapters import kube as k
from ..adapters import targets
from ..api.events import EventReason
from ..api.reasons import Common, ScopeSynced
from ..core import roll_pacing as pacing
from ..core import scope as sc
from ..core import scope_outcome as so
from ..core import scope_plan as sp
from ..core.compose import Part
from ..core.conditions import Status
from ..core.redact import describe
from ..core.scheduler import Discovery
from . import grants, retry
from . import roll as rolling
from . import scope_restore as sr
from .context import Context
from .state import BindingState, ScopeMemory

log = logging.getLogger("sunk_sandbox_operator")

COND = "ScopeSynced"


def _sandbox_set(ctx: Context, state: BindingState, mem: ScopeMemory, full: bool) -> set[str]:
    """The namespaces that belong: kept current by namespace events, recomputed from the whole cache
    at every periodic sync (level-triggered) and whenever the spec's matcher changed."""
    matcher = state.matcher
    assert matcher is not None  # an admitted binding's
    if full or mem.sandbox is None or mem.sandbox_for is not matcher:
        mem.sandbox, mem.sandbox_for = ctx.namespaces.belonging(matcher), matcher
    sandbox = set(mem.sandbox)
    for ns in list(mem.pod_signalled):
        if ns in ctx.namespaces or not matcher(ns, {}):
            mem.pod_signalled.discard(ns)  # the watch decides now
        else:
            sandbox.add(ns)
    return sandbox


def _error_part(ctx: Context, state: BindingState, reason: str, message: str, status: Status = "False") -> Part:
    return Part(COND, status, reason, message, "scope",
                sc.section(state.section("scope"), None, now=ctx.now_iso(), error=True))


async def run(ctx: Context, state: BindingState, mem: ScopeMemory, *, periodic: bool) -> Part:
    """One sync: the list, then the roll and the grants; every failure is this Part, never raised."""
    started = mem.syncer.take_first_signal()
    try:
        return await _sync_inner(ctx, state, mem, periodic, started)
    except (Problem, targets.TargetFailed) as exc:
        p = sr.problem_of(exc)  # a target's failure classified: core.scope_errors
        return _error_part(ctx, state, p.reason, p.message)
    except retry.RetriesExhausted as exc:
        return _error_part(ctx, state, ScopeSynced.CONFLICT,
                           f"the target changed under us {exc.attempts} times in a row (someone else is editing "
                           "it); nothing was overwritten, retrying with backoff")
    except Exception as exc:  # an API error we do not classify: report, retry with backoff
        log.exception("scope sync of %s failed", state.ref)
        return _error_part(ctx, state, ScopeSynced.ERROR, f"scope sync failed: {describe(exc)}; retrying", status="Unknown")


def _observation(ctx: Context, state: BindingState, target: targets.ScopeTarget, read: targets.TargetRead,
                 sandbox: set[str], mem: ScopeMemory) -> sc.ScopeObservation:
    spec = state.admitted_spec
    ours = sr.ours(state, read, mem)
    return sc.ScopeObservation(
        target=target.describe(), values=read.list.values, scope_type=read.list.scope_type, error=read.list.error,
        error_reason=read.list.reason,
        sandbox=frozenset(sandbox), always=tuple(spec.scope.always_include),
        preexisting=ours.preexisting, added=ours.added, observe=spec.mode == "Observe",
        others=sr.others(ctx, state, read), own_namespace=state.discovery.namespace if state.discovery else None,
        target_ref=target.ref().wire())


async def _sync_inner(ctx: Context, state: BindingState, mem: ScopeMemory, periodic: bool,
                      started: float | None) -> Part:
    spec = state.admitted_spec
    d = state.discovery
    if d is None:  # the first reconcile's discovery failed (a transient read error): nothing to sync against
        return _error_part(ctx, state, Common.API_ERROR, "the scheduler's namespace has not been read yet (the "
                           "read failed; see SchedulerReady); retrying", status="Unknown")
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

    async def attempt(retried: int) -> tuple[sp.SyncObservation, sp.Write]:
        obs, read = await _gather(ctx, state, mem, target, d, periodic, retried)
        write = sp.decide_write(obs)
        if write.ledger is not None:  # the ledger entry travels in the same request as the list
            rv = await target.write(read, write.values, write.ledger)
            ctx.depends.wrote(target.kind, target.namespace, target.name, rv)
            ctx.failpoints.hit("after-scope-write")
        return obs, write

    obs, write = await retry.optimistic(
        attempt, lost_race=lambda e: isinstance(e, k.Conflict), retries=ctx.config.scope_conflict_retries,
        sleep=ctx.sleep)
    written = sp.after_write(obs, mem.kept())
    mem.keep(written.memory)  # at once: namespace events compare with the list while the sync goes on
    _tell_written(ctx, state, obs, write, written, started)
    obs, now = await _gather_late(ctx, state, mem, obs, periodic)
    plan = sp.decide_sync(obs, mem.kept(), now)
    if plan.wake is not None:
        _roll_later(ctx, mem, plan.wake)  # folded: one roll at the interval's end carries every change
    # The grants before the roll: the restarted scheduler starts its watches where it may already
    # watch and bind (a roll first would meet 403s and client-go's backoff in the new namespaces).
    deleted, created, cut = await grants.apply(ctx, state, plan, obs.grant_role, lambda: mem.syncer.pending)
    rolled_at, refused = None, None
    if plan.roll.patch is not None and not cut:
        at = ctx.now_iso()  # the template records it too (a death before the status flush keeps it)
        rolled, refused = await rolling.patch(ctx, state, obs.roll.namespace, plan.roll.patch, at)
        rolled_at = (ctx.monotonic(), at) if rolled else None
    answers = so.Answers() if cut else await grants.review(ctx, plan.reviews)
    out = so.outcome(obs, plan, so.Done(rolled_at, refused, deleted, created, answers, cut),
                     prev=state.section("scope"), now=ctx.now_iso())
    mem.keep(out.memory)
    r = out.report
    return Part(COND, r.status, r.reason, r.message, "scope", r.section)


async def _gather(ctx: Context, state: BindingState, mem: ScopeMemory, target: targets.ScopeTarget, d: Discovery,
                  periodic: bool, retried: int) -> tuple[sp.SyncObservation, targets.TargetRead]:
    """The facts the write is decided from: the target's list and ledger, the namespaces that belong,
    and the scheduler's workloads when the revert rule asks for them."""
    spec = state.admitted_spec
    sandbox = _sandbox_set(ctx, state, mem, full=periodic)
    # During a burst, start from the object our last write returned while the target's watch has
    # seen nobody else write it; a resync always reads (level-triggered), and a stale copy can only
    # cost a Conflict (the write's precondition), after which the retry reads.
    reuse = not periodic and not retried and ctx.depends.unchanged_since(
        (target.kind, target.namespace, target.name), target.last_write())
    read = await target.read(reuse=reuse)
    rolls = target.kind == "ConfigMap" and target.can_roll  # the list is a ConfigMap key the scheduler reads at start
    roll = sp.RollSettings(can_roll=target.can_roll, restart=spec.scope.restart_scheduler,
                           interval=pacing.interval_of(spec.scope.min_roll_interval), namespace=d.namespace,
                           pod_selector=spec.scheduler.pod_selector,
                           list_field=("data", getattr(target, "key", "")) if rolls else None)
    obs = sp.SyncObservation(
        _observation(ctx, state, target, read, sandbox, mem), sp.Owner(state.namespace, state.name, state.uid),
        ledger=read.ledger, target_meta=read.obj.get("metadata"), target_kind=target.kind, periodic=periodic,
        roll=roll, service_account=(d.namespace, d.service_account), grant_role=spec.scope.grant_cluster_role,
        grants_bounded=ctx.tenancy.grant_bound(state.namespace) is not None)
    if sp.workloads_for_write(obs):
        obs = await _with_workloads(ctx, obs)
    return obs, read


async def _gather_late(ctx: Context, state: BindingState, mem: ScopeMemory, obs: sp.SyncObservation,
                       periodic: bool) -> tuple[sp.SyncObservation, float]:
    """The facts the rest of the plan needs (`core.scope_plan.late_needs`), after the write: whether a
    burst goes on is known only now, and the write does not wait for a RoleBinding LIST. The plan is
    decided at the time they were chosen by (`now`)."""
    timer, now = mem.roll_timer, ctx.monotonic()
    obs = replace(obs, burst_goes_on=not periodic and mem.syncer.pending, now_iso=ctx.now_iso(),
                  roll_timer_pending=timer is not None and not timer.done())
    needs = sp.late_needs(obs, mem.kept(), now)
    if needs.workloads:
        obs = await _with_workloads(ctx, obs)
    if needs.rolebindings:
        found, forbidden = await grants.ours(ctx, state)
        obs = replace(obs, found=found, found_forbidden=forbidden)
    if needs.namespaces:
        mine, live, may = grants.grantable(ctx, state, obs.scope.sandbox)
        obs = replace(obs, grantable=mine, live=live, may_grant=may)
    if needs.role:  # one read, so that namespaces our RoleBinding covers need no review
        obs = replace(obs, role_covers=await grants.role_covers(ctx, obs.grant_role))
    return obs, now


async def _with_workloads(ctx: Context, obs: sp.SyncObservation) -> sp.SyncObservation:
    found, forbidden = await rolling.workloads(ctx, obs.roll.namespace)
    return replace(obs, workloads=found, workloads_forbidden=forbidden)


def _tell_written(ctx: Context, state: BindingState, obs: sp.SyncObservation, write: sp.Write, written: sp.Written,
                  started: float | None) -> None:
    """Events, log lines, counters and the latency metric of the list part (its write is done)."""
    d, target, manager = obs.scope.listed, obs.scope.target, written.manager
    if manager is not None and written.warn:  # Helm, Argo CD or Flux rendering a ConfigMap target: said once
        ctx.event(state, EventReason.TARGET_MANAGED_ELSEWHERE, f"{manager.describe()} also writes {target}: "
                  f"{manager.fix}")
    if d.reverted and not obs.scope.observe:
        state.counters.scope_reverts += 1
        log.info("scope of %s: %d namespace(s) the operator added were removed from %s by another writer%s",
                 state.ref, len(d.reverted), target, f" ({manager.describe()})" if manager else "")
    if d.error or d.cluster:
        return
    state.counters.scope_namespaces = len(written.memory.known_list or ())
    if write.values is not None:
        log.info("scope of %s: %s now lists %d namespace(s) (+%d -%d)", state.ref, target, len(d.final),
                 len(d.diff.added), len(d.diff.removed))
        state.counters.scope_writes += 1
        if started is not None:
            ctx.metrics.scope_sync_latency.observe(ctx.monotonic() - started)
        restored = f" (put back after another writer removed {sc.names(d.reverted)})" if d.reverted else ""
        ctx.event(state, EventReason.SCOPE_UPDATED, sc.change_message(target, d.diff) + restored)


def _roll_later(ctx: Context, mem: ScopeMemory, wait: float) -> None:
    """One sync at the end of the roll interval (it finds the roll due and makes it)."""
    def due() -> None:
        mem.roll_timer = None
        mem.syncer.signal()
    mem.roll_timer = ctx.timers.later(wait, due, "folded scheduler roll")
