"""Scope targets: where the scheduler's watched-namespace list lives, behind one small protocol.

A target reads the list (`read` → `TargetRead`: the values, their style, and the object as a
precondition) and writes a new one with that precondition (`write`: raises `kube.Conflict` when
the object changed since the read: a lost race, for the retry). Every other failure it can
explain is a `TargetFailed` carrying the facts (`core.scope.errors.TargetError`, the API's error as
its cause): this module knows no condition reasons; the scope pipeline classifies the facts
(`scope_errors.classify`: the ScopeSynced reason and the fix). Which object a spec names is
`core.scope.target_ref`'s to say (`locate`); `build` turns that descriptor into the class that reads and
writes it here. The documents are tenant-written: scope_doc.parse reads them through core/untrusted
(once per resourceVersion, a refusal too: `ParseMemo`), and a refused one is never written over.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterator, Protocol

from ..api.keys import BINDING_LABEL, FLUX_WATCH_LABEL, MANAGED_BY_LABEL, SCOPE_LEDGER_ANNOTATION
from ..api.spec import BindingSpec
from ..core.scope.grants import binding_label
from ..core.scope import doc as scope_doc
from ..core.scope.target_ref import APPLICATION, CONFIGMAP, FLUX, TargetRef, locate
from ..core.problems import Problem
from ..core.scope.errors import Cause, Op, TargetError
from ..core.scope.ledger import Ledger, decode as decode_ledger, encode as encode_ledger
from ..core.scope.yaml_splice import Span
from . import kube as k


class TargetFailed(Exception):
    """A target could not be built, read or written: `error` says what failed, as facts, for the scope
    pipeline to classify (`core.scope.errors.classify`); the API's error, if any, is the cause."""

    def __init__(self, error: TargetError) -> None:
        detail = f": {error.detail}" if error.detail else ""
        super().__init__(f"{error.op} {error.target or error.obj}: {error.cause}{detail}")
        self.error = error


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

    def ref(self) -> TargetRef:
        """Which list this is (status.scope.target): a switch of target is seen by comparing these."""
        ...

    async def read(self, reuse: bool = False) -> TargetRead:
        """`reuse`: the caller knows nobody wrote the object since `last_write` (its watch saw only
        our writes): a target may answer from the object that write returned instead of a GET."""
        ...

    def last_write(self) -> str | None:
        """The resourceVersion of our last write that `read(reuse=True)` would answer from."""
        ...

    async def write(self, read: TargetRead, values: list[str] | None, ledger: Ledger) -> str | None:
        """The new list (None: unchanged) and the new ledger, in one request; the written resourceVersion."""
        ...


def _answer(exc: k.KubeError) -> Cause:
    return "not-found" if isinstance(exc, k.NotFound) else "forbidden" if isinstance(exc, k.Forbidden) else "invalid"


@contextmanager
def _reading(target: "ScopeTarget", what: str, field: str = "spec.scope.target",
             denied: str | None = None) -> Iterator[None]:
    """The API's answers to a read of `what` (which `field` names; `denied`: as a refusal names it)."""
    try:
        yield
    except (k.NotFound, k.Forbidden) as exc:
        raise TargetFailed(TargetError("read", _answer(exc), denied or target.describe(), target.namespace, what, field,
                                       detail=str(exc))) from exc


@contextmanager
def _writing(target: "ScopeTarget") -> Iterator[None]:
    """The API's answers to a write with a precondition (kube.Conflict passes through: a lost race)."""
    try:
        yield
    except (k.Forbidden, k.NotFound, k.Invalid) as exc:
        raise TargetFailed(TargetError("write", _answer(exc), target.describe(), target.namespace,
                                       detail=str(exc))) from exc


def _document(target: "ScopeTarget", error: str | Exception) -> TargetFailed:
    """The document cannot take the new list (malformed, an edit it does not allow, or refused as untrusted)."""
    return TargetFailed(TargetError("write", "refused" if scope_doc.refused(error) else "document", target.describe(),
                                    target.namespace, detail=str(error)))


def _judged(op: Op, where: str, p: Problem) -> TargetFailed:
    """What core.scope.app_values found wrong with an Application's values (its reason and explanation)."""
    return TargetFailed(TargetError(op, "values", where, detail=p.message, reason=p.reason))


def _version(obj: dict, *fingerprint: str) -> tuple:
    meta = obj.get("metadata") or {}
    return (meta.get("uid"), meta.get("resourceVersion"), *fingerprint)


Version = tuple[Any, ...]          # (uid, resourceVersion, *where the document sits in the object)
Parsed = tuple[Any, str | None]    # scope_doc.parse: (the document, its error)


@dataclass(slots=True)
class ParseMemo:
    """A target's document as last parsed, for one object version: an unchanged target is never
    re-parsed. Kept by the caller between syncs (`ScopeMemory.parsed`); it holds one version only,
    so it costs one document at most. What our own last write produced rides along: the list's span
    in that text (the next edit splices there) and the object the write returned (`read(reuse=True)`)."""

    version: Version | None = None
    parsed: Parsed | None = None
    span: Span | None = None        # the list's span in the text our last write produced
    written: dict | None = None     # the object our last write returned (ConfigMapTarget)
    ledger: Ledger | None = None    # ... and the ledger it carries

    @property
    def written_version(self) -> str | None:
        """The resourceVersion of the object our last write returned (None: none kept)."""
        return self.written["metadata"].get("resourceVersion") if self.written is not None else None

    def get(self, version: Version) -> Parsed | None:
        """What `version` parsed to, if it is the version held (one without a resourceVersion never is)."""
        return self.parsed if version[1] and self.version == version else None

    def remember(self, version: Version, parsed: Parsed, *, span: Span | None = None, written: dict | None = None,
                 ledger: Ledger | None = None) -> None:
        """Hold `version` instead of the one before (and only what this call says of it)."""
        self.version, self.parsed, self.span, self.written, self.ledger = version, parsed, span, written, ledger

    def parse(self, version: Version, parse: Callable[[], Parsed]) -> Parsed:
        """`version`'s parse: the one held, else `parse()` (then held)."""
        parsed = self.get(version)
        if parsed is None:
            parsed = parse()
            self.remember(version, parsed)
        return parsed

    def clear(self) -> None:
        self.version = self.parsed = self.span = self.written = self.ledger = None


def _edited_key(target: Any, memo: ParseMemo, read: TargetRead, values: list[str] | None) -> tuple[dict, Parsed, Span | None]:
    """The ConfigMap data with the list at `target.path` in `target.key` set to `values` (None: as is),
    what the key's text parses to (checked by the edit), and the list's span in it for the next edit."""
    data = read.obj.get("data") or {}
    text = data.get(target.key) or ""
    parsed = memo.parse(_version(read.obj, target.key, target.path), lambda: scope_doc.parse(text))
    if values is None:
        return data, parsed, None
    if parsed[1]:  # malformed or refused YAML is never overwritten (edit takes the parse as valid)
        raise _document(target, parsed[1])
    try:  # the span of our previous write, when this is the text it produced: no re-parse
        e = scope_doc.edit(text, target.path, values, read.list.style, parsed[0], memo.span)
    except ValueError as exc:  # or untrusted.Refused: e.g. the new list would take the document past a bound
        raise _document(target, exc) from exc
    return {**data, target.key: e.text}, (e.data, None), e.span


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
        if reuse and memo.written is not None and memo.parsed is not None:  # a burst: what our last write returned
            (doc, error), obj = memo.parsed, memo.written
            return TargetRead(scope_doc.read_parsed(doc, error, self.path), obj, memo.ledger or Ledger())
        with _reading(self, f"ConfigMap {self.namespace}/{self.name}"):
            obj = await self.kube.get_configmap(self.namespace, self.name)
        data = obj.get("data") or {}
        if self.key not in data:
            raise TargetFailed(TargetError("read", "no-key", self.describe(), self.namespace,
                                           f"ConfigMap {self.namespace}/{self.name}", "spec.scope.target.configMap.key",
                                           key=self.key))
        text = data[self.key]
        doc, error = self.memo.parse(_version(obj, self.key, self.path), lambda: scope_doc.parse(text))
        return TargetRead(scope_doc.read_parsed(doc, error, self.path), obj, _ledger(obj))

    def last_write(self) -> str | None:
        return self.memo.written_version

    async def write(self, read: TargetRead, values: list[str] | None, ledger: Ledger) -> str | None:
        data, parsed, span = _edited_key(self, self.memo, read, values)
        meta = {**read.obj["metadata"], "annotations": _annotations_with(read.obj, ledger)}
        body = {**read.obj, "metadata": meta, "data": data}
        self.memo.written = None  # a failed write leaves nothing to reuse
        with _writing(self):
            written = await self.kube.replace_configmap(self.namespace, self.name, body)
        # What we wrote parses to `parsed` (checked, or the text is unchanged): the next read need not
        # parse, and during a burst the next sync starts from this very object.
        self.memo.remember(_version(written, self.key, self.path), parsed, span=span, written=written,
                           ledger=_ledger(written))
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
            version = _version(obj, source.where, "helm.values")  # a values string is parsed once per version
            return app_values.locate(source, self.path,
                                     lambda text: self.memo.parse(version, lambda: scope_doc.parse(text)))
        except Problem as p:
            raise _judged("read", f"Application {self.namespace}/{self.name}", p) from None

    def last_write(self) -> str | None:
        return None  # Argo CD writes the Application's status all the time: always read it

    async def read(self, reuse: bool = False) -> TargetRead:
        with _reading(self, f"Argo CD Application {self.namespace}/{self.name}"):
            obj = await self.kube.get_application(self.namespace, self.name)
        self.located = self._locate(obj)
        return TargetRead(self.located.list, obj, _ledger(obj))

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
                raise _judged("write", self.describe(), p) from None
        with _writing(self):
            written = await self.kube.merge_patch_application(self.namespace, self.name, patch)
        if new_doc is not None and loc is not None and written:  # the text written was checked to parse to new_doc
            self.memo.remember(_version(written, loc.source.where, "helm.values"), (new_doc, None))
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

    async def read(self, reuse: bool = False) -> TargetRead:
        hr = f"HelmRelease {self.namespace}/{self.helm_release}"
        with _reading(self, f"Flux {hr}", "spec.scope.target.helmRelease (a helm.toolkit.fluxcd.io/v2 HelmRelease)",
                      denied=hr):
            release = await self.kube.get_helmrelease(self.namespace, self.helm_release)
        inline_type = self._check_release(release)
        with _reading(self, f"ConfigMap {self.namespace}/{self.name}"):
            try:
                obj = await self.kube.get_configmap(self.namespace, self.name)
            except k.NotFound:  # ours to create: read as an empty document, created by the first write
                obj = {"apiVersion": "v1", "kind": "ConfigMap",
                       "metadata": {"namespace": self.namespace, "name": self.name}, "data": {}}
        text = (obj.get("data") or {}).get(self.key) or ""
        doc, error = self.memo.parse(_version(obj, self.key, self.path), lambda: scope_doc.parse(text))
        found = scope_doc.read_parsed(doc, error, self.path)
        if found.scope_type is None and inline_type is not None:
            found = replace(found, scope_type=inline_type)  # the chart's scope type lives in Git, next to the rest
        return TargetRead(found, obj, _ledger(obj))

    async def write(self, read: TargetRead, values: list[str] | None, ledger: Ledger) -> str | None:
        data, parsed, span = _edited_key(self, self.memo, read, values)
        meta = dict(read.obj.get("metadata") or {})
        labels = {**(meta.get("labels") or {}), FLUX_WATCH_LABEL[0]: FLUX_WATCH_LABEL[1]}  # kept on every write
        exists = bool(meta.get("resourceVersion"))
        if not exists:
            labels[MANAGED_BY_LABEL[0]] = MANAGED_BY_LABEL[1]
            if len(ledger.entries) == 1:  # the creating binding: the only ledger entry of a new ConfigMap
                binding_ns, _, binding_name = next(iter(ledger.entries)).partition("/")
                labels[BINDING_LABEL] = binding_label(binding_ns, binding_name)
        meta.update(labels=labels, annotations=_annotations_with(read.obj, ledger))
        body = {**read.obj, "metadata": meta, "data": data}
        with _writing(self):
            if exists:
                written = await self.kube.replace_configmap(self.namespace, self.name, body)
            else:
                written = await self.kube.create_configmap(self.namespace, body)
        self.memo.remember(_version(written, self.key, self.path), parsed, span=span)  # as ConfigMapTarget
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
    """The target `ref` names; `memo` (kept by the caller between syncs) saves re-parsing it."""
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
