"""What discovery keeps of the scheduler namespace's ConfigMaps and Pods (pure), and the bound on it.

The namespace is tenant-written: anyone who may create ConfigMaps or Pods there decides how many and
how large they are (110 ConfigMaps of 1 MB each held and decoded at once pushed the operator to
387 MiB). So each object is reduced, as it arrives, to the few fields discovery reads — a ConfigMap
to its labels and its `scheduler.conf` and `*slurm.conf` keys (and the key the spec names in the one
it names); a Pod to its labels, times, ServiceAccount, Ready condition and the `scheduler`
container's command, args and env — and an object whose kept part is over the size cap is skipped
and reported by name. Everything else of the object is dropped with the page that carried it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ...api.keys import SCHEDULER_CONFIGMAP_LABEL, SCOPE_HASH_ANNOTATION
from .conf import SCHEDULER_CONF_KEY, SCHEDULER_CONTAINER
from .slurm_conf import SLURM_CONF_SUFFIX

DEFAULT_MAX_OBJECT_BYTES = 256 * 1024   # what discovery keeps of one object (SSB_MAX_OBJECT_BYTES)
NAMESPACE_BUDGET_OBJECTS = 16           # ... and of one namespace: this many objects at the cap
OTHER_CONTAINERS_KEPT = 8               # names of other containers, for the "no `scheduler` container" hint


@dataclass(frozen=True)
class Skipped:
    """An object discovery did not read: its kept part is over the cap (or the namespace's budget)."""

    kind: str
    name: str
    size: int
    budget: bool = False  # over the namespace's budget rather than the object cap

    def note(self, namespace: str, cap: int) -> str:
        what = (f"the ConfigMaps and Pods kept of {namespace} already hold {NAMESPACE_BUDGET_OBJECTS} x {cap} bytes"
                if self.budget else f"over the {cap}-byte cap (SSB_MAX_OBJECT_BYTES)")
        return (f"{self.kind} {namespace}/{self.name} not read: what discovery reads of it is {self.size} bytes, "
                f"{what}; make it smaller, or move what is not the scheduler's out of the namespace")


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return _map(obj.get("metadata"))


def _text_size(value: Any) -> int:
    """Characters of the strings in a JSON value (keys included): its size, as discovery would hold it."""
    if isinstance(value, str):
        return len(value)
    if isinstance(value, Mapping):
        return sum(len(str(k)) + _text_size(v) for k, v in value.items())
    if isinstance(value, list):
        return sum(_text_size(v) for v in value)
    return 8


def _labels(meta: Mapping[str, Any]) -> dict[str, str]:
    labels = meta.get("labels")
    return {k: v for k, v in labels.items() if isinstance(k, str) and isinstance(v, str)} \
        if isinstance(labels, Mapping) else {}


def configmap_keys(name: str, labels: Mapping[str, str], keys: Any, named: tuple[str, str] = ("", "")) -> list[str]:
    """The keys of a ConfigMap that discovery reads: `scheduler.conf` (of one carrying the scheduler label),
    every `*slurm.conf`, and in the ConfigMap the spec names, the key it names."""
    label_key, label_value = SCHEDULER_CONFIGMAP_LABEL
    labelled = labels.get(label_key) == label_value
    return [k for k in keys if isinstance(k, str) and (
        k.endswith(SLURM_CONF_SUFFIX) or (k == SCHEDULER_CONF_KEY and labelled) or (name == named[0] and k == named[1]))]


def reduce_configmap(obj: Mapping[str, Any], cap: int, named: tuple[str, str] = ("", "")) -> dict[str, Any] | Skipped:
    """The ConfigMap as discovery reads it, or Skipped. `named`: (name, key) the spec names."""
    meta = _meta(obj)
    name = str(meta.get("name") or "")
    labels = _labels(meta)
    data = _map(obj.get("data"))
    kept = {k: data[k] for k in configmap_keys(name, labels, data.keys(), named)}
    size = _text_size(kept) + _text_size(labels)
    if size > cap:
        return Skipped("ConfigMap", name, size)
    return {"metadata": {"name": name, "namespace": meta.get("namespace"), "labels": labels,
                         "resourceVersion": meta.get("resourceVersion")}, "data": kept}


def _container(container: Mapping[str, Any]) -> dict[str, Any]:
    env = container.get("env")
    out: dict[str, Any] = {"name": container.get("name")}
    for part in ("command", "args"):
        if part in container:
            out[part] = container[part]
    if isinstance(env, list):  # literal values only: $(VAR) expansion reads nothing else
        out["env"] = [{"name": e.get("name"), "value": e.get("value")} for e in env
                      if isinstance(e, Mapping) and isinstance(e.get("value"), str)]
    return out


def reduce_pod(obj: Mapping[str, Any], cap: int) -> dict[str, Any] | Skipped:
    """The Pod as discovery reads it, or Skipped."""
    meta = _meta(obj)
    name = str(meta.get("name") or "")
    spec, status = _map(obj.get("spec")), _map(obj.get("status"))
    containers = _list(spec.get("containers"))
    ours = [c for c in containers if isinstance(c, Mapping) and c.get("name") == SCHEDULER_CONTAINER][:1]
    kept = [_container(c) for c in ours] or [{"name": c.get("name")} for c in containers[:OTHER_CONTAINERS_KEPT]
                                             if isinstance(c, Mapping)]
    ready = [{"type": "Ready", "status": c.get("status")} for c in _list(status.get("conditions"))
             if isinstance(c, Mapping) and c.get("type") == "Ready"][:1]
    labels = _labels(meta)
    size = _text_size(kept) + _text_size(labels)
    if size > cap:
        return Skipped("Pod", name, size)
    pod_meta = {"name": name, "namespace": meta.get("namespace"), "labels": labels,
                "creationTimestamp": meta.get("creationTimestamp")}
    if meta.get("deletionTimestamp"):
        pod_meta["deletionTimestamp"] = meta["deletionTimestamp"]
    # The scope hash its template carried when it started (our own annotation, a short hex string):
    # which list a Ready scheduler pod runs, for `kubectl ssb why`'s rolled link.
    scope_hash = _map(meta.get("annotations")).get(SCOPE_HASH_ANNOTATION)
    if isinstance(scope_hash, str) and len(scope_hash) <= 64:
        pod_meta["annotations"] = {SCOPE_HASH_ANNOTATION: scope_hash}
    pod_spec: dict[str, Any] = {"containers": kept}
    for key in ("serviceAccountName", "serviceAccount"):
        if isinstance(spec.get(key), str):
            pod_spec[key] = spec[key]
    return {"metadata": pod_meta, "spec": pod_spec, "status": {"conditions": ready}}


def relevant(reduced: Mapping[str, Any] | Skipped) -> bool:
    """Does discovery read anything of it? A ConfigMap without a key it reads does not (most of a
    tenant's ConfigMaps): it is not kept at all, so a namespace's 10,000 cost nothing per reconcile."""
    return isinstance(reduced, Skipped) or "spec" in reduced or bool(reduced.get("data"))


def size_of(reduced: Mapping[str, Any]) -> int:
    """What a reduced object costs against the namespace's budget."""
    return _text_size(reduced.get("data") or reduced.get("spec") or {})


def split(reduced: list[dict[str, Any] | Skipped], cap: int) -> tuple[list[dict[str, Any]], list[Skipped]]:
    """The objects kept and those skipped; past the namespace's budget (NAMESPACE_BUDGET_OBJECTS objects
    at the cap), in name order, the rest are skipped too."""
    kept: list[dict[str, Any]] = []
    skipped = [r for r in reduced if isinstance(r, Skipped)]
    budget = NAMESPACE_BUDGET_OBJECTS * cap
    for r in sorted((r for r in reduced if not isinstance(r, Skipped)), key=lambda r: str(r["metadata"]["name"])):
        size = size_of(r)
        if size > budget:
            skipped.append(Skipped("Pod" if "spec" in r else "ConfigMap", r["metadata"]["name"], size, budget=True))
            continue
        budget -= size
        kept.append(r)
    return kept, skipped
