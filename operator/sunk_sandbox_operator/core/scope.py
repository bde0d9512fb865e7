"""Which namespaces belong in the scheduler's watched list, and how the list changes (pure).

No I/O here: the controller reads Namespaces and the target, calls these functions, and
writes what they return. The list's text form lives in `scope_doc`.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Callable, Iterable, Mapping, Sequence

from ..api.reasons import ScopeSynced as R
from ..api.spec import SandboxNamespaces
from ..api.status import ScopeStatus
from . import conditions, selectors

# ---------------------------------------------------------------- which namespaces belong


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
    """The few facts about a Namespace the scope sync needs (what an index stores)."""

    name: str
    labels: dict[str, str] = field(default_factory=dict)
    terminating: bool = False

    @classmethod
    def from_object(cls, ns: Mapping[str, Any]) -> "NamespaceInfo":
        meta = ns.get("metadata") or {}
        return cls(name=str(meta.get("name") or ""), labels=dict(meta.get("labels") or {}),
                   terminating=is_terminating(ns))


def sandbox_namespaces(spec: SandboxNamespaces | Matcher, namespaces: Iterable[NamespaceInfo]) -> set[str]:
    """Names of the matching namespaces that are not terminating (design: 'Scope')."""
    m = spec if isinstance(spec, Matcher) else compile_matcher(spec)
    return {ns.name for ns in namespaces if ns.name and not ns.terminating and m(ns.name, ns.labels)}


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
    """`plan` with the current names and ours as sets (a sync at 5,000 names builds each once)."""
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


def scope_hash(values: Iterable[str]) -> str:
    """Short, order-independent digest for the pod-template annotation sunksandbox.dev/scope-hash."""
    canon = json.dumps(sorted(set(values)), separators=(",", ":"))
    return hashlib.sha256(canon.encode()).hexdigest()[:16]


def missing_summary(desired_sandbox: Iterable[str], current: Iterable[str], limit: int = 5) -> tuple[int, list[str]]:
    """How many sandbox namespaces the list lacks, and the first few by name (for status)."""
    missing = sorted(set(desired_sandbox) - set(current))
    return len(missing), missing[: max(limit, 0)]


# ---------------------------------------------------------------- deciding a sync

MISSING_LIMIT = 5
EVENT_NAMES_LIMIT = 10


@dataclass(frozen=True)
class ScopeObservation:
    """What a sync read: the target's list, the namespaces that belong, and our ledger."""

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
    def listed(self) -> ListDecision:  # decide_list(self), once: a sync asks before and after its write
        return decide_list(self)


@dataclass(frozen=True)
class ListDecision:
    """The list to write (None: no write), the ledger after it, or a report that ends the sync."""

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


def decide_list(obs: ScopeObservation) -> ListDecision:
    if obs.error:
        return ListDecision(error=f"{obs.target}: {obs.error}; it was left untouched: fix it by hand",
                            error_reason=obs.error_reason)
    if obs.scope_type == "cluster":
        return ListDecision(cluster=True, preexisting=list(obs.preexisting) if obs.preexisting is not None else None,
                            added=list(obs.added))
    current = list(obs.values or [])
    if not current and obs.own_namespace:
        # SUNK reads a blank list as "the scheduler's own namespace": writing the sandbox
        # namespaces alone would silently stop it watching there. The effective list is kept.
        current = [obs.own_namespace]
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


@dataclass(frozen=True)
class ScopeReport:
    status: conditions.Status
    reason: str
    message: str
    section: dict[str, Any]


def section(prev: dict[str, Any] | None, ledger: ListDecision | None, *, now: str, error: bool = False,
            scope_type: str | None = None, count: int | None = None, missing: list[str] | None = None,
            missing_count: int | None = None, wrote: bool = False, managed_by: str | None = None,
            target_ref: Mapping[str, Any] | None = None, rolls: Mapping[str, str] | None = None) -> dict[str, Any]:
    """status.scope: counts and the first few names, never every name (the full record of what we
    added is the target's ledger). lastSyncTime moves when the list was written or what we report
    changed, not at every confirming resync. On error, what was last known is kept."""
    prev = prev or {}
    if error:
        new: dict[str, Any] = {k: prev[k] for k in ("target", "type", "namespaceCount", "missing", "missingCount",
                                                    "addedCount", "managedBy", "lastRollTime", "nextRollTime")
                               if k in prev}
    else:
        new = {"target": dict(target_ref)} if target_ref else {}
        if scope_type:
            new["type"] = scope_type
        if count is not None:
            new["namespaceCount"] = count
        new["missing"] = list(missing or [])
        new["missingCount"] = missing_count or 0
        if ledger is not None:
            new["addedCount"] = len(ledger.added)
        if managed_by:
            new["managedBy"] = managed_by
        new.update(rolls or {})
    new = ScopeStatus.model_validate(new).wire()  # the model is the shape of status.scope
    unchanged = {k: v for k, v in prev.items() if k != "lastSyncTime"} == new
    if not error and (wrote or not unchanged or not prev.get("lastSyncTime")):
        new["lastSyncTime"] = now
    elif prev.get("lastSyncTime"):
        new["lastSyncTime"] = prev["lastSyncTime"]
    return new


def report(obs: ScopeObservation, d: ListDecision, *, prev: dict[str, Any] | None, now: str, wrote: bool,
           problem: tuple[str, str] | None = None, notes: Sequence[str] = (), managed_by: str | None = None,
           rolls: Mapping[str, str] | None = None) -> ScopeReport:
    """ScopeSynced after a sync: a problem (reason, message), Pending, ClusterScope or Synced."""
    if d.error:
        return ScopeReport("False", d.error_reason, d.error, section(prev, d, now=now, error=True))
    if d.cluster:
        return ScopeReport("True", R.CLUSTER_SCOPE,
                           f"the scheduler watches all namespaces (scope type cluster in {obs.target}); nothing to "
                           "write", section(prev, d, now=now, scope_type="cluster", missing=[], managed_by=managed_by,
                                            target_ref=obs.target_ref))
    final = set(d.final)
    count, missing = missing_summary(set(obs.sandbox) | set(obs.always), final, MISSING_LIMIT)
    sec = section(prev, d, now=now, scope_type=obs.scope_type or "namespace", count=len(final), missing=missing,
                  missing_count=count, wrote=wrote, managed_by=managed_by, target_ref=obs.target_ref, rolls=rolls)
    extra = (" " + " ".join(notes)) if notes else ""
    if problem is not None:
        return ScopeReport("False", problem[0], problem[1] + extra, sec)
    if count:
        why = "Observe mode: nothing is written" if obs.observe else "not written yet"
        return ScopeReport("False", R.PENDING,
                           f"{count} sandbox namespace(s) missing from {obs.target} ({why}): {', '.join(missing)}"
                           f"{' …' if count > len(missing) else ''}.{extra}", sec)
    return ScopeReport("True", R.SYNCED,
                       f"{obs.target} lists {len(final)} namespace(s), every sandbox namespace included.{extra}", sec)


# ---------------------------------------------------------------- rolling the scheduler


@dataclass(frozen=True)
class RollDecision:
    workload: str | None = None      # patch this Deployment's (or StatefulSet's) pod-template hash
    kind: str = "Deployment"
    hash: str | None = None
    generation: int | None = None    # and the ledger generation it is rolled for
    note: str | None = None          # say this in the condition message instead


def scheduler_workload(workloads: Sequence[Mapping[str, Any]], pod_selector: Any) -> Mapping[str, Any] | None:
    """The Deployment or StatefulSet running the scheduler: pod template labels matching podSelector
    (Deployments first, then by name)."""
    found = [w for w in workloads
             if selectors.matches(pod_selector, ((((w.get("spec") or {}).get("template") or {})
                                                  .get("metadata") or {}).get("labels")))]
    return sorted(found, key=lambda x: (x.get("kind", "Deployment") != "Deployment", x["metadata"]["name"]))[0] \
        if found else None


def decide_roll(workloads: Sequence[Mapping[str, Any]], pod_selector: Any, namespace: str, values: Iterable[str],
                *, wrote: bool, hash_annotation: str, generation: int | None = None,
                generation_annotation: str | None = None) -> RollDecision:
    """Roll the scheduler when what its pod template says it runs is not what the target holds:
    the list's hash differs, or the list was written again since the roll (ledger `generation`:
    a list put back after a revert — a `helm upgrade` that also restarted the scheduler on the
    chart's list — has the old names but must still be re-read). Level-triggered: compares the
    template with the target, whoever changed either. Unless `wrote` (the operator wrote the list: this
    sync, or the ledger's generation says so), a scheduler we never rolled is left alone."""
    dep = scheduler_workload(workloads, pod_selector)
    if dep is None:
        return RollDecision(note=f"No Deployment or StatefulSet in {namespace} has pod template labels matching "
                            "spec.scheduler.podSelector, so the scheduler was not restarted; restart it by hand if "
                            "it reads its config only at start.")
    annotations = (((dep.get("spec") or {}).get("template") or {}).get("metadata") or {}).get("annotations") or {}
    want, have = scope_hash(values), annotations.get(hash_annotation)
    have_gen = annotations.get(generation_annotation) if generation_annotation else None
    # A template from before generations were recorded (no annotation) is taken as current.
    stale_gen = generation is not None and have_gen is not None and have_gen != str(generation)
    if (have == want and not stale_gen) or (not wrote and have is None):
        return RollDecision()
    return RollDecision(workload=dep["metadata"]["name"], kind=dep.get("kind", "Deployment"), hash=want,
                        generation=generation)


def restore_plan(current: list[str], always_include: Iterable[str], preexisting: Iterable[str] | None,
                 added: Iterable[str], others: Iterable[str] = ()) -> ScopePlan:
    """deletionPolicy Restore: our entries leave unless another live binding claims them;
    alwaysInclude entries still listed stay, never re-added."""
    keep = [a for a in always_include if a in current]
    return plan(current, set(), keep, preexisting or (), added, others)
