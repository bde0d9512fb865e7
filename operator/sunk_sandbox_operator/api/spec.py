"""The SunkSandboxBinding spec: pydantic models, the one source of truth.

`api/crd.py` renders the CRD's OpenAPI schema from these models; a unit test fails when
`crds/` and the models disagree. Field names are snake_case in Python and camelCase on
the wire (aliases). Validation rules that only the API server can run (CEL) are attached
with `json_schema_extra={"x-kubernetes-validations": [...]}` so they live next to the field.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Optional

from pydantic import ConfigDict, Field, StringConstraints, model_validator

from .bounds import (DURATION_PATTERN, SLURM_NAME_PATTERN, NUMERIC_ID_PATTERN, DNS_SUBDOMAIN_PATTERN,
                     OPTIONAL_NAME_PATTERN, OPTIONAL_NAMESPACE_PATTERN, NAMESPACE_GLOB_PATTERN, ANNOTATION_KEY_PATTERN,
                     NAME_MAX, NAMESPACE_MAX, LABEL_KEY_MAX, LABEL_VALUE_MAX, SELECTOR_LABELS_MAX,
                     SELECTOR_EXPRESSIONS_MAX, SELECTOR_VALUES_MAX, NAMESPACE_GLOBS_MAX, CLIENT_ANNOTATIONS_MAX,
                     URL_MAX, DURATION_MAX)
from .base import _Model, _cel
from .keys import ANNOTATION_PREFIX, DEFAULT_API_URL, DEFAULT_SCHEDULER_POD_LABELS
from .policy_spec import PolicySpec
from .scope_spec import ScopeSpec
from .slurm import SlurmRestAPI

NamespaceGlob = Annotated[str, StringConstraints(pattern=NAMESPACE_GLOB_PATTERN, min_length=1, max_length=NAMESPACE_MAX)]
AnnotationKey = Annotated[str, StringConstraints(pattern=ANNOTATION_KEY_PATTERN, max_length=LABEL_KEY_MAX)]
LabelKey = Annotated[str, StringConstraints(min_length=1, max_length=LABEL_KEY_MAX)]
LabelValue = Annotated[str, StringConstraints(max_length=LABEL_VALUE_MAX)]


# ---------------------------------------------------------------- shared pieces


class LabelSelectorRequirement(_Model):
    """One expression of a label selector."""

    key: LabelKey = Field(description="The label key the selector applies to.")
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"] = Field(
        description="How the key relates to the values: In, NotIn, Exists or DoesNotExist."
    )
    values: list[LabelValue] = Field(
        default_factory=list,
        max_length=SELECTOR_VALUES_MAX,
        description="Values for In and NotIn; must be empty for Exists and DoesNotExist.",
    )


class LabelSelector(_Model):
    """A Kubernetes label selector (matchLabels AND matchExpressions)."""

    match_labels: dict[LabelKey, LabelValue] = Field(
        default_factory=dict, max_length=SELECTOR_LABELS_MAX,
        description="Labels that must all be present with these values."
    )
    match_expressions: list[LabelSelectorRequirement] = Field(
        default_factory=list, max_length=SELECTOR_EXPRESSIONS_MAX,
        description="Set-based requirements, all of which must hold."
    )


# ---------------------------------------------------------------- spec


class SecretKeyRef(_Model):
    """A key of a Secret in the binding's namespace."""

    name: str = Field(
        description="Name of the Secret, in the binding's namespace, holding the CoreWeave API token.",
        pattern=DNS_SUBDOMAIN_PATTERN, max_length=NAME_MAX,
    )
    key: str = Field(default="token", description="Key of the Secret's data holding the token.", min_length=1, max_length=NAME_MAX)


class RunnerSpec(_Model):
    """The CoreWeave sandbox runner whose policy this binding manages."""

    id: str = Field(
        description="The runner's id (as shown by `cwic runner list`). Required, non-empty.",
        min_length=1,
        max_length=NAME_MAX,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:-]*$",
    )
    api_url: str = Field(
        default=DEFAULT_API_URL,
        alias="apiURL",
        description="Base URL of the CoreWeave sandbox API (Connect protocol). http:// is for the local emulator only.",
        pattern=r"^https?://[^\s/]+(/[^\s]*)?$", max_length=URL_MAX,
    )
    token_secret_ref: SecretKeyRef = Field(
        description="Secret holding an API token with the sandbox_admin role. Read at each use, so rotation works."
    )


class SchedulerSpec(_Model):
    """Which SUNK Pod Scheduler places the sandboxes, and how to find it."""

    name: str = Field(
        default="",
        description="The scheduler name pods must carry in spec.schedulerName. Empty: discover it "
        "(SUNK 8 ConfigMap scheduler.conf .scheduler.name, then SUNK 7 --scheduler-name).",
        pattern=OPTIONAL_NAME_PATTERN, max_length=NAME_MAX,
    )
    namespace: str = Field(
        default="",
        description="Namespace the scheduler runs in. Empty: the binding's namespace.",
        pattern=OPTIONAL_NAMESPACE_PATTERN, max_length=NAMESPACE_MAX,
    )
    pod_selector: LabelSelector = Field(
        default_factory=lambda: LabelSelector(match_labels=dict(DEFAULT_SCHEDULER_POD_LABELS)),
        description="Selects the scheduler pods in the scheduler namespace.",
    )
    kill_wait_seconds: Optional[int] = Field(
        default=None,
        description="Slurm kill-wait in seconds; set only when it cannot be discovered from "
        "--slurm-kill-wait or Slurm's KillWait.",
        ge=1,
        le=86400,
    )


class SlurmSpec(_Model):
    """Further Slurm annotations pinned on every sandbox pod (sunk.coreweave.com/<key>), and optionally
    where to read Slurm's side (restAPI)."""

    account: Optional[str] = Field(default=None, description="Slurm account (sunk.coreweave.com/account).",
                                   pattern=SLURM_NAME_PATTERN, max_length=64)
    qos: Optional[str] = Field(default=None, description="Slurm QoS (sunk.coreweave.com/qos).", pattern=SLURM_NAME_PATTERN,
                               max_length=64)
    constraint: Optional[str] = Field(
        default=None,
        description="Slurm feature constraint expression (sunk.coreweave.com/constraint), e.g. cpu or cpu&avx512.",
        pattern=r"^[A-Za-z0-9_.&|!\[\]()*:,-]{1,256}$", max_length=256,
    )
    exclusive: Optional[Literal["none", "user", "ok"]] = Field(
        default=None,
        description="Node exclusivity (sunk.coreweave.com/exclusive): none, user or ok (ok is not for GPU pods).",
    )
    user_id: Optional[str] = Field(
        default=None,
        description="Numeric Linux UID for Slurm accounting (sunk.coreweave.com/user-id). A user name blocks scheduling.",
        pattern=NUMERIC_ID_PATTERN, max_length=10,
    )
    group_id: Optional[str] = Field(
        default=None,
        description="Numeric Linux GID (sunk.coreweave.com/group-id). Defaults to user-id in SUNK when unset.",
        pattern=NUMERIC_ID_PATTERN, max_length=10,
    )
    rest_api: Optional[SlurmRestAPI] = Field(
        default=None, alias="restAPI",
        description="slurmrestd to read: the partition exists and is UP (SlurmReady), each sandbox pod's "
        "placeholder job is found and not stuck PENDING (PlacementVerified). Unset: Slurm is not read.",
    )

    def annotations(self) -> dict[str, str]:
        """The annotation keys (without prefix) and values this spec pins."""
        names = {"account": "account", "qos": "qos", "constraint": "constraint",
                 "exclusive": "exclusive", "user_id": "user-id", "group_id": "group-id"}
        return {key: getattr(self, attr) for attr, key in names.items() if getattr(self, attr) is not None}


class SandboxNamespaces(_Model):
    """Which namespaces hold sandboxes: a label selector and/or name globs (a namespace matching either belongs)."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                _cel(
                    "has(self.selector) || (has(self.names) && size(self.names) > 0)",
                    "spec.sandboxNamespaces needs at least one of selector or names (e.g. names: [\"ds-*\"])",
                )
            ]
        }
    )

    selector: Optional[LabelSelector] = Field(
        default=None, description="Namespaces whose labels match this selector are sandbox namespaces."
    )
    names: list[NamespaceGlob] = Field(
        default_factory=list,
        max_length=NAMESPACE_GLOBS_MAX,
        description="Shell-style globs over namespace names (e.g. ds-*); a match makes it a sandbox namespace.",
    )


_PINNED_KEYS = ["partition", "account", "qos", "constraint", "exclusive", "user-id", "group-id"]

_SLURM_FIELD = {"account": "account", "qos": "qos", "constraint": "constraint", "exclusive": "exclusive",
                "user-id": "userId", "group-id": "groupId"}


def _not_pinned_and_client(key: str) -> dict[str, Any]:
    if key == "partition":
        field, has = "spec.partition", "has(self.partition)"
    else:
        field = f"spec.slurm.{_SLURM_FIELD[key]}"
        has = f"has(self.slurm) && has(self.slurm.{_SLURM_FIELD[key]})"
    return _cel(
        f"!({has}) || !has(self.clientAnnotations) || !('{ANNOTATION_PREFIX}{key}' in self.clientAnnotations)",
        f"{field} pins {ANNOTATION_PREFIX}{key}, which spec.clientAnnotations leaves to clients: remove one of the two",
    )


class BindingSpec(_Model):
    """Sandboxes of runner R are placed by the SUNK scheduler S (in partition P)."""

    model_config = ConfigDict(
        json_schema_extra={"x-kubernetes-validations": [_not_pinned_and_client(k) for k in _PINNED_KEYS]}
    )

    runner: RunnerSpec = Field(description="The runner whose policy is managed.")
    scheduler: SchedulerSpec = Field(default_factory=SchedulerSpec, description="The SUNK Pod Scheduler.")
    partition: Optional[str] = Field(
        default=None,
        description="Slurm partition pinned as sunk.coreweave.com/partition. Omit to let Slurm choose.",
        pattern=SLURM_NAME_PATTERN, max_length=64,
    )
    slurm: SlurmSpec = Field(default_factory=SlurmSpec, description="Further pinned Slurm annotations.")
    client_annotations: list[AnnotationKey] = Field(
        default_factory=list,
        max_length=CLIENT_ANNOTATIONS_MAX,
        description="Annotation keys clients must stay free to set (e.g. sunk.coreweave.com/user-id): never pinned, and reported if denied.",
    )
    sandbox_namespaces: SandboxNamespaces = Field(description="Which namespaces hold sandboxes.")
    scope: ScopeSpec = Field(default_factory=ScopeSpec, description="Scheduler watched-namespace sync.")
    expected_grace_period_seconds: int = Field(
        default=30,
        description="terminationGracePeriodSeconds sandbox pods use (300 with snapshot storage); observed pods override upward.",
        ge=0,
        le=86400,
    )
    mode: Literal["Enforce", "Observe"] = Field(
        default="Enforce", description="Enforce: write policy and scope. Observe: report only, never write."
    )
    policy: PolicySpec = Field(default_factory=PolicySpec, description="How the runner policy is managed.")
    resync_interval: str = Field(
        default="5m",
        description="How often to re-read policy and scope and correct drift, as a duration (e.g. 30s, 5m, 1h); "
        "one below the operator's --min-resync-interval (default 30s) is raised to it.",
        pattern=DURATION_PATTERN, max_length=DURATION_MAX,
    )
    deletion_policy: Literal["Restore", "Orphan"] = Field(
        default="Restore",
        description="On delete: Restore puts back what the operator changed; Orphan leaves everything as is.",
    )

    @model_validator(mode="after")
    def _pinned_keys_not_client_keys(self) -> "BindingSpec":
        pinned = self.pinned_annotations()
        clash = sorted(k for k in pinned if k in self.client_annotations)
        if clash:
            raise ValueError(
                f"{clash[0]} is both pinned (spec.partition/spec.slurm) and in spec.clientAnnotations: remove one of the two"
            )
        return self

    def pinned_annotations(self) -> dict[str, str]:
        """Full annotation keys and values the binding pins on every sandbox pod."""
        out = {ANNOTATION_PREFIX + k: v for k, v in self.slurm.annotations().items()}
        if self.partition is not None:
            out[ANNOTATION_PREFIX + "partition"] = self.partition
        return out

    def scheduler_namespace(self, binding_namespace: str) -> str:
        return self.scheduler.namespace or binding_namespace


def parse_spec(spec: dict[str, Any]) -> BindingSpec:
    """Validate a binding's spec as the API server would (models mirror the CRD)."""
    return BindingSpec.model_validate(spec)
