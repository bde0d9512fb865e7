"""What to do about the runner policy, given what was read (pure).

`decide` takes the observation (the runner's current policy and etag, what we own, the spec
and the scheduler name, the memory of another writer removing our keys) and returns a
`PolicyDecision`: either a policy to write, or the condition to report without writing.
`written` turns a successful write into its report. The controller only gathers, calls these,
writes, and reports. Who may write the policy at all (`spec.policy.management`, another owner
in a tug-of-war) is `core.policy_contention`'s.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..api.events import EventReason
from ..api.reasons import PolicySynced
from ..api.spec import BindingSpec
from ..api.status import OwnedPath, PolicyContention, PolicyStatus
from . import policy
from . import policy_contention
from . import policy_handoff as handoff
from .conditions import Status
from .policy_checks import validate_policy
from .policy_paths import PolicyError
from .redact import describe


@dataclass(frozen=True)
class PolicyObservation:
    spec: BindingSpec
    scheduler_name: str | None
    policy: Any                      # the runner's current policy (None: never configured)
    etag: str | None
    owned: list[OwnedPath]           # what status says we own (paths, our values, previous values)
    contention: PolicyContention | None = None  # status.policy.contention: another writer removing our keys
    request: str | None = None       # the reconcile-requested-at value this reconcile handles
    ours: str | None = None          # the etag our last write (or confirmation) left, from the ownership record
    settings: policy_contention.Settings = policy_contention.Settings()
    confirmed: bool = True           # `owned` was seen in the policy (False: a pending record, its write unproven)


@dataclass(frozen=True)
class PolicyReport:
    """The condition and the status.policy fields to change."""

    status: Status
    reason: PolicySynced
    message: str
    section: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class PolicyDecision:
    report: PolicyReport | None            # set when nothing is to be written
    write: Any = None                      # the new policy document, when one is to be written
    owned: list[OwnedPath] = field(default_factory=list)
    drift: bool = False                    # the write puts back a field someone changed
    changes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    contention: PolicyContention | None = None  # status.policy.contention after the write (None: unchanged)
    event: tuple[EventReason, str] | None = None  # posted once, with this decision (the stop of the writes)


def _synced_message(scheduler_name: str, desired: policy.Desired, warnings: list[str]) -> str:
    pinned = len(desired.values) - 1
    msg = f"policy routes sandboxes to scheduler {scheduler_name!r}" + (
        f" with {pinned} pinned annotation(s)" if pinned else "")
    msg += "; applies to new sandboxes only"
    if warnings:
        msg += ". Warnings: " + " | ".join(warnings)
    return msg


def no_scheduler_name() -> PolicyReport:
    return PolicyReport("False", PolicySynced.SCHEDULER_NAME_UNKNOWN,
                        "the scheduler name is not known yet, so nothing was written: set spec.scheduler.name "
                        "or fix scheduler discovery (see SchedulerReady)")


def desired(spec: BindingSpec, scheduler_name: str) -> policy.Desired | PolicyReport:
    """The fields the binding wants, or the InvalidBinding report when it cannot want any."""
    try:
        return policy.desired_fields(spec, scheduler_name)
    except PolicyError as exc:
        return PolicyReport("False", PolicySynced.INVALID_BINDING, describe(exc))


def decide(obs: PolicyObservation, now: str) -> PolicyDecision:
    """Write, or report. `now` stamps lastCheckedTime."""
    if not obs.scheduler_name:
        return PolicyDecision(no_scheduler_name())
    want = desired(obs.spec, obs.scheduler_name)
    if isinstance(want, PolicyReport):
        return PolicyDecision(want)
    try:
        validate_policy(obs.policy)
    except PolicyError as exc:
        return PolicyDecision(PolicyReport("False", PolicySynced.INVALID_POLICY,
                                           f"the runner's current policy is malformed, so it was left alone: {describe(exc)}",
                                           {"etag": obs.etag}))
    result = policy.merge(obs.policy, want, obs.owned, obs.spec.client_annotations)
    checked = {"etag": obs.etag, "lastCheckedTime": now, "warnings": result.warnings}
    if policy_contention.hands_off(obs.spec):
        return PolicyDecision(_observed(obs, want, result.warnings, checked))
    memory = obs.contention
    if not result.changed or (policy_contention.stopped(memory) and not handoff.missing(obs.policy, want)):
        return PolicyDecision(_in_sync(obs, want, result, checked))
    changes = policy.diff(obs.policy, result.policy)
    if obs.spec.mode == "Observe":
        return PolicyDecision(PolicyReport(
            "False", PolicySynced.DRIFTED,
            "Observe mode, nothing written; the operator would change: " + "; ".join(changes[:8]), checked))
    # Another writer's removal: values we know were there, gone under an etag that is not ours.
    taken = policy_contention.removed(obs.policy, want, obs.owned) if obs.confirmed and obs.etag != obs.ours else []
    verdict = policy_contention.judge(memory, taken, obs.request, now, obs.settings)
    if not verdict.write:
        stop = verdict.memory or memory
        assert stop is not None
        event = (EventReason.POLICY_WRITES_STOPPED, policy_contention.stopped_event(stop, obs.spec.runner.id)) \
            if verdict.stopped_now else None
        return PolicyDecision(PolicyReport("False", PolicySynced.MANAGED_ELSEWHERE,
                                           policy_contention.managed_elsewhere(want, stop, obs.settings),
                                           {**checked, "contention": stop.wire()}), event=event)
    return PolicyDecision(None, write=result.policy, owned=result.owned, drift=bool(taken), changes=changes,
                          warnings=result.warnings, contention=verdict.memory)


def _in_sync(obs: PolicyObservation, want: policy.Desired, result: policy.MergeResult,
             checked: dict[str, Any]) -> PolicyReport:
    """The policy holds our keys: nothing to write. After a stop, they are the other owner's now: it
    carries them, so the record keeps them as found (a Restore leaves them) and writing resumes."""
    message = _synced_message(obs.scheduler_name or "", want, result.warnings)
    owned = result.owned
    section: dict[str, Any] = dict(checked)
    if policy_contention.stopped(obs.contention):
        owned = policy.merge(obs.policy, want, (), obs.spec.client_annotations).owned
        message += "; the policy's other owner carries the binding's keys, so the operator writes it again"
        section["contention"] = None
    return PolicyReport("True", PolicySynced.SYNCED, message, {**section, "owned": [o.wire() for o in owned]})


def _observed(obs: PolicyObservation, want: policy.Desired, warnings: list[str], checked: dict[str, Any]) -> PolicyReport:
    """`spec.policy.management: Observe`: verified and reported, never written; nothing is claimed."""
    section = {**checked, "contention": None}
    if handoff.missing(obs.policy, want):
        return PolicyReport("False", PolicySynced.KEYS_MISSING, policy_contention.keys_missing(want, obs.policy), section)
    return PolicyReport("True", PolicySynced.SYNCED, _synced_message(obs.scheduler_name or "", want, warnings)
                        + " (spec.policy.management Observe: verified, never written)", section)


def written(obs: PolicyObservation, decision: PolicyDecision, new_etag: str | None, now: str) -> PolicyReport:
    """The report after `decision.write` was accepted by the API."""
    want = desired(obs.spec, obs.scheduler_name or "")
    assert not isinstance(want, PolicyReport)
    reason = PolicySynced.DRIFT_CORRECTED if decision.drift else PolicySynced.SYNCED
    section: dict[str, Any] = {"etag": new_etag, "lastAppliedTime": now, "lastCheckedTime": now,
                               "warnings": decision.warnings, "owned": [o.wire() for o in decision.owned]}
    if decision.contention is not None:
        # Counting afresh (a hand-back) clears the memory; a correction records itself.
        section["contention"] = decision.contention.wire() if decision.contention.corrections else None
    return PolicyReport("True", reason, _synced_message(obs.scheduler_name or "", want, decision.warnings), section)


def api_error(code: str, message: str) -> PolicyReport:
    """The condition for a runner API error, by Connect code, with the fix."""
    if code == "unauthenticated":
        return PolicyReport("False", PolicySynced.UNAUTHENTICATED,
                            "the API token was refused: put a valid CoreWeave API token in the Secret")
    if code == "permission_denied":
        return PolicyReport("False", PolicySynced.PERMISSION_DENIED,
                            "the token lacks the sandbox_admin role: grant it, or use a token that has it")
    if code == "not_found":
        return PolicyReport("False", PolicySynced.RUNNER_NOT_FOUND,
                            "no runner with spec.runner.id: check the id (`cwic runner list`)")
    if code in ("invalid_argument", "out_of_range"):
        return PolicyReport("False", PolicySynced.POLICY_REJECTED, f"the API rejected the policy: {message}")
    if code == "unimplemented":
        return PolicyReport("False", PolicySynced.API_UNAVAILABLE,
                            "the API answered 'unimplemented' (wrong path?): check spec.runner.apiURL")
    return PolicyReport("False", PolicySynced.API_UNAVAILABLE, f"the runner API is not answering ({code}); retrying")


def conflict_exhausted(attempts: int) -> PolicyReport:
    return PolicyReport("False", PolicySynced.CONFLICT_RETRIES_EXHAUSTED,
                        f"the policy changed under us {attempts} times in a row (another admin is writing); "
                        "nothing was overwritten, retrying with backoff")


def section(previous: dict[str, Any] | None, changes: dict[str, Any]) -> dict[str, Any]:
    """status.policy: the previous section with these fields changed, built through the model."""
    merged = {**(previous or {}), **changes}
    model = PolicyStatus.model_validate({k: v for k, v in merged.items() if v is not None})
    return model.wire_compact()


# Failures worth retrying soon (with backoff), rather than at the next resync.
TRANSIENT = frozenset({PolicySynced.API_UNAVAILABLE, PolicySynced.CONFLICT_RETRIES_EXHAUSTED,
                       PolicySynced.CREDENTIALS_MISSING, PolicySynced.RECORD_FAILED})
