"""The watched-namespace list inside a YAML document or a Helm values object (pure).

`read_list` finds the list at a dotted path (a YAML list or a comma-separated string, the two
forms SUNK's values use); `write_list` puts a new list there, keeping its form.

The document is tenant-written: every parse goes through `untrusted` (no aliases, bounded size,
nodes and depth). A refused document reads as an error with the reason DocumentRefused, a
malformed one as InvalidConfig; neither is ever rewritten (`write_list` raises).

YAML edits are *text splices* (`yaml_splice`): only the span of the edited value is replaced;
comments, key order, quoting and layout of everything else survive byte for byte. Every splice
is checked by re-parsing: if the result is not exactly "the input with only that path replaced"
(merge keys, odd layouts), the document is re-emitted with `yaml.safe_dump(sort_keys=False)`
instead, which keeps key order and values but drops comments.

A burst of writes edits the text the previous write produced. When that write spliced a list
of plain names (block or flow), `edit` hands back the list's span; given that span, the next edit of that
exact text replaces it directly: the same bytes the checked splice would produce, without
composing or re-parsing a document of thousands of names (see `Span`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal, Mapping

import yaml

from ..api.reasons import ScopeSynced
from . import untrusted, yaml_splice
from .redact import describe
from .tenant_text import shown
from .yaml_splice import Span

ListStyle = Literal["list", "string", "missing"]

_load = yaml_splice.load

# ---------------------------------------------------------------- reading the list


@dataclass(frozen=True)
class ListRead:
    """The watched-namespace list as found at a path.

    values is None exactly when error is set. style says how to write it back; reason is the
    ScopeSynced reason that reports the error.
    """

    values: list[str] | None
    style: ListStyle
    scope_type: str | None = None
    error: str | None = None
    reason: ScopeSynced = ScopeSynced.INVALID_CONFIG


def _kind(value: Any) -> str:
    # YAML vocabulary in messages: admins read "a mapping", not "a dict".
    for typ, name in ((bool, "a boolean"), (int, "an integer"), (float, "a number"), (str, "a string"),
                      (list, "a list"), (Mapping, "a mapping")):
        if isinstance(value, typ):
            return name
    return "null" if value is None else f"a {type(value).__name__}"


def _split_path(path: str) -> list[str] | None:
    parts = path.split(".")
    return parts if path and all(parts) else None


def _read_data(data: Any, path: str, what: str) -> ListRead:
    parts = _split_path(path)
    if parts is None:
        return ListRead(None, "missing", None, f"invalid path {path!r}: expected dotted keys like scheduler.scope.namespaces")
    if data is None:
        return ListRead([], "missing")
    if not isinstance(data, Mapping):  # kopf hands out Mapping views, YAML gives dicts
        return ListRead(None, "missing", None, f"{what} is {_kind(data)}, not a mapping")
    cur: Mapping[str, Any] = data
    for i, key in enumerate(parts[:-1]):
        nxt = cur.get(key)
        if nxt is None:  # absent or null: Helm treats both as "not set"
            return ListRead([], "missing")
        if not isinstance(nxt, Mapping):
            where = ".".join(parts[: i + 1])
            return ListRead(None, "missing", None, f"{what}: {where} is {_kind(nxt)}, not a mapping")
        cur = nxt
    stype = cur.get("type")
    scope_type = shown(stype) if isinstance(stype, str) else None  # goes to status.scope.type: escaped unless plain
    value = cur.get(parts[-1])
    if value is None:
        return ListRead([], "missing", scope_type)
    if isinstance(value, str):
        if not value.strip():
            return ListRead([], "missing", scope_type)
        return ListRead([v.strip() for v in value.split(",") if v.strip()], "string", scope_type)
    if isinstance(value, list):
        bad = None
        if not set(map(type, value)) <= {str}:  # one C-level pass over 5,000 names; the index only when needed
            bad = next((i for i, v in enumerate(value) if not isinstance(v, str)), None)
        if bad is not None:
            return ListRead(None, "list", scope_type,
                            f"{what}: {path}[{bad}] is {_kind(value[bad])}, expected a namespace name (string)")
        return ListRead(list(value), "list", scope_type)
    return ListRead(None, "missing", scope_type,
                    f"{what}: {path} is {_kind(value)}, expected a list of namespace names or a comma-separated string")


class Refusal(str):
    """The error of a document refused as untrusted input (`untrusted.Refused`), not malformed: it
    travels where parse errors do (the targets' parse memo) and reads as DocumentRefused."""


def refused(error: str | Exception | None) -> bool:
    """Is this parse error, or the exception an edit raised, a refusal of untrusted input (not malformed)?"""
    return isinstance(error, (Refusal, untrusted.Refused))


def error_reason(error: str | Exception | None) -> ScopeSynced:
    """The ScopeSynced reason of a parse error, or of the exception an edit raised."""
    return ScopeSynced.DOCUMENT_REFUSED if refused(error) else ScopeSynced.INVALID_CONFIG


def _parse(doc_text: str) -> tuple[Any, str | None]:
    try:
        return _load(doc_text), None
    except untrusted.Refused as exc:
        return None, Refusal(exc)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        return None, f"malformed YAML{where}: {exc.problem or exc.context}"
    except Exception as exc:  # noqa: BLE001 - untrusted text: bad timestamps raise ValueError, deep nesting RecursionError
        return None, f"malformed YAML: {describe(exc)}"


def read_list(doc_text: str, path: str) -> ListRead:
    """Read the namespace list at a dotted path of a YAML document (e.g. ConfigMap scheduler.conf)."""
    return read_parsed(*parse(doc_text), path)


def parse(doc_text: str) -> tuple[Any, str | None]:
    """The document's data, or the error saying why it is not valid YAML."""
    return _parse(doc_text)


def read_parsed(data: Any, error: str | None, path: str) -> ListRead:
    """read_list over a document already parsed with `parse`."""
    if error:
        return ListRead(None, "missing", None, error, error_reason(error))
    return _read_data(data, path, "the YAML document")


def read_list_obj(obj: Mapping[str, Any] | None, path: str) -> ListRead:
    """Same as read_list over already-parsed data (Argo CD spec.source.helm.valuesObject)."""
    return _read_data(obj, path, "valuesObject")


# ---------------------------------------------------------------- writing the list


def _new_value(values: list[str], style: ListStyle) -> list[str] | str:
    return ",".join(values) if style == "string" else list(values)


def set_path_patch(path: str, values: list[str], style: ListStyle) -> dict[str, Any]:
    """A JSON merge-patch fragment setting only `path` (merge patch replaces lists whole)."""
    parts = _split_path(path)
    if parts is None:
        raise ValueError(f"invalid path {path!r}")
    patch: dict[str, Any] = {parts[-1]: _new_value(values, style)}  # a valid path has at least one key
    for key in reversed(parts[:-1]):
        patch = {key: patch}
    return patch


def _unshare(data: Any) -> Any:
    # Aliased YAML nodes would load as one shared object (refused: untrusted), and data handed in by a
    # caller may share too: editing a copy must not edit both places.
    if isinstance(data, dict):
        return {k: _unshare(v) for k, v in data.items()}
    if isinstance(data, list):
        return [_unshare(v) for v in data]
    return data


def _same(a: Any, b: Any) -> bool:
    """Structural equality that also checks key order and scalar types (and NaN == NaN)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return type(a) is type(b) and a == b


def _set_path(data: Any, parts: list[str], value: Any) -> dict[str, Any]:
    root = data if isinstance(data, dict) else {}
    cur = root
    for key in parts[:-1]:
        if not isinstance(cur.get(key), dict):
            cur[key] = {}
        cur = cur[key]
    cur[parts[-1]] = value
    return root


def write_list(doc_text: str, path: str, values: list[str], style: ListStyle) -> str:
    """The document with only `path` set to `values`, written in `style`.

    "list" and "missing" write a YAML list, "string" a comma-separated string. Writing an
    empty list where the value is already missing/null/blank returns the text unchanged
    (it already reads as empty), which keeps writes idempotent. Raises ValueError when
    read_list reports an error (malformed YAML is never overwritten; a document refused as
    untrusted input raises untrusted.Refused) or when no rewrite re-parses as "the input with only
    this path replaced".
    """
    return edit_list(doc_text, path, values, style)[0]


_UNPARSED: Any = object()


@dataclass(frozen=True)
class Edit:
    text: str
    data: Any                # what `text` parses to (checked, or known from `Span`)
    span: Span | None = None  # where the list sits in `text`, when the next edit can splice it directly


def edit_list(doc_text: str, path: str, values: list[str], style: ListStyle, data: Any = _UNPARSED) -> tuple[str, Any]:
    """write_list, given the parsed document when the caller has it (saves a parse), returning the
    new text and the new document's data (the text was checked to parse to exactly that)."""
    e = edit(doc_text, path, values, style, data)
    return e.text, e.data


def _replaced(data: Any, parts: list[str], value: Any) -> dict[str, Any]:
    """A copy of the mappings on the way to `parts` with the value there replaced; the rest shared."""
    out = dict(data)
    out[parts[0]] = value if len(parts) == 1 else _replaced(data[parts[0]], parts[1:], value)
    return out


def edit(doc_text: str, path: str, values: list[str], style: ListStyle, data: Any = _UNPARSED,
         span: Span | None = None) -> Edit:
    """`edit_list` with the list's span. `span` (from the `Edit` that produced `doc_text`, with its
    `data`) lets a list of plain names be replaced without composing or re-parsing the document."""
    parts = _split_path(path)
    if (span is not None and data is not _UNPARSED and parts is not None and style == "list" and values
            and span.fits(doc_text) and yaml_splice.all_plain(values)):
        items = span.render(values)
        out = doc_text[:span.start] + items + doc_text[span.end:]
        return Edit(out, _replaced(data, parts, list(values)),
                    Span(span.start, span.start + len(items), span.pad, len(out), span.flow))
    if data is _UNPARSED:
        data, err = _parse(doc_text)
    else:
        err = None
    found = read_parsed(data, err, path)
    if found.error:
        raise (untrusted.Refused if found.reason == ScopeSynced.DOCUMENT_REFUSED else ValueError)(found.error)
    assert parts is not None  # _read_data validated it
    if found.style == "missing" and not values:
        return Edit(doc_text, data)
    new = _new_value(values, style)
    expected = _set_path(_unshare(data), parts, new)
    spliced = _checked_splice(doc_text, parts, new, expected)
    if spliced is not None:
        return Edit(spliced[0], expected, spliced[1])
    # Re-emit (comments are lost). PyYAML's emitter does not round-trip every string (e.g. a
    # NEL before trailing spaces), so the dump is checked too; ASCII escapes are the last try.
    for allow_unicode in (True, False):
        dumped = yaml.safe_dump(expected, sort_keys=False, default_flow_style=False,
                                allow_unicode=allow_unicode, width=float("inf"))
        # Splice once more so the value is rendered as a splice renders it: the next write is a no-op.
        spliced = _checked_splice(dumped, parts, new, expected)
        if spliced is not None:
            return Edit(spliced[0], expected, spliced[1])
        if _same(_load(dumped), expected):
            return Edit(dumped, expected)
    raise ValueError(f"cannot rewrite {path} without changing other keys; edit it by hand")


def _checked_splice(text: str, parts: list[str], new: list[str] | str,
                    expected: dict[str, Any]) -> tuple[str, Span | None] | None:
    try:
        out, span = yaml_splice.splice(text, parts, new)
        return (out, span) if _same(_load(out), expected) else None
    except Exception:  # noqa: BLE001 - any surprise in the splice means: use the safe re-emit
        return None
