"""Pure condition bookkeeping (metav1.Condition, KEP-1623).

`lastTransitionTime` changes only when `status` flips; nothing else is touched, so a status
computed twice from the same facts is byte-identical and never rewritten.
"""

from __future__ import annotations

from typing import Any, Iterable, Literal

from ..api.reasons import CONDITION_TYPES, READY_INPUTS, UNKNOWN_DOES_NOT_HOLD_READY, Common, ConditionType, Ready

Status = Literal["True", "False", "Unknown"]



def find(conditions: Iterable[dict[str, Any]], ctype: str) -> dict[str, Any] | None:
    return next((c for c in conditions if c.get("type") == ctype), None)


def set_condition(
    conditions: list[dict[str, Any]],
    ctype: ConditionType,
    status: Status,
    reason: str,
    message: str,
    generation: int | None,
    now: str,
) -> list[dict[str, Any]]:
    """Return a new list with `ctype` set; keep its transition time unless status changed."""
    old = find(conditions, ctype)
    new = {
        "type": ctype,
        "status": status,
        "reason": reason,
        "message": message,
        "observedGeneration": generation,
        "lastTransitionTime": now if old is None or old.get("status") != status else old["lastTransitionTime"],
    }
    if generation is None:
        del new["observedGeneration"]
    out = [c for c in conditions if c.get("type") != ctype] + [new]
    return order(out)


def order(conditions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Known types in the documented order, unknown ones after (stable output, no churn)."""
    rank: dict[str | None, int] = {t: i for i, t in enumerate(CONDITION_TYPES)}
    return sorted(conditions, key=lambda c: (rank.get(c.get("type"), len(rank)), c.get("type", "")))


def ready(conditions: list[dict[str, Any]]) -> tuple[Status, str, str]:
    """Ready = SchedulerReady ∧ PolicySynced ∧ ScopeSynced ∧ GracePeriodSafe ∧ SlurmReady≠False ∧
    PlacementVerified≠False.

    The first False input names the reason; failing that the first Unknown one (PlacementVerified
    Unknown, i.e. no sandbox pod yet, and SlurmReady Unknown, i.e. slurmrestd not answering, do not
    hold Ready back).
    """
    current = {t: find(conditions, t) for t in READY_INPUTS}
    wanted: Status
    for wanted in ("False", "Unknown"):
        for ctype in READY_INPUTS:
            cond = current[ctype]
            status = cond.get("status") if cond else "Unknown"
            if ctype in UNKNOWN_DOES_NOT_HOLD_READY and status == "Unknown":
                continue
            if status == wanted:
                reason: str = cond["reason"] if cond else Common.NOT_RECONCILED  # the CRD requires reason
                message = f"{ctype}: {cond.get('message')}" if cond and cond.get("message") else f"{ctype} is {status}"
                return wanted, reason, message
    return "True", Ready.READY, "sandboxes of this runner are placed by the SUNK scheduler"


def with_ready(conditions: list[dict[str, Any]], generation: int | None, now: str,
               note: str | None = None, paused: str | None = None) -> list[dict[str, Any]]:
    """Ready derived from the others; `note` (a setting that changed what the spec asks, e.g. the
    resync floor) ends its message, whatever its status. `paused` (the pause's message): Ready is
    False with reason Paused, whatever the others say (core/pause.py)."""
    status, reason, message = ("False", Common.PAUSED, paused) if paused else ready(conditions)
    if note:
        message = f"{message}; note: {note}"
    return set_condition(conditions, ConditionType.READY, status, reason, message, generation, now)


def initial(generation: int | None, now: str) -> list[dict[str, Any]]:
    """Every condition Unknown/NotReconciled: the resource is alive before anything is known."""
    conds: list[dict[str, Any]] = []
    for ctype in CONDITION_TYPES:
        conds = set_condition(conds, ctype, "Unknown", Common.NOT_RECONCILED, "not reconciled yet", generation, now)
    return conds
