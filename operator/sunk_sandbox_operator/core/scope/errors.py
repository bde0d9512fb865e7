"""What a scope target's failure means: the ScopeSynced reason and the fix (pure).

The target adapter (`adapters.targets`) knows no condition reasons: when it cannot read or write
the list, or the spec names no target it can build, it raises its one typed error carrying a
`TargetError`, the facts of what failed (the operation, the object as messages name it, the API
server's answer or the document's error), with the transport error as its cause. A lost race
(`kube.Conflict`) is not a failure: it passes as it is, for the retry. The scope pipeline's
catch points (sync, Restore, leaving a target) turn a `TargetError` into the `Problem` that
ScopeSynced or the SCOPE_NOT_RESTORED event reports with `classify`, this module's one table.

`Finding` is what one scope loop keeps of a problem for ScopeSynced (`core.scope.report` ranks them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import yaml

from ...api.keys import SCHEDULER_CONFIGMAP_LABEL
from ...api.reasons import ScopeSynced, _Reason, grant_targets
from ..conditions import Status
from ..problems import Problem

Op = Literal["build", "read", "write"]  # build: the target from the spec, before any request
Cause = Literal[
    "not-found",      # the API server answered NotFound
    "forbidden",      # ... Forbidden
    "invalid",        # ... Invalid (a write it refused)
    "no-key",         # the ConfigMap has no such key
    "document",       # the document cannot take the new list: malformed YAML, or an edit it does not allow
    "refused",        # the document (or the edit's result) refused as untrusted input (core.untrusted)
    "values",         # an Argo CD Application's Helm values, as core.scope.app_values judged them (`reason`)
    "values-from-missing",      # the HelmRelease does not read the ConfigMap key in spec.valuesFrom
    "values-from-target-path",  # ... reads it only with a targetPath (a single flat value)
    "values-overridden",        # its inline spec.values sets the list's path over every valuesFrom entry
    "no-release-name",  # spec.scope.target.helmRelease without a usable name
    "no-configmap",     # no ConfigMap named, and none discovered by its label
]


@dataclass(frozen=True)
class TargetError:
    """What failed, as the adapter saw it: no reason and no fix (those are `classify`'s)."""

    op: Op
    cause: Cause
    target: str = ""             # what failed as messages name it: the target's describe(), or a HelmRelease read
    namespace: str = ""          # the target's namespace: where the operator's RBAC is granted
    obj: str = ""                # the object read, as a NotFound names it ("ConfigMap slurm/cm")
    field: str = ""              # the spec field naming that object (the fix for a wrong name)
    name: str | None = None      # the ConfigMap a HelmRelease should read; the HelmRelease (no-release-name)
    key: str | None = None       # the ConfigMap key holding the document
    path: str = ""               # the list's path in the document
    detail: str = ""             # the API server's message, the document's error, app_values' explanation
    reason: _Reason | None = None  # "values": the reason core.scope.app_values gave


@dataclass(frozen=True)
class Finding:
    """A problem one scope loop found, as ScopeSynced reports it: its reason, the message with the fix,
    and the condition's status (Unknown for what is transient and not understood)."""

    reason: str
    message: str
    status: Status = "False"

    @classmethod
    def of(cls, problem: Problem) -> "Finding":
        return cls(problem.reason, problem.message)


def classify(error: TargetError) -> Problem:
    """The Problem a target's failure is reported as: its ScopeSynced reason and a message with the fix."""
    e = error
    match e.cause, e.op:
        case "not-found", "write":
            return Problem(ScopeSynced.TARGET_NOT_FOUND, f"{e.target} disappeared while being written")
        case "not-found", _:
            return Problem(ScopeSynced.TARGET_NOT_FOUND, f"{e.obj} not found: create it or fix {e.field}")
        case "forbidden", _:
            verb = "write" if e.op == "write" else "read"
            return Problem(ScopeSynced.FORBIDDEN, f"the operator may not {verb} {e.target}: {e.detail}; "
                                                  f"{grant_targets(e.namespace)}")
        case "invalid", _:
            return Problem(ScopeSynced.INVALID_CONFIG, f"the API server refused the write to {e.target}: {e.detail}")
        case "no-key", _:
            return Problem(ScopeSynced.TARGET_NOT_FOUND, f"{e.obj} has no key {e.key}: fix {e.field}")
        case "document", _:
            return Problem(ScopeSynced.INVALID_CONFIG, f"{e.target}: {e.detail}")
        case "refused", _:
            return Problem(ScopeSynced.DOCUMENT_REFUSED, f"{e.target}: {e.detail}")
        case "values", _:
            return Problem(e.reason or ScopeSynced.INVALID_CONFIG, f"{e.target}: {e.detail}")
        case "values-from-missing" | "values-from-target-path", _:
            return Problem(ScopeSynced.VALUES_FROM_MISSING, _values_from_missing(e))
        case "values-overridden", _:
            return Problem(ScopeSynced.VALUES_OVERRIDDEN, f"{e.obj} sets {e.path} in its inline spec.values, "
                           "which Flux merges over every valuesFrom entry, so the list in "
                           f"{e.target} would have no effect: remove {e.path} from spec.values (list "
                           "fixed namespaces in spec.scope.alwaysInclude); nothing is written until then")
        case "no-release-name", _:
            return Problem(ScopeSynced.INVALID_CONFIG, "spec.scope.target.helmRelease needs a name, and a "
                           f"configMap name when {e.name}-sunk-scope is longer than 253 characters")
        case "no-configmap", _:
            label, value = SCHEDULER_CONFIGMAP_LABEL
            return Problem(ScopeSynced.TARGET_NOT_FOUND,
                           f"no ConfigMap labelled {label}={value} with key {e.key} in {e.namespace}: set "
                           "spec.scope.target.configMap.name, or use target kind ArgoCDApplication when the list "
                           "lives in the Slurm chart's Helm values")
    raise AssertionError(f"unclassified target error {e.cause!r}")  # every Cause has its row above


def _values_from_missing(e: TargetError) -> str:
    """The fix: the spec.valuesFrom entry through which the HelmRelease reads the key as a values document."""
    entry = {"kind": "ConfigMap", "name": e.name, "valuesKey": e.key}
    snippet = yaml.safe_dump({"spec": {"valuesFrom": [entry]}}, sort_keys=False).rstrip()
    why = (f"reads ConfigMap {e.name} key {e.key} only with a targetPath (a single flat value): remove "
           "targetPath, the key holds a values document" if e.cause == "values-from-target-path" else
           f"does not read ConfigMap {e.name} key {e.key} in spec.valuesFrom")
    return (f"{e.obj} {why}. Add this entry, last in spec.valuesFrom (a later entry setting {e.path} would "
            f"override it):\n{snippet}\n(or fix spec.scope.target.helmRelease); nothing is written until then")
