"""PlacementVerified and GracePeriodSafe: sandbox pods seen by the pod watch, judged per binding.

The pod cache holds each sandbox pod once; every binding keeps a PlacementTracker of the few
facts `core.placement` derives for the pods in its namespaces. When a binding's expectations
change (scheduler discovered, kill-wait changed, spec edited) its tracker is rebuilt from the
cache without listing pods again.
"""

from __future__ import annotations

from typing import Iterator

from ..api.events import EventReason
from ..api.keys import PARTITION_ANNOTATION
from ..core import grace, placement
from ..core.compose import Part
from ..core.scheduler import Discovery
from .context import Context
from .state import BindingState, PodExpectations
from .status_writer import request_flush


def expectations(state: BindingState, d: Discovery) -> PodExpectations:
    spec = state.admitted_spec
    pinned = tuple(sorted((k, v) for k, v in spec.pinned_annotations().items() if k != PARTITION_ANNOTATION))
    selector = spec.sandbox_namespaces.selector
    return PodExpectations(scheduler_name=d.name, partition=spec.partition, pinned=pinned,
                           kill_wait=d.kill_wait_seconds, names=tuple(spec.sandbox_namespaces.names),
                           selector=repr(selector.wire()) if selector else None)


def _facts(state: BindingState, pod: placement.PodRecord) -> placement.PodFacts:
    e = state.placement.expectations
    if e is None:
        return placement.observe_pod(pod, scheduler_name=None, partition=state.spec.partition if state.spec else None,
                                     pinned={}, kill_wait=None)
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
    for pod in ctx.pods:
        if _belongs(ctx, state, pod.namespace):
            tracker.apply("ADDED", _facts(state, pod))


def refresh_namespace(ctx: Context, state: BindingState, namespace: str) -> bool:
    """A namespace's labels changed (or it appeared after its pods): re-judge its pods only."""
    pods = ctx.pods.in_namespace(namespace)
    if not pods or state.spec is None:
        return False
    belongs = _belongs(ctx, state, namespace)
    changed = False
    for pod in pods:
        changed |= state.placement.tracker.apply("ADDED" if belongs else "DELETED", _facts(state, pod))
    return changed


def observe(ctx: Context, kind: str, pod: placement.PodRecord
            ) -> Iterator[tuple[BindingState, placement.PodFacts, frozenset[str]]]:
    """One pod event (already in the cache): each binding whose aggregate changed, with new hazards."""
    ns = pod.namespace
    for state in ctx.bindings:
        if not _belongs(ctx, state, ns):
            continue
        tracker = state.placement.tracker
        facts = _facts(state, pod)
        before = tracker.get(facts.key)
        if tracker.apply(kind, facts):
            yield state, facts, placement.new_hazards(before, facts) if kind != "DELETED" else frozenset()


def hazard_event(ctx: Context, state: BindingState, kind: str, pod_ref: str) -> None:
    """At most one Warning per hazard kind per binding per interval (no event storms under churn)."""
    now = ctx.monotonic()
    if now - state.placement.hazard_events.get(kind, -1e9) < ctx.config.hazard_event_interval_seconds:
        return
    state.placement.hazard_events[kind] = now
    ctx.event(state, EventReason(kind), placement.hazard_message(kind, pod_ref))  # type: ignore[call-arg]  # lookup by value


def report(ctx: Context, state: BindingState) -> None:
    """GracePeriodSafe and PlacementVerified from the discovery and the pods seen so far."""
    d = state.discovery
    applied = state.section("policy").get("lastAppliedTime")
    summary = state.placement.tracker.summary(applied)
    kill_wait = d.kill_wait_seconds if d else None
    status, reason, message = grace.grace_condition(state.admitted_spec.expected_grace_period_seconds, summary.max_grace,
                                                    kill_wait)
    state.report(Part("GracePeriodSafe", status, reason, message))
    window, now = ctx.config.policy_propagation_seconds, ctx.now_iso()
    status, reason, message = placement.placement_condition(summary, applied, window_seconds=window, now=now)
    state.report(Part("PlacementVerified", status, reason, message, "placement", summary.to_status().wire()))
    _recheck_at(ctx, state, placement.propagating_until(summary, applied, window_seconds=window, now=now),
                placement.parse_time(now))


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
