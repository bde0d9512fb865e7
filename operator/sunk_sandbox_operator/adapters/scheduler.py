"""Reads of the scheduler's objects (for discovery) and the scheduler roll (a pod-template annotation)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..api.keys import SCOPE_GENERATION_ANNOTATION, SCOPE_HASH_ANNOTATION, SCOPE_ROLLED_AT_ANNOTATION
from ..api.reasons import grant_targets
from ..api.spec import LabelSelector
from ..core.scheduler import objects as so
from ..core import selectors
from ..core.redact import describe
from . import kube as k


@dataclass
class SchedulerObjects:
    """What discovery reads in the scheduler namespace: each object reduced to what discovery reads
    (core/scheduler/objects.py), those over the size cap named in `skipped`."""

    namespace: str
    selector: str                       # the pod selector as a string ("" when not expressible)
    pods: list[dict] = field(default_factory=list)
    configmaps: list[dict] = field(default_factory=list)
    skipped: list[so.Skipped] = field(default_factory=list)
    error: str | None = None
    denied: k.Forbidden | None = None   # the refusal `error` says, for callers that word it themselves


CONFIGMAP_PAGE_SIZE = 8   # a tenant's ConfigMap may be 1 MiB: a page is what is held at once
POD_PAGE_SIZE = 50


async def read(kube: k.KubeAPI, namespace: str, pod_selector: LabelSelector, cap: int = so.DEFAULT_MAX_OBJECT_BYTES,
               named: tuple[str, str] = ("", "")) -> SchedulerObjects:
    """Paginated, each object reduced as its page arrives (only the reduced ones are kept); `named`:
    the (ConfigMap, key) the spec names."""
    selector = selectors.to_label_selector_string(pod_selector)
    out = SchedulerObjects(namespace, selector or "")
    try:
        pods = await kube.list_pods(namespace, selector or None, lambda p: so.reduce_pod(p, cap), POD_PAGE_SIZE)
    except k.Forbidden as exc:  # cluster-wide in manifests/rbac.yaml
        out.error, out.denied = f"the operator may not list pods in {namespace}: {describe(exc)}; check manifests/rbac.yaml", exc
        return out
    if selector is None:  # not expressible server-side: filter here
        pods = [p for p in pods if isinstance(p, so.Skipped) or selectors.matches(pod_selector, p["metadata"]["labels"])]
    try:
        cms = await kube.list_configmaps(namespace, lambda c: so.reduce_configmap(c, cap, named), CONFIGMAP_PAGE_SIZE)
    except k.Forbidden as exc:  # per namespace (manifests/rbac-targets.yaml)
        out.error = f"the operator may not list ConfigMaps in {namespace}: {describe(exc)}; {grant_targets(namespace)}"
        out.denied = exc
        return out
    out.pods, skipped_pods = so.split(pods, cap)
    kept = [c for c in cms if so.relevant(c) or c["metadata"]["name"] == named[0]]  # the named one, even without its key
    out.configmaps, skipped_cms = so.split(kept, cap)
    out.skipped = skipped_pods + skipped_cms
    return out


async def read_named(kube: k.KubeAPI, objs: SchedulerObjects, named: tuple[str, str], cap: int) -> None:
    """The ConfigMap the spec names, read by name (its watch keeps only the keys every binding reads;
    this one's key is the spec's): replaces what `objs` holds of it."""
    name = named[0]
    objs.configmaps = [c for c in objs.configmaps if c["metadata"]["name"] != name]
    objs.skipped = [s for s in objs.skipped if (s.kind, s.name) != ("ConfigMap", name)]
    try:
        found = so.reduce_configmap(await kube.get_configmap(objs.namespace, name), cap, named)
    except k.NotFound:
        return
    except k.Forbidden as exc:
        objs.error = f"the operator may not read ConfigMaps in {objs.namespace}: {exc}; {grant_targets(objs.namespace)}"
        objs.denied = exc
        return
    if isinstance(found, so.Skipped):
        objs.skipped.append(found)
    else:
        objs.configmaps.append(found)


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
