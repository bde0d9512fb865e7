"""Which namespaces belong in the scheduler's watched list, and how the list changes (pure).

No I/O here: the controller reads Namespaces and the target, calls these functions, and
writes what they return. The list's text form lives in `scope_doc`.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from ..api.spec import SandboxNamespaces
from . import selectors

# ---------------------------------------------------------------- which namespaces belong


def namespace_matches(spec: SandboxNamespaces, name: str, labels: Mapping[str, str] | None) -> bool:
    """A namespace is a sandbox namespace if the selector matches OR any name glob matches."""
    if any(fnmatch.fnmatchcase(name, glob) for glob in spec.names):
        return True
    return spec.selector is not None and selectors.matches(spec.selector, labels or {})


def is_terminating(ns: Mapping[str, Any]) -> bool:
    """Being deleted: deletionTimestamp set (the phase lags behind it) or phase Terminating."""
    meta = ns.get("metadata") or {}
    status = ns.get("status") or {}
    return bool(isinstance(meta, Mapping) and meta.get("deletionTimestamp")) or (
        isinstance(status, Mapping) and status.get("phase") == "Terminating"
    )


@dataclass
class NamespaceInfo:
    """The few facts about a Namespace the scope sync needs (what an index stores)."""

    name: str
    labels: dict[str, str] = field(default_factory=dict)
    terminating: bool = False

    @classmethod
    def from_object(cls, ns: Mapping[str, Any]) -> "NamespaceInfo":
        meta = ns.get("metadata") or {}
        return cls(name=str(meta.get("name") or ""), labels=dict(meta.get("labels") or {}),
                   terminating=is_terminating(ns))


def sandbox_namespaces(spec: SandboxNamespaces, namespaces: Iterable[NamespaceInfo]) -> set[str]:
    """Names of the matching namespaces that are not terminating (design: 'Scope')."""
    return {
        ns.name
        for ns in namespaces
        if ns.name and not ns.terminating and namespace_matches(spec, ns.name, ns.labels)
    }


# ---------------------------------------------------------------- planning a change


@dataclass(frozen=True)
class ScopeDiff:
    added: list[str]
    removed: list[str]

    @property
    def empty(self) -> bool:
        return not self.added and not self.removed


@dataclass(frozen=True)
class ScopePlan:
    new_list: list[str]
    diff: ScopeDiff
    added_by_us: list[str]

    @property
    def changed(self) -> bool:
        return not self.diff.empty


def diff_lists(current: Iterable[str], desired: Iterable[str]) -> ScopeDiff:
    """Set difference, sorted (order and duplicates are not changes)."""
    cur, want = set(current), set(desired)
    return ScopeDiff(added=sorted(want - cur), removed=sorted(cur - want))


def plan(
    current: list[str],
    desired_sandbox: set[str],
    always_include: Iterable[str],
    preexisting: Iterable[str] | None,
    managed_added: Iterable[str],
) -> ScopePlan:
    """Decide the next watched list.

    Rules:
    - every alwaysInclude name and every matching sandbox namespace is in the result;
    - an entry is removed only if we added it earlier (in `managed_added`) and it is
      neither desired any more (deleted, terminating, relabelled) nor alwaysInclude nor
      preexisting. Entries an admin put there, and preexisting ones, are never removed;
    - preexisting entries are protected, not re-added: if an admin deletes one from the
      target, we respect that (they cannot edit status to un-protect it);
    - the result is sorted and deduplicated, EXCEPT when the set of names does not change:
      then `current` is returned as is, so ordering or duplicates alone never cause a write.

    `added_by_us` is what status.scope.added should become: our still-listed entries plus
    what this plan adds (alwaysInclude entries we added stay ours, so they are cleaned up if
    later dropped from alwaysInclude). With desired_sandbox=set() this is the Restore plan.
    """
    keep_always = set(always_include)
    protected = set(preexisting or ())
    ours = set(managed_added) - protected
    stale = ours - desired_sandbox - keep_always
    cur = set(current)
    new = (cur - stale) | keep_always | desired_sandbox
    added_by_us = sorted(n for n in new if (n in ours or n not in cur) and n not in protected)
    if new == cur:
        return ScopePlan(list(current), ScopeDiff([], []), added_by_us)
    return ScopePlan(sorted(new), diff_lists(cur, new), added_by_us)


def scope_hash(values: Iterable[str]) -> str:
    """Short, order-independent digest for the pod-template annotation sunksandbox.dev/scope-hash."""
    canon = json.dumps(sorted(set(values)), separators=(",", ":"))
    return hashlib.sha256(canon.encode()).hexdigest()[:16]


def missing_summary(desired_sandbox: Iterable[str], current: Iterable[str], limit: int = 5) -> tuple[int, list[str]]:
    """How many sandbox namespaces the list lacks, and the first few by name (for status)."""
    missing = sorted(set(desired_sandbox) - set(current))
    return len(missing), missing[: max(limit, 0)]
