"""The reconcile pipeline of one binding, and its deletion.

discover the scheduler → report SchedulerReady → who keeps the runner (proof) → policy pipeline →
scope pipeline → Slurm (read only) → placement → write status once. Each concern reports a `Part`; decisions are
made in `core/`, I/O in `adapters/`; this module only sequences them.
"""

from __future__ import annotations

import logging

from ..api.events import EventReason
from ..adapters import kube as k
from ..adapters import scheduler as sched
from ..api.reasons import CONDITION_TYPES, Common, ConditionType, PolicySynced
from ..core import conflicts, pause, resync, tenancy
from ..core.scheduler import discovery as scheduler
from ..core.budget import heaviest
from ..core.compose import Part
from ..core.policy.decide import TRANSIENT
from ..core.redact import describe
from . import depends, placement, policy, runner_proof, scope, slurm, slurm_poll
from .budget import step, timed
from .context import Context
from .retry import FAILURE_BACKOFF
from .state import BindingState
from .status_writer import flush

log = logging.getLogger("sunk_sandbox_operator")

# A failing Kubernetes read (a 500, a 429, a timeout, the API server away) reported on one
# condition and retried with backoff, never an aborted reconcile.
TRANSIENT_ERRORS = (k.KubeError, OSError, TimeoutError)


def resync_seconds(state: BindingState, minimum: float) -> float:
    """The resync interval (raised to the operator's `minimum`); after a transient failure, sooner
    (backoff capped by the interval)."""
    base = resync.decide(state.spec.resync_interval if state.spec else None, minimum).seconds
    return min(base, FAILURE_BACKOFF.delay(state.failures - 1) + 1.0) if state.failures else base


async def discover(ctx: Context, state: BindingState) -> scheduler.Discovery:
    """Over the scheduler namespace's Pods and ConfigMaps as their watches hold them (reduced to what
    discovery reads: no LIST per reconcile; a first reconcile starts them and waits for their first
    LIST), or, when they cannot list (refused, failing), one bounded read that says why."""
    spec = state.admitted_spec
    ns, cap = spec.scheduler_namespace(state.namespace), ctx.config.max_object_bytes
    named = scheduler.scheduler_conf_location(spec, state.namespace)[:2]
    objs = await ctx.depends.listed_scheduler_objects(ns, spec.scheduler.pod_selector, depends.FIRST_LIST_WAIT_SECONDS)
    if objs is None:
        objs = await sched.read(ctx.kube, ns, spec.scheduler.pod_selector, cap, named)
    elif named[0]:
        await sched.read_named(ctx.kube, objs, named, cap)
    if objs.error:
        return scheduler.Discovery(namespace=objs.namespace, selector=objs.selector, forbidden=objs.error)
    state.cost.inputs = heaviest(objs.configmaps, objs.pods)  # named if the reconcile overruns its budget
    d = scheduler.discover(spec, state.namespace, objs.pods, objs.configmaps)
    d.errors.extend(skipped.note(ns, cap) for skipped in objs.skipped)
    return d


def _verdict(ctx: Context, state: BindingState) -> conflicts.RunnerVerdict:
    """Who keeps the runner among the bindings naming it (from the binding cache: no LIST), and whether
    an older binding on the same scope target disagrees with this one. Only bindings the operator's
    settings allow count (a refused binding claims nothing); `me` is the admitted body, with the proof
    this process recorded."""
    cache = ctx.binding_cache
    me = runner_proof.me(state)
    state.target_conflict = conflicts.shared_target_conflict(me, cache.on_target(conflicts.target_key(me)))
    return conflicts.runner_verdict(me, cache.on_runner(state.admitted_spec.runner.id))


async def _owner(ctx: Context, state: BindingState) -> Part | None:
    """Decide who keeps the runner (state.conflict); when this binding has not proved it may manage
    it and a proof would decide it, try once first (one read with its own token). The PolicySynced
    part when another binding keeps it (RunnerConflict) or this binding's attempt failed; else None."""
    verdict = _verdict(ctx, state)
    tried = None
    if runner_proof.tier(state) != conflicts.PROVEN and (verdict.prove or (verdict.owner is None and verdict.claimants)):
        tried = await runner_proof.attempt(ctx, state, policy.client(ctx, state))
        verdict = _verdict(ctx, state)
    state.conflict, state.conflict_checked = verdict.owner, True
    if verdict.owner is not None:
        message = runner_proof.conflict_message(state, verdict, tried)
        return runner_proof.conflict_part(state, ConditionType.POLICY_SYNCED, message)
    claims = frozenset(verdict.claimants)
    if claims - state.claims_warned:
        ctx.event(state, EventReason.RUNNER_CLAIMED,
                  f"binding(s) {', '.join(sorted(claims - state.claims_warned))} also name runner "
                  f"{state.admitted_spec.runner.id} without having proved a token that may manage it: they write "
                  "nothing while this binding keeps it")
    state.claims_warned = claims
    return tried


async def _admit(ctx: Context, state: BindingState) -> list[tenancy.Violation]:
    """Check the live spec and admit exactly it (empty list), or refuse it. Taken under the scope
    loops' locks, with no await between the check and the admission: a signalled scope wake in flight
    ends on the spec it started with, and the next one starts on this one."""
    async with scope.held(ctx, state):
        body, live = state.body, state.live_spec
        if live is None:  # an edit made it unparsable while we waited for the lock: the next reconcile says so
            state.admitted = None
            return [tenancy.Violation("spec", f"does not validate: {state.spec_error}")]
        refused = tenancy.violations(live, state.namespace, ctx.tenancy)
        if refused:
            state.admitted = None  # inactive: namespace and pod signals start no sync for it
        else:
            state.admit(body, live)
        return refused


async def reconcile(ctx: Context, state: BindingState, *, resync: bool = True) -> None:
    """One reconcile. `resync`: the periodic one (the runner policy is read again even when
    nothing it depends on changed); False when something woke it."""
    ctx.failpoints.stall("stall-in-reconcile")
    async with state.lock:  # a reconcile and a finalize never interleave: one admitted spec at a time
        await _reconcile(ctx, state, resync)


async def _reconcile(ctx: Context, state: BindingState, resync: bool) -> None:
    if await _paused(ctx, state):  # a request waits for the resume (which then reads everything)
        return
    # A reconcile request is handled by this reconcile: its status write records it.
    if state.reconcile_request is not None and state.reconcile_request != state.handled_request:
        state.request_honoured_at = ctx.monotonic()
    state.handled_request = state.reconcile_request or state.handled_request
    if state.live_spec is None:
        state.reconciled_generation = state.generation
        state.admitted = None
        for ctype in CONDITION_TYPES[1:]:
            state.report(Part(ctype, "False", Common.INVALID_SPEC, f"spec does not validate: {state.spec_error}"))
        await flush(ctx, state)
        return
    if await _refused(ctx, state):
        return
    spec = state.admitted_spec  # nothing below reads the live one
    await ctx.synced()  # the first reconcile waits for the namespace, pod and RoleBinding caches' initial LIST
    state.reconciled_generation = state.admission.generation
    transient = False
    try:
        d = await step(ctx, state, ConditionType.SCHEDULER_READY, discover(ctx, state))
        state.discovery = d
        status, reason, message = scheduler.scheduler_condition(d)
        state.report(Part(ConditionType.SCHEDULER_READY, status, reason, message, "scheduler", scheduler.to_status(d).wire()))
    except TRANSIENT_ERRORS as exc:  # stays on this condition; the rest goes on with what was known
        transient = True
        state.report(Part(ConditionType.SCHEDULER_READY, "Unknown", Common.API_ERROR,
                          f"reading the scheduler's pods and ConfigMaps failed ({describe(exc)}); retrying", "scheduler",
                          state.section("scheduler") or None))
    d = state.discovery or scheduler.Discovery(namespace=spec.scheduler_namespace(state.namespace), selector="")
    with timed(ctx, state, ConditionType.PLACEMENT_VERIFIED):
        placement.set_expectations(ctx, state, d)

    owned = await _owner(ctx, state)  # None: this binding keeps the runner and its proof did not fail
    if state.conflict:
        state.policy.read_key = None  # the policy step did not run: the next one reads the runner
        assert owned is not None
        state.report(owned)
        state.report(runner_proof.conflict_part(state, ConditionType.SCOPE_SYNCED, owned.message))
    else:
        if owned is not None:  # its own attempt to prove failed: that is PolicySynced (no second call)
            state.policy.read_key = None
            state.report(owned)
        else:
            state.report(await step(ctx, state, ConditionType.POLICY_SYNCED,
                                    policy.sync(ctx, state, d.name, resync=resync)))
        if state.parts[ConditionType.POLICY_SYNCED].reason == PolicySynced.CREDENTIALS_MISSING:
            runner_proof.failed(state, PolicySynced.CREDENTIALS_MISSING)
        state.report(await step(ctx, state, ConditionType.SCOPE_SYNCED, scope.sync(ctx, state)))
    # Read only, so a younger conflicting binding checks Slurm too; its own token, its own request.
    state.report(await step(ctx, state, ConditionType.SLURM_READY, slurm.sync(ctx, slurm_poll.pollers(ctx), state)))
    ctx.slurm.checked(state)
    policy_part = state.parts[ConditionType.POLICY_SYNCED]
    transient = transient or (policy_part.status == "False" and policy_part.reason in TRANSIENT) \
        or policy_part.reason == Common.API_ERROR
    state.failures = state.failures + 1 if transient else 0
    with timed(ctx, state, ConditionType.PLACEMENT_VERIFIED):
        placement.report(ctx, state)
    await flush(ctx, state)
    ctx.depends.refresh()  # the scheduler namespace or the target may have moved: watch what it reads now
    slurm_poll.pollers(ctx).refresh()  # ... and poll the slurmrestd it names now


async def _paused(ctx: Context, state: BindingState) -> bool:
    """Is the binding paused (core/pause.py)? Decided once per wake, under the scope loops' locks (a
    wake in flight ends first; the next one sees it). Then the status records the pause and nothing
    else is read or written; the one event of a pause, or of a resume, is posted here."""
    async with scope.held(ctx, state):
        now = state.paused = pause.paused(state.body.get("metadata"))
    event = pause.transition(now, state.status)
    if event is not None:
        ctx.event(state, event, pause.MESSAGE if now else "the pause annotation was removed: reconciling now")
    if not now:
        return False
    state.policy.read_key = None  # the resume reads the runner again
    await flush(ctx, state)
    return True


async def _refused(ctx: Context, state: BindingState) -> bool:
    """Does the binding ask what the operator's settings do not allow? Then every condition says
    so (with the field and the fix; the status writer posts the Warning events of the transition),
    nothing is read, written or sent for it (no Secret, no runner API call, no scheduler or target
    read), and the RoleBindings granted for it earlier are revoked."""
    generation = state.generation
    refused = await _admit(ctx, state)
    if not refused:
        return False
    message = "not allowed by the operator's settings: " + "; ".join(v.text() for v in refused)
    for ctype in CONDITION_TYPES[1:]:
        state.report(Part(ctype, "False", Common.NOT_ALLOWED, message))
    state.reconciled_generation = generation
    state.conflict_checked = False
    state.policy.read_key = None
    await scope.revoke(ctx, state)
    await flush(ctx, state)
    ctx.depends.refresh()  # nothing it names is watched while it is refused
    if ctx.slurm is not None:
        ctx.slurm.refresh()  # ... nor polled
    return True


async def finalize(ctx: Context, state: BindingState) -> None:
    """On delete: Restore puts back what we changed (unless we were the younger, conflicting binding)."""
    async with state.lock:
        try:
            if state.live_spec is None:
                return
            if await _admit(ctx, state):
                # Its token is never sent to a URL the operator does not allow, even to restore; the
                # RoleBindings granted for it are ours alone and go.
                await scope.revoke(ctx, state)
                ctx.event(state, EventReason.RESTORE_SKIPPED, "the binding asks what the operator's settings do "
                          "not allow; nothing was restored (check the runner policy and the scope list by hand if "
                          "it wrote anything before the settings changed)")
                await policy.forget(ctx, state)
                return
            spec = state.admitted_spec
            await ctx.synced()  # the binding cache's first LIST is in
            if spec.deletion_policy == "Orphan" or spec.mode == "Observe" or _verdict(ctx, state).owner:
                await policy.forget(ctx, state)
                return
            await policy.restore(ctx, state)
            await scope.restore(ctx, state, discover)
        finally:
            await policy.close(state)


def forget(ctx: Context, state: BindingState) -> None:
    """The binding is gone: stop its timers and tasks, drop its state (and so its metrics)."""
    state.close()
    ctx.bindings.forget(state.key)
    ctx.runner_budget.forget(state.key)
    ctx.depends.refresh()
    if ctx.slurm is not None:
        ctx.slurm.refresh()


async def shutdown(ctx: Context) -> None:
    for state in ctx.bindings:
        await policy.close(state)
        state.close()
