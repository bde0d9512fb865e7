"""The reconcile pipeline of one binding: each concern reports a Part, then status is flushed.

Imperative shell: every decision is made by the pure modules (scheduler, policy, scope_core,
placement, grace, conditions, status); this module reads, calls them, writes.
"""

from __future__ import annotations

import logging
import time

from . import conflicts, grace, kube, placement, policy_sync, scheduler, scope, selectors
from . import model as m
from .runtime import BindingState, Registry
from .sandboxpods import PodStore
from .status import Part

log = logging.getLogger("sunk_sandbox_operator")

PODS = PodStore()


def resync_seconds(state: BindingState) -> float:
    base = 300.0
    if state.spec:
        try:
            base = max(1.0, scheduler.parse_go_duration(state.spec.resync_interval))
        except ValueError:
            pass
    # After a failure, come back sooner (exponential, capped by the resync interval) to recover.
    failures = state.extras.get("failures", 0)
    return min(base, 2.0 * (2 ** min(failures, 8))) if failures else base


async def startup(registry: Registry) -> None:
    registry.before_flush = report_placement
    await scope.startup(registry)


async def shutdown(registry: Registry) -> None:
    for state in list(registry.bindings.values()):
        await policy_sync.close(state)
    await scope.shutdown(registry)


# ---------------------------------------------------------------- one binding


async def _conflict(state: BindingState) -> str | None:
    """The older binding on the same runner id, if this one is the younger (it then writes nothing)."""
    return conflicts.older_owner(state.body, await kube.list_bindings())


async def discover(state: BindingState) -> scheduler.Discovery:
    spec = state.spec
    ns = spec.scheduler_namespace(state.namespace)
    selector = selectors.to_label_selector_string(spec.scheduler.pod_selector)
    try:
        pods = await kube.list_pods(ns, selector or None)
        if selector is None:  # not expressible server-side: filter here
            pods = [p for p in pods if selectors.matches(spec.scheduler.pod_selector, p["metadata"].get("labels"))]
        configmaps = await kube.list_configmaps(ns)
    except kube.Forbidden as exc:
        d = scheduler.Discovery(namespace=ns, selector=selector or "")
        d.errors.append(f"the operator may not read pods/configmaps in {ns}: {exc}")
        return d
    return scheduler.discover(spec, state.namespace, pods, configmaps)


async def reconcile(registry: Registry, state: BindingState) -> None:
    spec = state.spec
    if spec is None:
        for ctype in ("SchedulerReady", "PolicySynced", "ScopeSynced", "GracePeriodSafe", "PlacementVerified"):
            state.report(Part(ctype, "False", "InvalidSpec", f"spec does not validate: {state.spec_error}"))
        await registry.flush(state)
        return
    state.extras["reconciled_generation"] = state.generation
    d = await discover(state)
    state.extras["discovery"] = d
    status, reason, message = scheduler.scheduler_condition(d)
    state.report(Part("SchedulerReady", status, reason, message, "scheduler", scheduler.to_status(d).wire()))

    expectations_changed = PODS.set_expectations(state, d)
    conflict = await _conflict(state)
    state.extras["conflict"] = conflict
    if conflict:
        msg = (f"binding {conflict} already manages runner {spec.runner.id}; this younger binding writes "
               "nothing: delete one of them")
        state.report(Part("PolicySynced", "False", "RunnerConflict", msg))
        state.report(Part("ScopeSynced", "False", "RunnerConflict", msg))
    else:
        part = await policy_sync.sync(registry, state, d.name)
        state.report(part)
        state.report(await scope.sync(registry, state, d))
    failed = state.parts["PolicySynced"].status == "False" and state.parts["PolicySynced"].reason in (
        "APIUnavailable", "ConflictRetriesExhausted")
    state.extras["failures"] = state.extras.get("failures", 0) + 1 if failed else 0
    if expectations_changed:
        PODS.rebuild(state)
    report_placement(state)
    await registry.flush(state)


def report_placement(state: BindingState) -> None:
    """GracePeriodSafe and PlacementVerified from the discovery and the pods seen so far."""
    d: scheduler.Discovery | None = state.extras.get("discovery")
    tracker: placement.PlacementTracker = PODS.tracker(state)
    applied = (state.status.get("policy") or {}).get("lastAppliedTime")
    policy_part = state.parts.get("PolicySynced")
    if policy_part and policy_part.data:
        applied = policy_part.data.get("lastAppliedTime", applied)
    summary = tracker.summary(applied)
    kill_wait = d.kill_wait_seconds if d else None
    status, reason, message = grace.grace_condition(state.spec.expected_grace_period_seconds, summary.max_grace, kill_wait)
    state.report(Part("GracePeriodSafe", status, reason, message))
    status, reason, message = placement.placement_condition(summary, applied)
    state.report(Part("PlacementVerified", status, reason, message, "placement",
                      summary.to_status().wire()))


async def finalize(registry: Registry, state: BindingState) -> None:
    """On delete: Restore puts back what we changed (unless we were the younger, conflicting binding)."""
    spec = state.spec
    try:
        if spec is None or spec.deletion_policy == "Orphan" or spec.mode == "Observe":
            return
        if await _conflict(state):
            return
        await policy_sync.restore(registry, state)
        await scope.restore(registry, state)
    finally:
        await policy_sync.close(state)
        PODS.forget(state)


# ---------------------------------------------------------------- watch events


def on_namespace(registry: Registry, event_type: str | None, body: dict) -> None:
    scope.on_namespace(registry, event_type, body)
    name = (body.get("metadata") or {}).get("name", "")
    for state in list(registry.bindings.values()):
        if PODS.refresh_namespace(state, name):  # membership may have changed with its labels
            registry.request_flush(state)


def on_pod(registry: Registry, event_type: str | None, body: dict) -> None:
    started = time.monotonic()
    for state, facts, new_hazards in PODS.observe(registry, event_type, body):
        for kind in new_hazards:
            _hazard_event(registry, state, kind, facts.ref)
        scope.on_sandbox_pod(registry, state, body)
        # The placement summary (one pass over the binding's pods) is computed by the coalesced
        # flush itself (Registry.before_flush), once per status write, not once per pod event.
        registry.request_flush(state)
    if time.monotonic() - started > 0.5:
        log.warning("slow pod event handling: %.2fs", time.monotonic() - started)


def _hazard_event(registry: Registry, state: BindingState, kind: str, pod_ref: str) -> None:
    """At most one Warning per hazard kind per binding per interval (no event storms under churn)."""
    last = state.extras.setdefault("hazard_events", {})
    now = time.monotonic()
    if now - last.get(kind, -1e9) < registry.config.hazard_event_interval_seconds:
        return
    last[kind] = now
    registry.event(state, "Warning", kind, placement.hazard_message(kind, pod_ref))
