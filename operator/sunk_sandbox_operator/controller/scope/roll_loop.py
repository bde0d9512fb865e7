"""The roll loop (I/O): the list the running scheduler was rolled for vs the list now.

A wake reads facts only: the target's list and its ledger generation, the scheduler's workloads (their
pod template records the hash, the generation and the time it was last rolled for), how many
namespaces that belong are not listed yet, and, with grants on, how many listed ones still lack our
RoleBinding. `core.scope.roll_loop.decide` answers once: patch the template now (the roll), look
again later (the interval's end, a hold), or nothing. The list loop's writes and the grants loop's
creates wake it; a decision to look again later sets its one timer. Restore on deletion goes through
the same decision, as the binding leaving (not rationed).
"""

from __future__ import annotations

from ...adapters import kube as k
from ...adapters import scheduler as sched
from ...adapters import targets
from ...api.events import EventReason
from ...api.keys import SCOPE_GENERATION_ANNOTATION, SCOPE_HASH_ANNOTATION
from ...api.reasons import ScopeSynced
from ...core.redact import describe
from ...core.scope import pacing
from ...core.scope.errors import Finding
from ...core.scope.grant_loop import owed
from ...core.scope.roll_loop import RollObservation, RollSettings, RollState, RollStep, decide, refused, rolled
from ..context import Context
from ..state import BindingState, ScopeMemory
from . import facts, slo

TRANSIENT = (ScopeSynced.ERROR,)  # retried with backoff


async def run(ctx: Context, state: BindingState, *, periodic: bool = False) -> None:
    mem = state.scope
    assert mem is not None
    loop = mem.roll_loop

    async def body() -> None:
        obs = await _observe(ctx, state, mem, facts.target(ctx, state, mem), periodic)
        step = decide(obs, loop.latest)
        loop.latest = await _act(ctx, state, obs.settings.namespace, step)
        if step.patch is not None and step.patch.hash is not None and loop.latest.problem is None:
            slo.rolled_for(mem, step.patch.hash, obs.values)
        poll = slo.rolled(ctx, state, mem, obs)  # (a patch made now is seen at the next look)
        facts.wake_in(ctx, loop, step.wake if poll is None else min(poll, step.wake or poll))

    await facts.wake(ctx, state, loop, "roll", body, TRANSIENT)


def _settings(state: BindingState, target: targets.ScopeTarget) -> RollSettings:
    spec, d = state.admitted_spec, state.discovery
    assert d is not None
    return RollSettings(can_roll=target.can_roll, restart=spec.scope.restart_scheduler, observe=spec.mode == "Observe",
                        interval=pacing.interval_of(spec.scope.min_roll_interval), namespace=d.namespace,
                        pod_selector=spec.scheduler.pod_selector)


async def _observe(ctx: Context, state: BindingState, mem: ScopeMemory, target: targets.ScopeTarget,
                   periodic: bool) -> RollObservation:
    """The facts `decide` compares (nothing is read for a binding that never rolls the scheduler)."""
    s = _settings(state, target)
    if not s.rolls:
        return RollObservation(s, None)
    read = await facts.read(ctx, target, trusted=periodic)
    values = facts.listed(state, read)
    if values is None:
        return RollObservation(s, None)
    workloads, forbidden = await facts.workloads(ctx, s.namespace)
    sandbox = facts.belonging(ctx, state, mem, full=False)
    listed = frozenset(values)
    unlisted = len((sandbox | set(state.admitted_spec.scope.always_include)) - listed)
    ungranted = 0
    grants = facts.grant_settings(ctx, state)
    if grants.role and not grants.observe:
        found, _ = await facts.our_grants(ctx, state)
        ungranted = owed(grants, values, facts.where(ctx, state, sandbox), found) if found is not None else 0
    return RollObservation(s, values, read.ledger.generation, workloads, forbidden, unlisted, ungranted,
                           now=ctx.monotonic(), now_iso=ctx.now_iso())


async def _act(ctx: Context, state: BindingState, namespace: str, step: RollStep) -> RollState:
    """Patch the pod template as decided (it rolls the scheduler) with the roll's time: the state that leaves."""
    d = step.patch
    if d is None:
        return step.memory
    assert d.workload is not None and d.hash is not None  # a decision to patch
    at = ctx.now_iso()  # the template records it too (a death before the status flush keeps it)
    try:
        done = await sched.set_scope_hash(ctx.kube, namespace, d.kind, d.workload, d.hash, d.generation, at)
    except k.Forbidden as exc:
        return refused(step.memory, d, namespace, describe(exc))
    if not done:  # the workload is gone
        return rolled(step.memory, None)
    ctx.failpoints.hit("after-scheduler-roll")
    gen = f", {SCOPE_GENERATION_ANNOTATION}={d.generation}" if d.generation is not None else ""
    ctx.event(state, EventReason.SCHEDULER_RESTARTED, f"{d.kind} {namespace}/{d.workload}: pod-template "
              f"{SCOPE_HASH_ANNOTATION}={d.hash}{gen} (the watched list was written since the last roll)")
    return rolled(step.memory, (ctx.monotonic(), at))


async def restore(ctx: Context, state: BindingState, target: targets.ScopeTarget, values: list[str]) -> Finding | None:
    """After Restore wrote the list: the same decision as the binding leaving (not rationed, not held);
    what kept the scheduler from being rolled onto it, if anything."""
    mem = state.scope
    assert mem is not None
    s = _settings(state, target)
    if not s.rolls:
        return None
    workloads, forbidden = await facts.workloads(ctx, s.namespace)
    obs = RollObservation(s, tuple(values), workloads=workloads, workloads_forbidden=forbidden, leaving=True,
                          now=ctx.monotonic(), now_iso=ctx.now_iso())
    mem.roll_loop.latest = await _act(ctx, state, s.namespace, decide(obs, mem.roll_loop.latest))
    return mem.roll_loop.latest.problem
