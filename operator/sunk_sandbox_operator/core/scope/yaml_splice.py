"""Text splices of one value in a YAML document (pure): the scope list's edits keep the rest.

PyYAML's composer gives every node its character span; `splice` replaces only the span of the
value at a path, so comments, key order, quoting and layout elsewhere survive byte for byte.
Scalars are rendered so they re-parse as the same string (plain when unambiguous). The caller
(`scope_doc.edit`) checks every splice by re-parsing, except the `Span` shortcut, which is the
splice itself applied to a text it produced. Every parse here goes through `untrusted` (the text is
tenant-written: no aliases, bounded size and work).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import yaml

from .. import untrusted

# The parse of a tenant-written text: bounded (untrusted.Refused), libyaml when present.
load = untrusted.load


class CannotSplice(Exception):
    """The text edit would be unsafe; fall back to re-emitting the document."""


_PLAIN_OK = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_./-]*\Z")
_PLAIN_OK_WITH_COMMAS = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_./,-]*\Z")


def _loads_as(text: str) -> Any:
    try:
        return load(text)
    except Exception:  # noqa: BLE001 - e.g. "2024-13-01" looks like a date and raises ValueError
        return None


# A plain scalar that starts with a letter can only resolve to a bool or null (ints, floats and
# timestamps start with a digit, a sign or a dot), so these need no YAML load to be sure.
_LETTER_START = re.compile(r"^[A-Za-z][A-Za-z0-9_./-]*\Z")
_BOOL_OR_NULL = frozenset(w for base in ("yes", "no", "true", "false", "on", "off", "null")
                          for w in (base, base.capitalize(), base.upper()))


def plain_name(text: str) -> bool:
    """A name that renders as itself, plain, in any block list: no quoting, no YAML load."""
    return bool(_LETTER_START.match(text)) and text not in _BOOL_OR_NULL


def scalar(text: str, flow: bool, quote: str | None = None) -> str:
    """Render one string so it re-parses as that exact string (plain when unambiguous)."""
    if quote is None and plain_name(text):
        return text  # the common case (namespace names): no YAML load per name
    plain = _PLAIN_OK if flow else _PLAIN_OK_WITH_COMMAS
    if quote is None and plain.match(text) and _loads_as(text) == text:
        return text  # e.g. "true", "123", "2024-01-01" fail the round trip and get quoted
    style = "'" if quote == "'" else '"'
    out = yaml.safe_dump(text, default_style=style, width=float("inf"), allow_unicode=True)
    return out.rstrip("\n").removesuffix("\n...").rstrip("\n")


def flow_text(value: Any) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{scalar(k, True)}: {flow_text(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(scalar(v, True) for v in value) + "]"
    return scalar(value, True)


def _after_colon(value: Any, indent: int, nl: str) -> str:
    """Block-context text that follows `key:` for a new value, children at `indent`."""
    pad = " " * indent
    if isinstance(value, list):
        return nl + nl.join(f"{pad}- {scalar(v, False)}" for v in value) if value else " []"
    if isinstance(value, dict):
        return "".join(f"{nl}{pad}{scalar(k, False)}:{_after_colon(v, indent + 2, nl)}" for k, v in value.items())
    return " " + scalar(value, False)


_PLAIN_LINES = re.compile(r"[A-Za-z][A-Za-z0-9_./-]*(?:\n[A-Za-z][A-Za-z0-9_./-]*)*")


def all_plain(values: list[str]) -> bool:
    """`plain_name` for every value, in one regex pass over them (a burst checks 5,000 per write);
    the line count proves no value carried a line break of its own."""
    joined = "\n".join(values)
    return (bool(values) and _BOOL_OR_NULL.isdisjoint(values) and joined.count("\n") == len(values) - 1
            and _PLAIN_LINES.fullmatch(joined) is not None)


@dataclass(frozen=True)
class Span:
    """Where a list of plain names sits in a text the checked splice produced: a block list, items
    `- name` joined by `pad` (the line break and the list's indentation), from the first `-` to the
    end of the last name; or a flow list `[a, b]`, bracket to bracket. Rendering other plain names
    there is exactly what the splice does to that text, so it needs no compose and no check;
    `length` (the text's) guards against handing it a different text."""

    start: int
    end: int
    pad: str          # block: between items; flow: ", "
    length: int
    flow: bool = False

    def fits(self, text: str) -> bool:
        return len(text) == self.length and text.startswith("[" if self.flow else "- ", self.start)

    def render(self, values: list[str]) -> str:
        return "[" + ", ".join(values) + "]" if self.flow else self.pad.join(["- " + v for v in values])


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
        last: yaml.Node | tuple[yaml.Node, yaml.Node] = node.value[-1]
        if isinstance(last, tuple):
            return max(last[0].end_mark.index, _content_end(last[1], text))
        return _content_end(last, text)
    return node.end_mark.index


def _colon_after(key: yaml.Node, text: str) -> int:
    i = key.end_mark.index
    while i < len(text) and text[i] in " \t":
        i += 1
    if i >= len(text) or text[i] != ":":
        raise CannotSplice("no ':' after the key")
    return i


def _find(mapping: yaml.MappingNode, key: str) -> tuple[yaml.Node, yaml.Node] | None:
    found = None
    for k, v in mapping.value:  # the last duplicate wins, as in safe_load
        if isinstance(k, yaml.ScalarNode) and k.tag == "tag:yaml.org,2002:str" and k.value == key:
            found = (k, v)
    if found and found[1].start_mark.index < found[0].end_mark.index:
        raise CannotSplice("value is an alias")  # its span is the anchor's, elsewhere
    return found


def splice(text: str, parts: list[str], new: list[str] | str) -> tuple[str, Span | None]:
    """The spliced text, and the list's span when it is a block list of plain names."""
    if text.startswith("\ufeff"):  # libyaml's marks do not count a leading BOM: splice after it
        out, span = splice(text[1:], parts, new)
        span = span and Span(span.start + 1, span.end + 1, span.pad, span.length + 1, span.flow)
        return text[0] + out, span
    return _splice_text(text, parts, new)


def _splice_text(text: str, parts: list[str], new: list[str] | str) -> tuple[str, Span | None]:
    nl = "\r\n" if "\r\n" in text else "\n"
    root = untrusted.compose(text)  # its marks are character offsets (libyaml's too)

    def nest(keys: list[str]) -> Any:
        out: Any = new
        for k in reversed(keys):
            out = {k: out}
        return out

    if root is None or _is_null(root):  # empty document (maybe only comments)
        key, rest = parts[0], nest(parts[1:])
        body = text if not text or text.endswith("\n") else text + nl
        return f"{body}{scalar(key, False)}:{_after_colon(rest, 2, nl)}{nl}", None
    if not isinstance(root, yaml.MappingNode):
        raise CannotSplice("root is not a mapping")

    node: yaml.MappingNode = root
    flow = bool(root.flow_style)
    for i, key in enumerate(parts):
        hit = _find(node, key)
        if hit is None:  # insert `key: <rest>` as the mapping's last entry
            rest = nest(parts[i + 1:])
            if node.flow_style:
                close = node.end_mark.index - 1
                if text[close] != "}":
                    raise CannotSplice("flow mapping without '}'")
                sep = ", " if node.value else ""
                return f"{text[:close]}{sep}{scalar(key, True)}: {flow_text(rest)}{text[close:]}", None
            indent = node.value[0][0].start_mark.column
            pos = _content_end(node, text)
            if text[pos - 1] != "\n":
                eol = text.find("\n", pos)
                pos = len(text) if eol < 0 else (eol - 1 if text[eol - 1] == "\r" else eol)
                entry = f"{nl}{' ' * indent}{scalar(key, False)}:{_after_colon(rest, indent + 2, nl)}"
            else:
                entry = f"{' ' * indent}{scalar(key, False)}:{_after_colon(rest, indent + 2, nl)}{nl}"
            return text[:pos] + entry + text[pos:], None
        k, v = hit
        last = i == len(parts) - 1
        if not last and isinstance(v, yaml.MappingNode):
            node, flow = v, flow or bool(v.flow_style)
            continue
        if not last and not _is_null(v):
            raise CannotSplice("intermediate is not a mapping")
        value = nest(parts[i + 1:])
        # Keep the value's own layout where possible: a block list stays block with its
        # indentation, a flow list stays flow, a string keeps its quotes; comments after
        # `key:` survive.
        if last and isinstance(v, yaml.SequenceNode) and isinstance(value, list):
            plain = all_plain(value)
            start = v.start_mark.index
            if v.flow_style:
                items = flow_text(value)
                out = text[:start] + items + text[v.end_mark.index:]
                return out, Span(start, start + len(items), ", ", len(out), flow=True) if plain else None
            if value:
                pad = nl + " " * v.start_mark.column
                items = pad.join(f"- {scalar(x, False)}" for x in value)
                out = text[:start] + items + text[_content_end(v, text):]
                return out, Span(start, start + len(items), pad, len(out)) if plain else None
        if last and isinstance(v, yaml.ScalarNode) and not _is_null(v) and isinstance(value, str):
            quote = v.style if v.style in ("'", '"') else ('"' if v.style in ("|", ">") else None)
            return text[: v.start_mark.index] + scalar(value, flow, quote) + text[_content_end(v, text):], None
        # Anything else (null, type change, emptied block list): rewrite after the colon.
        colon = _colon_after(k, text)
        end = max(_content_end(v, text), colon + 1)
        repl = " " + flow_text(value) if flow else _after_colon(value, k.start_mark.column + 2, nl)
        return text[: colon + 1] + repl + text[end:], None
    raise CannotSplice("empty path")  # unreachable: _split_path rejects it
