"""Which object holds a binding's watched-namespace list: one descriptor, derived from the spec (pure).

`locate(spec, binding_namespace, discovered_configmap)` is the one place that knows, per target
kind, which namespace and object the list lives in and what else must be read for it. The
adapter builds its target from it, the dependency watches watch its `reads`, the tenancy check
asks whether its namespaces are reachable, shared-target conflicts compare its `key`, and
status.scope.target records it (so a switch of target is seen, even across a restart).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from ...api.spec import BindingSpec

CONFIGMAP, APPLICATION, FLUX = "SchedulerConfigMap", "ArgoCDApplication", "FluxHelmRelease"


@dataclass(frozen=True)
class TargetRef:
    kind: str                          # spec.scope.target.kind
    namespace: str                     # of the object written (and, for Flux, of its HelmRelease)
    name: str                          # the object written: a ConfigMap or an Application ("": not discovered yet)
    path: str                          # of the list in the document
    key: str | None = None             # the ConfigMap key holding the document
    helm_release: str | None = None    # FluxHelmRelease: the HelmRelease consuming the ConfigMap
    source_chart: str | None = field(default=None, compare=False)   # ArgoCDApplication: which source
    source_index: int | None = field(default=None, compare=False)

    @property
    def writes(self) -> tuple[str, str, str]:
        """(Kubernetes kind, namespace, name) of the object written."""
        return ("Application" if self.kind == APPLICATION else "ConfigMap", self.namespace, self.name)

    @property
    def reads(self) -> tuple[tuple[str, str, str], ...]:
        """Every object whose change may change the list or whether it can be written."""
        extra = (("HelmRelease", self.namespace, self.helm_release),) if self.kind == FLUX and self.helm_release else ()
        return (self.writes, *extra)

    @property
    def reads_beyond_scheduler_configmaps(self) -> tuple[tuple[str, str, str], ...]:
        """`reads` less the SchedulerConfigMap target's ConfigMap: that one is among the scheduler
        namespace's ConfigMaps, which every binding reads (and watches) anyway."""
        return () if self.kind == CONFIGMAP else self.reads

    @property
    def namespace_field(self) -> tuple[str, str]:
        """(the spec field that decides `namespace`, what lives there): for the tenancy check's message."""
        return {APPLICATION: ("spec.scope.target.application.namespace", "the Argo CD Application"),
                FLUX: ("spec.scope.target.helmRelease.namespace", "the Flux HelmRelease"),
                }.get(self.kind, ("spec.scheduler.namespace", "the scheduler's ConfigMap"))

    @property
    def key_tuple(self) -> tuple[str, ...]:
        """Which list it is: two bindings with equal tuples share a target."""
        return (self.kind, self.namespace, self.name, self.key or "", self.path)

    def wire(self) -> dict[str, Any]:
        """status.scope.target."""
        out: dict[str, Any] = {"kind": self.kind, "namespace": self.namespace, "name": self.name}
        if self.key is not None:
            out["key"] = self.key
        out["path"] = self.path
        if self.helm_release is not None:
            out["helmRelease"] = self.helm_release
        return out

    @classmethod
    def from_wire(cls, raw: object) -> "TargetRef | None":
        """A recorded status.scope.target, or None when it is not one this version writes."""
        if not isinstance(raw, Mapping):
            return None
        try:
            kind, ns, name, path = (str(raw[k]) for k in ("kind", "namespace", "name", "path"))
        except KeyError:
            return None
        if kind not in (CONFIGMAP, APPLICATION, FLUX) or (kind != APPLICATION and "key" not in raw) \
                or (kind == FLUX and "helmRelease" not in raw):
            return None
        key = str(raw["key"]) if kind != APPLICATION else None
        return cls(kind, ns, name, path, key, str(raw["helmRelease"]) if kind == FLUX else None)


def locate(spec: BindingSpec, binding_namespace: str, discovered_configmap: str | None = None) -> TargetRef:
    """The target the spec names (a SchedulerConfigMap without a name: the discovered one, else "")."""
    t = spec.scope.target
    scheduler_ns = spec.scheduler_namespace(binding_namespace)
    if t.kind == APPLICATION:
        a = t.application
        return TargetRef(APPLICATION, a.namespace or scheduler_ns, a.name, a.path,
                         source_chart=a.source_chart, source_index=a.source_index)
    if t.kind == FLUX:
        hr = t.helm_release
        return TargetRef(FLUX, hr.namespace or scheduler_ns, hr.config_map_name(), hr.path, hr.key, hr.name)
    cm = t.config_map
    return TargetRef(CONFIGMAP, scheduler_ns, cm.name or discovered_configmap or "", cm.path, cm.key)
