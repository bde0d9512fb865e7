"""Where an Argo CD Application keeps the watched-namespace list, and the spec patch that writes it (pure).

Argo CD renders a Helm source with, lowest precedence first: the chart's values.yaml, the source's
`helm.valueFiles`, one inline values document, `helm.parameters` (`--set`). The inline document is
`helm.valuesObject` when that is set (not null), else the YAML string `helm.values`: Argo CD never
merges the two (`ApplicationSourceHelm.ValuesYAML`), so a set valuesObject makes all of `values` dead.
Hence the rules (`locate`):

- the list is read and written in the inline document Argo CD renders: the valuesObject if set, else a
  non-blank `values` string (edited as text by `scope_doc.edit_list`: the admin's other values and
  comments stay), else a new valuesObject. A valuesObject is never created next to a `values`
  string: it would silence every value in it;
- when the path is not in the inline document but the source has valueFiles, the list may come from
  one of those files, which the operator cannot edit: a `Problem` (ListNotEditable), nothing is
  written. So is a Helm parameter at the path: it overrides whatever the operator writes;
- a multi-source Application (`spec.sources`, which makes Argo CD ignore `spec.source`) is edited in
  one source (`select_source`): the one named by chart or index, else the only one with `helm` or a
  `chart`. A merge patch cannot patch one list element, so the patch replaces `spec.sources` whole;
  the caller sends it with the read's resourceVersion as precondition, so a concurrent edit of any
  source is a Conflict, never lost.

The `values` string is tenant-written YAML: it is parsed through `untrusted` (scope_doc.parse), and a
refused one is a Problem with DocumentRefused. A valuesObject is JSON the API server already decoded:
no aliases, and no larger than the object.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Callable, Literal, Mapping

from ...api.reasons import ScopeSynced
from . import doc as scope_doc
from ..problems import Problem
from .doc import ListRead

Field = Literal["valuesObject", "values"]
FIELD = "spec.scope.target.application"


@dataclass(frozen=True)
class Source:
    index: int | None              # None: spec.source; else the position in spec.sources
    body: Mapping[str, Any]

    @property
    def where(self) -> str:
        return "spec.source" if self.index is None else f"spec.sources[{self.index}]"


@dataclass(frozen=True)
class Location:
    """The inline values document the list is read from and written to."""

    source: Source
    field: Field
    list: ListRead
    text: str | None = None        # the `values` string (field "values")
    data: Any = None               # its parse, handed to edit_list

    def describe(self, path: str) -> str:
        if self.field == "values":
            return f"{path} in {self.source.where}.helm.values"
        return f"{self.source.where}.helm.valuesObject.{path}"


# ---------------------------------------------------------------- which source


def _chart(source: Mapping[str, Any]) -> str | None:
    """The chart a source renders: `chart` (Helm repository), else the last segment of `path` (Git)."""
    if source.get("chart"):
        return str(source["chart"])
    path = str(source.get("path") or "").rstrip("/")
    return path.rsplit("/", 1)[-1] or None


def _label(i: int, source: Any) -> str:
    if not isinstance(source, Mapping):
        return f"[{i}] (not an object)"
    what = (f"chart {source['chart']}" if source.get("chart") else f"path {source['path']}" if source.get("path")
            else f"ref {source['ref']}" if source.get("ref") else f"repoURL {source.get('repoURL', '?')}")
    return f"[{i}] {what}"


def select_source(spec: Mapping[str, Any], chart: str | None = None, index: int | None = None) -> Source:
    """The source whose Helm values hold the list (Problem: InvalidConfig, naming the field to set)."""
    sources = spec.get("sources")
    if isinstance(sources, list) and sources:
        items: list[tuple[int | None, Any]] = list(enumerate(sources))
        listed = ", ".join(_label(i, s) for i, s in enumerate(sources))
        if index is not None:
            if index >= len(sources) or not isinstance(sources[index], Mapping):
                raise Problem(ScopeSynced.INVALID_CONFIG, f"{FIELD}.sourceIndex is {index}, but spec.sources has "
                              f"{len(sources)} entries ({listed}): fix it")
            return Source(index, sources[index])
    elif isinstance(spec.get("source"), Mapping):
        items, listed = [(None, spec["source"])], "spec.source"
        if index not in (None, 0):
            raise Problem(ScopeSynced.INVALID_CONFIG, f"{FIELD}.sourceIndex is {index}, but the Application has a "
                          "single spec.source: remove sourceIndex")
    else:
        raise Problem(ScopeSynced.INVALID_CONFIG, "has neither spec.source nor spec.sources")
    objects = [(i, s) for i, s in items if isinstance(s, Mapping)]
    if chart:
        hits = [(i, s) for i, s in objects if _chart(s) == chart]
        if len(hits) == 1:
            return Source(*hits[0])
        if hits:
            raise Problem(ScopeSynced.INVALID_CONFIG, f"{len(hits)} sources render chart {chart} "
                          f"({', '.join(f'[{i}]' for i, _ in hits)}): set {FIELD}.sourceIndex instead of sourceChart")
        raise Problem(ScopeSynced.INVALID_CONFIG, f"no source renders chart {chart} ({listed}): fix "
                      f"{FIELD}.sourceChart")
    if items[0][0] is None:
        return Source(None, items[0][1])
    helm = [(i, s) for i, s in objects if s.get("helm") is not None or s.get("chart")]
    if len(helm) == 1:
        return Source(*helm[0])
    which = "none" if not helm else f"{len(helm)}"
    raise Problem(ScopeSynced.INVALID_CONFIG, f"has {len(items)} spec.sources and {which} of them with helm or a "
                  f"chart ({listed}): set {FIELD}.sourceChart (or sourceIndex) to the source rendering the Slurm chart")


# ---------------------------------------------------------------- where in it


def _has(data: Any, path: str) -> bool:
    """The path's key is present (even null: in Helm a null deletes the key from lower layers)."""
    cur = data
    for key in path.split("."):
        if not isinstance(cur, Mapping) or key not in cur:
            return False
        cur = cur[key]
    return True


def _overriding_parameters(helm: Mapping[str, Any], path: str) -> list[str]:
    """Helm parameters (`--set`) at the path, below it or above it: they win over any value written."""
    found = []
    for key in ("parameters", "fileParameters"):
        for p in helm.get(key) or []:
            name = p.get("name") if isinstance(p, Mapping) else None
            if isinstance(name, str) and (name == path or name.startswith((path + ".", path + "["))
                                          or path.startswith(name + ".")):
                found.append(f"{key} {name}")
    return found


def locate(source: Source, path: str, parse: Callable[[str], tuple[Any, str | None]] = scope_doc.parse) -> Location:
    """Where the list is read and written (module docstring); `parse` may be memoized by the caller."""
    helm = source.body.get("helm")
    helm = helm if isinstance(helm, Mapping) else {}
    where = f"{source.where}.helm"
    params = _overriding_parameters(helm, path)
    if params:
        raise Problem(ScopeSynced.LIST_NOT_EDITABLE, f"{where}.{', '.join(params)} overrides {path} whatever the "
                      f"operator writes: remove it and keep the list in {where}.valuesObject (or values)")
    obj, text = helm.get("valuesObject"), helm.get("values")
    if obj is not None:
        found = Location(source, "valuesObject", scope_doc.read_list_obj(obj, path))
        present, inline = _has(obj, path), "valuesObject"
    elif isinstance(text, str) and text.strip():
        data, error = parse(text)
        found = Location(source, "values", scope_doc.read_parsed(data, error, path), text, data)
        present, inline = error is None and _has(data, path), "values"
    else:
        found = Location(source, "valuesObject", ListRead([], "missing"))
        present, inline = False, "valuesObject or values (neither is set)"
    files = [str(f) for f in helm.get("valueFiles") or []]
    if present or not files or found.list.error or found.list.scope_type == "cluster":
        return found
    raise Problem(ScopeSynced.LIST_NOT_EDITABLE, f"{path} is not in {where}.{inline}, but the source has valueFiles "
                  f"({', '.join(files)}): the list may come from one of them, which the operator cannot edit. Put "
                  f"the list into {where}.{found.field} (an empty list is enough: it overrides the files)")


# ---------------------------------------------------------------- the write


def _merged(target: Any, patch: Any) -> Any:
    """RFC 7386 for a patch without nulls (set_path_patch's): mappings merge, anything else replaces."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        out[key] = _merged(out.get(key), value)
    return out


def spec_patch(loc: Location, path: str, values: list[str], spec: Mapping[str, Any]) -> tuple[dict[str, Any], Any]:
    """The JSON merge patch of `spec` writing the list where `loc` says, and (field "values") the new
    document's parse (the text was checked to parse to it), else None. Problem when it cannot be written."""
    if loc.list.error:  # never write over what could not be read (malformed or refused YAML, a non-list value)
        raise Problem(loc.list.reason, loc.list.error)
    new_data = None
    try:
        if loc.field == "values":
            text, new_data = scope_doc.edit_list(loc.text or "", path, values, loc.list.style, loc.data)
            change: dict[str, Any] = {"values": text}
        else:
            change = {"valuesObject": scope_doc.set_path_patch(path, values, loc.list.style)}
    except ValueError as exc:  # or untrusted.Refused: e.g. the list would take the document past a bound
        raise Problem(scope_doc.error_reason(exc), f"{loc.describe(path)}: {exc}") from None
    if loc.source.index is None:
        return {"source": {"helm": change}}, new_data
    sources = copy.deepcopy(list(spec["sources"]))
    body = dict(sources[loc.source.index])
    body["helm"] = _merged(body.get("helm") if isinstance(body.get("helm"), Mapping) else {}, change)
    sources[loc.source.index] = body
    return {"sources": sources}, new_data
