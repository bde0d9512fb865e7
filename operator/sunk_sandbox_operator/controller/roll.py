"""Rolling the scheduler onto the list in its target (a pod-template annotation patch).

Level-triggered: the template records the list's hash and the ledger generation it was rolled
for (`core.scope.decide_roll` compares them with the target). A write that puts back what
another writer removed bumps the generation only when the scheduler may have restarted on the
other list meanwhile (`rewrites_running_list`, from managedFields times: the API server's clock).
"""

from __future__ import annotations

from ..api.events import EventReason
from ..adapters import kube as k
from ..adapters import scheduler as sched
from ..adapters import targets
from ..api.keys import FIELD_MANAGER, SCOPE_GENERATION_ANNOTATION, SCOPE_HASH_ANNOTATION
from ..api.reasons import ScopeSynced, grant_targets
from ..core import managers
from ..core import scope as sc
from .context import Context
from .state import BindingState


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
        dep = sc.scheduler_workload(await sched.list_workloads(ctx.kube, state.discovery.namespace),
                                    state.spec.scheduler.pod_selector)
    except k.Forbidden:
        return True
    return dep is not None and managers.changed_since(dep.get("metadata"), ("spec", "template"), since, FIELD_MANAGER)


async def roll(ctx: Context, state: BindingState, values: list[str], *, wrote: bool,
               generation: int | None = None) -> tuple[str | None, bool]:
    """Set the pod-template scope hash of the Deployment or StatefulSet running the scheduler when
    it differs from the target, or the target's list was written since the roll (rolls the scheduler).
    (a note for the condition message, whether it rolled)."""
    ns = state.discovery.namespace
    try:
        workloads = await sched.list_workloads(ctx.kube, ns)
    except k.Forbidden as exc:
        raise targets.TargetProblem(ScopeSynced.FORBIDDEN, f"the operator may not list Deployments and "
                                    f"StatefulSets in {ns}: {exc}; {grant_targets(ns)}") from None
    decision = sc.decide_roll(workloads, state.spec.scheduler.pod_selector, ns, values, wrote=wrote,
                              hash_annotation=SCOPE_HASH_ANNOTATION, generation=generation,
                              generation_annotation=SCOPE_GENERATION_ANNOTATION)
    if decision.workload is None:
        return decision.note, False
    try:
        rolled = await sched.set_scope_hash(ctx.kube, ns, decision.kind, decision.workload, decision.hash,
                                            decision.generation)
    except k.Forbidden as exc:
        raise targets.TargetProblem(ScopeSynced.FORBIDDEN, f"the operator may not patch {decision.kind} "
                                    f"{ns}/{decision.workload}: {exc}; {grant_targets(ns)}") from None
    if rolled:
        gen = f", {SCOPE_GENERATION_ANNOTATION}={decision.generation}" if decision.generation is not None else ""
        ctx.event(state, EventReason.SCHEDULER_RESTARTED, f"{decision.kind} {ns}/{decision.workload}: pod-template "
                  f"{SCOPE_HASH_ANNOTATION}={decision.hash}{gen} (the watched list was written since the last roll)")
    return None, rolled
