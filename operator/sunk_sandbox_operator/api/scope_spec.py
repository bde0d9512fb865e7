"""spec.scope: where the scheduler's watched-namespace list lives (a ConfigMap, an Argo CD Application's
Helm values, a Flux HelmRelease's values ConfigMap) and how the operator keeps it (always-included
namespaces, the scheduler's roll and its pacing, the RBAC grant).
"""

from __future__ import annotations

from typing import Annotated, Literal, Optional

from pydantic import ConfigDict, Field, StringConstraints, model_validator

from .base import _Model, _cel
from .bounds import (ALWAYS_INCLUDE_MAX, DNS_LABEL_PATTERN, DOTTED_PATH_MAX, DOTTED_PATH_PATTERN, DURATION_MAX,
                     DURATION_PATTERN, NAME_MAX, NAMESPACE_MAX, OPTIONAL_NAME_PATTERN, OPTIONAL_NAMESPACE_PATTERN)

NamespaceName = Annotated[str, StringConstraints(pattern=DNS_LABEL_PATTERN, max_length=NAMESPACE_MAX)]

# Where SUNK's scheduler.conf keeps the watched-namespace list (the default path of every target kind).
DEFAULT_SCOPE_PATH = "scheduler.scope.namespaces"


class ConfigMapTargetSpec(_Model):
    """The scheduler's ConfigMap holding the watched-namespace list (SUNK 8)."""

    name: str = Field(
        default="",
        description="ConfigMap name in the scheduler namespace. Empty: the one labelled app.kubernetes.io/component=scheduler.",
        pattern=OPTIONAL_NAME_PATTERN, max_length=NAME_MAX,
    )
    key: str = Field(default="scheduler.conf", description="Data key holding the YAML config.", min_length=1, max_length=NAME_MAX)
    path: str = Field(
        default=DEFAULT_SCOPE_PATH,
        description="Dotted path of the namespace list inside the YAML document.",
        pattern=DOTTED_PATH_PATTERN, max_length=DOTTED_PATH_MAX,
    )


class ApplicationTargetSpec(_Model):
    """An Argo CD Application rendering the Slurm Helm chart; the list lives in its Helm values."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                _cel(
                    "!has(self.sourceChart) || !has(self.sourceIndex)",
                    "spec.scope.target.application: set sourceChart or sourceIndex, not both",
                )
            ]
        }
    )

    name: str = Field(default="", description="Application name. Required when kind is ArgoCDApplication.",
                      pattern=OPTIONAL_NAME_PATTERN, max_length=NAME_MAX)
    namespace: str = Field(default="argocd", description="Namespace of the Application.", pattern=DNS_LABEL_PATTERN,
                           max_length=NAMESPACE_MAX)
    path: str = Field(
        default=DEFAULT_SCOPE_PATH,
        description="Dotted path of the list inside the Helm values Argo CD renders for the source: "
        "helm.valuesObject when set, else the YAML string helm.values (edited in place), else a new valuesObject.",
        pattern=DOTTED_PATH_PATTERN, max_length=DOTTED_PATH_MAX,
    )
    source_chart: Optional[str] = Field(
        default=None,
        description="Multi-source Applications (spec.sources): edit the source whose chart is this name (or, "
        "for a chart in Git, whose path ends in it). Unset: the only source with helm or a chart.",
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,252}$", max_length=NAME_MAX,
    )
    source_index: Optional[int] = Field(
        default=None,
        description="Multi-source Applications: edit spec.sources[sourceIndex] (when two sources render the "
        "same chart). Not with sourceChart.",
        ge=0,
        le=1000,
    )

    @model_validator(mode="after")
    def _one_source_selector(self) -> "ApplicationTargetSpec":
        if self.source_chart is not None and self.source_index is not None:
            raise ValueError("spec.scope.target.application: set sourceChart or sourceIndex, not both")
        return self


class FluxTargetSpec(_Model):
    """A Flux HelmRelease rendering the Slurm chart: the operator owns a ConfigMap (one key of it) that the
    HelmRelease consumes through spec.valuesFrom, so nobody fights over the Git-managed HelmRelease."""

    name: str = Field(default="", description="HelmRelease (helm.toolkit.fluxcd.io/v2) name. Required when kind is "
                      "FluxHelmRelease.", pattern=OPTIONAL_NAME_PATTERN, max_length=NAME_MAX)
    namespace: str = Field(
        default="",
        description="Namespace of the HelmRelease, and of the ConfigMap (Flux reads valuesFrom in the HelmRelease's "
        "namespace). Empty: the scheduler namespace.",
        pattern=OPTIONAL_NAMESPACE_PATTERN, max_length=NAMESPACE_MAX,
    )
    config_map: str = Field(
        default="",
        description="The ConfigMap the operator owns (created if missing, labelled reconcile.fluxcd.io/watch: Enabled). "
        "Empty: <name>-sunk-scope.",
        pattern=OPTIONAL_NAME_PATTERN, max_length=NAME_MAX,
    )
    key: str = Field(default="values.yaml", description="Data key holding the values YAML document (the valuesFrom "
                     "entry's valuesKey).", min_length=1, max_length=NAME_MAX, pattern=r"^[-._a-zA-Z0-9]+$")
    path: str = Field(
        default=DEFAULT_SCOPE_PATH,
        description="Dotted path of the namespace list inside that values document.",
        pattern=DOTTED_PATH_PATTERN, max_length=DOTTED_PATH_MAX,
    )

    def config_map_name(self) -> str:
        return self.config_map or f"{self.name}-sunk-scope"


class ScopeTargetSpec(_Model):
    """Where the scheduler's watched-namespace list lives."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                _cel(
                    "!has(self.kind) || self.kind != 'ArgoCDApplication' || (has(self.application) && has(self.application.name) && self.application.name != '')",
                    "spec.scope.target.application.name is required when kind is ArgoCDApplication",
                ),
                _cel(
                    "!has(self.kind) || self.kind != 'FluxHelmRelease' || (has(self.helmRelease) && has(self.helmRelease.name) && self.helmRelease.name != '')",
                    "spec.scope.target.helmRelease.name is required when kind is FluxHelmRelease",
                ),
            ]
        }
    )

    kind: Literal["SchedulerConfigMap", "ArgoCDApplication", "FluxHelmRelease"] = Field(
        default="SchedulerConfigMap",
        description="SchedulerConfigMap: edit the scheduler's ConfigMap. ArgoCDApplication: edit the Helm values of an Argo CD Application. "
        "FluxHelmRelease: own a values ConfigMap that a Flux HelmRelease consumes through spec.valuesFrom.",
    )
    config_map: ConfigMapTargetSpec = Field(default_factory=ConfigMapTargetSpec, description="Used when kind is SchedulerConfigMap.")
    application: ApplicationTargetSpec = Field(default_factory=ApplicationTargetSpec, description="Used when kind is ArgoCDApplication.")
    helm_release: FluxTargetSpec = Field(default_factory=FluxTargetSpec, description="Used when kind is FluxHelmRelease.")


class ScopeSpec(_Model):
    """Keeps the scheduler's watched-namespace list equal to the sandbox namespaces."""

    target: ScopeTargetSpec = Field(default_factory=ScopeTargetSpec, description="Where the list lives.")
    always_include: list[NamespaceName] = Field(
        default_factory=list,
        max_length=ALWAYS_INCLUDE_MAX,
        description="Namespaces always in the list (e.g. the Slurm namespace). Never removed by the operator.",
    )
    restart_scheduler: bool = Field(default=True, description="ConfigMap target: roll the scheduler (pod-template "
                                    "annotation sunksandbox.dev/scope-hash) when the list changes.")
    min_roll_interval: str = Field(default="30s", pattern=DURATION_PATTERN, max_length=DURATION_MAX, description=(
        "At most one scheduler roll per this interval: the first change rolls at once, later ones fold into one roll "
        "at the interval's end (a roll restarts what places Slurm and sandbox pods). 0s: roll at every list write."))
    grant_cluster_role: str = Field(default="", pattern=r"^([A-Za-z0-9:._-]{1,253})?$", max_length=NAME_MAX, description=(
        "If set, a RoleBinding to this ClusterRole for the scheduler's ServiceAccount in each listed namespace the "
        "binding itself matches (its sandbox namespaces, and the alwaysInclude entries its namespace may reach)."))
