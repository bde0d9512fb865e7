"""PodStore: compact pods, per-binding trackers, namespace membership changes."""

from types import SimpleNamespace

from sunk_sandbox_operator import api as m
from sunk_sandbox_operator.namespaces import NAMESPACES
from sunk_sandbox_operator.runtime import BindingState
from sunk_sandbox_operator.sandboxpods import PodStore, compact


def _binding(selector=None, names=()):
    spec = {"runner": {"id": "r", "tokenSecretRef": {"name": "s"}}, "partition": "p",
            "sandboxNamespaces": {"names": list(names)} | ({"selector": selector} if selector else {})}
    body = {"metadata": {"namespace": "tenant", "name": "b", "uid": "u", "generation": 1}, "spec": spec}
    state = BindingState("tenant", "b", body)
    state.update_body(body)
    return state


def _pod(ns, name, scheduler="slurm-scheduler"):
    return {"metadata": {"namespace": ns, "name": name, "uid": f"{ns}-{name}", "creationTimestamp": "2026-11-30T00:00:00Z",
                         "labels": {m.SANDBOX_ID_LABEL: name}, "annotations": {"sunk.coreweave.com/partition": "p",
                                                                               "unrelated": "x" * 1000}},
            "spec": {"schedulerName": scheduler, "containers": [{"name": "c", "image": "i", "env": [{"name": "A"}],
                                                                 "resources": {"requests": {"cpu": "1"}}}]},
            "status": {"phase": "Pending"}}


def test_compact_keeps_only_what_placement_reads():
    small = compact(_pod("ds-a", "p1"))
    assert "unrelated" not in small["metadata"]["annotations"]
    assert small["spec"]["containers"] == [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]
    assert small["spec"]["schedulerName"] == "slurm-scheduler"


def test_namespace_relabel_moves_its_pods_in_and_out():
    store = PodStore()
    state = _binding(selector={"matchLabels": {"sandboxes": "yes"}})
    registry = SimpleNamespace(bindings={state.key: state})
    NAMESPACES.apply("ADDED", {"metadata": {"name": "team-x", "labels": {}}})
    list(store.observe(registry, "ADDED", _pod("team-x", "p1")))
    assert len(store.tracker(state)) == 0
    NAMESPACES.apply("MODIFIED", {"metadata": {"name": "team-x", "labels": {"sandboxes": "yes"}}})
    assert store.refresh_namespace(state, "team-x") is True
    assert len(store.tracker(state)) == 1
    NAMESPACES.apply("MODIFIED", {"metadata": {"name": "team-x", "labels": {}}})
    assert store.refresh_namespace(state, "team-x") is True
    assert len(store.tracker(state)) == 0
    assert store.refresh_namespace(state, "no-pods-here") is False


def test_observe_yields_only_matching_bindings_and_tracks_deletes():
    store = PodStore()
    state = _binding(names=["ds-*"])
    registry = SimpleNamespace(bindings={state.key: state})
    assert [s for s, _, _ in store.observe(registry, "ADDED", _pod("other", "p0"))] == []
    assert [s.name for s, _, _ in store.observe(registry, "ADDED", _pod("ds-a", "p1"))] == ["b"]
    assert len(store.tracker(state)) == 1
    list(store.observe(registry, "DELETED", _pod("ds-a", "p1")))
    assert len(store.tracker(state)) == 0 and "ds-a-p1" not in store.pods
    assert "ds-a" not in store.by_namespace  # no empty entry left behind per deleted namespace
