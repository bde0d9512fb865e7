"""One scope sync: gather → decide (`core.scope`) → write → roll and grant → report.

gather the target's list and the namespaces that belong; `core.scope.decide_list` says what the
list becomes and what the ledger records; the write carries the read's precondition
(`retry.optimistic`: a lost race reads again, another writer's change is never overwritten); then
`core.roll_pacing.when_to_roll` says whether the scheduler is rolled now, later or not at all, the
grants follow what the binding matches, and ScopeSynced reports the first problem of the chain
(roll → grants → the scheduler's RBAC) or the list's state.
"""

from __future__ import annotations

import logging
from typing import Any, Awaitable, Sequence

from ..core.problems import Problem
from ..adapters import kube as k
from ..adapters import targets
from ..api.events import EventReason
from ..api.reasons import Common, ScopeSynced
from ..core import managers
from ..core import scope as sc
from ..core.compose import Part
from ..core.conditions import Status
from ..core.ledger import Entry
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
        return _error_part(ctx, state, ScopeSynced.ERROR, f"scope sync failed: {exc}; retrying", status="Unknown")


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

    mine = grants.grantable(ctx, state, decision.final, obs.sandbox)  # the listed namespaces the binding matches
    if not obs.observe:
        mem.roll_due = mem.roll_due or wrote
    # The chain, in the order ScopeSynced reports its first problem: roll → grants → the scheduler's RBAC.
    rolled = await _problem(rolling.step(ctx, state, mem, target, decision.final, periodic=periodic,
                                         generation=generation))
    granted = await _problem(grants.sync(ctx, state, mem, mine, refresh=periodic or mem.grants is None)) \
        if not obs.observe else (None, None)
    checked = await _problem(grants.verify_scheduler(ctx, state, mem, mine, refresh=periodic))
    problem = next((p for p, _ in (rolled, granted, checked) if p is not None), None)
    notes = [rolled[1]] if rolled[1] else []
    return Part(COND, *_report(ctx, state, obs, decision, wrote, problem, notes, managed_by=managed_by))


async def _problem(step: Awaitable[str | None]) -> tuple[tuple[str, str] | None, str | None]:
    """(the step's problem as (reason, message), or None; the note it returned)."""
    try:
        return None, await step
    except Problem as exc:
        return (exc.reason, exc.message), None


def _report(ctx: Context, state: BindingState, obs: sc.ScopeObservation, decision: sc.ListDecision, wrote: bool,
            problem: tuple[str, str] | None = None, notes: Sequence[str] = (), *,
            managed_by: str | None = None) -> tuple[Status, str, str, str, dict[str, Any]]:
    r = sc.report(obs, decision, prev=state.section("scope"), now=ctx.now_iso(), wrote=wrote, problem=problem,
                  notes=list(notes), managed_by=managed_by, rolls=rolling.status_times(state.scope))
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
