"""Who else writes the scope target: Helm, Argo CD or Flux, read from its labels and annotations (pure).

A ConfigMap rendered by a tool is put back by it (`helm upgrade`, Argo CD self-heal, Flux
reconcile): the operator restores the list and rolls the scheduler each time, so a tug-of-war
follows. Saying who the other writer is, with the fix, lets the admin end it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

HELM_RELEASE_NAME = "meta.helm.sh/release-name"
HELM_RELEASE_NAMESPACE = "meta.helm.sh/release-namespace"
MANAGED_BY = "app.kubernetes.io/managed-by"
ARGO_TRACKING_ID = "argocd.argoproj.io/tracking-id"
ARGO_INSTANCE = "app.kubernetes.io/instance"
FLUX_NAME = "helm.toolkit.fluxcd.io/name"
FLUX_NAMESPACE = "helm.toolkit.fluxcd.io/namespace"


@dataclass(frozen=True)
class Manager:
    tool: str          # Helm | Argo CD | Flux
    name: str          # what renders it: a release, an Application, a HelmRelease
    fix: str

    def describe(self) -> str:
        return f"{self.tool} ({self.name})"


def other_manager(metadata: Mapping[str, Any] | None, target: str) -> Manager | None:
    """The tool that renders this object, if its metadata says so. Flux's helm-controller and the
    helm CLI both set Helm's release annotations, so Flux is checked first; Argo CD renders charts
    with `helm template` (no release annotations) and tracks by annotation or instance label."""
    meta = metadata or {}
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    if labels.get(FLUX_NAME):
        name = f"HelmRelease {labels.get(FLUX_NAMESPACE, '?')}/{labels[FLUX_NAME]}"
        return Manager("Flux", name, f"Flux reconciles {target} back to its render: keep the namespace list in "
                       f"the {name} values: point spec.scope.target at it (kind FluxHelmRelease), so the operator "
                       "owns a ConfigMap that the HelmRelease reads through spec.valuesFrom")
    tracking = annotations.get(ARGO_TRACKING_ID)
    if tracking or (labels.get(ARGO_INSTANCE) and not annotations.get(HELM_RELEASE_NAME)
                    and labels.get(MANAGED_BY) != "Helm"):
        app = (tracking or "").split(":", 1)[0] or labels.get(ARGO_INSTANCE, "?")
        return Manager("Argo CD", f"Application {app}", f"Argo CD self-heal and every sync put back its render of "
                       f"{target}: point spec.scope.target at that Application (kind ArgoCDApplication) so the list "
                       "lives in its Helm values")
    release = annotations.get(HELM_RELEASE_NAME)
    if release or labels.get(MANAGED_BY) == "Helm":
        name = f"release {annotations.get(HELM_RELEASE_NAMESPACE, '?')}/{release}" if release else "a release"
        return Manager("Helm", name, f"every `helm upgrade` of {name} that changes {target} puts back the chart's "
                       "list; the operator restores it and rolls the scheduler each time. Render the list from the "
                       "release values, or let Argo CD or Flux own the release and target it instead")
    return None


# ---------------------------------------------------------------- managedFields (one clock: the API server's)


def _owns(fields: Any, path: tuple[str, ...]) -> bool:
    for part in path:
        if not isinstance(fields, Mapping) or f"f:{part}" not in fields:
            return False
        fields = fields[f"f:{part}"]
    return True


def last_foreign_change(metadata: Mapping[str, Any] | None, path: tuple[str, ...], ours: str) -> str | None:
    """When a field manager other than `ours` last wrote an object in which it owns `path` (RFC 3339,
    the API server's clock), or None. A manager's `time` moves with any change it makes to the
    object, so this is when the field may have changed, at the latest."""
    times = [str(e.get("time")) for e in (metadata or {}).get("managedFields") or []
             if isinstance(e, Mapping) and e.get("manager") != ours and e.get("time")
             and _owns(e.get("fieldsV1"), path)]
    return max(times) if times else None


def changed_since(metadata: Mapping[str, Any] | None, path: tuple[str, ...], since: str, ours: str) -> bool:
    """Did another manager owning `path` write the object at or after `since` (same clock, same
    one-second RFC 3339 format, so the strings compare in time order)?"""
    last = last_foreign_change(metadata, path, ours)
    return last is not None and last >= since
