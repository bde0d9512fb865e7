"""The watched-namespace list inside a YAML document or a Helm values object (pure).

`read_list` finds the list at a dotted path (a YAML list or a comma-separated string, the two
forms SUNK's values use); `write_list` puts a new list there, keeping its form.

YAML edits are *text splices*: PyYAML's composer gives every node its character span, and
only the span of the edited value is replaced. Comments, key order, quoting and layout of
everything else survive byte for byte. Every splice is checked by re-parsing: if the result
is not exactly "the input with only that path replaced" (anchors/aliases, merge keys, odd
layouts), the document is re-emitted with `yaml.safe_dump(sort_keys=False)` instead, which
keeps key order and values but drops comments. Malformed input is never rewritten:
`write_list` raises.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Literal, Mapping

import yaml

ListStyle = Literal["list", "string", "missing"]

# libyaml when present (~20x faster). Its node marks are character offsets too, like the
# pure-Python loader's, which the splice relies on.
_FastLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _load(text: str) -> Any:
    return yaml.load(text, Loader=_FastLoader)  # noqa: S506 - a safe loader


# ---------------------------------------------------------------- reading the list


@dataclass(frozen=True)
class ListRead:
    """The watched-namespace list as found at a path.

    values is None exactly when error is set. style says how to write it back.
    """

    values: list[str] | None
    style: ListStyle
    scope_type: str | None = None
    error: str | None = None


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
    scope_type = stype if isinstance(stype, str) else None
    value = cur.get(parts[-1])
    if value is None:
        return ListRead([], "missing", scope_type)
    if isinstance(value, str):
        if not value.strip():
            return ListRead([], "missing", scope_type)
        return ListRead([v.strip() for v in value.split(",") if v.strip()], "string", scope_type)
    if isinstance(value, list):
        bad = next((i for i, v in enumerate(value) if not isinstance(v, str)), None)
        if bad is not None:
            return ListRead(None, "list", scope_type,
                            f"{what}: {path}[{bad}] is {_kind(value[bad])}, expected a namespace name (string)")
        return ListRead(list(value), "list", scope_type)
    return ListRead(None, "missing", scope_type,
                    f"{what}: {path} is {_kind(value)}, expected a list of namespace names or a comma-separated string")


def _parse(doc_text: str) -> tuple[Any, str | None]:
    try:
        return _load(doc_text), None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        return None, f"malformed YAML{where}: {exc.problem or exc.context}"
    except Exception as exc:  # noqa: BLE001 - untrusted text: bad timestamps raise ValueError, deep nesting RecursionError
        return None, f"malformed YAML: {exc}"


def read_list(doc_text: str, path: str) -> ListRead:
    """Read the namespace list at a dotted path of a YAML document (e.g. ConfigMap scheduler.conf)."""
    return read_parsed(*parse(doc_text), path)


def parse(doc_text: str) -> tuple[Any, str | None]:
    """The document's data, or the error saying why it is not valid YAML."""
    return _parse(doc_text)


def read_parsed(data: Any, error: str | None, path: str) -> ListRead:
    """read_list over a document already parsed with `parse`."""
    if error:
        return ListRead(None, "missing", None, error)
    return _read_data(data, path, "the YAML document")


def read_list_obj(obj: Mapping[str, Any] | None, path: str) -> ListRead:
    """Same as read_list over already-parsed data (Argo CD spec.source.helm.valuesObject)."""
    return _read_data(obj, path, "valuesObject")


# ---------------------------------------------------------------- writing the list


def _new_value(values: list[str], style: ListStyle) -> list[str] | str:
    return ",".join(values) if style == "string" else list(values)


def set_path_patch(path: str, values: list[str], style: ListStyle) -> dict:
    """A JSON merge-patch fragment setting only `path` (merge patch replaces lists whole)."""
    parts = _split_path(path)
    if parts is None:
        raise ValueError(f"invalid path {path!r}")
    patch: Any = _new_value(values, style)
    for key in reversed(parts):
        patch = {key: patch}
    return patch


class _CannotSplice(Exception):
    """The text edit would be unsafe; fall back to re-emitting the document."""


_PLAIN_OK = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_./-]*$")
_PLAIN_OK_WITH_COMMAS = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_./,-]*$")


def _loads_as(text: str) -> Any:
    try:
        return _load(text)
    except Exception:  # noqa: BLE001 - e.g. "2024-13-01" looks like a date and raises ValueError
        return None


# A plain scalar that starts with a letter can only resolve to a bool or null (ints, floats and
# timestamps start with a digit, a sign or a dot), so these need no YAML load to be sure.
_LETTER_START = re.compile(r"^[A-Za-z][A-Za-z0-9_./-]*$")
_BOOL_OR_NULL = frozenset(w for base in ("yes", "no", "true", "false", "on", "off", "null")
                          for w in (base, base.capitalize(), base.upper()))


def _scalar(text: str, flow: bool, quote: str | None = None) -> str:
    """Render one string so it re-parses as that exact string (plain when unambiguous)."""
    if quote is None and _LETTER_START.match(text) and text not in _BOOL_OR_NULL:
        return text  # the common case (namespace names): no YAML load per name
    plain = _PLAIN_OK if flow else _PLAIN_OK_WITH_COMMAS
    if quote is None and plain.match(text) and _loads_as(text) == text:
        return text  # e.g. "true", "123", "2024-01-01" fail the round trip and get quoted
    style = "'" if quote == "'" else '"'
    out = yaml.safe_dump(text, default_style=style, width=float("inf"), allow_unicode=True)
    return out.rstrip("\n").removesuffix("\n...").rstrip("\n")


def _flow(value: Any) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_scalar(k, True)}: {_flow(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_scalar(v, True) for v in value) + "]"
    return _scalar(value, True)


def _after_colon(value: Any, indent: int, nl: str) -> str:
    """Block-context text that follows `key:` for a new value, children at `indent`."""
    pad = " " * indent
    if isinstance(value, list):
        return nl + nl.join(f"{pad}- {_scalar(v, False)}" for v in value) if value else " []"
    if isinstance(value, dict):
        return "".join(f"{nl}{pad}{_scalar(k, False)}:{_after_colon(v, indent + 2, nl)}" for k, v in value.items())
    return " " + _scalar(value, False)


def _is_null(node: yaml.Node) -> bool:
    return isinstance(node, yaml.ScalarNode) and node.tag == "tag:yaml.org,2002:null"


def _content_end(node: yaml.Node, text: str) -> int:
    """End of a node's own text; block collections otherwise swallow trailing comments."""
    if isinstance(node, yaml.ScalarNode):
        end = node.end_mark.index
        while end > node.start_mark.index and text[end - 1] in " \t\r\n":
            end -= 1  # block scalars (| >) include their line breaks
        return end
    if isinstance(node, (yaml.SequenceNode, yaml.MappingNode)) and not node.flow_style and node.value:
        last = node.value[-1]
        if isinstance(last, tuple):
            return max(last[0].end_mark.index, _content_end(last[1], text))
        return _content_end(last, text)
    return node.end_mark.index


def _colon_after(key: yaml.Node, text: str) -> int:
    i = key.end_mark.index
    while i < len(text) and text[i] in " \t":
        i += 1
    if i >= len(text) or text[i] != ":":
        raise _CannotSplice("no ':' after the key")
    return i


def _find(mapping: yaml.MappingNode, key: str) -> tuple[yaml.Node, yaml.Node] | None:
    found = None
    for k, v in mapping.value:  # the last duplicate wins, as in safe_load
        if isinstance(k, yaml.ScalarNode) and k.tag == "tag:yaml.org,2002:str" and k.value == key:
            found = (k, v)
    if found and found[1].start_mark.index < found[0].end_mark.index:
        raise _CannotSplice("value is an alias")  # its span is the anchor's, elsewhere
    return found


def _splice(text: str, parts: list[str], new: list[str] | str) -> str:
    if text.startswith("\ufeff"):  # libyaml's marks do not count a leading BOM: splice after it
        return text[0] + _splice(text[1:], parts, new)
    nl = "\r\n" if "\r\n" in text else "\n"
    root = yaml.compose(text, Loader=_FastLoader)

    def nest(keys: list[str]) -> Any:
        out: Any = new
        for k in reversed(keys):
            out = {k: out}
        return out

    if root is None or _is_null(root):  # empty document (maybe only comments)
        key, rest = parts[0], nest(parts[1:])
        body = text if not text or text.endswith("\n") else text + nl
        return f"{body}{_scalar(key, False)}:{_after_colon(rest, 2, nl)}{nl}"
    if not isinstance(root, yaml.MappingNode):
        raise _CannotSplice("root is not a mapping")

    node: yaml.MappingNode = root
    flow = bool(root.flow_style)
    for i, key in enumerate(parts):
        hit = _find(node, key)
        if hit is None:  # insert `key: <rest>` as the mapping's last entry
            rest = nest(parts[i + 1:])
            if node.flow_style:
                close = node.end_mark.index - 1
                if text[close] != "}":
                    raise _CannotSplice("flow mapping without '}'")
                sep = ", " if node.value else ""
                return f"{text[:close]}{sep}{_scalar(key, True)}: {_flow(rest)}{text[close:]}"
            indent = node.value[0][0].start_mark.column
            pos = _content_end(node, text)
            if text[pos - 1] != "\n":
                eol = text.find("\n", pos)
                pos = len(text) if eol < 0 else (eol - 1 if text[eol - 1] == "\r" else eol)
                entry = f"{nl}{' ' * indent}{_scalar(key, False)}:{_after_colon(rest, indent + 2, nl)}"
            else:
                entry = f"{' ' * indent}{_scalar(key, False)}:{_after_colon(rest, indent + 2, nl)}{nl}"
            return text[:pos] + entry + text[pos:]
        k, v = hit
        last = i == len(parts) - 1
        if not last and isinstance(v, yaml.MappingNode):
            node, flow = v, flow or bool(v.flow_style)
            continue
        if not last and not _is_null(v):
            raise _CannotSplice("intermediate is not a mapping")
        value = nest(parts[i + 1:])
        # Keep the value's own layout where possible: a block list stays block with its
        # indentation, a flow list stays flow, a string keeps its quotes; comments after
        # `key:` survive.
        if last and isinstance(v, yaml.SequenceNode) and isinstance(value, list):
            if v.flow_style:
                return text[: v.start_mark.index] + _flow(value) + text[v.end_mark.index:]
            if value:
                pad = nl + " " * v.start_mark.column
                items = pad.join(f"- {_scalar(x, False)}" for x in value)
                return text[: v.start_mark.index] + items + text[_content_end(v, text):]
        if last and isinstance(v, yaml.ScalarNode) and not _is_null(v) and isinstance(value, str):
            quote = v.style if v.style in ("'", '"') else ('"' if v.style in ("|", ">") else None)
            return text[: v.start_mark.index] + _scalar(value, flow, quote) + text[_content_end(v, text):]
        # Anything else (null, type change, emptied block list): rewrite after the colon.
        colon = _colon_after(k, text)
        end = max(_content_end(v, text), colon + 1)
        repl = " " + _flow(value) if flow else _after_colon(value, k.start_mark.column + 2, nl)
        return text[: colon + 1] + repl + text[end:]
    raise _CannotSplice("empty path")  # unreachable: _split_path rejects it


def _unshare(data: Any) -> Any:
    # Aliased YAML nodes load as one shared object; editing a copy must not edit both places.
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


def _set_path(data: Any, parts: list[str], value: Any) -> dict:
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
    read_list reports an error (malformed YAML is never overwritten) or when no rewrite
    re-parses as "the input with only this path replaced".
    """
    return edit_list(doc_text, path, values, style)[0]


_UNPARSED: Any = object()


def edit_list(doc_text: str, path: str, values: list[str], style: ListStyle, data: Any = _UNPARSED) -> tuple[str, Any]:
    """write_list, given the parsed document when the caller has it (saves a parse), returning the
    new text and the new document's data (the text was checked to parse to exactly that)."""
    if data is _UNPARSED:
        data, err = _parse(doc_text)
    else:
        err = None
    found = ListRead(None, "missing", None, err) if err else _read_data(data, path, "the YAML document")
    if found.error:
        raise ValueError(found.error)
    parts = _split_path(path)
    assert parts is not None  # _read_data validated it
    if found.style == "missing" and not values:
        return doc_text, data
    new = _new_value(values, style)
    expected = _set_path(_unshare(data), parts, new)
    out = _checked_splice(doc_text, parts, new, expected)
    if out is not None:
        return out, expected
    # Re-emit (comments are lost). PyYAML's emitter does not round-trip every string (e.g. a
    # NEL before trailing spaces), so the dump is checked too; ASCII escapes are the last try.
    for allow_unicode in (True, False):
        dumped = yaml.safe_dump(expected, sort_keys=False, default_flow_style=False,
                                allow_unicode=allow_unicode, width=float("inf"))
        # Splice once more so the value is rendered as a splice renders it: the next write is a no-op.
        out = _checked_splice(dumped, parts, new, expected)
        if out is not None:
            return out, expected
        if _same(_load(dumped), expected):
            return dumped, expected
    raise ValueError(f"cannot rewrite {path} without changing other keys; edit it by hand")


def _checked_splice(text: str, parts: list[str], new: list[str] | str, expected: dict) -> str | None:
    try:
        out = _splice(text, parts, new)
        return out if _same(_load(out), expected) else None
    except Exception:  # noqa: BLE001 - any surprise in the splice means: use the safe re-emit
        return None
