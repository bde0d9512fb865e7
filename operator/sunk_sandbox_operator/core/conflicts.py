"""Which binding owns a runner when several name it (pure).

The runner has one policy: two bindings writing it would fight. Naming a runner id is not enough
to own it: a binding owns it only once it has *proved* it may manage it (its token was read and
the runner API answered one call for this id at this URL: `status.runner.provenTime`). Proven
bindings come first, the oldest of them (creation time, then namespace/name, so the order is
total) owns the runner; among bindings that have not proved it, one that has not tried yet ranks
before one whose attempt failed (a Secret that does not exist, a token the API refuses), so a
binding naming another tenant's runner with no usable token blocks nobody. Every other binding
writes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from ..api.keys import DEFAULT_API_URL
from ..api.spec import parse_spec
from .scope.target_ref import locate

PROVEN, UNTRIED, FAILED = 0, 1, 2  # proof tiers, in rank order


def _age_key(binding: dict[str, Any]) -> tuple[str, str, str]:
    meta = binding.get("metadata") or {}
    return (meta.get("creationTimestamp") or "", meta.get("namespace") or "", meta.get("name") or "")


def ref(binding: dict[str, Any]) -> str:
    """namespace/name of a binding body."""
    meta = binding.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}"


def _runner_id(binding: dict[str, Any]) -> str | None:
    return ((binding.get("spec") or {}).get("runner") or {}).get("id")


def _api_url(binding: dict[str, Any]) -> str:
    return ((binding.get("spec") or {}).get("runner") or {}).get("apiURL") or DEFAULT_API_URL


def proof_tier(binding: dict[str, Any]) -> int:
    """PROVEN, UNTRIED or FAILED for the runner id and URL its spec names now (`status.runner`
    records them: a proof for another runner or URL does not count)."""
    proof = (binding.get("status") or {}).get("runner")
    if not isinstance(proof, dict) or proof.get("id") != _runner_id(binding) or proof.get("apiURL") != _api_url(binding):
        return UNTRIED
    if proof.get("provenTime"):
        return PROVEN
    return FAILED if proof.get("failure") else UNTRIED


def _rank(binding: dict[str, Any]) -> tuple[int, tuple[str, str, str]]:
    return (proof_tier(binding), _age_key(binding))


@dataclass(frozen=True)
class RunnerVerdict:
    """Who keeps `me`'s runner. `owner` None: `me` does."""

    owner: str | None = None
    owner_tier: int = PROVEN
    prove: bool = False           # `me` has not proved it may manage the runner, and a proof now would make it
                                  # the owner: try once (one read), then decide again
    claimants: tuple[str, ...] = ()  # bindings naming the runner that have not proved it (the owner is told)


def runner_verdict(me: dict[str, Any], others: list[dict[str, Any]]) -> RunnerVerdict:
    """The verdict for `me` among the bindings (live or still finalizing) naming the same runner id.

    An older binding being deleted still counts until it is gone: its finalizer may be restoring the
    policy, and a takeover meanwhile would be undone by that restore. A binding that has not tried
    to prove it yet is waited for (it tries at its first reconcile): racing it would let a younger
    binding write first, then lose the runner to it."""
    runner = _runner_id(me)
    rivals = [o for o in others if _runner_id(o) == runner and _age_key(o)[1:] != _age_key(me)[1:]]
    claimants = tuple(sorted(ref(o) for o in rivals if proof_tier(o) != PROVEN))
    if not rivals:
        return RunnerVerdict()
    top = min(rivals, key=_rank)
    if _rank(me) < _rank(top):
        return RunnerVerdict(claimants=claimants)
    top_tier = proof_tier(top)
    would_win = _age_key(me) < _age_key(top) if top_tier == PROVEN else top_tier == FAILED
    return RunnerVerdict(ref(top), top_tier, prove=proof_tier(me) != PROVEN and would_win, claimants=claimants)


def older_owner(me: dict[str, Any], others: list[dict[str, Any]]) -> str | None:
    """namespace/name of the binding that keeps `me`'s runner (`runner_verdict`), or None if `me` does."""
    return runner_verdict(me, others).owner


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
