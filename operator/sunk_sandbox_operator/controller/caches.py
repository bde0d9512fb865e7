"""In-memory caches of Namespaces and sandbox Pods, behind one small interface.

Both are fed by one cluster-wide watch per kind (`apply` per event, `load` for the initial
list) and read by name, by label match and per namespace. They keep only the fields the
operator needs: a Namespace is (name, labels, terminating), a Pod is the compact dict
`compact_pod` returns. How they are fed can change without changing their readers.
"""

from __future__ import annotations

from typing import Iterable, Iterator

from ..api.keys import ANNOTATION_PREFIX
from ..api.spec import SandboxNamespaces
from ..core.scope import NamespaceInfo, namespace_matches


class NamespaceCache:
    def __init__(self) -> None:
        self._infos: dict[str, NamespaceInfo] = {}
        self.ready = False  # True once the initial list is in

    def load(self, namespaces: Iterable[dict]) -> None:
        for ns in namespaces:
            info = NamespaceInfo.from_object(ns)
            self._infos.setdefault(info.name, info)
        self.ready = True

    def apply(self, event_type: str | None, body: dict) -> tuple[NamespaceInfo | None, NamespaceInfo | None]:
        """Record one watch event; (before, after), after None when deleted."""
        info = NamespaceInfo.from_object(body)
        before = self._infos.get(info.name)
        if event_type == "DELETED":
            self._infos.pop(info.name, None)
            return before, None
        if before == info:
            return before, before  # a relist, or a change of fields we do not keep
        self._infos[info.name] = info
        return before, info

    def get(self, name: str) -> NamespaceInfo | None:
        return self._infos.get(name)

    def keys(self) -> Iterable[str]:
        return self._infos.keys()

    def __contains__(self, name: str) -> bool:
        return name in self._infos

    def __iter__(self) -> Iterator[NamespaceInfo]:
        return iter(self._infos.values())

    def __len__(self) -> int:
        return len(self._infos)

    def matches(self, spec: SandboxNamespaces, name: str) -> bool:
        """Whether `name` matches the selector/globs (labels from the cache; unknown: no labels)."""
        info = self._infos.get(name)
        return namespace_matches(spec, name, info.labels if info else {})

    def belonging(self, spec: SandboxNamespaces) -> set[str]:
        """Matching namespaces that are not terminating: the ones that belong in the list."""
        return {i.name for i in self._infos.values()
                if i.name and not i.terminating and namespace_matches(spec, i.name, i.labels)}


def compact_pod(pod: dict) -> dict:
    """The fields placement reads, nothing else (a few hundred bytes per pod)."""
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}

    def resources(containers: list | None) -> list[dict]:
        return [{"name": c.get("name"), "resources": c.get("resources") or {}} for c in containers or []]

    annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k.startswith(ANNOTATION_PREFIX)}
    out_spec = {"containers": resources(spec.get("containers")), "initContainers": resources(spec.get("initContainers"))}
    for key in ("schedulerName", "terminationGracePeriodSeconds", "nodeName"):
        if key in spec:
            out_spec[key] = spec[key]
    return {
        "metadata": {k: meta.get(k) for k in ("namespace", "name", "uid", "creationTimestamp")} | {"annotations": annotations},
        "spec": out_spec,
        "status": {"phase": (pod.get("status") or {}).get("phase")},
    }


def pod_key(pod: dict) -> str:
    meta = pod["metadata"]
    return f"{meta.get('namespace')}/{meta.get('name')}"


class PodCache:
    def __init__(self) -> None:
        self._pods: dict[str, dict] = {}               # namespace/name -> compact pod
        self._by_namespace: dict[str, set[str]] = {}   # namespace -> keys

    def apply(self, event_type: str | None, body: dict) -> list[tuple[str, dict]]:
        """Record one watch event; the changes it makes, as (ADDED | MODIFIED | DELETED, compact pod).

        A DELETED carries the pod as last stored (a relist tombstone has only namespace and name);
        a namesake with a new uid replaces the old pod: DELETED old, then ADDED new.
        """
        pod = compact_pod(body)
        key, ns = pod_key(pod), pod["metadata"]["namespace"]
        old = self._pods.get(key)
        if event_type == "DELETED":
            if old is None:
                return []
            del self._pods[key]
            keys = self._by_namespace.get(ns)
            if keys is not None:
                keys.discard(key)
                if not keys:  # sandbox namespaces come and go: drop their empty entries
                    del self._by_namespace[ns]
            return [("DELETED", old)]
        self._pods[key] = pod
        self._by_namespace.setdefault(ns, set()).add(key)
        if old is None:
            return [("ADDED", pod)]
        if old["metadata"].get("uid") != pod["metadata"].get("uid"):
            return [("DELETED", old), ("ADDED", pod)]
        return [("MODIFIED", pod)]

    def keys(self) -> Iterable[str]:
        return self._pods.keys()

    def in_namespace(self, namespace: str) -> list[dict]:
        return [self._pods[k] for k in self._by_namespace.get(namespace, ())]

    def __iter__(self) -> Iterator[dict]:
        return iter(self._pods.values())

    def __len__(self) -> int:
        return len(self._pods)
