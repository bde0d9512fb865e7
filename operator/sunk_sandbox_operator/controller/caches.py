"""In-memory caches of Namespaces and sandbox Pods, behind one small interface.

Both are fed by one cluster-wide watch per kind (`apply` per event, `load` for the initial
list) and read by name, by label match and per namespace. They keep only the fields the
operator needs: a Namespace is (name, labels, terminating), a Pod a `PodRecord`. How they are fed can change without changing their readers.
"""

from __future__ import annotations

from typing import Callable, Iterable, Iterator

from ..core.units import parse_quantity
from ..api.spec import SandboxNamespaces
from ..core.scope.grants import Grant, grant_of
from ..core.pods import PodRecord, container_hazards, decode_pod, resources_key
from ..core.scope.membership import Matcher, NamespaceInfo, namespace_matches, sandbox_namespaces


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

    def matches(self, spec: SandboxNamespaces | Matcher, name: str) -> bool:
        """Whether `name` matches the selector/globs (labels from the cache; unknown: no labels)."""
        info = self._infos.get(name)
        return namespace_matches(spec, name, info.labels if info else {})

    def belonging(self, spec: SandboxNamespaces | Matcher) -> set[str]:
        """Matching namespaces that are not terminating: the ones that belong in the list."""
        return sandbox_namespaces(spec, self._infos.values())


def pod_key(pod: PodRecord) -> tuple[str, str]:
    return (pod.namespace, pod.name)


class PodCache:
    """Sandbox pods as `PodRecord`s (decoded once: resources reduced to hazards), by namespace/name."""

    SHARED_LIMIT = 20_000  # distinct shared values kept (annotation sets, creation seconds)
    HAZARDS_LIMIT = 4_096  # distinct container resources remembered (then forgotten all at once)

    def __init__(self) -> None:
        self._pods: dict[tuple[str, str], PodRecord] = {}
        self._by_namespace: dict[str, set[str]] = {}   # namespace -> pod names
        self._shared: dict = {}
        self._hazards: dict = {}  # resources_key -> hazards

    def _hazards_of(self, containers: list, inits: list) -> frozenset[str]:
        """Hazards memoized by the pods' container resources: a runner's pods come from a few
        templates, and judging them was half of decoding a pod (Decimal sums and compares)."""
        key = resources_key(containers, inits)
        if key is None:
            return container_hazards(containers, inits, parse_quantity)
        found = self._hazards.get(key)
        if found is None:
            if len(self._hazards) >= self.HAZARDS_LIMIT:  # a tenant writing distinct resources only churns it
                self._hazards.clear()
            found = self._hazards[key] = container_hazards(containers, inits, parse_quantity)
        return found

    def _share(self, value):
        """One stored copy of values many pods have in common (bounded; a miss only costs memory)."""
        found = self._shared.get(value)
        if found is not None:
            return found
        if len(self._shared) < self.SHARED_LIMIT:
            self._shared[value] = value
        return value

    def apply(self, event_type: str | None, body: dict) -> list[tuple[str, PodRecord]]:
        """Record one watch event; the changes it makes, as (ADDED | MODIFIED | DELETED, record).

        A DELETED carries the pod as last stored (a relist tombstone has only namespace and name);
        a namesake with a new uid replaces the old pod: DELETED old, then ADDED new.
        """
        pod = decode_pod(body, parse_quantity, self._share, self._hazards_of)
        key = pod_key(pod)
        old = self._pods.get(key)
        if event_type == "DELETED":
            if old is None:
                return []
            del self._pods[key]
            names = self._by_namespace.get(pod.namespace)
            if names is not None:
                names.discard(pod.name)
                if not names:  # sandbox namespaces come and go: drop their empty entries
                    del self._by_namespace[pod.namespace]
            return [("DELETED", old)]
        self._pods[key] = pod
        self._by_namespace.setdefault(pod.namespace, set()).add(pod.name)
        if old is None:
            return [("ADDED", pod)]
        if old.uid != pod.uid:
            return [("DELETED", old), ("ADDED", pod)]
        return [("MODIFIED", pod)]

    def keys(self) -> Iterator[str]:
        """namespace/name of every pod (what a relist compares with)."""
        return (f"{ns}/{name}" for ns, name in self._pods)

    def in_namespace(self, namespace: str) -> list[PodRecord]:
        return [self._pods[(namespace, n)] for n in self._by_namespace.get(namespace, ())]

    def __iter__(self) -> Iterator[PodRecord]:
        return iter(self._pods.values())

    def __len__(self) -> int:
        return len(self._pods)


class GrantCache:
    """The RoleBindings carrying our binding label, as `Grant`s, by binding label value: a grant plan
    reads them here instead of listing RoleBindings cluster-wide at every resync."""

    def __init__(self) -> None:
        self._by_binding: dict[str, dict[tuple[str, str], Grant]] = {}
        self._keys: dict[tuple[str, str], str] = {}   # (namespace, name) -> binding label
        self.listed: Callable[[], bool] = lambda: False  # its informer's first LIST is in

    @property
    def ready(self) -> bool:
        return self.listed()

    def apply(self, event_type: str | None, body: dict) -> None:
        g = grant_of(body)
        key = (g.namespace, g.name)
        old = self._keys.pop(key, None)
        if old is not None:
            entries = self._by_binding.get(old, {})
            entries.pop(key, None)
            if not entries:
                self._by_binding.pop(old, None)
        if event_type != "DELETED":
            self._by_binding.setdefault(g.binding, {})[key] = g
            self._keys[key] = g.binding

    def for_binding(self, label: str) -> list[Grant]:
        return list(self._by_binding.get(label, {}).values())

    def keys(self) -> Iterator[str]:
        return (f"{ns}/{name}" for ns, name in self._keys)

    def __len__(self) -> int:
        return len(self._keys)
