"""Proof that a binding may manage the runner it names (status.runner), and the verdict it gives.

A binding proves it by one runner API call for its runner id at its URL that succeeds with the
token read from its own Secret (any call: the policy read of a sync counts). A token that cannot
be read, or a call the API refuses (unauthenticated, permission denied, no such runner), is a
failed attempt: such a binding blocks nobody (core/conflicts.py ranks them). The record is kept in
`state.runner_proof` until the status writer writes it; it is for the admitted spec's runner id and
URL, and starts again (untried) when the spec names another.
"""

from __future__ import annotations

from typing import Any

from ..adapters import kube as k
from ..adapters.runnerapi import client as rc
from ..adapters.runnerapi import errors as rerr
from ..api.reasons import Common, ConditionType, PolicySynced
from ..api.status import RunnerStatus
from ..core import conflicts
from ..core.policy import decide
from ..core.compose import Part
from ..core.problems import Problem
from ..core.redact import describe
from .context import Context
from .runner_record import current
from .state import BindingState

# Answers that say this token may not manage this runner: the attempt failed.
REFUSALS = {"unauthenticated": PolicySynced.UNAUTHENTICATED, "permission_denied": PolicySynced.PERMISSION_DENIED,
            "not_found": PolicySynced.RUNNER_NOT_FOUND}


def me(state: BindingState) -> dict[str, Any]:
    """The admitted body with its proof, as the conflict rules compare bindings."""
    return {**state.admission.body, "status": {"runner": current(state)}}


def tier(state: BindingState) -> int:
    return conflicts.proof_tier(me(state))


def _record(state: BindingState, **fields: Any) -> None:
    base = {k: v for k, v in current(state).items() if k in ("id", "apiURL")}
    state.runner_proof = RunnerStatus.model_validate({**base, **fields}).wire()


def observe(ctx: Context, state: BindingState, code: str) -> None:
    """A runner API call of this binding's client was answered `code` (the client's on_call hook)."""
    if state.admitted is None or tier(state) == conflicts.PROVEN:
        return
    if code == "ok":
        _record(state, provenTime=ctx.now_iso())
    elif code in REFUSALS:
        _record(state, failure=REFUSALS[code].value)


def failed(state: BindingState, reason: str) -> None:
    """The token could not be read (CredentialsMissing): a failed attempt, unless proven already."""
    if state.admitted is not None and tier(state) != conflicts.PROVEN:
        _record(state, failure=reason)


async def attempt(ctx: Context, state: BindingState, api: rc.RunnerClient) -> Part | None:
    """One read of the runner with the binding's own client (its token, its share of the budget):
    None when it proved it, else the PolicySynced part saying why not."""
    try:
        await api.get_managed_runner(state.admitted_spec.runner.id)  # observe() records the answer
    except Problem as exc:
        failed(state, exc.reason)
        return Part(ConditionType.POLICY_SYNCED, "False", exc.reason, exc.message)
    except rc.Throttled as exc:
        return Part(ConditionType.POLICY_SYNCED, "False", PolicySynced.API_UNAVAILABLE, exc.message)
    except (k.KubeError, OSError) as exc:  # reading the Secret failed: nothing is known, nothing recorded
        return Part(ConditionType.POLICY_SYNCED, "Unknown", Common.API_ERROR, f"reading the token Secret failed ({describe(exc)}); retrying")
    except rerr.RunnerAPIError as err:
        report = decide.api_error(err.code, err.message)
        return Part(ConditionType.POLICY_SYNCED, report.status, report.reason, report.message)
    return None


def conflict_message(state: BindingState, verdict: conflicts.RunnerVerdict, why: Part | None) -> str:
    """The RunnerConflict message: who keeps the runner, and what this binding's own attempt said."""
    runner = state.admitted_spec.runner.id
    if verdict.owner_tier == conflicts.PROVEN:
        text = (f"binding {verdict.owner} already manages runner {runner} (its token proved it may); this binding "
                "writes nothing: delete one of them")
    elif verdict.owner_tier == conflicts.UNTRIED:
        text = (f"binding {verdict.owner} also names runner {runner} and has not tried its token yet; this binding "
                "writes nothing until that one has proved it may manage the runner or failed to")
    else:
        text = (f"binding {verdict.owner} (older) also names runner {runner}; neither has proved it may manage it, "
                "and the older keeps it meanwhile; this binding writes nothing")
    if why is not None:
        text += f". This binding's token did not prove it either: {why.message}"
    return text


def conflict_part(state: BindingState, condition: ConditionType, message: str) -> Part:
    return Part(condition, "False", Common.RUNNER_CONFLICT, message)
