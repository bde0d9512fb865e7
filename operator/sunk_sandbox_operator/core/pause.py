"""Pause: whether a binding is paused, what its status says then, and the one event of a pause or a resume.

`sunksandbox.dev/paused: "true"` (exactly that value, as Crossplane's `crossplane.io/paused`; what
Argo CD's health check compares too) stops every write for the binding: the runner policy, the
scope list, the RoleBindings, the scheduler rolls, and its status except the pause itself. The
reconcile decides it once per wake, from the body it admits (controller/reconcile.py); the scope
loops, which wake on their own, read that decision. Deletion is not paused: it still restores.
"""

from __future__ import annotations

from typing import Any, Mapping

from ..api.events import EventReason
from ..api.keys import PAUSED_ANNOTATION
from ..api.reasons import Common, ConditionType
from .compose import Part

# The conditions of what the operator writes: while paused they say so (the others keep what was
# last observed: the scheduler, grace, Slurm and placement are facts, not writes).
WRITE_CONDITIONS: tuple[ConditionType, ...] = (ConditionType.POLICY_SYNCED, ConditionType.SCOPE_SYNCED)
MESSAGE = (f'paused by the annotation {PAUSED_ANNOTATION}="true": nothing is written for this binding until it is '
           "removed (deletion still restores)")


def paused(metadata: Mapping[str, Any] | None) -> bool:
    """Does the binding's metadata ask for a pause? Only the exact value "true" does (any other
    value, e.g. "false" or "yes", is no pause: one spelling, the one Argo CD's check compares)."""
    annotations = (metadata or {}).get("annotations")
    return isinstance(annotations, Mapping) and annotations.get(PAUSED_ANNOTATION) == "true"


def parts() -> list[Part]:
    """What the write conditions report while paused (Unknown: nothing is compared, nothing written)."""
    return [Part(ctype, "Unknown", Common.PAUSED, MESSAGE) for ctype in WRITE_CONDITIONS]


def recorded(status: Mapping[str, Any] | None) -> bool:
    """Does the stored status record a pause (Ready's reason)? What a new process reads after a restart."""
    for cond in (status or {}).get("conditions") or []:
        if isinstance(cond, Mapping) and cond.get("type") == ConditionType.READY.value:
            return bool(cond.get("reason") == Common.PAUSED)
    return False


def transition(now: bool, status: Mapping[str, Any] | None) -> EventReason | None:
    """The one event of this wake: paused now and not recorded, or recorded and not paused now.
    Compared with the stored status, so a restart (a new leader) posts nothing again."""
    was = recorded(status)
    if now and not was:
        return EventReason.BINDING_PAUSED
    if was and not now:
        return EventReason.BINDING_RESUMED
    return None
