"""Which binding owns a runner when several name it (pure).

The runner has one policy: two bindings writing it would fight. The oldest binding (creation
time, then namespace/name so the order is total) owns it; every younger one writes nothing.
"""

from __future__ import annotations


def _age_key(binding: dict) -> tuple[str, str, str]:
    meta = binding.get("metadata") or {}
    return (meta.get("creationTimestamp") or "", meta.get("namespace") or "", meta.get("name") or "")


def _runner_id(binding: dict) -> str | None:
    return ((binding.get("spec") or {}).get("runner") or {}).get("id")


def older_owner(me: dict, others: list[dict]) -> str | None:
    """namespace/name of an older binding (live or still finalizing) on the same runner id, or None
    if `me` owns it."""
    mine = _age_key(me)
    runner = _runner_id(me)
    for other in sorted(others, key=_age_key):
        meta = other.get("metadata") or {}
        # An older binding being deleted still owns the runner until it is gone: its finalizer may be
        # restoring the policy, and a takeover meanwhile would be undone by that restore.
        if _age_key(other)[1:] == mine[1:] or _runner_id(other) != runner:
            continue
        if _age_key(other) < mine:
            return f"{meta.get('namespace')}/{meta.get('name')}"
    return None
