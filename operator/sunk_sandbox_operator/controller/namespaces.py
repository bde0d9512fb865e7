"""A light in-memory index of Namespaces (name, labels, terminating), fed by one watch.

kopf's `@kopf.index` is slow past a few thousand objects; this keeps only what the scope sync
and the pod filter need. It is complete once `load` has listed them all at start-up; watch
events keep it current afterwards.
"""

from __future__ import annotations

from .scope_core import NamespaceInfo


class NamespaceCache:
    def __init__(self) -> None:
        self.infos: dict[str, NamespaceInfo] = {}
        self.ready = False

    def load(self, namespaces: list[dict]) -> None:
        for ns in namespaces:
            info = NamespaceInfo.from_object(ns)
            self.infos.setdefault(info.name, info)
        self.ready = True

    def apply(self, event_type: str | None, body: dict) -> tuple[NamespaceInfo | None, NamespaceInfo | None]:
        """Record one watch event; returns (before, after), after None when deleted."""
        info = NamespaceInfo.from_object(body)
        before = self.infos.get(info.name)
        if event_type == "DELETED":
            self.infos.pop(info.name, None)
            return before, None
        self.infos[info.name] = info
        return before, info

    def labels(self, name: str) -> dict[str, str] | None:
        info = self.infos.get(name)
        return info.labels if info else None

    def values(self):
        return self.infos.values()


NAMESPACES = NamespaceCache()
