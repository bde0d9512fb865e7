"""ScopeSynced and status.scope from what the scope wing found (pure)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from ...api.reasons import ScopeSynced as R
from ...api.status import ScopeStatus
from .. import conditions
from .plan import MISSING_LIMIT, ListDecision, ScopeObservation, missing_summary


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
