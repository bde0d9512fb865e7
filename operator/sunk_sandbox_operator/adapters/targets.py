"""Scope targets: where the scheduler's watched-namespace list lives, one class per kind.

Which object a spec names is `core.scope.target_ref`'s to say (`locate`); `build` turns that
descriptor into the class that reads and writes it here, behind the protocol of
`adapters.target_base` (`ScopeTarget`, `TargetRead`, `TargetFailed`, `ParseMemo`: the names callers
use are re-exported here). The documents are tenant-written: scope_doc.parse reads them through
core/untrusted (once per resourceVersion, a refusal too: `ParseMemo`), and a refused one is never
written over.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..api.keys import BINDING_LABEL, FLUX_WATCH_LABEL, MANAGED_BY_LABEL, SCOPE_LEDGER_ANNOTATION
from ..api.spec import BindingSpec
from ..core.problems import Problem
from ..core.scope import doc as scope_doc
from ..core.scope.errors import Cause, TargetError
from ..core.scope.grants import binding_label
from ..core.scope.ledger import Ledger, encode as encode_ledger
from ..core.scope.target_ref import APPLICATION, CONFIGMAP, FLUX, TargetRef, locate
from . import kube as k
from .target_base import (ParseMemo, ScopeTarget, TargetFailed, TargetRead, annotations_with,
                          edited_key, judged, ledger_of, reading, version_of, writing)

__all__ = ["ApplicationTarget", "ConfigMapTarget", "FluxTarget", "ParseMemo", "ScopeTarget", "TargetFailed",
           "TargetRead", "build", "for_spec"]


class ConfigMapTarget:
    """A key of the scheduler's ConfigMap holding a YAML document (SUNK 8 `scheduler.conf`)."""

    kind = "ConfigMap"
    can_roll = True

    def __init__(self, kube: k.KubeAPI, namespace: str, name: str, key: str, path: str,
                 memo: ParseMemo | None = None) -> None:
        self.kube, self.namespace, self.name, self.key, self.path = kube, namespace, name, key, path
        self.memo = memo if memo is not None else ParseMemo()

    def describe(self) -> str:
        return f"ConfigMap {self.namespace}/{self.name} key {self.key} at {self.path}"

    def ref(self) -> TargetRef:
        return TargetRef(CONFIGMAP, self.namespace, self.name, self.path, self.key)

    async def read(self, reuse: bool = False) -> TargetRead:
        memo = self.memo
        if reuse and memo.obj is not None and memo.parsed is not None:  # unchanged since we last read or wrote it
            (doc, error), obj = memo.parsed, memo.obj
            return TargetRead(scope_doc.read_parsed(doc, error, self.path), obj, memo.ledger or Ledger())
        with reading(self, f"ConfigMap {self.namespace}/{self.name}"):
            obj = await self.kube.get_configmap(self.namespace, self.name)
        data = obj.get("data") or {}
        if self.key not in data:
            raise TargetFailed(TargetError("read", "no-key", self.describe(), self.namespace,
                                           f"ConfigMap {self.namespace}/{self.name}", "spec.scope.target.configMap.key",
                                           key=self.key))
        text = data[self.key]
        doc, error = self.memo.parse(version_of(obj, self.key, self.path), lambda: scope_doc.parse(text))
        ledger = ledger_of(obj)
        self.memo.hold(obj, ledger)
        return TargetRead(scope_doc.read_parsed(doc, error, self.path), obj, ledger)

    def last_write(self) -> str | None:
        return self.memo.written_version

    def held(self) -> tuple[str, ...]:
        return self.memo.held

    async def write(self, read: TargetRead, values: list[str] | None, ledger: Ledger) -> str | None:
        data, parsed, span = edited_key(self, self.memo, read, values)
        meta = {**read.obj["metadata"], "annotations": annotations_with(read.obj, ledger)}
        body = {**read.obj, "metadata": meta, "data": data}
        self.memo.obj = None  # a failed write leaves nothing to reuse
        with writing(self):
            written = await self.kube.replace_configmap(self.namespace, self.name, body)
        # What we wrote parses to `parsed` (checked, or the text is unchanged): the next read need not
        # parse, and during a burst the next wake starts from this very object.
        self.memo.remember(version_of(written, self.key, self.path), parsed, span=span)
        self.memo.hold(written, ledger_of(written), replaced=read.obj["metadata"].get("resourceVersion", ""))
        return (written.get("metadata") or {}).get("resourceVersion")


class ApplicationTarget:
    """Helm values of an Argo CD Application rendering the Slurm chart: the inline values document Argo CD
    renders for its only or selected source (`helm.valuesObject`, else the YAML string `helm.values`,
    edited in place); the rules live in core/scope/app_values. One merge patch with the read's resourceVersion
    as precondition (for a multi-source Application it replaces `spec.sources` whole)."""

    kind = "Application"
    can_roll = False  # Argo CD re-renders the chart, and the chart's checksum annotation rolls the scheduler

    def __init__(self, kube: k.KubeAPI, namespace: str, name: str, path: str, memo: ParseMemo | None = None,
                 source_chart: str | None = None, source_index: int | None = None) -> None:
        self.kube, self.namespace, self.name, self.path = kube, namespace, name, path
        self.memo = memo if memo is not None else ParseMemo()
        self.source_chart, self.source_index = source_chart, source_index
        self.located: Any = None  # the app_values.Location of the last read (describe names it)

    def describe(self) -> str:
        where = self.located.describe(self.path) if self.located else f"{self.path} in its Helm values"
        return f"Application {self.namespace}/{self.name} at {where}"

    def ref(self) -> TargetRef:
        return TargetRef(APPLICATION, self.namespace, self.name, self.path, source_chart=self.source_chart,
                         source_index=self.source_index)

    def _locate(self, obj: dict) -> Any:
        from ..core.scope import app_values  # (imported here: this class is the module's only user)
        try:
            source = app_values.select_source(obj.get("spec") or {}, self.source_chart, self.source_index)
            version = version_of(obj, source.where, "helm.values")  # a values string is parsed once per version
            return app_values.locate(source, self.path,
                                     lambda text: self.memo.parse(version, lambda: scope_doc.parse(text)))
        except Problem as p:
            raise judged("read", f"Application {self.namespace}/{self.name}", p) from None

    def last_write(self) -> str | None:
        return None  # Argo CD writes the Application's status all the time: always read it

    def held(self) -> tuple[str, ...]:
        return ()

    async def read(self, reuse: bool = False) -> TargetRead:
        with reading(self, f"Argo CD Application {self.namespace}/{self.name}"):
            obj = await self.kube.get_application(self.namespace, self.name)
        self.located = self._locate(obj)
        return TargetRead(self.located.list, obj, ledger_of(obj))

    async def write(self, read: TargetRead, values: list[str] | None, ledger: Ledger) -> str | None:
        from ..core.scope import app_values
        patch: dict = {"metadata": {"resourceVersion": read.obj["metadata"]["resourceVersion"],
                                    "annotations": {SCOPE_LEDGER_ANNOTATION: encode_ledger(ledger)}}}
        new_doc, loc = None, None
        if values is not None:
            loc = self._locate(read.obj)
            try:
                patch["spec"], new_doc = app_values.spec_patch(loc, self.path, values, read.obj["spec"])
            except Problem as p:
                raise judged("write", self.describe(), p) from None
        with writing(self):
            written = await self.kube.merge_patch_application(self.namespace, self.name, patch)
        if new_doc is not None and loc is not None and written:  # the text written was checked to parse to new_doc
            self.memo.remember(version_of(written, loc.source.where, "helm.values"), (new_doc, None))
        return ((written or {}).get("metadata") or {}).get("resourceVersion")


class FluxTarget:
    """A key of a ConfigMap the operator owns, consumed by a Flux HelmRelease through `spec.valuesFrom`.

    Nobody fights over a Git-managed object: the HelmRelease is only read (Flux would revert an edit
    of it), and the ConfigMap, labelled `reconcile.fluxcd.io/watch: Enabled`, makes helm-controller
    upgrade the release within seconds of a change. `read` first checks that the HelmRelease consumes
    this key as a values document (a valuesFrom entry without targetPath) and that its inline
    `spec.values`, which Flux merges over every valuesFrom entry, does not set the path: else it
    fails (`TargetFailed`), and nothing is written. A missing ConfigMap reads as an empty document
    and the first write creates it (AlreadyExists is a lost race: `kube.Conflict`, like a stale resourceVersion).
    """

    kind = "ConfigMap"  # what is written (the HelmRelease is only read)
    can_roll = False    # Flux upgrades the release, and the chart's checksum annotation rolls the scheduler

    def __init__(self, kube: k.KubeAPI, namespace: str, helm_release: str, name: str, key: str, path: str,
                 memo: ParseMemo | None = None) -> None:
        self.kube, self.namespace, self.helm_release = kube, namespace, helm_release
        self.name, self.key, self.path = name, key, path
        self.memo = memo if memo is not None else ParseMemo()

    def describe(self) -> str:
        return (f"ConfigMap {self.namespace}/{self.name} key {self.key} at {self.path} (valuesFrom of HelmRelease "
                f"{self.namespace}/{self.helm_release})")

    def ref(self) -> TargetRef:
        return TargetRef(FLUX, self.namespace, self.name, self.path, self.key, self.helm_release)

    def _check_release(self, release: dict) -> str | None:
        """Raise unless the HelmRelease reads our key as a values document that nothing overrides at our
        path; return the scope type its inline values set (scheduler.scope.type: cluster), if any."""
        spec = s if isinstance(s := release.get("spec"), dict) else {}
        hr = f"HelmRelease {self.namespace}/{self.helm_release}"
        ours = [ref for ref in spec.get("valuesFrom") or [] if isinstance(ref, dict)
                and ref.get("kind") == "ConfigMap" and ref.get("name") == self.name
                and (ref.get("valuesKey") or "values.yaml") == self.key]  # Flux's default valuesKey
        values = spec.get("values")
        cause: Cause | None = None
        if not any(not ref.get("targetPath") for ref in ours):
            cause = "values-from-target-path" if ours else "values-from-missing"
        elif _sets_path(values, self.path):
            cause = "values-overridden"
        if cause is not None:
            raise TargetFailed(TargetError("read", cause, self.describe(), self.namespace, hr, name=self.name,
                                           key=self.key, path=self.path))
        return scope_doc.read_list_obj(values, self.path).scope_type if isinstance(values, dict) else None

    def last_write(self) -> str | None:
        return None  # the HelmRelease is read at every sync

    def held(self) -> tuple[str, ...]:
        return ()

    async def read(self, reuse: bool = False) -> TargetRead:
        hr = f"HelmRelease {self.namespace}/{self.helm_release}"
        with reading(self, f"Flux {hr}", "spec.scope.target.helmRelease (a helm.toolkit.fluxcd.io/v2 HelmRelease)",
                      denied=hr):
            release = await self.kube.get_helmrelease(self.namespace, self.helm_release)
        inline_type = self._check_release(release)
        with reading(self, f"ConfigMap {self.namespace}/{self.name}"):
            try:
                obj = await self.kube.get_configmap(self.namespace, self.name)
            except k.NotFound:  # ours to create: read as an empty document, created by the first write
                obj = {"apiVersion": "v1", "kind": "ConfigMap",
                       "metadata": {"namespace": self.namespace, "name": self.name}, "data": {}}
        text = (obj.get("data") or {}).get(self.key) or ""
        doc, error = self.memo.parse(version_of(obj, self.key, self.path), lambda: scope_doc.parse(text))
        found = scope_doc.read_parsed(doc, error, self.path)
        if found.scope_type is None and inline_type is not None:
            found = replace(found, scope_type=inline_type)  # the chart's scope type lives in Git, next to the rest
        return TargetRead(found, obj, ledger_of(obj))

    async def write(self, read: TargetRead, values: list[str] | None, ledger: Ledger) -> str | None:
        data, parsed, span = edited_key(self, self.memo, read, values)
        meta = dict(read.obj.get("metadata") or {})
        labels = {**(meta.get("labels") or {}), FLUX_WATCH_LABEL[0]: FLUX_WATCH_LABEL[1]}  # kept on every write
        exists = bool(meta.get("resourceVersion"))
        if not exists:
            labels[MANAGED_BY_LABEL[0]] = MANAGED_BY_LABEL[1]
            if len(ledger.entries) == 1:  # the creating binding: the only ledger entry of a new ConfigMap
                binding_ns, _, binding_name = next(iter(ledger.entries)).partition("/")
                labels[BINDING_LABEL] = binding_label(binding_ns, binding_name)
        meta.update(labels=labels, annotations=annotations_with(read.obj, ledger))
        body = {**read.obj, "metadata": meta, "data": data}
        with writing(self):
            if exists:
                written = await self.kube.replace_configmap(self.namespace, self.name, body)
            else:
                written = await self.kube.create_configmap(self.namespace, body)
        self.memo.remember(version_of(written, self.key, self.path), parsed, span=span)  # as ConfigMapTarget
        return (written.get("metadata") or {}).get("resourceVersion")


def _sets_path(values: Any, path: str) -> bool:
    """Does a values object set `path`, or replace a mapping on the way to it? Flux (like Helm) merges
    mappings key by key and lets anything else, null included, replace what was merged before."""
    cur = values
    for part in path.split("."):
        if not isinstance(cur, dict) or part not in cur:
            return False
        cur = cur[part]
        if not isinstance(cur, dict):
            return True
    return True


def build(kube: k.KubeAPI, ref: TargetRef, memo: ParseMemo | None = None) -> ScopeTarget:
    """The target `ref` names; `memo` (kept by the caller between reads) saves re-parsing it."""
    if ref.kind == APPLICATION:
        return ApplicationTarget(kube, ref.namespace, ref.name, ref.path, memo, ref.source_chart, ref.source_index)
    if ref.kind == FLUX:
        if not ref.helm_release or len(ref.name) > 253:
            raise TargetFailed(TargetError("build", "no-release-name", namespace=ref.namespace, name=ref.helm_release))
        return FluxTarget(kube, ref.namespace, ref.helm_release, ref.name, ref.key or "", ref.path, memo)
    if not ref.name:  # none named, and none found by its label
        raise TargetFailed(TargetError("build", "no-configmap", namespace=ref.namespace, key=ref.key))
    return ConfigMapTarget(kube, ref.namespace, ref.name, ref.key or "", ref.path, memo)


def for_spec(kube: k.KubeAPI, spec: BindingSpec, scheduler_namespace: str, discovered_configmap: str | None,
             memo: ParseMemo | None = None) -> ScopeTarget:
    """The target the spec names, for a scheduler in `scheduler_namespace` (`target_ref.locate`)."""
    return build(kube, locate(spec, scheduler_namespace, discovered_configmap), memo)
