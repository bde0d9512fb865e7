"""The Namespace and Pod caches, and placement judged over them (per-binding trackers, relabels, hazards)."""

from __future__ import annotations

import copy

from sunk_sandbox_operator.api import keys
from sunk_sandbox_operator.api.spec import LabelSelector, SandboxNamespaces
from sunk_sandbox_operator.controller import placement, watch
from sunk_sandbox_operator.core.units import parse_quantity
from sunk_sandbox_operator.controller.caches import NamespaceCache, PodCache, pod_key
from sunk_sandbox_operator.core.placement import GPU_REQUESTED, decode_pod

from tests.unit.fakes import binding_body, discovery, harness_fixture, namespace  # noqa: F401 (fixture)


def _pod(ns: str, name: str, scheduler: str = "slurm-scheduler", *, phase: str = "Running", gpu: bool = False,
         uid: str | None = None) -> dict:
    requests = {"cpu": "1", "memory": "1Gi"} | ({"nvidia.com/gpu": "1"} if gpu else {})
    return {"metadata": {"namespace": ns, "name": name, "uid": uid if uid is not None else f"{ns}-{name}",
                         "creationTimestamp": "2026-11-30T00:00:00Z", "labels": {keys.SANDBOX_ID_LABEL: name},
                         "annotations": {"sunk.coreweave.com/partition": "p", "unrelated": "x" * 1000}},
            "spec": {"schedulerName": scheduler, "nodeName": "n1",
                     "containers": [{"name": "c", "image": "i", "env": [{"name": "A"}],
                                     "resources": {"requests": requests, "limits": {"cpu": "2", "memory": "2Gi"}}}]},
            "status": {"phase": phase, "conditions": [{"type": "Ready", "status": "True"}]}}


# ---------------------------------------------------------------- the pod cache


def _record(pod: dict):
    return decode_pod(pod, parse_quantity)


def test_the_cache_keeps_only_what_placement_reads() -> None:
    pod = _pod("ds-a", "p1", gpu=True)
    pod["spec"]["initContainers"] = [{"name": "init", "image": "i", "command": ["x"]}]
    pod["spec"]["terminationGracePeriodSeconds"] = 45
    cache = PodCache()
    cache.apply("ADDED", pod)
    [kept] = cache.in_namespace("ds-a")
    assert (kept.namespace, kept.name, kept.uid, kept.created) == ("ds-a", "p1", "ds-a-p1", "2026-11-30T00:00:00Z")
    assert kept.annotations == (("sunk.coreweave.com/partition", "p"),)     # ours only: no "unrelated", no labels
    assert (kept.scheduler_name, kept.node_name, kept.phase, kept.grace) == ("slurm-scheduler", "n1", "Running", 45)
    assert kept.resource_hazards == {GPU_REQUESTED}                           # the resources, reduced to hazards
    assert kept.ref == "ds-a/p1"


def test_a_sparse_pod_is_kept_with_defaults() -> None:
    cache = PodCache()
    [(kind, kept)] = cache.apply("ADDED", {"metadata": {"namespace": "ds-a", "name": "p"}})
    assert kind == "ADDED" and kept.phase is None and kept.annotations == () and kept.grace == 30


def test_pod_key_is_namespace_and_name() -> None:
    assert pod_key(_record(_pod("ds-a", "p1"))) == ("ds-a", "p1")
    assert pod_key(_record({"metadata": {"namespace": "ds-a", "name": "p1"}})) == ("ds-a", "p1")  # a tombstone


def test_pod_cache_events() -> None:
    cache = PodCache()
    assert cache.apply("ADDED", _pod("ds-a", "p1")) == [("ADDED", _record(_pod("ds-a", "p1")))]
    assert [k for k, _ in cache.apply(None, _pod("ds-a", "p1", phase="Succeeded"))] == ["MODIFIED"]  # a relist
    assert [k for k, _ in cache.apply("MODIFIED", _pod("ds-b", "p2"))] == ["ADDED"]  # first seen as a MODIFIED
    assert len(cache) == 2 and [p.phase for p in cache.in_namespace("ds-a")] == ["Succeeded"]
    assert sorted(cache.keys()) == ["ds-a/p1", "ds-b/p2"]
    # A tombstone carries only namespace and name: the DELETED hands back the pod as stored.
    deleted = cache.apply("DELETED", {"metadata": {"namespace": "ds-a", "name": "p1"}})
    assert deleted == [("DELETED", _record(_pod("ds-a", "p1", phase="Succeeded")))]
    assert cache.in_namespace("ds-a") == [] and len(cache) == 1
    assert "ds-a" not in cache._by_namespace  # no empty entry left behind per deleted namespace
    assert cache.apply("DELETED", _pod("ds-a", "p1")) == []                      # twice: nothing to say
    assert [p.name for p in cache] == ["p2"]


def test_a_namesake_with_a_new_uid_replaces_the_old_pod() -> None:
    cache = PodCache()
    cache.apply("ADDED", _pod("ds-a", "p1", uid="old"))
    changes = cache.apply("MODIFIED", _pod("ds-a", "p1", uid="new"))  # deleted and recreated between events
    assert [(k, p.uid) for k, p in changes] == [("DELETED", "old"), ("ADDED", "new")]
    assert len(cache) == 1 and cache.in_namespace("ds-a")[0].uid == "new"


# ---------------------------------------------------------------- the namespace cache


def test_namespace_cache_apply_returns_before_and_after() -> None:
    cache = NamespaceCache()
    before, after = cache.apply("ADDED", namespace("ds-a", {"team": "x"}))
    assert before is None and after.name == "ds-a" and after.labels == {"team": "x"} and not after.terminating
    before, after = cache.apply("MODIFIED", namespace("ds-a", terminating=True))
    assert before.labels == {"team": "x"} and after.terminating
    before, after = cache.apply("DELETED", namespace("ds-a"))
    assert before.terminating and after is None
    assert "ds-a" not in cache and len(cache) == 0 and cache.get("ds-a") is None


def test_namespace_cache_says_when_nothing_it_keeps_changed() -> None:
    cache = NamespaceCache()
    cache.apply("ADDED", namespace("ds-a", {"team": "x"}))
    annotated = namespace("ds-a", {"team": "x"})
    annotated["metadata"]["annotations"] = {"note": "an edit of a field the cache does not keep"}
    before, after = cache.apply("MODIFIED", annotated)
    assert before is after and before.labels == {"team": "x"}


def test_namespace_cache_load_keeps_what_the_watch_already_applied() -> None:
    cache = NamespaceCache()
    assert not cache.ready
    cache.apply("MODIFIED", namespace("ds-a", {"fresh": "yes"}))   # the watch was faster than the list
    cache.load([namespace("ds-a"), namespace("other")])
    assert cache.ready and cache.get("ds-a").labels == {"fresh": "yes"}
    assert sorted(i.name for i in cache) == ["ds-a", "other"]


def test_namespace_cache_matching_and_belonging() -> None:
    cache = NamespaceCache()
    cache.load([namespace("ds-a"), namespace("ds-gone", terminating=True), namespace("team", {"sbx": "yes"}),
                namespace("other")])
    spec = SandboxNamespaces(names=["ds-*"], selector=LabelSelector(match_labels={"sbx": "yes"}))
    assert cache.belonging(spec) == {"ds-a", "team"}            # terminating ones do not belong
    assert cache.matches(spec, "ds-gone") and cache.matches(spec, "team") and not cache.matches(spec, "other")
    assert cache.matches(spec, "ds-unknown")                    # by name, even before the watch saw it
    assert not cache.matches(SandboxNamespaces(selector=LabelSelector(match_labels={"sbx": "yes"})), "unknown")


# ---------------------------------------------------------------- placement over the caches


async def test_namespace_relabel_moves_its_pods_in_and_out(harness) -> None:
    h = harness()
    state = h.binding(binding_body(partition="p", sandboxNamespaces={"selector": {"matchLabels": {"sandboxes": "yes"}}}),
                      active=False, judged=True)
    ctx = h.ctx
    ctx.namespaces.apply("ADDED", namespace("team-x"))
    [(kind, record)] = ctx.pods.apply("ADDED", _pod("team-x", "p1"))
    assert list(placement.observe(ctx, kind, record)) == []
    assert len(state.placement.tracker) == 0
    ctx.namespaces.apply("MODIFIED", namespace("team-x", {"sandboxes": "yes"}))
    assert placement.refresh_namespace(ctx, state, "team-x") is True
    assert len(state.placement.tracker) == 1
    assert placement.refresh_namespace(ctx, state, "team-x") is False   # nothing changed this time
    ctx.namespaces.apply("MODIFIED", namespace("team-x"))
    assert placement.refresh_namespace(ctx, state, "team-x") is True
    assert len(state.placement.tracker) == 0
    assert placement.refresh_namespace(ctx, state, "no-pods-here") is False


async def test_observe_yields_only_matching_bindings_and_tracks_deletes(harness) -> None:
    h = harness()
    state = h.binding(active=False, judged=True)
    h.binding(binding_body("other", uid="u2", sandboxNamespaces={"names": ["team-*"]}), active=False, judged=True)
    ctx = h.ctx

    def observe(kind: str, pod: dict) -> list[str]:
        return [s.name for change, small in ctx.pods.apply(kind, pod) for s, _, _ in placement.observe(ctx, change, small)]

    assert observe("ADDED", _pod("elsewhere", "p0")) == []
    assert observe("ADDED", _pod("ds-a", "p1")) == ["b"]
    assert len(state.placement.tracker) == 1
    assert observe("MODIFIED", _pod("ds-a", "p1")) == []                 # the same facts: nothing changed
    assert observe("DELETED", _pod("ds-a", "p1")) == ["b"]
    assert len(state.placement.tracker) == 0 and len(ctx.pods) == 1
    assert observe("DELETED", _pod("ds-a", "p1")) == []                  # already gone


async def test_pods_before_the_first_reconcile_are_cached_not_judged_then_judged_once_from_the_cache(harness) -> None:
    """The initial LIST's 50,000 pods arrive before the binding's first reconcile: judging them one
    by one was thrown away when that reconcile rebuilt the tracker. They are cached only, then
    judged once, by `set_expectations`."""
    h = harness()
    state = h.binding(binding_body(partition="p"), active=False)   # admitted, not reconciled yet
    ctx = h.ctx
    for pod in (_pod("ds-a", "p1", gpu=True), _pod("ds-a", "p2"), _pod("other", "p3")):
        watch.on_pod(ctx, "ADDED", pod)
    assert len(ctx.pods) == 3 and len(state.placement.tracker) == 0
    assert state.flusher is None and h.events == []             # no status write asked, no hazard event yet
    placement.set_expectations(ctx, state, discovery())
    assert len(state.placement.tracker) == 2                    # the binding's two, from the cache
    watch.on_pod(ctx, "DELETED", _pod("ds-a", "p2"))
    assert len(state.placement.tracker) == 1                    # judged per event from now on


async def test_new_expectations_rebuild_the_tracker_from_the_cache_without_listing_pods(harness) -> None:
    h = harness()
    state = h.binding(binding_body(partition="p"), active=False)
    ctx = h.ctx
    for pod in (_pod("ds-a", "p1"), _pod("ds-a", "p2", scheduler="default-scheduler"), _pod("other", "p3")):
        ctx.pods.apply("ADDED", pod)
    placement.set_expectations(ctx, state, discovery())
    assert len(state.placement.tracker) == 2
    summary = state.placement.tracker.summary(None)
    assert summary.pods_observed == 2 and summary.pods_mismatched == 1   # p2 names another scheduler
    ctx.pods.apply("DELETED", _pod("ds-a", "p2"))
    placement.set_expectations(ctx, state, discovery())                  # unchanged expectations: no rebuild
    assert len(state.placement.tracker) == 2
    placement.set_expectations(ctx, state, discovery(name="default-scheduler"))
    assert len(state.placement.tracker) == 1
    assert h.kube.count("list_pods") == 0


async def test_hazard_events_are_paced_per_kind_by_the_injected_clock(harness) -> None:
    h = harness(hazard_event_interval_seconds=60.0)
    state = h.binding(binding_body(partition="p"), active=False, judged=True)
    ctx = h.ctx

    def warnings() -> list[str]:
        return [m for kind, reason, m in h.events if kind == "Warning" and reason == GPU_REQUESTED]

    watch.on_pod(ctx, "ADDED", _pod("ds-a", "p1", gpu=True))
    assert len(warnings()) == 1 and "ds-a/p1" in warnings()[0]
    watch.on_pod(ctx, "ADDED", _pod("ds-a", "p2", gpu=True))
    assert len(warnings()) == 1                                 # a second pod within the interval: no storm
    await h.clock.advance(60.0)
    watch.on_pod(ctx, "ADDED", _pod("ds-a", "p3", gpu=True))
    assert len(warnings()) == 2 and "ds-a/p3" in warnings()[1]
    watch.on_pod(ctx, "MODIFIED", _pod("ds-a", "p3", gpu=True, phase="Succeeded"))
    assert len(warnings()) == 2                                 # not a new hazard on that pod
    assert ctx.metrics.registry.get_sample_value("ssb_sandbox_pod_events_total") == 4
    await h.run_until_idle()
    assert state.status["placement"]["hazards"] == {GPU_REQUESTED: 3}


async def test_pod_churn_is_one_status_write_per_interval(harness) -> None:
    h = harness(status_min_interval_seconds=2.0)
    state = h.binding(binding_body(partition="p"), active=False, judged=True)
    ctx = h.ctx
    for i in range(50):
        watch.on_pod(ctx, "ADDED", _pod("ds-a", f"p{i}"))
    await h.run_until_idle()
    assert h.kube.count("patch_binding_status") == 1
    assert state.status["placement"]["podsObserved"] == 50
    for i in range(50, 60):
        watch.on_pod(ctx, "ADDED", _pod("ds-a", f"p{i}"))
        await h.clock.advance(0.1)
    assert h.kube.count("patch_binding_status") == 1            # paced: 1 s since the last write
    await h.clock.advance(1.0)
    assert h.kube.count("patch_binding_status") == 2
    assert h.kube.get("bindings", "slurm", "b")["status"]["placement"]["podsObserved"] == 60


async def test_a_namespace_relabel_refreshes_placement_through_the_watch(harness) -> None:
    h = harness()
    state = h.binding(binding_body(partition="p", sandboxNamespaces={"selector": {"matchLabels": {"sbx": "yes"}}}),
                      active=False, judged=True)
    ctx = h.ctx
    h.load_namespaces(namespace("team-x"))
    watch.on_pod(ctx, "ADDED", _pod("team-x", "p1"))
    assert len(state.placement.tracker) == 0 and state.flusher is None  # not ours: nothing to write
    watch.on_namespace(ctx, "MODIFIED", namespace("team-x", {"sbx": "yes"}))
    assert len(state.placement.tracker) == 1
    await h.run_until_idle()
    assert h.kube.get("bindings", "slurm", "b")["status"]["placement"]["podsObserved"] == 1
    body = copy.deepcopy(namespace("team-x", {"sbx": "yes"}))
    watch.on_namespace(ctx, "DELETED", body)
    assert len(state.placement.tracker) == 0


def test_quantities_are_parsed_once_and_invalid_ones_refused_every_time():
    from decimal import Decimal

    import pytest

    from sunk_sandbox_operator.core import units

    units._parse.cache_clear()
    assert units.parse_quantity("1Gi") == Decimal(2**30) and units.parse_quantity("1Gi") == Decimal(2**30)
    assert units._parse.cache_info().hits == 1
    for bad in (True, "NaN", "Infinity", "1x"):  # the API server's refusals, whatever was cached before
        for _ in range(2):
            with pytest.raises(ValueError):
                units.parse_quantity(bad)
    assert units.parse_quantity(1) == 1 and units.parse_quantity(1.5) == Decimal("1.5")
