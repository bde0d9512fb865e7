"""Condition types and reasons: the one place a reason is named, each with the fix it asks for.

Every reason is a member of the enum of its condition type. Members are `str`s (StrEnum), so
they go into status and events as plain CamelCase strings, and `fix` is the text of the
"Conditions, reasons and fixes" table of docs/reference.md (a unit test keeps the two equal). Code that
decides a condition returns one of these members; nothing else spells a reason.
"""

from __future__ import annotations

from enum import StrEnum

from .keys import TARGETS_CLUSTER_ROLE


class ConditionType(StrEnum):
    READY = "Ready"
    SCHEDULER_READY = "SchedulerReady"
    POLICY_SYNCED = "PolicySynced"
    SCOPE_SYNCED = "ScopeSynced"
    GRACE_PERIOD_SAFE = "GracePeriodSafe"
    SLURM_READY = "SlurmReady"
    PLACEMENT_VERIFIED = "PlacementVerified"


# Status order, and the inputs of Ready in the order its reason is picked (SlurmReady before
# PlacementVerified: a partition that is down is the cause, the placeholder jobs pending on it the
# symptom).
CONDITION_TYPES: list[ConditionType] = list(ConditionType)
READY_INPUTS: list[ConditionType] = CONDITION_TYPES[1:]
# Inputs whose Unknown does not hold Ready back: no sandbox pod yet; Slurm not answering (its own
# condition says so; nothing the binding does depends on slurmrestd).
UNKNOWN_DOES_NOT_HOLD_READY: frozenset[ConditionType] = frozenset({ConditionType.PLACEMENT_VERIFIED,
                                                              ConditionType.SLURM_READY})


class _Reason(StrEnum):
    """A reason and its fix ("—" when there is nothing to do)."""

    fix: str

    def __new__(cls, value: str, fix: str) -> "_Reason":
        obj = str.__new__(cls, value)
        obj._value_ = value
        obj.fix = fix
        return obj


class Common(_Reason):
    """Reasons any condition may carry."""

    NOT_RECONCILED = "NotReconciled", "— (transient: the operator has not looked yet)"
    INVALID_SPEC = "InvalidSpec", "the spec does not validate against the operator's models (a CRD older than the operator?): re-apply crds/"
    RUNNER_CONFLICT = "RunnerConflict", (
        "another binding keeps the same runner (one whose token proved it may manage it, the older of two such; "
        "or an older one that has not tried yet); this one writes nothing: delete one. A binding whose token "
        "cannot be read or is refused (status.runner.failure) blocks nobody")
    API_ERROR = "APIError", "transient (Unknown): a Kubernetes read failed (the message says which); retried with backoff"
    NOT_ALLOWED = "NotAllowed", (
        "the binding asks what the operator's settings do not allow (an API URL, another namespace, a system "
        "namespace, a selector or glob that matches (nearly) everything; the message names the field): fix the "
        "field, or ask the operator's admin (`--allowed-api-url`, `--allowed-slurm-url`, `--allow-reach`, "
        "`--allow-match-all`). Nothing is read or written for it, no token is sent")
    OVER_BUDGET = "OverBudget", (
        "a reconcile of this binding used more CPU than the operator allows (`SSB_RECONCILE_CPU_SECONDS`); the "
        "message names the step and the objects it read (e.g. a huge or malformed `slurm.conf` key, scheduler args "
        "or target document): shorten or fix them. The binding is reconciled again after a backoff (1 min, "
        "doubling to 30 min), not sooner, whatever changes, so no binding delays the others")
    PAUSED = "Paused", (
        "the binding carries `sunksandbox.dev/paused: \"true\"`: nothing is written for it (runner policy, scope "
        "list, RoleBindings, scheduler rolls, status other than the pause) until the annotation is removed "
        "(`kubectl annotate ssb NAME sunksandbox.dev/paused-`), which reconciles at once. Deletion still restores")


class Ready(_Reason):
    READY = "Ready", "—"


class SchedulerReady(_Reason):
    SCHEDULER_FOUND = "SchedulerFound", "—"
    SCHEDULER_NOT_FOUND = "SchedulerNotFound", (
        "no pods match `scheduler.podSelector` in the scheduler namespace: set `scheduler.enabled: true` in "
        "the Slurm Helm values, or fix `spec.scheduler.namespace/podSelector`")
    SCHEDULER_NOT_RUNNING = "SchedulerNotRunning", (
        "pods exist, none Ready: `kubectl logs -n tenant-slurm -l app.kubernetes.io/name=sunk-scheduler -c scheduler`")
    NAME_UNKNOWN = "NameUnknown", "no `scheduler.conf`, no `--scheduler-name`: set `spec.scheduler.name`"
    FORBIDDEN = "Forbidden", (
        "the operator may not list the scheduler namespace's ConfigMaps: add a RoleBinding there to the ClusterRole "
        f"`{TARGETS_CLUSTER_ROLE}` for the operator's ServiceAccount (manifests/rbac-targets.yaml, shipped for "
        "`tenant-slurm`); pods are read cluster-wide (manifests/rbac.yaml)")
    INPUT_REFUSED = "InputRefused", (
        "a tenant-written value the operator reads to find the scheduler is past its bounds, so it was not read "
        "(the message names the ConfigMap and key, or the pod, container and argument, and the bound): a slurm.conf "
        "key over 1 MiB or with a line over 64 KiB, an argument or env value expanding past 128 KiB (256 KiB a "
        "container), a duration over 64 characters, a scheduler.conf refused as untrusted YAML, or a scheduler "
        "name that is not a DNS-1123 subdomain. Fix that value; what else was found (name, kill-wait) is still used")

class PolicySynced(_Reason):
    SYNCED = "Synced", "— (a policy change applies to *new* sandboxes only)"
    DRIFT_CORRECTED = "DriftCorrected", "— (someone changed a field the binding owns; it was put back)"
    DRIFTED = "Drifted", "Observe mode: the message lists what Enforce would change"
    CREDENTIALS_MISSING = "CredentialsMissing", (
        "create the Secret / key named in `runner.tokenSecretRef`, or grant the operator `get` on Secrets in "
        "that namespace")
    UNAUTHENTICATED = "Unauthenticated", "the token is invalid or expired: update the Secret"
    PERMISSION_DENIED = "PermissionDenied", "the token lacks the `sandbox_admin` role"
    RUNNER_NOT_FOUND = "RunnerNotFound", "wrong `runner.id`"
    POLICY_REJECTED = "PolicyRejected", (
        "the API refused the policy (message from the server): usually a forbidden `base` field (affinity, "
        "securityContext, runtimeClassName, initContainers, terminationGracePeriodSeconds) already in the policy")
    INVALID_POLICY = "InvalidPolicy", "the current policy is malformed; it was left alone: fix it with `cwic`"
    CONFLICT_RETRIES_EXHAUSTED = "ConflictRetriesExhausted", (
        "another writer keeps changing the policy; retried with backoff, nothing overwritten")
    API_UNAVAILABLE = "APIUnavailable", "the API did not answer; retried with backoff"
    SCHEDULER_NAME_UNKNOWN = "SchedulerNameUnknown", "see SchedulerReady"
    INVALID_BINDING = "InvalidBinding", "the binding cannot produce a policy (e.g. a pinned key that is also a client key)"
    MANAGED_ELSEWHERE = "PolicyManagedElsewhere", (
        "another writer (a declarative owner such as Terraform's `coreweave_sandbox_managed_runner`) removed or "
        "changed the binding's keys more than `SSB_POLICY_CONTENTION_CORRECTIONS` times (default 3) within "
        "`SSB_POLICY_CONTENTION_WINDOW` (default 24h), so the operator stopped writing the policy; the message names "
        "what it removed and the fragment that owner must carry: add it there (writing resumes by itself once the "
        "policy holds it: nothing is left to write), or leave the policy to the operator (Terraform: "
        "`lifecycle { ignore_changes = [policy] }`) and set `sunksandbox.dev/reconcile-requested-at` to resume")
    KEYS_MISSING = "PolicyKeysMissing", (
        "`spec.policy.management: Observe`: the runner policy lacks the binding's keys (or holds other values); the "
        "message lists them and the fragment to add. Nothing is written: add it through the policy's owner (e.g. "
        "Terraform), or set `management: Enforce`")
    RECORD_FAILED = "RecordFailed", (
        "the ownership record (ConfigMap `ssb-policy-…` in the operator's namespace) could not be written, so "
        "nothing was written to the policy: check the operator's Role there (manifests/rbac-operator.yaml); "
        "retried with backoff")


class ScopeSynced(_Reason):
    SYNCED = "Synced", "—"
    CLUSTER_SCOPE = "ClusterScope", "— (the scheduler watches every namespace; nothing to do)"
    PENDING = "Pending", (
        "namespaces not yet listed (count and first few in the message and `status.scope.missing`); in "
        "Observe mode, never written")
    TARGET_NOT_FOUND = "TargetNotFound", (
        "the scheduler ConfigMap / Application / HelmRelease does not exist: set `scope.target`")
    INVALID_CONFIG = "InvalidConfig", (
        "`scheduler.conf` (or an Application's `helm.values`) is not valid YAML, the value is not a list/string, "
        "or `scope.target.application` does not pick one source (the message says which field): fix it; the "
        "operator never overwrites it")
    DOCUMENT_REFUSED = "DocumentRefused", (
        "the target document (`scheduler.conf`, an Application's `helm.values`, the Flux values ConfigMap) is "
        "tenant-written, so it is parsed only within bounds: no YAML aliases (`*x`), at most 1 MiB, 50,000 nodes "
        "and 100 levels of nesting (the message names the object, key and place, and which bound): write it "
        "without anchors and aliases, or shorten it. Nothing is expanded, and the operator never writes it")
    LIST_NOT_EDITABLE = "ListNotEditable", (
        "the Application's list is not in the source's `helm.valuesObject` or `helm.values` but may come from a "
        "`valueFiles` file (named in the message), or a Helm `parameters` entry overrides it; the operator edits "
        "neither and writes nothing: put the list into that source's `valuesObject` (or `values`), an empty "
        "list is enough")
    FORBIDDEN = "Forbidden", (
        "the operator lacks RBAC on the target or the scheduler's Deployment (the message names the namespace): "
        f"add a RoleBinding there to the ClusterRole `{TARGETS_CLUSTER_ROLE}` for the operator's ServiceAccount "
        "(manifests/rbac-targets.yaml, shipped for `tenant-slurm`); RoleBindings and SubjectAccessReviews are "
        "cluster-wide (manifests/rbac.yaml)")
    CONFLICT = "Conflict", "the target kept changing under concurrent edits; retried with backoff"
    GRANT_FAILED = "GrantFailed", "a `scope.grantClusterRole` RoleBinding could not be written (message says why)"
    GRANTS_NOT_ALLOWED = "GrantsNotAllowed", (
        "`scope.grantClusterRole` is set, but the operator's admin lets bindings of this namespace grant nowhere: no "
        "RoleBinding is made (those made before are removed). The admin names where they may: `--allow-grant "
        "NS=NAMESPACES` (`SSB_ALLOWED_GRANTS`, Helm `tenancy.allowedGrants`, e.g. `tenant-slurm=ds-*`); or grant the "
        "scheduler through the Slurm chart and remove `grantClusterRole`")
    SHARED_TARGET_CONFLICT = "SharedTargetConflict", (
        "an older binding writes the same target with another `spec.mode` or `scope.restartScheduler`: make them "
        "agree (this one writes nothing to it meanwhile)")
    SCHEDULER_NOT_PERMITTED = "SchedulerNotPermitted", (
        "the scheduler's ServiceAccount may not watch pods or bind them in listed namespaces (SubjectAccessReview): "
        "set `scope.grantClusterRole: sunk-scheduler-sandbox` (shipped) or grant it through the Slurm chart")
    ERROR = "Error", "transient (Unknown): the sync is retried with backoff"
    NAMESPACES_NOT_LOADED = "NamespacesNotLoaded", "transient (Unknown): at start-up namespaces are listed first"
    VALUES_FROM_MISSING = "ValuesFromMissing", (
        "`FluxHelmRelease` target: the HelmRelease does not read the operator's ConfigMap; add the `spec.valuesFrom` "
        "entry the message shows (kind ConfigMap, name, valuesKey, no targetPath), last in the list. Nothing is "
        "written until it does")
    VALUES_OVERRIDDEN = "ValuesOverridden", (
        "`FluxHelmRelease` target: the HelmRelease's inline `spec.values` sets the list's path, and Flux merges "
        "`spec.values` over every valuesFrom entry: remove it there (fixed names go in `scope.alwaysInclude`). "
        "Nothing is written until then")


class GracePeriodSafe(_Reason):
    WITHIN_KILL_WAIT = "GracePeriodWithinKillWait", "—"
    TOO_LONG = "GracePeriodTooLong", (
        "SUNK needs grace < kill-wait − 5 s: set Slurm `slurmConfig.KillWait` (60 for 30 s grace, 330 for "
        "300 s) and keep the scheduler's kill-wait equal")
    KILL_WAIT_UNKNOWN = "KillWaitUnknown", "set `spec.scheduler.killWaitSeconds`"


class SlurmReady(_Reason):
    NOT_CONFIGURED = "NotConfigured", "— (no `spec.slurm.restAPI`: Slurm is not read)"
    PARTITION_UP = "PartitionUp", "—"
    SLURM_REACHABLE = "SlurmReachable", (
        "— (no `spec.partition`: Slurm answered with the token; pods go to the partitions Slurm picks)")
    PARTITION_NOT_FOUND = "PartitionNotFound", (
        "Slurm has no partition named `spec.partition` (`sinfo -h -o %P` lists them): fix `spec.partition`, or "
        "have the Slurm admin add it (Helm `slurmConfig` partitions)")
    PARTITION_DOWN = "PartitionDown", (
        "the partition's state is not UP (DOWN, DRAIN or INACTIVE; the message says which): sandboxes' placeholder "
        "jobs stay PENDING there; a Slurm admin: `scontrol update PartitionName=P State=UP`")
    SLURM_UNREACHABLE = "SlurmUnreachable", (
        "transient (Unknown): slurmrestd (or slurmctld behind it) did not answer (connection refused, timeout, "
        "502/503/504; the message says which): check `spec.slurm.restAPI.url`, that slurmrestd runs, and the "
        "NetworkPolicy (egress to its port). Nothing else is affected: Ready does not wait for it")
    SLURM_AUTH_FAILED = "SlurmAuthFailed", (
        "slurmrestd refused the token (401), or slurmctld did (HTTP 511 from Slurm 24.11 on; Slurm 22.05 answers "
        "HTTP 500 `slurmctld config is unable to load`): put a valid, unexpired JWT for `spec.slurm.restAPI.user` in "
        "the Secret (`scontrol token username=USER lifespan=SECONDS`; the message says when one expired or names "
        "another user); slurmrestd needs `SLURM_JWT=daemon` and slurmctld `AuthAltTypes=auth/jwt`")
    CREDENTIALS_MISSING = "CredentialsMissing", (
        "create the Secret / key named in `slurm.restAPI.tokenSecretRef` (the JWT alone: a value with a line break or "
        "another character an HTTP header cannot carry is refused unsent), or grant the operator `get` on Secrets "
        "in that namespace")
    API_VERSION_NOT_SERVED = "APIVersionNotServed", (
        "slurmrestd does not serve `spec.slurm.restAPI.apiVersion` (HTTP 404; the message lists the versions it "
        "serves), or serves none the operator knows (v0.0.38, v0.0.40–v0.0.45): remove `apiVersion` to negotiate, "
        "or set one it serves (Slurm 22.05: v0.0.38; 24.11: v0.0.40–v0.0.42; 25.11, SUNK 8.1/8.2: v0.0.41–v0.0.44; "
        "26.05: v0.0.42–v0.0.45)")
    SLURM_API_ERROR = "SlurmAPIError", (
        "slurmrestd answered something unexpected (the message says what: an error it listed, a body that is not "
        "its JSON): check slurmrestd's log; the check is repeated at every reconcile")


class PlacementVerified(_Reason):
    VERIFIED = "Verified", "the newest sandbox pod carries our scheduler and annotations"
    NO_SANDBOX_PODS = "NoSandboxPods", "create a sandbox to verify"
    NO_NEW_SANDBOX_PODS = "NoNewSandboxPods", "create a sandbox to verify (pods created before the policy write prove nothing)"
    POLICY_PROPAGATING = "PolicyPropagating", (
        "transient (Unknown): a pod created within `SSB_POLICY_PROPAGATION_SECONDS` (default 60) of the policy "
        "write lacks it; re-checked when that window ends (a newer matching pod verifies it sooner)")
    POLICY_NOT_PROPAGATED = "PolicyNotPropagated", (
        "a pod created after the policy write lacks it, and the propagation window is over: check again with a "
        "new sandbox; if new pods keep the old values, read the runner policy back")
    SLURM_JOB_PENDING = "SlurmJobPending", (
        "a sandbox pod's placeholder job has been PENDING in Slurm for a reason that persisted "
        "(`SSB_SLURM_PENDING_SECONDS`, default 60, over `SSB_SLURM_PENDING_POLLS` polls; a backfill cycle's brief "
        "`ReqNodeNotAvail` does not count): the message names the pod, the job and Slurm's reason with its usual "
        "fix (`squeue -j ID -o %R`, `scontrol show job ID`)")
    SLURM_JOB_MISSING = "SlurmJobMissing", (
        "a sandbox pod placed by the scheduler has no placeholder job in Slurm `SSB_SLURM_PENDING_SECONDS` after "
        "its creation (no name in `spec.slurm.restAPI.jobNameTemplates` matched): check that the scheduler watches "
        "its namespace (ScopeSynced), the pod's events (the scheduler rejects bad annotations), and the templates")


# Condition type → the enum of its own reasons (Common ones apply to every type).
BY_CONDITION: dict[ConditionType, type[_Reason]] = {
    ConditionType.READY: Ready,
    ConditionType.SCHEDULER_READY: SchedulerReady,
    ConditionType.POLICY_SYNCED: PolicySynced,
    ConditionType.SCOPE_SYNCED: ScopeSynced,
    ConditionType.GRACE_PERIOD_SAFE: GracePeriodSafe,
    ConditionType.SLURM_READY: SlurmReady,
    ConditionType.PLACEMENT_VERIFIED: PlacementVerified,
}


def grant_targets(namespace: str) -> str:
    """The fix of a Forbidden read or write of the scheduler's objects or the scope target."""
    return (f"grant it: a RoleBinding in {namespace} to the ClusterRole {TARGETS_CLUSTER_ROLE} for the operator's "
            "ServiceAccount (manifests/rbac-targets.yaml)")


def table() -> list[tuple[str, str, str]]:
    """(condition, reason, fix) rows, as docs/reference.md shows them."""
    rows = [(str(ctype), str(r), r.fix) for ctype, enum in BY_CONDITION.items() if ctype != ConditionType.READY for r in enum]
    rows += [("any", str(r), r.fix) for r in Common]
    return rows
