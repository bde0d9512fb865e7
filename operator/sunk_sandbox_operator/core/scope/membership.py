"""Which namespaces belong in the scheduler's watched list (pure): `sandboxNamespaces` compiled once,
and the few facts of a Namespace the scope wing keeps."""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

from ...api.spec import SandboxNamespaces
from .. import selectors
from .slo import created_at


@dataclass(frozen=True)
class Matcher:
    """`sandboxNamespaces` compiled once: the globs as one regex, the selector parsed. System
    namespaces (`excluded`: kube-*, the operator's own) are matched only by an exact name, never by
    a glob or a selector (whether that name is allowed is the tenancy check's to say). A namespace
    outside the operator's `bound` (`--sandbox-namespace-selector`) is never matched, not even by
    its exact name, unless it is the binding's `own` namespace. It runs for every binding on every
    namespace event: the bound is asked only of a namespace that matched otherwise (few do)."""

    globs: re.Pattern[str] | None
    selector: selectors.ParsedSelector | None
    literals: frozenset[str] = frozenset()
    excluded: Callable[[str], bool] | None = None
    bound: selectors.ParsedSelector | None = None
    own: str | None = None

    def __call__(self, name: str, labels: Mapping[str, str] | None) -> bool:
        if name in self.literals:
            hit = True
        elif self.excluded is not None and self.excluded(name):
            return False
        else:
            hit = bool(self.globs is not None and self.globs.match(name)) or (
                self.selector is not None and selectors.matches(self.selector, labels or {}))
        return hit and (self.bound is None or name == self.own or selectors.matches(self.bound, labels or {}))


def is_literal(name: str) -> bool:
    """A sandboxNamespaces name without glob characters: one namespace, by its exact name."""
    return not any(ch in name for ch in "*?[")


def glob_literals(glob: str) -> str:
    """The characters a name must contain to match `glob`, in fnmatch's grammar: `*`, `?` and a
    closed `[...]` class are not literal (an unclosed `[` is). `*`, `?*`, `[a-z]*` have none: they
    match (nearly) every name."""
    out, i, n = [], 0, len(glob)
    while i < n:
        ch = glob[i]
        i += 1
        if ch in "*?":
            continue
        if ch == "[":
            j = i
            if j < n and glob[j] == "!":
                j += 1
            if j < n and glob[j] == "]":
                j += 1
            while j < n and glob[j] != "]":
                j += 1
            if j < n:  # a closed class
                i = j + 1
                continue
        out.append(ch)
    return "".join(out)


def compile_matcher(spec: SandboxNamespaces, excluded: Callable[[str], bool] | None = None, *,
                    bound: selectors.ParsedSelector | None = None, own: str | None = None) -> Matcher:
    globs = re.compile("|".join(fnmatch.translate(g) for g in spec.names)) if spec.names else None
    literals = frozenset(filter(is_literal, spec.names))
    return Matcher(globs, selectors.parse_selector(spec.selector) if spec.selector is not None else None,
                   literals, excluded, bound, own)


def namespace_matches(spec: SandboxNamespaces | Matcher, name: str, labels: Mapping[str, str] | None) -> bool:
    """A namespace is a sandbox namespace if the selector matches OR any name glob matches."""
    matcher = spec if isinstance(spec, Matcher) else compile_matcher(spec)
    return matcher(name, labels)


def is_terminating(ns: Mapping[str, Any]) -> bool:
    """Being deleted: deletionTimestamp set (the phase lags behind it) or phase Terminating."""
    meta = ns.get("metadata") or {}
    status = ns.get("status") or {}
    return bool(isinstance(meta, Mapping) and meta.get("deletionTimestamp")) or (
        isinstance(status, Mapping) and status.get("phase") == "Terminating"
    )


@dataclass(slots=True)
class NamespaceInfo:
    """The few facts about a Namespace the scope loops need (what an index stores)."""

    name: str
    labels: dict[str, str] = field(default_factory=dict)
    terminating: bool = False
    created: float | None = None         # creationTimestamp, epoch seconds (the placement SLO's start)

    @classmethod
    def from_object(cls, ns: Mapping[str, Any]) -> "NamespaceInfo":
        meta = ns.get("metadata") or {}
        return cls(name=str(meta.get("name") or ""), labels=dict(meta.get("labels") or {}),
                   terminating=is_terminating(ns), created=created_at(meta if isinstance(meta, Mapping) else None))


def sandbox_namespaces(spec: SandboxNamespaces | Matcher, namespaces: Iterable[NamespaceInfo]) -> set[str]:
    """Names of the matching namespaces that are not terminating (design: 'Scope')."""
    m = spec if isinstance(spec, Matcher) else compile_matcher(spec)
    return {ns.name for ns in namespaces if ns.name and not ns.terminating and m(ns.name, ns.labels)}
