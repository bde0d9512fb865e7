"""The next watched-namespace list (pure): what a list write adds and removes, and Restore's list.

No I/O here: the controller reads Namespaces and the target, calls these functions, and writes what
they return. The list's text form lives in `core.scope.doc`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Iterable, Mapping

from ...api.reasons import ScopeSynced as R


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
    cur = current if isinstance(current, (set, frozenset)) else set(current)
    want = desired if isinstance(desired, (set, frozenset)) else set(desired)
    return ScopeDiff(added=sorted(want - cur), removed=sorted(cur - want))


def plan(current: list[str], desired_sandbox: set[str], always_include: Iterable[str], preexisting: Iterable[str] | None,
         managed_added: Iterable[str], others: Iterable[str] = ()) -> ScopePlan:
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

    `added_by_us` is what the ledger entry should become: our still-listed entries plus
    what this plan adds (alwaysInclude entries we added stay ours, so they are cleaned up if
    later dropped from alwaysInclude). With desired_sandbox=set() this is the Restore plan.

    Shared targets: `others` is what the other live bindings on this target added (their
    ledger entries). An entry leaves only when no one of them claims it; we claim a listed
    entry another binding added when we want it too, and drop our claim on one we no longer
    want, so claims follow wants and the last binding wanting an entry removes it.
    """
    return _plan(current, set(current), desired_sandbox, always_include, preexisting, set(managed_added), others)


def _plan(current: list[str], cur: set[str], desired_sandbox: set[str] | frozenset[str], always_include: Iterable[str],
          preexisting: Iterable[str] | None, ours: set[str], others: Iterable[str]) -> ScopePlan:
    """`plan` with the current names and ours as sets (a wake at 5,000 names builds each once)."""
    protected = set(preexisting or ())
    claimed = others if isinstance(others, (set, frozenset)) else set(others)
    wanted = desired_sandbox.union(always_include)
    # Ours, no longer wanted, unclaimed and not protected: those leave. Nothing wanted is stale, so
    # (current - stale) | wanted is (current | wanted) - stale.
    stale = {n for n in ours if n not in wanted and n not in claimed and n not in protected}
    new = cur.union(wanted)
    new -= stale

    def added_by_us(names: Iterable[str]) -> list[str]:
        return [n for n in names if n in wanted and n not in protected and (n in ours or n not in cur or n in claimed)]

    if new == cur:
        return ScopePlan(list(current), ScopeDiff([], []), added_by_us(sorted(wanted)))
    ordered = sorted(new)
    return ScopePlan(ordered, diff_lists(cur, new), added_by_us(ordered))


def missing_summary(desired_sandbox: Iterable[str], current: Iterable[str], limit: int = 5) -> tuple[int, list[str]]:
    """How many sandbox namespaces the list lacks, and the first few by name (for status)."""
    missing = sorted(set(desired_sandbox) - set(current))
    return len(missing), missing[: max(limit, 0)]


# ---------------------------------------------------------------- deciding the list

MISSING_LIMIT = 5
EVENT_NAMES_LIMIT = 10


@dataclass(frozen=True)
class ScopeObservation:
    """What a list wake read: the target's list, the namespaces that belong, and our ledger."""

    target: str                      # human description of the target, for messages
    values: list[str] | None         # the list as read (None with error or cluster scope)
    scope_type: str | None
    error: str | None
    sandbox: frozenset[str]          # matching, non-terminating namespaces
    always: tuple[str, ...]
    preexisting: tuple[str, ...] | None
    added: tuple[str, ...]
    observe: bool
    others: frozenset[str] = frozenset()  # entries other live bindings on this target added (ledger)
    own_namespace: str | None = None      # a blank list means this namespace (the scheduler's own)
    target_ref: Mapping[str, Any] | None = None  # which list this is (status.scope.target)
    error_reason: str = R.INVALID_CONFIG  # what reports `error` (DocumentRefused: refused as untrusted input)

    @cached_property
    def listed(self) -> ListDecision:  # decide_list(self), once: a wake may ask before its decision too
        return decide_list(self)


@dataclass(frozen=True)
class ListDecision:
    """The list to write (None: no write), what we claim after it, or why the list cannot be kept."""

    write: list[str] | None = None
    final: list[str] = field(default_factory=list)
    added: list[str] = field(default_factory=list)
    preexisting: list[str] | None = None
    diff: ScopeDiff = field(default_factory=lambda: ScopeDiff([], []))
    cluster: bool = False
    error: str | None = None
    error_reason: str = R.INVALID_CONFIG
    reverted: list[str] = field(default_factory=list)  # ours, still wanted, removed by another writer
    claims_changed: bool = False  # the list stays, but what we claim in the ledger changed (shared targets)


def effective(values: list[str] | tuple[str, ...] | None, own_namespace: str | None) -> list[str]:
    """The list as the scheduler reads it. SUNK reads a blank list as "the scheduler's own namespace":
    writing the sandbox namespaces alone would silently stop it watching there, so the effective list
    is what is kept (and what the roll and the grants read)."""
    current = list(values or [])
    return [own_namespace] if not current and own_namespace else current


def decide_list(obs: ScopeObservation) -> ListDecision:
    if obs.error:
        return ListDecision(error=f"{obs.target}: {obs.error}; it was left untouched: fix it by hand",
                            error_reason=obs.error_reason)
    if obs.scope_type == "cluster":
        return ListDecision(cluster=True, preexisting=list(obs.preexisting) if obs.preexisting is not None else None,
                            added=list(obs.added))
    current = effective(obs.values, obs.own_namespace)
    cur, ours = set(current), set(obs.added)
    # Before our first write, what is listed is the admin's — except what other bindings added.
    pre = sorted(cur - obs.others) if obs.preexisting is None else list(obs.preexisting)
    p = _plan(current, cur, obs.sandbox, obs.always, pre, ours - set(pre), obs.others)
    # The ledger travels with the list, so a name it says we added that is gone from the list was
    # removed by someone else (a Helm upgrade, Argo CD self-heal, an admin).
    reverted = sorted(n for n in ours if n not in cur and (n in obs.sandbox or n in obs.always))
    if not p.changed or obs.observe:
        added = list(obs.added) if obs.observe else p.added_by_us
        return ListDecision(final=current, added=added, preexisting=pre, reverted=reverted,
                            claims_changed=not obs.observe and set(added) != set(obs.added))
    return ListDecision(write=p.new_list, final=p.new_list, added=p.added_by_us, preexisting=pre, diff=p.diff,
                        reverted=reverted)


def names(items: list[str], limit: int = EVENT_NAMES_LIMIT) -> str:
    shown = ", ".join(items[:limit])
    return shown + (f" (+{len(items) - limit} more)" if len(items) > limit else "")


def change_message(target: str, diff: ScopeDiff) -> str:
    parts = [f"added {names(diff.added)}" if diff.added else "", f"removed {names(diff.removed)}" if diff.removed else ""]
    return f"{target}: " + "; ".join(x for x in parts if x)


def restore_plan(current: list[str], always_include: Iterable[str], preexisting: Iterable[str] | None,
                 added: Iterable[str], others: Iterable[str] = ()) -> ScopePlan:
    """deletionPolicy Restore: our entries leave unless another live binding claims them;
    alwaysInclude entries still listed stay, never re-added."""
    keep = [a for a in always_include if a in current]
    return plan(current, set(), keep, preexisting or (), added, others)
