"""Names the API is made of: group/version/kind, label and annotation keys.

Shared by the models, the core and the shell, so a key is spelled in one place.
"""

from __future__ import annotations

GROUP = "sunksandbox.dev"
VERSION = "v1alpha1"
KIND = "SunkSandboxBinding"
PLURAL = "sunksandboxbindings"
SINGULAR = "sunksandboxbinding"
SHORT_NAMES = ["ssb"]
CATEGORIES = ["sunk"]
FINALIZER = f"{GROUP}/finalizer"
# Set to any new value (e.g. `date`) to reconcile now; status.lastHandledReconcileAt echoes it
# (External Secrets' force-sync, Flux's reconcile.fluxcd.io/requestedAt).
RECONCILE_REQUEST_ANNOTATION = f"{GROUP}/reconcile-requested-at"
# "true" (exactly, as Crossplane's crossplane.io/paused) stops every write for the binding until it is
# removed (core/pause.py); deletion still restores.
PAUSED_ANNOTATION = f"{GROUP}/paused"

ANNOTATION_PREFIX = "sunk.coreweave.com/"
PARTITION_ANNOTATION = ANNOTATION_PREFIX + "partition"
SANDBOX_ID_LABEL = "sandbox.coreweave.com/sandbox-id"
# The Job a pod belongs to (Kubernetes 1.27+, then the older key): {jobName} in placeholder job names.
JOB_NAME_LABELS = ("batch.kubernetes.io/job-name", "job-name")
DEFAULT_API_URL = "https://api.coreweave.com"
DEFAULT_SCHEDULER_POD_LABELS = {"app.kubernetes.io/name": "sunk-scheduler"}
SCHEDULER_CONFIGMAP_LABEL = ("app.kubernetes.io/component", "scheduler")

# Written by the operator on objects it touches.
SCOPE_HASH_ANNOTATION = f"{GROUP}/scope-hash"   # scheduler pod template: rolls it when the list changes
# Every write names this field manager: managedFields then say which fields are ours, and when
# another manager (helm, argocd-controller) last changed one.
FIELD_MANAGER = "sunk-sandbox-operator"
SCOPE_GENERATION_ANNOTATION = f"{GROUP}/scope-generation"  # ... and the ledger generation it was rolled for
SCOPE_ROLLED_AT_ANNOTATION = f"{GROUP}/rolled-at"  # ... and when (RFC 3339), in the roll's own patch: paces restarts
BINDING_LABEL = f"{GROUP}/binding"              # RoleBindings it created, naming the binding
BINDING_UID_LABEL = f"{GROUP}/binding-uid"      # ... and its UID: what makes one ours (names can be reused)
SCOPE_LEDGER_ANNOTATION = f"{GROUP}/scope-ledger"  # scope target: what each binding added (core/scope/ledger.py)
MANAGED_BY_LABEL = ("app.kubernetes.io/managed-by", "sunk-sandbox-operator")
# On the FluxHelmRelease target's ConfigMap: Flux's helm-controller watches labelled valuesFrom
# sources and upgrades the release within seconds of a change (else at the release's interval).
FLUX_WATCH_LABEL = ("reconcile.fluxcd.io/watch", "Enabled")

# The ClusterRole an admin binds, per namespace, to let the operator read and write the scheduler's
# objects and the scope target there (manifests/rbac-targets.yaml; shipped for tenant-slurm).
TARGETS_CLUSTER_ROLE = "sunk-sandbox-operator-targets"
