"""PlacementVerified and GracePeriodSafe: sandbox pods seen by the pod watch, judged per binding.

The pod cache holds each sandbox pod once; every binding keeps a PlacementTracker of the few
facts `core.placement` derives for the pods in its namespaces, and (with spec.slurm.restAPI) a
JobTracker of their placeholder jobs, fed the same pod events and the shared poller's job lists
(`on_jobs`). When a binding's expectations change (scheduler discovered, kill-wait changed, spec
edited) its trackers are rebuilt from the cache without listing pods again.
"""

from __future__ import annotations

from typing import Iterator

from ..api.events import EventReason
from ..api.keys import PARTITION_ANNOTATION
from ..api.reasons import ConditionType
from ..core import grace, placement
from ..core.compose import Part
from ..core.scheduler.discovery import Discovery
from ..core.slurm.jobs import JobTracker, JobView
from .context import Context
from .state import BindingState, PodExpectations
from .status_writer import request_flush


def expectations(state: BindingState, d: Discovery) -> PodExpectations:
    spec = state.admitted_spec
    pinned = tuple(sorted((k, v) for k, v in spec.pinned_annotations().items() if k != PARTITION_ANNOTATION))
    selector = spec.sandbox_namespaces.selector
    rest = spec.slurm.rest_api
    return PodExpectations(scheduler_name=d.name, partition=spec.partition, pinned=pinned,
                           kill_wait=d.kill_wait_seconds, names=tuple(spec.sandbox_namespaces.names),
                           selector=repr(selector.wire()) if selector else None,
                           job_templates=tuple(rest.job_name_templates) if rest is not None else None)


def _facts(e: PodExpectations, pod: placement.PodRecord) -> placement.PodFacts:
    return placement.observe_pod(pod, scheduler_name=e.scheduler_name, partition=e.partition, pinned=dict(e.pinned),
                                 kill_wait=e.kill_wait)


def _belongs(ctx: Context, state: BindingState, namespace: str) -> bool:
    return (m := state.matcher) is not None and ctx.namespaces.matches(m, namespace)  # None: not admitted


def set_expectations(ctx: Context, state: BindingState, d: Discovery) -> None:
    """New expectations: rebuild the tracker from the pod cache."""
    new = expectations(state, d)
    if new == state.placement.expectations:
        return
    state.placement.expectations = new
    tracker = state.placement.tracker
    tracker.clear()
    jobs = state.placement.jobs = JobTracker(new.job_templates, new.scheduler_name) \
        if new.job_templates is not None else None
    if jobs is not None and ctx.slurm is not None:
        jobs.set_view(ctx.slurm.view_for(state))
    for pod in ctx.pods:
        if _belongs(ctx, state, pod.namespace):
            tracker.apply("ADDED", _facts(new, pod))
            if jobs is not None:
                jobs.apply("ADDED", pod)


def refresh_namespace(ctx: Context, state: BindingState, namespace: str) -> bool:
    """A namespace's labels changed (or it appeared after its pods): re-judge its pods only (none
    before the binding's first reconcile: `set_expectations` judges them all then)."""
    pods = ctx.pods.in_namespace(namespace)
    e = state.placement.expectations
    if not pods or state.spec is None or e is None:
        return False
    belongs = _belongs(ctx, state, namespace)
    changed = False
    jobs = state.placement.jobs
    for pod in pods:
        changed |= state.placement.tracker.apply("ADDED" if belongs else "DELETED", _facts(e, pod))
        if jobs is not None:
            changed |= jobs.apply("ADDED" if belongs else "DELETED", pod)
    return changed


def observe(ctx: Context, kind: str, pod: placement.PodRecord
            ) -> Iterator[tuple[BindingState, placement.PodFacts, frozenset[str]]]:
    """One pod event (already in the cache): each binding whose aggregate changed, with new hazards."""
    ns = pod.namespace
    for state in ctx.bindings:
        # Not reconciled yet: its first reconcile builds the tracker from the whole cache
        # (`set_expectations`), so judging the pods of the initial LIST one by one here too would be
        # work thrown away (docs/scale.md).
        e = state.placement.expectations
        if e is None or not _belongs(ctx, state, ns):
            continue
        tracker = state.placement.tracker
        facts = _facts(e, pod)
        before = tracker.get(facts.key)
        jobs_changed = state.placement.jobs is not None and state.placement.jobs.apply(kind, pod)
        if tracker.apply(kind, facts):
            yield state, facts, placement.new_hazards(before, facts) if kind != "DELETED" else frozenset()
        elif jobs_changed:
            yield state, facts, frozenset()


def hazard_event(ctx: Context, state: BindingState, kind: str, pod_ref: str) -> None:
    """At most one Warning per hazard kind per binding per interval (no event storms under churn);
    none while paused (nothing is written for it)."""
    if state.paused:
        return
    now = ctx.monotonic()
    if now - state.placement.hazard_events.get(kind, -1e9) < ctx.config.hazard_event_interval_seconds:
        return
    state.placement.hazard_events[kind] = now
    ctx.event(state, EventReason(kind), placement.hazard_message(kind, pod_ref),  # type: ignore[call-arg]  # lookup by value
              pod=pod_ref)


def report(ctx: Context, state: BindingState) -> None:
    """GracePeriodSafe and PlacementVerified from the discovery and the pods seen so far (none
    before the pods' initial LIST is in: a verdict on part of them could be wrong)."""
    if not ctx.pods_listed():
        return
    d = state.discovery
    applied = state.section("policy").get("lastAppliedTime")
    summary = state.placement.tracker.summary(applied)
    kill_wait = d.kill_wait_seconds if d else None
    status, reason, message = grace.grace_condition(state.admitted_spec.expected_grace_period_seconds, summary.max_grace,
                                                    kill_wait)
    state.report(Part(ConditionType.GRACE_PERIOD_SAFE, status, reason, message))
    window, now = ctx.config.policy_propagation_seconds, ctx.now_iso()
    jobs = _jobs_summary(ctx, state)
    status, reason, message = placement.placement_condition(summary, applied, window_seconds=window, now=now,
                                                            jobs=jobs)
    state.report(Part(ConditionType.PLACEMENT_VERIFIED, status, reason, message, "placement", summary.to_status(jobs).wire()))
    _recheck_at(ctx, state, placement.propagating_until(summary, applied, window_seconds=window, now=now),
                placement.parse_time(now))


def _jobs_summary(ctx: Context, state: BindingState):
    jobs = state.placement.jobs
    if jobs is None or jobs.view is None:
        return None
    return jobs.summary(jobs.view.as_of - ctx.config.slurm_pending_seconds)


def on_jobs(ctx: Context, state: BindingState, view: JobView | None, names: set[str] | None,
            previous: JobView | None) -> None:
    """A poller's new job list for this binding (None: none for it now). `names` changed since
    `previous`; a tracker that did not judge against `previous` re-judges every pod once."""
    jobs = state.placement.jobs
    if jobs is None or state.deleted or (view is jobs.view and names is None):
        return
    moved = jobs.set_view(view, names if jobs.view is previous and previous is not None else None)
    due = view is not None and jobs.due(view.as_of - ctx.config.slurm_pending_seconds)
    if moved or due:
        request_flush(ctx, state, before=report)


def _recheck_at(ctx: Context, state: BindingState, end: float | None, now: float | None) -> None:
    """While PolicyPropagating, one re-judge (a status flush) just after the window ends, so the
    verdict flips then rather than at the next resync. A re-judge that still finds the window open
    (clocks) schedules the next one."""
    mem = state.placement
    if end is None or now is None:
        state.close_placement_timer()
        return
    if mem.recheck is not None and not mem.recheck.done() and mem.recheck_for == end:
        return
    state.close_placement_timer()
    delay = end + 1.0 - now  # one-second resolution: the window's last second is still inside it

    def due() -> None:
        mem.recheck, mem.recheck_for = None, None
        request_flush(ctx, state, before=report)

    mem.recheck, mem.recheck_for = ctx.timers.later(delay, due, "placement window re-judge"), end
