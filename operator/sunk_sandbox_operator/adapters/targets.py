"""Scope targets: where the scheduler's watched-namespace list lives, behind one small protocol.

A target reads the list (`read` → `TargetRead`: the values, their style, and the object as a
precondition) and writes a new one with that precondition (`write`: raises `kube.Conflict` when
the object changed since the read). Every failure the operator can explain is a `TargetProblem`
carrying the ScopeSynced reason and the fix. A new target kind is one new class here and one
entry in `KINDS`.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Protocol

from ..api.reasons import ScopeSynced
from ..api.keys import SCHEDULER_CONFIGMAP_LABEL
from ..api.spec import BindingSpec
from ..api.keys import SCOPE_LEDGER_ANNOTATION
from ..core import scope_doc
from ..core.ledger import Ledger
from ..core.ledger import decode as decode_ledger
from ..core.ledger import encode as encode_ledger
from . import kube as k


class TargetProblem(Exception):
    def __init__(self, reason: ScopeSynced, message: str) -> None:
        super().__init__(message)
        self.reason, self.message = reason, message


@dataclass(frozen=True)
class TargetRead:
    list: scope_doc.ListRead
    obj: dict                 # the object as read: its resourceVersion is the write precondition
    ledger: Ledger = field(default_factory=Ledger)


def _ledger(obj: dict) -> Ledger:
    return decode_ledger(((obj.get("metadata") or {}).get("annotations") or {}).get(SCOPE_LEDGER_ANNOTATION))


def _annotations_with(obj: dict, ledger: Ledger) -> dict:
    annotations = dict((obj.get("metadata") or {}).get("annotations") or {})
    value = encode_ledger(ledger)
    if value is None:
        annotations.pop(SCOPE_LEDGER_ANNOTATION, None)
    else:
        annotations[SCOPE_LEDGER_ANNOTATION] = value
    return annotations


class ScopeTarget(Protocol):
    kind: str                 # the Kubernetes kind written (ConfigMap, Application)
    can_roll: bool            # writing it needs a scheduler roll to take effect
    namespace: str
    name: str

    def describe(self) -> str: ...

    async def read(self) -> TargetRead: ...

    async def write(self, read: TargetRead, values: list[str] | None, ledger: Ledger) -> str | None:
        """The new list (None: unchanged) and the new ledger, in one request; the written resourceVersion."""
        ...


@contextmanager
def _reading(target: "ScopeTarget", what: str) -> Iterator[None]:
    """The API's answers to a read, as the problems ScopeSynced reports (with the fix)."""
    try:
        yield
    except k.NotFound:
        raise TargetProblem(ScopeSynced.TARGET_NOT_FOUND, f"{what} not found: create it or fix "
                            "spec.scope.target") from None
    except k.Forbidden as exc:
        raise TargetProblem(ScopeSynced.FORBIDDEN, f"the operator may not read {target.describe()}: {exc}") from None


@contextmanager
def _writing(target: "ScopeTarget") -> Iterator[None]:
    """The API's answers to a write with a precondition (kube.Conflict passes through: a lost race)."""
    try:
        yield
    except k.Forbidden as exc:
        raise TargetProblem(ScopeSynced.FORBIDDEN, f"the operator may not write {target.describe()}: {exc}") from None
    except k.NotFound:
        raise TargetProblem(ScopeSynced.TARGET_NOT_FOUND, f"{target.describe()} disappeared while being written") from None
    except k.Invalid as exc:
        raise TargetProblem(ScopeSynced.INVALID_CONFIG,
                            f"the API server refused the write to {target.describe()}: {exc}") from None


def _version(obj: dict, *fingerprint: str) -> tuple:
    meta = obj.get("metadata") or {}
    return (meta.get("uid"), meta.get("resourceVersion"), *fingerprint)


def _memoized(memo: dict | None, version: tuple, parse: Callable[[], tuple]) -> tuple:
    """Parse a target document once per object version: an unchanged target is never re-parsed.
    `memo` (kept by the caller between syncs) holds the last version and what it parsed to."""
    if memo is not None and version[1] and memo.get("version") == version:
        return memo["parsed"]
    parsed = parse()
    _remember(memo, version, parsed)
    return parsed


def _remember(memo: dict | None, version: tuple, parsed: tuple) -> None:
    if memo is not None:
        memo.clear()
        memo.update(version=version, parsed=parsed)


class ConfigMapTarget:
    """A key of the scheduler's ConfigMap holding a YAML document (SUNK 8 `scheduler.conf`)."""

    kind = "ConfigMap"
    can_roll = True

    def __init__(self, kube: k.Kube, namespace: str, name: str, key: str, path: str, memo: dict | None = None) -> None:
        self.kube, self.namespace, self.name, self.key, self.path = kube, namespace, name, key, path
        self.memo = memo

    def describe(self) -> str:
        return f"ConfigMap {self.namespace}/{self.name} key {self.key} at {self.path}"

    async def read(self) -> TargetRead:
        with _reading(self, f"ConfigMap {self.namespace}/{self.name}"):
            obj = await self.kube.get_configmap(self.namespace, self.name)
        data = obj.get("data") or {}
        if self.key not in data:
            raise TargetProblem(ScopeSynced.TARGET_NOT_FOUND, f"ConfigMap {self.namespace}/{self.name} has no key "
                                f"{self.key}: fix spec.scope.target.configMap.key")
        text = data[self.key]
        doc, error = _memoized(self.memo, _version(obj, self.key, self.path), lambda: scope_doc.parse(text))
        return TargetRead(scope_doc.read_parsed(doc, error, self.path), obj, _ledger(obj))

    async def write(self, read: TargetRead, values: list[str] | None, ledger: Ledger) -> str | None:
        data, new_doc = read.obj["data"], None
        if values is not None:
            old_doc, error = _memoized(self.memo, _version(read.obj, self.key, self.path),
                                       lambda: scope_doc.parse(data[self.key]))
            if error:  # malformed YAML is never overwritten (edit_list takes the parse as valid)
                raise TargetProblem(ScopeSynced.INVALID_CONFIG, f"{self.describe()}: {error}")
            try:
                text, new_doc = scope_doc.edit_list(data[self.key], self.path, values, read.list.style, old_doc)
            except ValueError as exc:
                raise TargetProblem(ScopeSynced.INVALID_CONFIG, f"{self.describe()}: {exc}") from None
            data = {**data, self.key: text}
        meta = {**read.obj["metadata"], "annotations": _annotations_with(read.obj, ledger)}
        body = {**read.obj, "metadata": meta, "data": data}
        with _writing(self):
            written = await self.kube.replace_configmap(self.namespace, self.name, body)
        if new_doc is not None:  # what we wrote was checked to parse to new_doc: the next read need not parse
            _remember(self.memo, _version(written, self.key, self.path), (new_doc, None))
        return (written.get("metadata") or {}).get("resourceVersion")


class ApplicationTarget:
    """Helm values of an Argo CD Application rendering the Slurm chart (`spec.source.helm.valuesObject`)."""

    kind = "Application"
    can_roll = False  # Argo CD re-renders the chart, and the chart's checksum annotation rolls the scheduler

    def __init__(self, kube: k.Kube, namespace: str, name: str, path: str, memo: dict | None = None) -> None:
        self.kube, self.namespace, self.name, self.path = kube, namespace, name, path  # values arrive parsed

    def describe(self) -> str:
        return f"Application {self.namespace}/{self.name} at spec.source.helm.valuesObject.{self.path}"

    async def read(self) -> TargetRead:
        with _reading(self, f"Argo CD Application {self.namespace}/{self.name}"):
            obj = await self.kube.get_application(self.namespace, self.name)
        spec = obj.get("spec") or {}
        source = spec.get("source")
        if not isinstance(source, dict):
            if spec.get("sources"):
                raise TargetProblem(ScopeSynced.INVALID_CONFIG, f"Application {self.namespace}/{self.name} uses "
                                    "spec.sources (multi-source), which is not supported: point spec.scope.target at a "
                                    "single-source Application")
            raise TargetProblem(ScopeSynced.INVALID_CONFIG, f"Application {self.namespace}/{self.name} has no spec.source")
        helm = source.get("helm") if isinstance(source.get("helm"), dict) else {}
        return TargetRead(scope_doc.read_list_obj(helm.get("valuesObject"), self.path), obj, _ledger(obj))

    async def write(self, read: TargetRead, values: list[str] | None, ledger: Ledger) -> str | None:
        patch: dict = {"metadata": {"resourceVersion": read.obj["metadata"]["resourceVersion"],
                                    "annotations": {SCOPE_LEDGER_ANNOTATION: encode_ledger(ledger)}}}
        if values is not None:
            patch["spec"] = {"source": {"helm": {"valuesObject": scope_doc.set_path_patch(self.path, values,
                                                                                          read.list.style)}}}
        with _writing(self):
            written = await self.kube.merge_patch_application(self.namespace, self.name, patch)
        return ((written or {}).get("metadata") or {}).get("resourceVersion")


def _configmap(kube: k.Kube, spec: BindingSpec, scheduler_namespace: str, discovered_name: str | None,
               memo: dict | None) -> ScopeTarget:
    t = spec.scope.target.config_map
    name = t.name or discovered_name
    if not name:
        key, value = SCHEDULER_CONFIGMAP_LABEL
        raise TargetProblem(ScopeSynced.TARGET_NOT_FOUND,
                            f"no ConfigMap labelled {key}={value} with key {t.key} in {scheduler_namespace}: set "
                            "spec.scope.target.configMap.name, or use target kind ArgoCDApplication when the list "
                            "lives in the Slurm chart's Helm values")
    return ConfigMapTarget(kube, scheduler_namespace, name, t.key, t.path, memo)


def _application(kube: k.Kube, spec: BindingSpec, scheduler_namespace: str, discovered_name: str | None,
                 memo: dict | None) -> ScopeTarget:
    t = spec.scope.target.application
    return ApplicationTarget(kube, t.namespace, t.name, t.path, memo)


# spec.scope.target.kind → how to build the target.
KINDS: dict[str, Any] = {"SchedulerConfigMap": _configmap, "ArgoCDApplication": _application}


def for_spec(kube: k.Kube, spec: BindingSpec, scheduler_namespace: str, discovered_configmap: str | None,
             memo: dict | None = None) -> ScopeTarget:
    """The target the spec names; `memo` (kept by the caller between syncs) saves re-parsing it."""
    return KINDS[spec.scope.target.kind](kube, spec, scheduler_namespace, discovered_configmap, memo)
