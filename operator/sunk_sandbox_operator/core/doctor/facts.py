"""The one observation `doctor` checks (core/doctor/checks.py): what the shell read, folded to facts.

adapters/doctor.py fills it from the cluster, the runner API and Slurm; nothing here reads or
decides. Tokens never appear in it: only where they are (`Secret ns/name key k`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .. import grace as gr
from .node_room import NodeRoom, Resources
from ..scheduler.discovery import Discovery
from ..slurm.facts import SlurmObservation

@dataclass(frozen=True)
class Result:
    id: str
    name: str
    ok: bool | None      # None: not applicable, or not checked because an earlier check failed
    detail: str
    fix: str = ""


def passed(id_: str, name: str, detail: str) -> Result:
    return Result(id_, name, True, detail)


def failing(id_: str, name: str, detail: str, fix: str) -> Result:
    return Result(id_, name, False, detail, fix)


def skipped(id_: str, name: str, detail: str) -> Result:
    return Result(id_, name, None, detail)


@dataclass(frozen=True)
class Scope:
    """What the scheduler's own config says it watches."""

    where: str                   # e.g. "scheduler.conf of ConfigMap tenant-slurm/slurm-scheduler-config"
    scope_type: str | None
    values: tuple[str, ...] | None
    error: str | None = None


@dataclass(frozen=True)
class SandboxPods:
    """The sandbox pods seen (label sandbox.coreweave.com/sandbox-id), folded to what the checks use."""

    count: int = 0
    graces: Mapping[int, int] = field(default_factory=dict)        # grace seconds -> pods
    grace_example: Mapping[int, str] = field(default_factory=dict)  # grace seconds -> one pod (ns/name)
    largest: Resources | None = None                                # each resource's largest request

    @property
    def max_grace(self) -> int | None:
        return max(self.graces) if self.graces else None


@dataclass(frozen=True)
class Access:
    """SubjectAccessReviews for the scheduler's ServiceAccount: watch pods, create pods/binding."""

    service_account: str                 # namespace/name
    cluster: bool | None                 # allowed in every namespace (None: not answered)
    denied: tuple[str, ...] = ()         # sandbox namespaces where it is not
    error: str | None = None             # the reviews could not be made


@dataclass(frozen=True)
class Runner:
    """GetManagedRunner with the token. outcome: ok | not_allowed (nothing sent) | credentials
    (nothing sent) | error (the API's `code`)."""

    runner_id: str
    api_url: str
    token: str                           # where the token is ("Secret ns/name key token"), never its value
    outcome: str
    code: str = ""
    message: str = ""
    policy: Any = None
    etag: str = ""


@dataclass(frozen=True)
class Observation:
    binding: str | None                  # namespace/name, or None: prerequisites (no binding yet)
    scheduler_namespace: str
    discovery: Discovery | None
    scheduler_error: str | None = None   # the scheduler's namespace could not be read
    violations: tuple[str, ...] = ()     # what the operator's settings refuse in the binding
    scope: Scope | None = None
    sandbox_namespaces: frozenset[str] = frozenset()
    sandbox_how: str = ""                # how they were found, for messages
    pods: SandboxPods = field(default_factory=SandboxPods)
    pods_error: str | None = None        # the sandbox pods or namespaces could not be listed
    expected_grace: int = gr.DEFAULT_GRACE_SECONDS
    access: Access | None = None
    nodes: tuple[NodeRoom, ...] = ()
    slurmd_pods: int = 0
    nodeset_filter: tuple[str, ...] = ()  # --nodeset: only these NodeSets' slurmd pods count
    nodes_error: str | None = None
    sandbox_request: Resources = Resources()
    sandbox_request_how: str = ""
    client_annotations: tuple[str, ...] = ()
    runner: Runner | None = None
    partition: str | None = None
    slurm: SlurmObservation | None = None  # the pinned partition (or a ping) asked of slurmrestd; None: not configured
    slurm_refused: str | None = None       # slurmrestd's URL is not one the operator allows: nothing was sent
    slurm_token_exp: int | None = None     # the Slurm JWT's `exp` (read without verifying), when it was sent
    now: float = 0.0                       # wall-clock epoch of the observation
    settings: str = ""                     # which settings judged it (the operator's published, flags, defaults)

    def knob(self, spec_field: str, flag: str) -> str:
        """Where the admin sets it: the binding's field, or the doctor's flag before any binding."""
        return spec_field if self.binding else flag
