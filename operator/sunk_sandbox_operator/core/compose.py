"""Pure status composition: parts reported by each concern → one status, and the patch to write.

Each concern (scheduler, policy, scope, placement, grace) reports a `Part`: its condition and its
status section. `compose` folds them into the previous status; `merge_patch` gives the JSON merge
patch from old to new, or None when nothing changed (then nothing is written: no churn, no Argo
CD noise).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..api.reasons import ConditionType
from . import conditions as c


@dataclass(frozen=True)
class Part:
    condition: ConditionType            # the condition this part decides
    status: c.Status                    # True | False | Unknown
    reason: str
    message: str
    section: str | None = None          # status key it owns (scheduler, policy, scope, placement)
    data: dict[str, Any] | None = field(default=None)


def compose(prev: dict[str, Any] | None, parts: list[Part], generation: int | None, now: str,
            handled_request: str | None = None, ready_note: str | None = None,
            sections: dict[str, Any] | None = None, paused: str | None = None) -> dict[str, Any]:
    """The new status: sections replaced by the parts that own them (and by `sections`, those no
    condition owns: status.runner), conditions updated, Ready derived (its message ending with
    `ready_note`, if any). `generation` is the one the parts were computed for (the admitted spec's),
    not the live one. `paused` (the pause's message): `paused: true` and Ready False/Paused
    (core/pause.py)."""
    prev = prev or {}
    out: dict[str, Any] = {k: v for k, v in prev.items() if k not in ("conditions", "observedGeneration")}
    if handled_request is not None:
        out["lastHandledReconcileAt"] = handled_request
    if paused:
        out["paused"] = True
    else:
        out.pop("paused", None)
    conds = list(prev.get("conditions") or [])
    if not conds:
        conds = c.initial(generation, now)
    for part in parts:
        conds = c.set_condition(conds, part.condition, part.status, part.reason, part.message, generation, now)
        if part.section is not None:
            if part.data is None:
                out.pop(part.section, None)
            else:
                out[part.section] = part.data
    out.update(sections or {})
    # observedGeneration of untouched conditions follows too: every condition was re-evaluated.
    conds = [{**cond, "observedGeneration": generation} if generation is not None else cond for cond in conds]
    conds = c.with_ready(conds, generation, now, ready_note, paused)
    if generation is not None:
        out["observedGeneration"] = generation
    out["conditions"] = conds
    return out


def without_volatile(status: dict[str, Any]) -> dict[str, Any]:
    """Status minus fields that change on every check (times): used to decide whether to write."""
    def strip(obj: Any) -> Any:
        if isinstance(obj, dict):
            return {k: strip(v) for k, v in obj.items() if k not in ("lastCheckedTime",)}
        if isinstance(obj, list):
            return [strip(v) for v in obj]
        return obj
    stripped: dict[str, Any] = strip(status)
    return stripped


def merge_patch(old: Any, new: Any) -> Any:
    """RFC 7386 merge patch turning old into new; None when they are equal."""
    if old == new:
        return None
    if not isinstance(old, dict) or not isinstance(new, dict):
        return new
    patch: dict[str, Any] = {}
    for key in old.keys() - new.keys():
        patch[key] = None
    for key, value in new.items():
        if key not in old:
            patch[key] = value
        elif old[key] != value:
            sub = merge_patch(old[key], value)
            patch[key] = sub if isinstance(value, dict) and isinstance(old[key], dict) else value
    return patch or None
