"""ScopeSynced and status.scope from the three scope loops' latest results (pure).

Each loop keeps what its latest wake found (`core.scope.list_loop.ListState`, `roll_loop.RollState`,
`grant_loop.GrantState`); whichever wakes last reports from all three. The list's own problem
comes first (the target could not be read or written, the document is refused, the gates before
it: status.scope then keeps what it said before); then one check chain, cert-manager's
`policies.Chain`: an ordered tuple of pure checks over one input, the first problem wins: the roll,
the grants, the scheduler's RBAC. With none: ClusterScope, Pending or Synced, from the list.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

from ...api.reasons import ScopeSynced as R
from ...api.status import ScopeStatus
from .. import conditions
from .errors import Finding
from .grant_loop import GrantState
from .list_loop import ListFacts, ListState
from .roll_loop import RollState

KEPT = ("target", "type", "namespaceCount", "missing", "missingCount", "addedCount", "managedBy", "lastRollTime",
        "nextRollTime")  # what status.scope keeps while the list cannot be kept


@dataclass(frozen=True)
class ScopeReport:
    status: conditions.Status
    reason: str
    message: str
    section: dict[str, Any]


@dataclass(frozen=True)
class Results:
    """The three loops' latest results: what the checks read."""

    list: ListState
    roll: RollState
    grants: GrantState


Check = Callable[[Results], Finding | None]


def _roll(r: Results) -> Finding | None:
    return r.roll.problem


def _grants(r: Results) -> Finding | None:
    return r.grants.problem


def _rbac(r: Results) -> Finding | None:
    return r.grants.rbac


# The order ScopeSynced reports its first problem in, after the list's own: the roll, the grants, the
# scheduler's RBAC.
CHAIN: tuple[Check, ...] = (_roll, _grants, _rbac)


def first_problem(r: Results, chain: tuple[Check, ...] = CHAIN) -> Finding | None:
    for check in chain:
        problem = check(r)
        if problem is not None:
            return problem
    return None


def section(prev: dict[str, Any] | None, facts: ListFacts | None, *, now: str,
            rolls: Mapping[str, str] | None = None, wrote: bool = False) -> dict[str, Any]:
    """status.scope: counts and the first few names, never every name (the full record of what we
    added is the target's ledger). lastSyncTime moves when the list was written (`wrote`: this
    report follows that write) or what we report changed, not at every confirming resync. Without
    facts (the list could not be kept), what was last known is kept."""
    prev = prev or {}
    if facts is None:
        new: dict[str, Any] = {k: prev[k] for k in KEPT if k in prev}
    else:
        new = {"target": dict(facts.target_ref)} if facts.target_ref else {}
        new["type"] = facts.scope_type
        if not facts.cluster:
            new["namespaceCount"] = facts.count
        new.update(missing=list(facts.missing), missingCount=facts.missing_count, addedCount=facts.added_count)
        if facts.managed_by:
            new["managedBy"] = facts.managed_by
        new.update(rolls or {})
    new = ScopeStatus.model_validate(new).wire()  # the model is the shape of status.scope
    unchanged = {k: v for k, v in prev.items() if k != "lastSyncTime"} == new
    if facts is not None and (wrote or not unchanged or not prev.get("lastSyncTime")):
        new["lastSyncTime"] = now
    elif prev.get("lastSyncTime"):
        new["lastSyncTime"] = prev["lastSyncTime"]
    return new


def report(r: Results, *, prev: dict[str, Any] | None, now: str, after_list: bool = True) -> ScopeReport | None:
    """ScopeSynced after any loop's wake: the list's problem, the chain's first, else ClusterScope,
    Pending or Synced (None: the list loop has not looked yet, nothing to say). `after_list`: the
    list loop's wake (or a resync) reports, so a write it made moves lastSyncTime; the other loops'
    wakes do not move it for that write again."""
    f, p = r.list.facts, r.list.problem
    if p is not None:
        return ScopeReport(p.status, p.reason, p.message, section(prev, None, now=now))
    if f is None:
        return None
    if f.cluster:
        return ScopeReport("True", R.CLUSTER_SCOPE, f"the scheduler watches all namespaces (scope type cluster in "
                           f"{f.target}); nothing to write", section(prev, f, now=now))
    sec = section(prev, f, now=now, rolls=r.roll.times(), wrote=after_list and f.wrote)
    extra = f" {r.roll.note}" if r.roll.note else ""
    problem = first_problem(r)
    if problem is not None:
        return ScopeReport(problem.status, problem.reason, problem.message + extra, sec)
    if f.missing_count:
        why = "Observe mode: nothing is written" if f.observe else "not written yet"
        return ScopeReport("False", R.PENDING, f"{f.missing_count} sandbox namespace(s) missing from {f.target} ({why}): "
                           f"{', '.join(f.missing)}{' …' if f.missing_count > len(f.missing) else ''}.{extra}", sec)
    return ScopeReport("True", R.SYNCED, f"{f.target} lists {f.count} namespace(s), every sandbox namespace "
                       f"included.{extra}", sec)
