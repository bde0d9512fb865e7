"""The facts the three scope loops read (I/O and caches), and what each does after a wake.

Every loop reads facts recorded in the cluster, never another loop's memory: the target (its list
and its ledger, cached per version and answered from that cache while the target's watch has seen
nobody else write it), the namespaces that belong (the namespace cache, kept current by its
events), our labelled RoleBindings (their informer, else one LIST), the scheduler's workloads.
After its wake a loop reports ScopeSynced from the three latest results (`core.scope.report`) and
retries a transient failure with backoff on its own.
"""

from __future__ import annotations

import logging
from typing import Any, Awaitable, Callable

from ...adapters import grants as io
from ...adapters import kube as k
from ...adapters import scheduler as sched
from ...adapters import targets
from ...api.reasons import Common, ConditionType, ScopeSynced
from ...core.compose import Part
from ...core.problems import Problem
from ...core.redact import describe
from ...core.scope import grants as g
from ...core.scope import report as rp
from ...core.scope.errors import Finding, classify
from ...core.scope.grant_loop import GrantSettings, Owner, Where
from ...core.scope.ledger import Entry
from ...core.scope.plan import effective
from ...core.scope.target_ref import TargetRef
from .. import retry
from ..context import Context
from ..state import BindingState, Loop, ScopeMemory

log = logging.getLogger("sunk_sandbox_operator")

COND = ConditionType.SCOPE_SYNCED


def gate(ctx: Context, state: BindingState) -> Finding | None:
    """Why no loop may look at the target now (the list loop reports it; the others wait)."""
    d = state.discovery
    if d is None:  # the first reconcile's discovery failed (a transient read error): nothing to sync against
        return Finding(Common.API_ERROR, "the scheduler's namespace has not been read yet (the read failed; see "
                       "SchedulerReady); retrying", "Unknown")
    if not ctx.namespaces.ready:
        return Finding(ScopeSynced.NAMESPACES_NOT_LOADED, "namespaces are not listed yet", "Unknown")
    if state.target_conflict:
        return Finding(ScopeSynced.SHARED_TARGET_CONFLICT, state.target_conflict)
    if d.forbidden:  # the scheduler namespace is not readable: neither its list nor its roll can be kept
        return Finding(ScopeSynced.FORBIDDEN, d.forbidden)
    return None


def finding(exc: Exception, what: str, ref: str) -> Finding:
    """A failed wake as ScopeSynced reports it: a Problem as it is, what a target could not do classified
    (`core.scope.errors.classify`: the reason and the fix), lost races in a row, anything else Unknown."""
    if isinstance(exc, (Problem, targets.TargetFailed)):
        return Finding.of(problem_of(exc))
    if isinstance(exc, retry.RetriesExhausted):
        return Finding(ScopeSynced.CONFLICT, f"the target changed under us {exc.attempts} times in a row (someone "
                       "else is editing it); nothing was overwritten, retrying with backoff")
    log.error("scope %s of %s failed", what, ref, exc_info=exc)  # an API error we do not classify: retried
    return Finding(ScopeSynced.ERROR, f"scope {what} failed: {describe(exc)}; retrying", "Unknown")


def problem_of(exc: Problem | targets.TargetFailed) -> Problem:
    return classify(exc.error) if isinstance(exc, targets.TargetFailed) else exc


def target(ctx: Context, state: BindingState, mem: ScopeMemory) -> targets.ScopeTarget:
    """The target the admitted spec names (its parse memo: the binding's)."""
    d = state.discovery
    assert d is not None  # past the gate
    return targets.for_spec(ctx.kube, state.admitted_spec, d.namespace, d.configmap_name, mem.parsed)


async def read(ctx: Context, target: targets.ScopeTarget, *, fresh: bool = False,
               trusted: bool = False) -> targets.TargetRead:
    """The target's list and ledger: from the object last read or written while the target's watch has
    seen nobody else write it since (no GET); `trusted`: from it in any case (a resync's later loops
    read what its list loop has just read); `fresh`: a GET in any case (a resync is level-triggered;
    a retry after a lost race reads). A stale copy can only cost the list loop a Conflict, after which
    it reads."""
    held = target.held()
    reuse = bool(held) and not fresh and (trusted or unchanged(ctx, target.ref(), held))
    return await target.read(reuse=reuse)


def unchanged(ctx: Context, ref: TargetRef, held: tuple[str, ...]) -> bool:
    """Has nobody else written the target since the version `held` (read, or written by us: then also
    the version our write replaced), as far as its watch knows? Its latest event is one of those, or
    one of our writes up to it (their echoes still on the way)."""
    obj = ref.writes
    return bool(held) and (ctx.depends.seen(obj) in held or ctx.depends.unchanged_since(obj, held[0]))


def listed(state: BindingState, read: targets.TargetRead) -> tuple[str, ...] | None:
    """The list the scheduler reads (`core.scope.plan.effective`), or None: in error, or scope type cluster."""
    if read.list.error or read.list.scope_type == "cluster":
        return None
    d = state.discovery
    return tuple(effective(read.list.values, d.namespace if d is not None else None))


def ours(state: BindingState, read: targets.TargetRead, mem: ScopeMemory) -> Entry:
    """What this binding owns in the list: the target's ledger; before the first ledger write (an
    upgrade from a version that kept it in status), what status.scope recorded."""
    entry = read.ledger.get(state.ref)
    if entry is not None:
        return entry
    m = mem.list_loop.latest
    return Entry(m.added, m.preexisting)


def others(ctx: Context, state: BindingState, read: targets.TargetRead) -> frozenset[str]:
    """What the other live bindings on this target added (their ledger entries). An entry is dead
    only when its binding is known gone: not in the binding cache (or refused) and not known here."""
    known = {s.ref for s in ctx.bindings}
    cache = ctx.binding_cache
    live = (lambda ref: True) if not cache.ready else (lambda ref: cache.allowed(ref) or ref in known)
    return frozenset(n for ref, e in read.ledger.entries.items() if ref != state.ref and live(ref) for n in e.added)


def belonging(ctx: Context, state: BindingState, mem: ScopeMemory, full: bool) -> set[str]:
    """The namespaces that belong: kept current by namespace events, recomputed from the whole cache
    at every resync (level-triggered) and whenever the spec's matcher changed."""
    matcher = state.matcher
    assert matcher is not None  # an admitted binding's
    if full or mem.sandbox is None or mem.sandbox_for is not matcher:
        mem.sandbox, mem.sandbox_for = ctx.namespaces.belonging(matcher), matcher
    return mem.sandbox


def grant_settings(ctx: Context, state: BindingState) -> GrantSettings:
    """The binding's grant settings: its RoleBindings' names and labels, the scheduler's ServiceAccount,
    spec.scope.grantClusterRole, and whether the admin's --allow-grant names anywhere for it."""
    spec, d = state.admitted_spec, state.discovery
    assert d is not None  # past the gate
    return GrantSettings(Owner(state.namespace, state.name, state.uid), (d.namespace, d.service_account),
                         spec.scope.grant_cluster_role, ctx.tenancy.grant_bound(state.namespace) is not None,
                         spec.mode == "Observe")


def where(ctx: Context, state: BindingState, sandbox: set[str]) -> Where:
    """Where the binding may grant (core.scope.grants.grantable over its sandbox namespaces and
    alwaysInclude, with the settings: whatever the list holds, a listed one is grantable iff it is
    here), of those the live ones, and the ones inside the admin's `--allow-grant` for its namespace."""
    always = frozenset(state.admitted_spec.scope.always_include)
    mine = frozenset(g.grantable(sandbox | always, sandbox, always, lambda ns: ctx.tenancy.may_reach(state.namespace, ns),
                                 ctx.tenancy.system))
    bound = ctx.tenancy.grant_bound(state.namespace)
    return Where(mine, frozenset(ns for ns in mine if (info := ctx.namespaces.get(ns)) is not None and not info.terminating),
                 frozenset(ns for ns in mine if bound(ns)) if bound is not None else frozenset())


async def our_grants(ctx: Context, state: BindingState) -> tuple[tuple[g.Grant, ...] | None, str | None]:
    """The RoleBindings carrying this binding's label: from the RoleBinding informer once it has
    listed (no API call), else one label-selected LIST; or why they could not be listed."""
    if ctx.grants is not None and ctx.grants.ready:
        return tuple(ctx.grants.for_binding(g.binding_label(state.namespace, state.name))), None
    try:
        return tuple(g.grant_of(rb) for rb in await io.list_ours(ctx.kube, g.selector(state.namespace, state.name))), None
    except k.Forbidden as exc:
        return None, describe(exc)


async def workloads(ctx: Context, namespace: str) -> tuple[tuple[dict, ...] | None, str | None]:
    """The Deployments and StatefulSets that may run the scheduler, or why they could not be listed."""
    try:
        return tuple(await sched.list_workloads(ctx.kube, namespace)), None
    except k.Forbidden as exc:
        return None, describe(exc)


def report(ctx: Context, state: BindingState, after_list: bool = True) -> Part | None:
    """ScopeSynced and status.scope from the three loops' latest results (None: the list not looked at
    yet); `after_list`: after the list loop's wake (or a resync), not another loop's."""
    mem = state.scope
    assert mem is not None
    r = rp.report(rp.Results(mem.list_loop.latest, mem.roll_loop.latest, mem.grant_loop.latest),
                  prev=state.section("scope"), now=ctx.now_iso(), after_list=after_list)
    return None if r is None else Part(COND, r.status, r.reason, r.message, "scope", r.section)


async def wake(ctx: Context, state: BindingState, loop: Loop[Any], what: str, body: Callable[[], Awaitable[None]],
               transient: tuple[str, ...], *, gates: bool = False,
               retried: Callable[[Any], Finding | None] = lambda latest: latest.problem) -> None:
    """One wake of `loop`, under its lock: `body` (its gather, decision and acts). The gates come first:
    the list loop (`gates`) keeps and reports them, the other loops wait for the next wake. A failure
    is kept as the loop's problem; a transient one (`transient` reasons, of what `retried` picks from
    the loop's state) wakes it again with backoff."""
    async with loop.lock:
        problem = gate(ctx, state)
        if problem is not None and not gates:
            return
        if problem is None:
            try:
                await body()
            except Exception as exc:
                problem = finding(exc, what, state.ref)
        if problem is not None:
            loop.latest = loop.latest.failed(problem)
        retry_later(ctx, loop, retried(loop.latest), transient)


def retry_later(ctx: Context, loop: Loop[Any], problem: Finding | None, transient: tuple[str, ...]) -> None:
    """A transient problem of this loop (`transient` reasons) wakes it again soon, with backoff; anything
    else ends its retries."""
    if problem is None or problem.reason not in transient:
        loop.failures = 0
        if loop.retry is not None:  # recovered: the pending retry is not needed any more
            loop.retry.cancel()
            loop.retry = None
        return
    delay = retry.FAILURE_BACKOFF.delay(loop.failures)
    loop.failures += 1
    if loop.retry is not None:
        loop.retry.cancel()
    loop.retry = ctx.timers.later(delay, loop.runs.signal, f"{loop.runs.name}: retry")


def wake_in(ctx: Context, loop: Loop[Any], seconds: float | None) -> None:
    """The one timer a decision may ask for (replacing the one before): the loop wakes then."""
    if loop.timer is not None:
        loop.timer.cancel()
        loop.timer = None
    if seconds is not None:
        def due() -> None:
            loop.timer = None
            loop.runs.signal()
        loop.timer = ctx.timers.later(seconds, due, f"{loop.runs.name}: wake")
