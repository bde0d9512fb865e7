"""The list loop's decision (pure): the namespaces that belong → the target's list and its ledger.

One wake of the loop (`controller/scope/list_loop.py`) reads the target (its list, its ledger, who
else renders it) and the namespaces that belong, then asks `decide` once: the list and the ledger
to write in one request (a crash cannot split them), and the memory the write leaves. The ledger's
generation counts the operator's list writes: the roll loop compares it with the generation the
scheduler's pod template was rolled for, so a list written again (put back after a revert that
restarted the scheduler on another list) rolls it even when the names are the same.

A target the spec (or discovery) moved is left first: `decide` says which, the shell takes our
names and our ledger entry out of it (`decide_restore`, as on deletion) and wakes the loop again
for the new one, where names already listed are pre-existing.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Mapping

from ...api.keys import FIELD_MANAGER
from ...api.spec import LabelSelector
from . import managers, template
from .errors import Finding
from .ledger import Entry, Ledger
from .plan import MISSING_LIMIT, ListDecision, ScopeObservation, ScopePlan, missing_summary, restore_plan
from .target_ref import TargetRef


@dataclass(frozen=True)
class ListObservation:
    """One wake's facts: the list as read (`scope`), the target it lives in, the ledger it carries."""

    scope: ScopeObservation               # the list, the namespaces that belong, what we own (core.scope.plan)
    ref: TargetRef                        # the target the admitted spec names now
    owner: str                            # the ledger's key: the binding's namespace/name
    ledger: Ledger = field(default_factory=Ledger)
    target_meta: Mapping[str, Any] | None = None  # its metadata: managedFields, who renders it
    target_kind: str = "ConfigMap"        # the Kubernetes kind written
    list_field: tuple[str, ...] | None = None  # where the list lives in a ConfigMap the scheduler is rolled for
    pod_selector: LabelSelector | None = None  # spec.scheduler.podSelector: which workload runs the scheduler
    # the scheduler namespace's Deployments and StatefulSets, only when `needs_workloads` (else None)
    workloads: tuple[Mapping[str, Any], ...] | None = None


@dataclass(frozen=True)
class ListFacts:
    """What ScopeSynced and status.scope say of the list (`core.scope.report`)."""

    target: str                           # the target, as messages name it
    target_ref: Mapping[str, Any] | None  # status.scope.target
    scope_type: str
    observe: bool
    cluster: bool = False
    count: int = 0                        # names listed
    missing: tuple[str, ...] = ()         # the first few namespaces that belong and are not listed
    missing_count: int = 0
    added_count: int = 0                  # names this binding added
    managed_by: str | None = None         # another tool rendering the target
    wrote: bool = False                   # this wake wrote the list


@dataclass(frozen=True)
class ListState:
    """The list loop's memory: what its latest wake decided, kept as `decide` returned it. `problem`:
    that wake could not keep the list (ScopeSynced says so, status.scope keeps what it said before)."""

    target_ref: TargetRef | None = None   # the target `added`/`preexisting` belong to (status.scope.target)
    preexisting: tuple[str, ...] | None = None
    added: tuple[str, ...] = ()
    known: frozenset[str] | None = None   # the list as last read or written (namespace events compare with it)
    cluster: bool = False                 # the target says scope type cluster: every namespace is watched
    manager_warned: str | None = None     # the other writer of the target last warned about
    facts: ListFacts | None = None        # None: no wake has read the list yet
    problem: Finding | None = None

    def failed(self, problem: Finding) -> "ListState":
        return replace(self, problem=problem)


@dataclass(frozen=True)
class ListStep:
    """What one wake does: write `values` and `ledger` (no `ledger`: no write), or leave a target."""

    memory: ListState                     # kept once the write is done
    decision: ListDecision = field(default_factory=ListDecision)  # the diff, what was put back (events, log)
    values: list[str] | None = None       # the new list (None: as is)
    ledger: Ledger | None = None          # written with it
    leave: TargetRef | None = None        # the target moved: take ours out of this one; nothing else this wake
    manager: managers.Manager | None = None  # another tool renders the target
    warn: bool = False                    # ... not said yet for this binding: a Warning event


def moved(mem: ListState, ref: TargetRef) -> TargetRef | None:
    """The target the list was kept in, when the spec (or discovery) names another now."""
    return mem.target_ref if mem.target_ref is not None and mem.target_ref != ref else None


def _foreign_list_change(obs: ListObservation) -> str | None:
    """When another field manager last wrote the list's field of a ConfigMap we roll for (the API
    server's clock), or None."""
    path = obs.list_field
    return managers.last_foreign_change(obs.target_meta, path, FIELD_MANAGER) if path is not None else None


def needs_workloads(obs: ListObservation) -> bool:
    """Must the wake read the scheduler's workloads before deciding? Only for a write putting back what
    another writer removed, when that writer is recorded (`rewrites_running_list`; rare)."""
    d = obs.scope.listed
    return obs.workloads is None and d.write is not None and bool(d.reverted) and _foreign_list_change(obs) is not None


def rewrites_running_list(obs: ListObservation, d: ListDecision) -> bool:
    """Must the scheduler re-read the list this write makes, even if its template already carries these
    names' hash? A write that changes our list rolls it by the hash anyway: yes. A write putting back
    what another writer removed: only when another manager changed the scheduler's pod template since
    that removal (a `helm upgrade` restarting it on the chart's list); a revert alone (a no-op upgrade,
    an admin's edit) left the running scheduler on our list."""
    since = _foreign_list_change(obs) if d.reverted else None
    if since is None or obs.workloads is None:
        return True  # not a revert, who removed them is not recorded, or the workloads are not readable
    dep = template.scheduler_workload(obs.workloads, obs.pod_selector)
    return dep is not None and managers.changed_since(dep.get("metadata"), ("spec", "template"), since, FIELD_MANAGER)


def _facts(obs: ListObservation, d: ListDecision, managed_by: str | None, wrote: bool) -> ListFacts:
    s = obs.scope
    if d.cluster:
        return ListFacts(s.target, s.target_ref, "cluster", s.observe, cluster=True, added_count=len(d.added),
                         managed_by=managed_by)
    final = set(d.final)
    count, missing = missing_summary(s.sandbox | frozenset(s.always), final, MISSING_LIMIT)
    return ListFacts(s.target, s.target_ref, s.scope_type or "namespace", s.observe, count=len(final),
                     missing=tuple(missing), missing_count=count, added_count=len(d.added), managed_by=managed_by,
                     wrote=wrote)


def decide(obs: ListObservation, mem: ListState) -> ListStep:
    """The one decision of a wake: leave a moved target, or write the list and the ledger (or nothing),
    and the memory that leaves. A list in error is reported, never written; scope type cluster has
    nothing to write."""
    left = moved(mem, obs.ref)
    if left is not None:
        return ListStep(ListState(target_ref=obs.ref), leave=left)
    d = obs.scope.listed
    manager = managers.other_manager(obs.target_meta, obs.scope.target) if obs.target_kind == "ConfigMap" else None
    warn = manager is not None and mem.manager_warned != manager.describe()
    m = replace(mem, target_ref=obs.ref, problem=None,
                manager_warned=manager.describe() if manager is not None else mem.manager_warned)
    managed_by = manager.describe() if manager is not None else None
    if d.error:
        return ListStep(m.failed(Finding(d.error_reason, d.error)), d, manager=manager, warn=warn)
    m = replace(m, cluster=d.cluster, preexisting=tuple(d.preexisting) if d.preexisting is not None else None,
                added=m.added if obs.scope.observe else tuple(d.added), known=None if d.cluster else frozenset(d.final))
    if d.write is None and not d.claims_changed:
        return ListStep(replace(m, facts=_facts(obs, d, managed_by, False)), d, manager=manager, warn=warn)
    ledger = obs.ledger.with_entry(obs.owner, Entry(tuple(d.added), tuple(d.preexisting or ())))
    if d.write is not None and rewrites_running_list(obs, d):
        ledger = ledger.next_generation()
    return ListStep(replace(m, facts=_facts(obs, d, managed_by, d.write is not None)), d, d.write, ledger,
                    manager=manager, warn=warn)


@dataclass(frozen=True)
class RestoreStep:
    """Restore in one target: the list without our names (None: as is) and the ledger without our entry."""

    plan: ScopePlan
    values: list[str] | None
    ledger: Ledger


def decide_restore(values: list[str], ledger: Ledger, owner: str, always: tuple[str, ...], mine: Entry,
                   others: frozenset[str]) -> RestoreStep | None:
    """deletionPolicy Restore (and leaving a moved target): our names leave the list unless another live
    binding claims them (`core.scope.plan.restore_plan`), our ledger entry goes in the same write; None
    when neither is there. A list written anew moves the generation, as any list write of ours."""
    p = restore_plan(values, always, mine.preexisting, mine.added, others)
    if not p.changed and ledger.get(owner) is None:
        return None
    rest = ledger.with_entry(owner, None)
    return RestoreStep(p, p.new_list if p.changed else None, rest.next_generation() if p.changed else rest)
