"""Which binding owns a runner when several name it (pure).

The runner has one policy: two bindings writing it would fight. The oldest binding (creation
time, then namespace/name so the order is total) owns it; every younger one writes nothing.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from ..api.spec import parse_spec
from .scope.target_ref import locate


def _age_key(binding: dict[str, Any]) -> tuple[str, str, str]:
    meta = binding.get("metadata") or {}
    return (meta.get("creationTimestamp") or "", meta.get("namespace") or "", meta.get("name") or "")


def ref(binding: dict[str, Any]) -> str:
    """namespace/name of a binding body."""
    meta = binding.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}"


def _runner_id(binding: dict[str, Any]) -> str | None:
    return ((binding.get("spec") or {}).get("runner") or {}).get("id")


def older_owner(me: dict[str, Any], others: list[dict[str, Any]]) -> str | None:
    """namespace/name of an older binding (live or still finalizing) on the same runner id, or None
    if `me` owns it."""
    mine = _age_key(me)
    runner = _runner_id(me)
    for other in sorted(others, key=_age_key):
        # An older binding being deleted still owns the runner until it is gone: its finalizer may be
        # restoring the policy, and a takeover meanwhile would be undone by that restore.
        if _age_key(other)[1:] == mine[1:] or _runner_id(other) != runner:
            continue
        if _age_key(other) < mine:
            return ref(other)
    return None


# ---------------------------------------------------------------- shared scope targets


def target_key(binding: dict[str, Any]) -> tuple[str, ...]:
    """Which list a binding writes, from its spec alone (`target_ref.locate`, the spec's defaults
    filled in: a binding that spells out a default and one that leaves it out share the target)."""
    meta = binding.get("metadata") or {}
    try:
        spec = parse_spec(binding.get("spec") or {})
    except ValidationError:  # refused elsewhere; keyed as written meanwhile
        return ("unparsed", repr(binding.get("spec")))
    return locate(spec, meta.get("namespace") or "").key_tuple


def _writes(binding: dict[str, Any]) -> tuple[str, bool]:
    spec = binding.get("spec") or {}
    scope = spec.get("scope") or {}
    return (spec.get("mode") or "Enforce", scope.get("restartScheduler", True) is not False)


def shared_target_conflict(me: dict[str, Any], others: list[dict[str, Any]]) -> str | None:
    """Several bindings may share a target (their entries merge through the ledger), but not
    disagree on what cannot be merged: whether the list is written (mode) and whether the
    scheduler is rolled. The oldest binding on the target decides; a younger one that disagrees
    gets this message and writes nothing there."""
    mine, key = _age_key(me), target_key(me)
    for other in sorted(others, key=_age_key):
        if _age_key(other)[1:] == mine[1:] or _age_key(other) >= mine or target_key(other) != key:
            continue
        (their_mode, their_roll), (my_mode, my_roll) = _writes(other), _writes(me)
        older = ref(other)
        if their_mode != my_mode:
            return (f"binding {older} (older) shares this scope target in mode {their_mode}, this one is {my_mode}: "
                    "a list cannot be both written and only observed; give both the same spec.mode")
        if their_roll != my_roll:
            return (f"binding {older} (older) shares this scope target with spec.scope.restartScheduler="
                    f"{str(their_roll).lower()}, this one {str(my_roll).lower()}: make them agree")
    return None
