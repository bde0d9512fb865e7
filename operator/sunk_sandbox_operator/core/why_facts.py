"""The one observation `why` checks (core/why.py): what the shell read about one pod or namespace.

adapters/why.py fills it from facts recorded in the cluster (the bindings and their status, the
scope target's list and ledger, the scheduler's pod template and pods, our RoleBindings, a
SubjectAccessReview, the pod), the runner API (the policy, under the operator's tenancy rules) and
Slurm (the job list); nothing here reads or decides, and nothing comes from the operator's memory,
so `why` answers with the operator stopped. Tokens never appear here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Literal

from ..api.reasons import ConditionType
from ..api.spec import BindingSpec
from .scope.grants import Grant
from .scope.ledger import Ledger
from .pods import PodRecord
from .scheduler.discovery import Discovery
from .slurm.facts import Job


@dataclass(frozen=True)
class Link:
    """One link of the chain: ok True (holds), False (broken: `fix` says what to do) or None (not
    checked: it does not apply, or an earlier link is broken; `unknown` when it could not be told)."""

    id: str
    name: str
    ok: bool | None
    detail: str
    fix: str = ""
    unknown: bool = False


@dataclass(frozen=True)
class Candidate:
    """A binding whose spec.sandboxNamespaces match the namespace (under the operator's settings)."""

    ref: str                                   # namespace/name
    namespace: str
    spec: BindingSpec
    uid: str
    status: Mapping[str, Any] = field(default_factory=dict)  # as the operator last recorded it (may be empty)


@dataclass(frozen=True)
class TargetList:
    """The scope target's list as read now, and what the cluster recorded of its writes."""

    where: str                                 # e.g. "ConfigMap tenant-slurm/slurm-scheduler-config key … at …"
    kind: str                                  # core.target_ref kind (SchedulerConfigMap, ArgoCDApplication, …)
    values: tuple[str, ...] | None             # None: error, or cluster scope
    scope_type: str | None
    own_namespace: str                         # a blank list means this one (the scheduler's)
    error: str | None = None
    ledger: Ledger = field(default_factory=Ledger)
    changed_at: str | None = None              # the newest managedFields time of the object (RFC 3339)
    written_at: str | None = None              # ... of the operator's field manager
    renders: str | None = None                 # Argo CD / Flux: the Application or HelmRelease (namespace/name)


@dataclass(frozen=True)
class Scheduler:
    """The scheduler's workloads and pods, and its own scheduler.conf (what a tool renders for it)."""

    workloads: tuple[Mapping[str, Any], ...] | None = None  # Deployments and StatefulSets (None: not read)
    workloads_error: str | None = None
    pods: tuple[Mapping[str, Any], ...] = ()
    rendered_where: str | None = None          # its scheduler.conf ConfigMap (None: none found)
    rendered: tuple[str, ...] | None = None    # the list in it (blank: its own namespace)
    rendered_type: str | None = None
    rendered_changed_at: str | None = None


@dataclass(frozen=True)
class Access:
    """A SubjectAccessReview as the scheduler's ServiceAccount, and our RoleBindings in the namespace."""

    service_account: str                       # namespace/name
    allowed: bool | None                       # None: the review could not be made
    error: str | None = None
    grants: tuple[Grant, ...] = ()


@dataclass(frozen=True)
class Policy:
    """What the runner policy sets at the binding's paths: read with the token (source "runner"), else
    the paths and values the binding's status records it owns (source "status")."""

    source: Literal["runner", "status", ""]
    values: Mapping[str, str]                  # formatted policy path -> value (only those present)
    unread: str = ""                           # why the runner's policy was not read
    applied_at: str | None = None              # status.policy.lastAppliedTime


@dataclass(frozen=True)
class Jobs:
    """The pod's placeholder job in Slurm's job list (spec.slurm.restAPI)."""

    where: str                                 # slurmrestd at URL (user U)
    error: str | None = None                   # nothing was asked (refused URL, credentials), or the read failed
    names: tuple[str, ...] = ()                # the names tried (spec.slurm.restAPI.jobNameTemplates)
    job: Job | None = None
    submitted: float | None = None             # its submit_time (epoch seconds)


@dataclass(frozen=True)
class Observation:
    kind: Literal["pod", "namespace"]
    namespace: str
    now: float                                 # wall clock, epoch seconds
    pod_name: str | None = None
    namespace_labels: Mapping[str, str] | None = None  # None: the namespace was not found
    namespace_terminating: bool = False
    pod: PodRecord | None = None
    bindings_error: str | None = None          # the bindings could not be listed
    candidates: tuple[Candidate, ...] = ()     # the bindings matching the namespace, the one judged first
    refused: tuple[str, ...] = ()              # "ns/name: why" of bindings the operator's settings refuse
    discovery: Discovery | None = None
    scheduler_error: str | None = None
    target: TargetList | None = None
    scheduler: Scheduler = field(default_factory=Scheduler)
    access: Access | None = None
    policy: Policy | None = None
    sandbox_grace: int | None = None           # namespace mode: the longest grace among its sandbox pods
    jobs: Jobs | None = None
    pending_seconds: float = 60.0              # a pending reason (or a missing job) counts after this long

    @property
    def binding(self) -> Candidate | None:
        return self.candidates[0] if self.candidates else None

    @property
    def subject(self) -> str:
        return f"pod {self.namespace}/{self.pod_name}" if self.kind == "pod" else f"namespace {self.namespace}"


# ---------------------------------------------------------------- building links (core/why.py, core/why_roll.py)

Done = Mapping[str, Link]   # the links told so far, by id
WAITS = "not checked: waits on “{}” (see above)"


def link_ok(id_: str, name: str, detail: str) -> Link:
    return Link(id_, name, True, detail)


def link_broken(id_: str, name: str, detail: str, fix: str) -> Link:
    return Link(id_, name, False, detail, fix)


def link_skipped(id_: str, name: str, detail: str) -> Link:
    return Link(id_, name, None, detail)


def link_unknown(id_: str, name: str, detail: str, fix: str = "") -> Link:
    return Link(id_, name, None, detail, fix, unknown=True)


def iso(ts: float) -> str:
    return datetime.fromtimestamp(int(ts), timezone.utc).isoformat().replace("+00:00", "Z")


def holds(done: Done, id_: str) -> bool:
    link = done.get(id_)
    return link is not None and link.ok is True


def condition_note(b: Candidate, ctype: ConditionType) -> str:
    """' (the binding's ScopeSynced is False, GrantsNotAllowed: …)' when the operator recorded it False."""
    conds = b.status.get("conditions") if isinstance(b.status, Mapping) else None
    c = next((c for c in conds or () if isinstance(c, Mapping) and c.get("type") == ctype), None)
    if c is None or c.get("status") != "False":
        return ""
    return f" (the binding's {ctype} is False, {c.get('reason')}: {c.get('message')})"


def scheduler_list(t: TargetList, values: Sequence[str] | None) -> list[str]:
    """The list as the scheduler reads it: blank means its own namespace."""
    return list(values or ()) or [t.own_namespace]
