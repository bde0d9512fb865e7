"""Reads of the scheduler's objects (for discovery) and the scheduler roll (a pod-template annotation)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..api.keys import SCOPE_GENERATION_ANNOTATION, SCOPE_HASH_ANNOTATION, SCOPE_ROLLED_AT_ANNOTATION
from ..api.reasons import grant_targets
from ..api.spec import LabelSelector
from ..core import selectors
from ..core.redact import describe
from . import kube as k


@dataclass
class SchedulerObjects:
    """What discovery reads in the scheduler namespace."""

    namespace: str
    selector: str                       # the pod selector as a string ("" when not expressible)
    pods: list[dict] = field(default_factory=list)
    configmaps: list[dict] = field(default_factory=list)
    error: str | None = None


async def read(kube: k.KubeAPI, namespace: str, pod_selector: LabelSelector) -> SchedulerObjects:
    selector = selectors.to_label_selector_string(pod_selector)
    out = SchedulerObjects(namespace, selector or "")
    try:
        pods = await kube.list_pods(namespace, selector or None)
    except k.Forbidden as exc:  # cluster-wide in manifests/rbac.yaml
        out.error = f"the operator may not list pods in {namespace}: {describe(exc)}; check manifests/rbac.yaml"
        return out
    if selector is None:  # not expressible server-side: filter here
        pods = [p for p in pods if selectors.matches(pod_selector, p["metadata"].get("labels"))]
    out.pods = pods
    try:
        out.configmaps = await kube.list_configmaps(namespace)
    except k.Forbidden as exc:  # per namespace (manifests/rbac-targets.yaml)
        out.error = f"the operator may not list ConfigMaps in {namespace}: {describe(exc)}; {grant_targets(namespace)}"
    return out


async def list_workloads(kube: k.KubeAPI, namespace: str) -> list[dict]:
    """The Deployments and StatefulSets that may run the scheduler, each with its `kind`."""
    deployments = await kube.list_deployments(namespace)
    statefulsets = await kube.list_statefulsets(namespace)
    return [{**d, "kind": "Deployment"} for d in deployments] + [{**s, "kind": "StatefulSet"} for s in statefulsets]


async def set_scope_hash(kube: k.KubeAPI, namespace: str, kind: str, name: str, value: str,
                         generation: int | None = None, rolled_at: str | None = None) -> bool:
    """Roll the scheduler by setting its pod-template scope hash (and the ledger generation it is
    rolled for, and when: `rolled_at`, in the same patch, so a process that dies before its status
    says so still leaves the roll's time) on the Deployment or StatefulSet running it. False when it
    is gone."""
    annotations = {SCOPE_HASH_ANNOTATION: value}
    if generation is not None:
        annotations[SCOPE_GENERATION_ANNOTATION] = str(generation)
    if rolled_at is not None:
        annotations[SCOPE_ROLLED_AT_ANNOTATION] = rolled_at
    patch = {"spec": {"template": {"metadata": {"annotations": annotations}}}}
    patch_fn = kube.merge_patch_statefulset if kind == "StatefulSet" else kube.merge_patch_deployment
    try:
        await patch_fn(namespace, name, patch)
    except k.NotFound:
        return False
    return True
