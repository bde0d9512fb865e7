"""Event reasons: every reason an event on a binding carries, with its type and when it is posted.

Condition transitions post the condition's own reason (api/reasons.py: a Warning when it turns
False, Normal when it recovers; a condition's first state is no transition, unless it is False:
controller/status_writer.py); everything else the operator says in an event is one of these.
The "Events" table of docs/reference.md is `table()` (a unit test keeps them equal), as for condition reasons.
"""

from __future__ import annotations

from enum import StrEnum


class EventReason(StrEnum):
    """A reason, its event type (Normal or Warning) and when it is posted."""

    type: str
    when: str

    def __new__(cls, value: str, type_: str, when: str) -> "EventReason":
        obj = str.__new__(cls, value)
        obj._value_ = value
        obj.type, obj.when = type_, when
        return obj

    POLICY_UPDATED = "PolicyUpdated", "Normal", "the runner policy was written: the fields that changed"
    DRIFT_CORRECTED = "DriftCorrected", "Normal", "a field the binding owns was changed in the runner policy by someone else and put back"
    POLICY_RESTORED = "PolicyRestored", "Normal", "deletion with Restore: the owned fields were put back to their previous values"
    POLICY_WRITES_STOPPED = "PolicyWritesStopped", "Warning", "another writer kept removing the binding's keys from the runner policy: the operator stopped writing it (once per stop; PolicySynced `PolicyManagedElsewhere` says what that owner must carry)"
    RUNNER_GONE = "RunnerGone", "Normal", "deletion with Restore: the runner no longer exists, nothing to restore in its policy"
    SCOPE_UPDATED = "ScopeUpdated", "Normal", "the watched-namespace list was written: the names added and removed"
    SCOPE_RESTORED = "ScopeRestored", "Normal", "the binding's names left a target (deletion with Restore, or a switch of target)"
    SCOPE_NOT_RESTORED = "ScopeNotRestored", "Warning", "a target or the RoleBindings could not be restored (the message says why); they were left as they are"
    SCOPE_GRANTS_UPDATED = "ScopeGrantsUpdated", "Normal", "`scope.grantClusterRole` RoleBindings created or removed"
    SCHEDULER_RESTARTED = "SchedulerRestarted", "Normal", "the scheduler's pod template was annotated with the list it must run (a roll); a roll within seconds of the `ScopeUpdated` it follows is said in that event instead"
    TARGET_MANAGED_ELSEWHERE = "TargetManagedElsewhere", "Warning", "Helm, Argo CD or Flux also renders the target and may put its own list back (once per binding)"
    RUNNER_CLAIMED = "RunnerClaimed", "Warning", "another binding names this binding's runner without having proved a token that may manage it (it writes nothing; once per such binding)"
    RESTORE_SKIPPED = "RestoreSkipped", "Warning", "deleted while the settings refuse it: nothing was restored (no token is sent to a URL they do not allow)"
    RESTORE_ABANDONED = "RestoreAbandoned", "Warning", "deletion: the restore kept failing; the binding is released, what is left is named"
    GUARANTEED_QOS = "GuaranteedQoS", "Warning", "a sandbox pod is Guaranteed with an integer CPU request: the CPU manager pins its CPUs"
    GPU_REQUESTED = "GPURequested", "Warning", "a sandbox pod requests GPUs (not supported with SUNK sandboxes)"
    MISSING_REQUESTS = "MissingRequests", "Warning", "a sandbox pod lacks a non-zero `requests.cpu` or `requests.memory` (SUNK reads both)"
    NON_NUMERIC_USER_ID = "NonNumericUserId", "Warning", "`sunk.coreweave.com/user-id` on a sandbox pod is not a numeric UID"
    GRACE_TOO_LONG = "GraceTooLong", "Warning", "a sandbox pod's grace period exceeds the scheduler's kill-wait"
    EXCLUSIVE_OK_ON_GPU = "ExclusiveOkOnGPU", "Warning", "a GPU sandbox pod carries `sunk.coreweave.com/exclusive: ok` (not for GPU pods)"
    BINDING_PAUSED = "BindingPaused", "Normal", "`sunksandbox.dev/paused: \"true\"` was set: nothing is written for the binding until it is removed (once per pause)"
    BINDING_RESUMED = "BindingResumed", "Normal", "the pause annotation was removed: the binding is reconciled at once (once per resume)"
    SLURM_TOKEN_EXPIRING = "SlurmTokenExpiring", "Warning", "the Slurm JWT of `spec.slurm.restAPI.tokenSecretRef` expires within the hour (its `exp`, read without verifying): the Secret and the time are named; once per token"


# An event that says the second half of what another one began, posted within seconds of it on the
# same binding, amends that event instead of adding one (adapters/events.py): the roll a scope write
# makes is said in the ScopeUpdated event that names the list it rolls onto.
FOLDS_INTO: dict[str, str] = {EventReason.SCHEDULER_RESTARTED.value: EventReason.SCOPE_UPDATED.value}


def table() -> list[tuple[str, str, str]]:
    """(reason, type, when) in declaration order: the Events table of docs/reference.md."""
    return [(r.value, r.type, r.when) for r in EventReason]
