"""Rolling the scheduler onto the list in its target: list its workloads, patch the pod template (I/O).

When to roll, and what to patch, is decided in core (`core.scope_plan`, `core.roll_pacing.when_to_roll`,
`core.scope.decide_roll`); the template records the list's hash, the ledger generation it was
rolled for, and when (`rolled-at`: the pacing's memory that survives a death before the status
flush). A refused read or patch is returned as a fact for the plan's check chain; only the Restore
path, which is not rationed, turns it into a Problem itself.
"""

from __future__ import annotations

from ..core.problems import Problem
from ..api.events import EventReason
from ..adapters import kube as k
from ..adapters import scheduler as sched
from ..api.keys import SCOPE_GENERATION_ANNOTATION, SCOPE_HASH_ANNOTATION
from ..core import scope as sc
from ..core import scope_plan as sp
from ..core.scheduler import Discovery
from ..core.redact import describe
from .context import Context
from .state import BindingState


async def workloads(ctx: Context, namespace: str) -> tuple[tuple[dict, ...] | None, str | None]:
    """The Deployments and StatefulSets that may run the scheduler, or why they could not be listed."""
    try:
        return tuple(await sched.list_workloads(ctx.kube, namespace)), None
    except k.Forbidden as exc:
        return None, describe(exc)


async def patch(ctx: Context, state: BindingState, namespace: str, d: sc.RollDecision,
                at: str | None = None) -> tuple[bool, str | None]:
    """Set the pod-template scope hash (rolls the scheduler) and the roll's time `at` (default: now).
    (whether it rolled: False when the workload is gone; why the patch was refused, or None)."""
    assert d.workload is not None and d.hash is not None  # a decision to patch
    try:
        rolled = await sched.set_scope_hash(ctx.kube, namespace, d.kind, d.workload, d.hash, d.generation,
                                            at or ctx.now_iso())
    except k.Forbidden as exc:
        return False, describe(exc)
    if rolled:
        gen = f", {SCOPE_GENERATION_ANNOTATION}={d.generation}" if d.generation is not None else ""
        ctx.event(state, EventReason.SCHEDULER_RESTARTED, f"{d.kind} {namespace}/{d.workload}: pod-template "
                  f"{SCOPE_HASH_ANNOTATION}={d.hash}{gen} (the watched list was written since the last roll)")
    return rolled, None


async def roll(ctx: Context, state: BindingState, values: list[str]) -> None:
    """After a Restore wrote the list: roll the scheduler onto it when its template says otherwise (not
    rationed: the binding is leaving). A Problem when that is not permitted."""
    ns = _discovered(state).namespace
    found, forbidden = await workloads(ctx, ns)
    settings = sp.RollSettings(namespace=ns, pod_selector=state.admitted_spec.scheduler.pod_selector)
    check = sp.template_check(found, forbidden, settings, values, wrote=False, generation=None)
    if isinstance(check, tuple):
        raise Problem(*check)
    if check.workload is None or check.hash is None:
        return
    _, refused = await patch(ctx, state, ns, check)
    if refused is not None:
        raise Problem(*sp.cannot_patch(check, ns, refused))


def _discovered(state: BindingState) -> Discovery:
    """The scheduler found: a roll follows a restore that read the target it names."""
    assert state.discovery is not None
    return state.discovery
