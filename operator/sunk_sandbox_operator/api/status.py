"""The SunkSandboxBinding status: pydantic models every status section is built through."""

from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import ConfigDict, Field
from pydantic.alias_generators import to_camel

from .base import _Model

class _Status(_Model):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")

    def wire_compact(self) -> dict[str, Any]:
        """wire() without empty lists: for sections that omit what they do not have."""
        return {k: v for k, v in self.wire().items() if v != []}


class Condition(_Status):
    """A metav1.Condition."""

    type: str = Field(description="Condition type.")
    status: Literal["True", "False", "Unknown"] = Field(description="True, False or Unknown.")
    reason: str = Field(description="CamelCase reason.")
    message: str = Field(default="", description="What happened and what to do.")
    observed_generation: Optional[int] = Field(default=None, description="metadata.generation this condition reflects.")
    last_transition_time: str = Field(description="When status last changed (RFC 3339).")


class SchedulerStatus(_Status):
    """What was found about the scheduler."""

    name: Optional[str] = Field(default=None, description="Resolved scheduler name.")
    name_source: Optional[str] = Field(default=None, description="Where the name came from: spec, configMap or args.")
    kill_wait_seconds: Optional[int] = Field(default=None, description="Resolved kill-wait in seconds.")
    kill_wait_source: Optional[str] = Field(default=None, description="Where kill-wait came from.")
    ready_replicas: Optional[int] = Field(default=None, description="Scheduler pods that are Ready.")


class OwnedPath(_Status):
    """A policy path the operator set, with what was there before."""

    path: str = Field(description="Dotted path in the policy document.")
    value: str = Field(description="Value the operator set.")
    previous: Optional[str] = Field(default=None, description="Value before the operator set it; absent if the key did not exist.")


class PolicyContention(_Status):
    """Another writer removing the binding's keys from the runner policy (e.g. Terraform applying its own)."""

    corrections: list[str] = Field(default_factory=list, description="When the operator put back keys another "
                                   "writer had removed (RFC 3339), the latest within the window.")
    removed: list[str] = Field(default_factory=list, description="What the other writer last removed or changed.")
    stopped_time: Optional[str] = Field(default=None, description="When the operator stopped writing the policy "
                                        "(PolicyManagedElsewhere); unset while it writes.")
    stopped_request: Optional[str] = Field(default=None, description="The reconcile-requested-at annotation's value "
                                           "when it stopped: a new value resumes writing.")


class PolicyStatus(_Status):
    """The runner policy as last seen and written."""

    etag: Optional[str] = Field(default=None, description="Etag of the policy last read.")
    last_applied_time: Optional[str] = Field(default=None, description="When the operator last wrote the policy.")
    last_checked_time: Optional[str] = Field(default=None, description="When the policy was last read and compared.")
    owned: list[OwnedPath] = Field(default_factory=list, description="Paths the operator owns.")
    warnings: list[str] = Field(default_factory=list, description="Non-fatal findings about the policy.")
    contention: Optional[PolicyContention] = Field(default=None, description="Another writer removing the binding's "
                                                   "keys: the corrections made, and whether the operator stopped.")


class RunnerStatus(_Status):
    """Whether this binding has proved it may manage the runner its spec names: its token was read and
    the runner API answered one call for this id at this URL. Only a proven binding owns a runner
    against others naming it (RunnerConflict); one whose attempt failed blocks nobody."""

    id: str = Field(description="The runner id this record is for (spec.runner.id).")
    api_url: str = Field(alias="apiURL", description="The API URL this record is for (spec.runner.apiURL).")
    proven_time: Optional[str] = Field(default=None, description="When a runner API call with this binding's token "
                                       "first succeeded for this runner.")
    failure: Optional[str] = Field(default=None, description="Why the last attempt to prove it failed (a PolicySynced "
                                   "reason: CredentialsMissing, Unauthenticated, PermissionDenied, RunnerNotFound); "
                                   "absent once proven.")


class ScopeTargetRef(_Status):
    """Which list the binding keeps (a change of target is cleaned up from the old one)."""

    kind: str = Field(description="SchedulerConfigMap, ArgoCDApplication or FluxHelmRelease.")
    namespace: str = Field(description="Namespace of the object written.")
    name: str = Field(description="Name of the object written (the ConfigMap or the Application).")
    key: Optional[str] = Field(default=None, description="ConfigMap key holding the document.")
    path: str = Field(description="Path of the list in the document.")
    helm_release: Optional[str] = Field(default=None, description="FluxHelmRelease: the HelmRelease consuming it.")


class ScopeStatus(_Status):
    """The scheduler's watched-namespace list."""

    target: Optional[ScopeTargetRef] = Field(default=None, description="The target the list was last kept in.")

    type: Optional[str] = Field(default=None, description="Scope type found: namespace or cluster.")
    namespace_count: Optional[int] = Field(default=None, description="Namespaces in the list.")
    missing: list[str] = Field(default_factory=list, description="First few sandbox namespaces not yet in the list.")
    missing_count: Optional[int] = Field(default=None, description="Sandbox namespaces not yet in the list.")
    added_count: Optional[int] = Field(
        default=None, description="Entries this binding added (the full list is the target's "
        "sunksandbox.dev/scope-ledger annotation, written with the list).")
    managed_by: Optional[str] = Field(
        default=None, description="Another tool that renders the target and may put its own list back (Helm, Argo CD, "
        "Flux), read from the target's labels and annotations.")
    last_sync_time: Optional[str] = Field(default=None, description="When the list was last written or confirmed.")
    last_roll_time: Optional[str] = Field(default=None, description="When the operator last restarted the scheduler "
                                          "onto the list (pod-template annotation).")
    next_roll_time: Optional[str] = Field(default=None, description="When the list's latest changes will restart the "
                                          "scheduler (spec.scope.minRollInterval folds changes into one roll).")


class Mismatch(_Status):
    """The latest sandbox pod that did not get the policy."""

    pod: str = Field(description="namespace/name of the pod.")
    reason: str = Field(description="What differs.")
    time: str = Field(description="When it was seen.")


class StuckJob(_Status):
    """A placeholder job PENDING for a reason that persisted (the oldest such)."""

    pod: str = Field(description="namespace/name of the sandbox pod.")
    job_id: int = Field(description="Slurm job id.")
    job: str = Field(description="Slurm job name.")
    reason: str = Field(description="Slurm's state_reason (e.g. PartitionDown, JobHeldUser, Resources).")
    since: str = Field(description="When the operator first saw the job pending for this reason.")


class PlacementJobs(_Status):
    """Sandbox pods placed by the scheduler, and their placeholder jobs in Slurm (spec.slurm.restAPI)."""

    matched: int = Field(default=0, description="Pods whose placeholder job was found.")
    pending: int = Field(default=0, description="... of which the job is PENDING for a reason that persisted "
                         "(SSB_SLURM_PENDING_SECONDS and SSB_SLURM_PENDING_POLLS).")
    missing: int = Field(default=0, description="Pods with no placeholder job, SSB_SLURM_PENDING_SECONDS after "
                         "their creation.")
    templates: dict[str, int] = Field(default_factory=dict, description="Matched pods per job name template.")
    stuck: Optional[StuckJob] = Field(default=None, description="The pending job that has waited longest.")
    missing_pods: Optional[list[str]] = Field(default=None, description="First few pods with no placeholder job.")


class PlacementStatus(_Status):
    """What sandbox pods show."""

    pods_observed: int = Field(default=0, description="Sandbox pods seen in the binding's namespaces.")
    pods_mismatched: int = Field(default=0, description="Pods created after the last policy write that lack it.")
    last_mismatch: Optional[Mismatch] = Field(default=None, description="Latest mismatching pod.")
    hazards: dict[str, int] = Field(default_factory=dict, description="Pods per hazard kind (GuaranteedQoS, GPURequested, ...).")
    jobs: Optional[PlacementJobs] = Field(default=None, description="Placeholder jobs in Slurm (when spec.slurm.restAPI "
                                          "is set and Slurm answers).")


class SlurmStatus(_Status):
    """slurmrestd as the binding's own check found it (spec.slurm.restAPI)."""

    api_version: Optional[str] = Field(default=None, description="The OpenAPI (data_parser) version in use.")
    api_version_source: Optional[Literal["negotiated", "spec"]] = Field(
        default=None, description="negotiated: the newest one slurmrestd serves of those the operator reads; spec: "
        "spec.slurm.restAPI.apiVersion.")
    release: Optional[str] = Field(default=None, description="The Slurm release slurmrestd's answers name (e.g. 24.11.5).")
    token_expires: Optional[str] = Field(default=None, description="When the Slurm JWT expires (its exp claim, read "
                                         "without verifying; RFC 3339).")


class BindingStatus(_Status):
    """Observed state of a SunkSandboxBinding."""

    observed_generation: Optional[int] = Field(default=None, description="metadata.generation last reconciled; "
                                               "-1 until the operator's first status write.")
    scheduler: Optional[SchedulerStatus] = Field(default=None, description="The scheduler as found.")
    policy: Optional[PolicyStatus] = Field(default=None, description="The runner policy.")
    scope: Optional[ScopeStatus] = Field(default=None, description="The watched-namespace list.")
    placement: Optional[PlacementStatus] = Field(default=None, description="Sandbox pod observations.")
    slurm: Optional[SlurmStatus] = Field(default=None, description="slurmrestd: the API version in use and why, the "
                                         "Slurm release, the token's expiry (spec.slurm.restAPI).")
    runner: Optional[RunnerStatus] = Field(default=None, description="Whether the binding proved it may manage its "
                                           "runner (only a proven binding owns it against others naming it).")
    last_handled_reconcile_at: Optional[str] = Field(
        default=None, description="The value of the sunksandbox.dev/reconcile-requested-at annotation the last "
        "reconcile handled.")
    paused: Optional[bool] = Field(default=None, description="True while the sunksandbox.dev/paused annotation "
                                   "is \"true\" and honoured: nothing is written for the binding (absent otherwise).")
    conditions: list[Condition] = Field(default_factory=list, description="Ready, SchedulerReady, PolicySynced, ScopeSynced, GracePeriodSafe, SlurmReady, PlacementVerified.")

