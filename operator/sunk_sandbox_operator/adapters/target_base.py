"""What every scope target shares: its failures as facts, what a read returns, the protocol, and the
memo of the object and its parsed document (`adapters.targets` has the three kinds).

A target reads the list (`read` → `TargetRead`: the values, their style, and the object as a
precondition) and writes a new one with that precondition (`write`: raises `kube.Conflict` when
the object changed since the read: a lost race, for the retry). Every other failure it can
explain is a `TargetFailed` carrying the facts (`core.scope.errors.TargetError`, the API's error as
its cause): this module knows no condition reasons; the scope wing classifies the facts
(`core.scope.errors.classify`: the ScopeSynced reason and the fix).
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Protocol

from ..api.keys import SCOPE_LEDGER_ANNOTATION
from ..core.problems import Problem
from ..core.scope import doc as scope_doc
from ..core.scope.errors import Cause, Op, TargetError
from ..core.scope.ledger import Ledger, decode as decode_ledger, encode as encode_ledger
from ..core.scope.target_ref import TargetRef
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


def ledger_of(obj: dict) -> Ledger:
    return decode_ledger(((obj.get("metadata") or {}).get("annotations") or {}).get(SCOPE_LEDGER_ANNOTATION))


def annotations_with(obj: dict, ledger: Ledger) -> dict:
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
        """`reuse`: the caller knows nobody wrote the object since the version `held` (its watch saw
        only our writes, or that version, last): a target may answer from it instead of a GET."""
        ...

    def last_write(self) -> str | None:
        """The resourceVersion of our last write that `read(reuse=True)` would answer from."""
        ...

    def held(self) -> tuple[str, ...]:
        """The object `read(reuse=True)` would answer from (last read or written): its resourceVersion, and
        for our write the one it replaced; if the target's watch delivered one of these last, nobody else
        wrote since (empty: nothing held)."""
        ...

    async def write(self, read: TargetRead, values: list[str] | None, ledger: Ledger) -> str | None:
        """The new list (None: unchanged) and the new ledger, in one request; the written resourceVersion."""
        ...


def answer_of(exc: k.KubeError) -> Cause:
    return "not-found" if isinstance(exc, k.NotFound) else "forbidden" if isinstance(exc, k.Forbidden) else "invalid"


@contextmanager
def reading(target: "ScopeTarget", what: str, field: str = "spec.scope.target",
             denied: str | None = None) -> Iterator[None]:
    """The API's answers to a read of `what` (which `field` names; `denied`: as a refusal names it)."""
    try:
        yield
    except (k.NotFound, k.Forbidden) as exc:
        raise TargetFailed(TargetError("read", answer_of(exc), denied or target.describe(), target.namespace, what, field,
                                       detail=str(exc))) from exc


@contextmanager
def writing(target: "ScopeTarget") -> Iterator[None]:
    """The API's answers to a write with a precondition (kube.Conflict passes through: a lost race)."""
    try:
        yield
    except (k.Forbidden, k.NotFound, k.Invalid) as exc:
        raise TargetFailed(TargetError("write", answer_of(exc), target.describe(), target.namespace,
                                       detail=str(exc))) from exc


def document_error(target: "ScopeTarget", error: str | Exception) -> TargetFailed:
    """The document cannot take the new list (malformed, an edit it does not allow, or refused as untrusted)."""
    return TargetFailed(TargetError("write", "refused" if scope_doc.refused(error) else "document", target.describe(),
                                    target.namespace, detail=str(error)))


def judged(op: Op, where: str, p: Problem) -> TargetFailed:
    """What core.scope.app_values found wrong with an Application's values (its reason and explanation)."""
    return TargetFailed(TargetError(op, "values", where, detail=p.message, reason=p.reason))


def version_of(obj: dict, *fingerprint: str) -> tuple:
    meta = obj.get("metadata") or {}
    return (meta.get("uid"), meta.get("resourceVersion"), *fingerprint)


Version = tuple[Any, ...]          # (uid, resourceVersion, *where the document sits in the object)
Parsed = tuple[Any, str | None]    # scope_doc.parse: (the document, its error)


@dataclass(slots=True)
class ParseMemo:
    """A target's document as last parsed, for one object version: an unchanged target is never
    re-parsed. Kept by the caller between reads (`ScopeMemory.parsed`); it holds one version only,
    so it costs one document at most. The object itself rides along (`read(reuse=True)` answers from
    it), and, when our own write produced it, the list's span in its text (the next edit splices there)."""

    version: Version | None = None
    parsed: Parsed | None = None
    span: Span | None = None        # the list's span in the text our last write produced
    obj: dict | None = None         # the object last read or written (ConfigMapTarget)
    ledger: Ledger | None = None    # ... and the ledger it carries
    replaced: str | None = None     # `obj` is what our last write returned: the resourceVersion it replaced

    @property
    def written_version(self) -> str | None:
        """The resourceVersion of the object our last write returned (None: none kept)."""
        if self.obj is None or self.replaced is None:
            return None
        return self.obj["metadata"].get("resourceVersion")

    @property
    def held(self) -> tuple[str, ...]:
        """The resourceVersion of the object last read or written, and the one our write replaced."""
        if self.obj is None:
            return ()
        return tuple(v for v in (self.obj["metadata"].get("resourceVersion"), self.replaced) if v)

    def get(self, version: Version) -> Parsed | None:
        """What `version` parsed to, if it is the version held (one without a resourceVersion never is)."""
        return self.parsed if version[1] and self.version == version else None

    def remember(self, version: Version, parsed: Parsed, *, span: Span | None = None) -> None:
        """Hold `version` instead of the one before (and only what this call says of it)."""
        self.version, self.parsed, self.span = version, parsed, span
        self.obj = self.ledger = self.replaced = None

    def hold(self, obj: dict, ledger: Ledger, *, replaced: str | None = None) -> None:
        """Keep the object of the version held (read, or returned by our write replacing `replaced`)."""
        self.obj, self.ledger, self.replaced = obj, ledger, replaced

    def parse(self, version: Version, parse: Callable[[], Parsed]) -> Parsed:
        """`version`'s parse: the one held, else `parse()` (then held)."""
        parsed = self.get(version)
        if parsed is None:
            parsed = parse()
            self.remember(version, parsed)
        return parsed

    def clear(self) -> None:
        self.version = self.parsed = self.span = self.obj = self.ledger = self.replaced = None


def edited_key(target: Any, memo: ParseMemo, read: TargetRead, values: list[str] | None) -> tuple[dict, Parsed, Span | None]:
    """The ConfigMap data with the list at `target.path` in `target.key` set to `values` (None: as is),
    what the key's text parses to (checked by the edit), and the list's span in it for the next edit."""
    data = read.obj.get("data") or {}
    text = data.get(target.key) or ""
    parsed = memo.parse(version_of(read.obj, target.key, target.path), lambda: scope_doc.parse(text))
    if values is None:
        return data, parsed, None
    if parsed[1]:  # malformed or refused YAML is never overwritten (edit takes the parse as valid)
        raise document_error(target, parsed[1])
    try:  # the span of our previous write, when this is the text it produced: no re-parse
        e = scope_doc.edit(text, target.path, values, read.list.style, parsed[0], memo.span)
    except ValueError as exc:  # or untrusted.Refused: e.g. the new list would take the document past a bound
        raise document_error(target, exc) from exc
    return {**data, target.key: e.text}, (e.data, None), e.span


