"""Rolling the scheduler onto the list in its target (a pod-template annotation patch).

Level-triggered: the template records the list's hash and the ledger generation it was rolled
for (`core.scope.decide_roll` compares them with the target). A write that puts back what
another writer removed bumps the generation only when the scheduler may have restarted on the
other list meanwhile (`rewrites_running_list`, from managedFields times: the API server's clock).
"""

from __future__ import annotations

from typing import Callable

from ..core.problems import Problem
from ..api.events import EventReason
from ..adapters import kube as k
from ..adapters import scheduler as sched
from ..adapters import targets
from ..api.keys import FIELD_MANAGER, SCOPE_GENERATION_ANNOTATION, SCOPE_HASH_ANNOTATION
from ..api.reasons import ScopeSynced, grant_targets
from ..api.spec import BindingSpec
from ..core import managers
from ..core import roll_pacing as pacing
from ..core import scope as sc
from ..core.scheduler import Discovery
from ..core.scheduler_conf import parse_go_duration
from .context import Context
from .state import BindingState, ScopeMemory


async def rewrites_running_list(ctx: Context, state: BindingState, target: targets.ScopeTarget,
                                 read: targets.TargetRead, decision: sc.ListDecision) -> bool:
    """Must the scheduler re-read the list this write makes, even if its template already carries
    these names' hash? A write that changes our list rolls it by the hash anyway: yes. A write
    putting back what another writer removed: only when another manager changed the scheduler's
    pod template since that removal (a `helm upgrade` restarting it on the chart's list); a revert
    alone (a no-op upgrade, an admin's edit) left the running scheduler on our list."""
    if not decision.reverted or target.kind != "ConfigMap" or not target.can_roll:
        return True
    meta = read.obj.get("metadata")
    since = managers.last_foreign_change(meta, ("data", getattr(target, "key", "")), FIELD_MANAGER)
    if since is None:
        return True  # who removed them is not recorded: roll to be sure
    try:
        dep = sc.scheduler_workload(await sched.list_workloads(ctx.kube, _discovered(state).namespace),
                                    state.admitted_spec.scheduler.pod_selector)
    except k.Forbidden:
        return True
    return dep is not None and managers.changed_since(dep.get("metadata"), ("spec", "template"), since, FIELD_MANAGER)


async def roll(ctx: Context, state: BindingState, values: list[str], *, wrote: bool,
               generation: int | None = None, may_patch: Callable[[], bool] = lambda: True) -> tuple[str | None, bool]:
    """Set the pod-template scope hash of the Deployment or StatefulSet running the scheduler when
    it differs from the target, or the target's list was written since the roll (rolls the scheduler).
    `may_patch`: asked once a patch is found needed (False: not now, the caller folds it for later).
    (a note for the condition message, whether it rolled)."""
    ns = _discovered(state).namespace
    try:
        workloads = await sched.list_workloads(ctx.kube, ns)
    except k.Forbidden as exc:
        raise Problem(ScopeSynced.FORBIDDEN, f"the operator may not list Deployments and "
                                    f"StatefulSets in {ns}: {exc}; {grant_targets(ns)}") from None
    decision = sc.decide_roll(workloads, state.admitted_spec.scheduler.pod_selector, ns, values, wrote=wrote,
                              hash_annotation=SCOPE_HASH_ANNOTATION, generation=generation,
                              generation_annotation=SCOPE_GENERATION_ANNOTATION)
    if decision.workload is None or decision.hash is None:  # set together
        return decision.note, False
    if not may_patch():
        return None, False
    try:
        rolled = await sched.set_scope_hash(ctx.kube, ns, decision.kind, decision.workload, decision.hash,
                                            decision.generation)
    except k.Forbidden as exc:
        raise Problem(ScopeSynced.FORBIDDEN, f"the operator may not patch {decision.kind} "
                                    f"{ns}/{decision.workload}: {exc}; {grant_targets(ns)}") from None
    if rolled:
        gen = f", {SCOPE_GENERATION_ANNOTATION}={decision.generation}" if decision.generation is not None else ""
        ctx.event(state, EventReason.SCHEDULER_RESTARTED, f"{decision.kind} {ns}/{decision.workload}: pod-template "
                  f"{SCOPE_HASH_ANNOTATION}={decision.hash}{gen} (the watched list was written since the last roll)")
    return None, rolled


async def step(ctx: Context, state: BindingState, mem: ScopeMemory, target: targets.ScopeTarget, values: list[str],
               *, periodic: bool, generation: int | None) -> str | None:
    """After a sync: roll now, fold into one roll later, or nothing (`core.roll_pacing.when_to_roll`).
    A note for the condition message, or None; a Problem when the roll is not permitted."""
    spec = state.admitted_spec
    plan = pacing.when_to_roll(can_roll=target.can_roll, restart=spec.scope.restart_scheduler,
                               observe=spec.mode == "Observe", roll_due=mem.roll_due, periodic=periodic,
                               burst_goes_on=not periodic and mem.syncer.pending, last_roll=mem.last_roll,
                               now=ctx.monotonic(), interval=_min_roll_interval(spec))
    if plan.wait:
        _roll_later(ctx, mem, plan.wait)  # folded: one roll at the interval's end carries every change
        return None
    if not plan.now:
        return None
    interval = _min_roll_interval(spec)
    deferred: list[float] = []

    def may_patch() -> bool:
        # A roll the resync finds needed (an admin's edit, a revert) is rationed like ours.
        wait = pacing.roll_wait(mem.last_roll, ctx.monotonic(), interval)
        if wait > 0:
            deferred.append(wait)
        return not deferred

    note, rolled = await roll(ctx, state, values, wrote=mem.roll_due, generation=generation, may_patch=may_patch)
    if deferred:
        mem.roll_due = True
        _roll_later(ctx, mem, deferred[0])
        return note
    mem.roll_due, mem.next_roll_at = False, None
    if rolled:
        mem.last_roll, mem.last_roll_at = ctx.monotonic(), ctx.now_iso()
    return note


def _discovered(state: BindingState) -> Discovery:
    """The scheduler found: a roll follows a sync (or a restore) that read the target it names."""
    assert state.discovery is not None
    return state.discovery


def _min_roll_interval(spec: BindingSpec) -> float:
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


def status_times(mem: ScopeMemory | None) -> dict[str, str]:
    """status.scope.lastRollTime, and nextRollTime while a folded roll is due."""
    if mem is None:
        return {}
    out = {"lastRollTime": mem.last_roll_at} if mem.last_roll_at else {}
    return {**out, "nextRollTime": mem.next_roll_at} if mem.next_roll_at and mem.roll_due else out
