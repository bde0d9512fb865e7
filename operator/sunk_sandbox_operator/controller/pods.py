"""Sandbox pods seen by the one cluster-wide pod watch, fed to each binding's PlacementTracker.

Pods are kept compact (the fields `placement.observe_pod` reads), so a binding created later, or
whose expectations change (scheduler discovered, kill-wait changed), is rebuilt from memory
without listing pods again.
"""

from __future__ import annotations

from typing import Iterator

from . import placement, scope_core
from . import model as m
from .namespaces import NAMESPACES
from .runtime import BindingState, Registry

PARTITION_KEY = m.ANNOTATION_PREFIX + "partition"


def compact(pod: dict) -> dict:
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}

    def resources(containers):
        return [{"name": c.get("name"), "resources": c.get("resources") or {}} for c in containers or []]

    annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k.startswith(m.ANNOTATION_PREFIX)}
    out_spec = {"containers": resources(spec.get("containers")), "initContainers": resources(spec.get("initContainers"))}
    for key in ("schedulerName", "terminationGracePeriodSeconds"):
        if key in spec:
            out_spec[key] = spec[key]
    return {
        "metadata": {k: meta.get(k) for k in ("namespace", "name", "uid", "creationTimestamp")} | {"annotations": annotations},
        "spec": out_spec,
        "status": {"phase": (pod.get("status") or {}).get("phase")},
    }


class PodStore:
    def __init__(self) -> None:
        self.pods: dict[str, dict] = {}  # uid -> compact pod
        self.by_namespace: dict[str, set[str]] = {}  # namespace -> uids

    @staticmethod
    def _belongs(state: BindingState, namespace: str) -> bool:
        if state.spec is None:
            return False
        info = NAMESPACES.infos.get(namespace)
        labels = info.labels if info else {}
        return scope_core.namespace_matches(state.spec.sandbox_namespaces, namespace, labels)

    def _expect(self, state: BindingState) -> dict:
        return state.extras.get("pod_expectations") or {
            "scheduler_name": None, "partition": state.spec.partition if state.spec else None, "pinned": {}, "kill_wait": None}

    def set_expectations(self, state: BindingState, discovery) -> bool:
        spec = state.spec
        pinned = {k: v for k, v in spec.pinned_annotations().items() if k != PARTITION_KEY}
        new = {"scheduler_name": discovery.name, "partition": spec.partition, "pinned": pinned,
               "kill_wait": discovery.kill_wait_seconds, "names": list(spec.sandbox_namespaces.names),
               "selector": spec.sandbox_namespaces.selector.wire() if spec.sandbox_namespaces.selector else None}
        changed = state.extras.get("pod_expectations") != new
        state.extras["pod_expectations"] = new
        return changed

    def _facts(self, state: BindingState, pod: dict) -> placement.PodFacts:
        e = self._expect(state)
        return placement.observe_pod(pod, scheduler_name=e["scheduler_name"], partition=e["partition"],
                                     pinned=e["pinned"], kill_wait=e["kill_wait"])

    def tracker(self, state: BindingState) -> placement.PlacementTracker:
        tracker = state.extras.get("placement_tracker")
        if tracker is None:
            tracker = state.extras["placement_tracker"] = placement.PlacementTracker()
        return tracker

    def rebuild(self, state: BindingState) -> None:
        tracker = self.tracker(state)
        tracker.clear()
        for pod in self.pods.values():
            if self._belongs(state, pod["metadata"]["namespace"]):
                tracker.apply("ADDED", self._facts(state, pod))

    def refresh_namespace(self, state: BindingState, namespace: str) -> bool:
        """A namespace's labels changed (or it appeared after its pods): re-judge its pods only."""
        uids = self.by_namespace.get(namespace)
        if not uids or state.spec is None:
            return False
        tracker = self.tracker(state)
        belongs = self._belongs(state, namespace)
        changed = False
        for uid in uids:
            facts = self._facts(state, self.pods[uid])
            changed |= tracker.apply("ADDED" if belongs else "DELETED", facts)
        return changed

    def forget(self, state: BindingState) -> None:
        state.extras.pop("placement_tracker", None)

    def observe(self, registry: Registry, event_type: str | None, body: dict
                ) -> Iterator[tuple[BindingState, placement.PodFacts, frozenset[str]]]:
        """Record one pod event; yield each binding whose aggregate changed, with new hazards."""
        pod = compact(body)
        uid = pod["metadata"]["uid"] or f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
        kind = "DELETED" if event_type == "DELETED" else ("ADDED" if uid not in self.pods else "MODIFIED")
        ns = pod["metadata"]["namespace"]
        if kind == "DELETED":
            self.pods.pop(uid, None)
            uids = self.by_namespace.get(ns)
            if uids is not None:
                uids.discard(uid)
                if not uids:  # sandbox namespaces come and go: drop their empty entries
                    del self.by_namespace[ns]
        else:
            self.pods[uid] = pod
            self.by_namespace.setdefault(ns, set()).add(uid)
        for state in list(registry.bindings.values()):
            if not self._belongs(state, pod["metadata"]["namespace"]):
                continue
            tracker = self.tracker(state)
            facts = self._facts(state, pod)
            before = tracker.get(facts.key)
            if tracker.apply(kind, facts):
                hazards = placement.new_hazards(before, facts) if kind != "DELETED" else frozenset()
                yield state, facts, hazards
