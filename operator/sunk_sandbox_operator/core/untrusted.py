"""Tenant-written YAML, parsed at a cost its size warrants (pure): the one door for every target document.

The scope target (`scheduler.conf`, an Argo CD Application's `helm.values`, the Flux values ConfigMap) and
the scheduler.conf that discovery reads are written by tenants. YAML lets a few hundred bytes stand for
gigabytes (aliases of aliases, the "billion laughs" that took down the kube-apiserver in CVE-2019-11253),
so before libyaml builds anything, `check` raises `Refused` (saying what, where, and the fix) for:

- more than MAX_BYTES of UTF-8: a ConfigMap's own limit (for all its keys together);
- any alias (`*x`). Refused rather than expanded within a budget: every later step (the unshared copy an
  edit changes, the comparison that checks a splice, the re-emit) walks the expanded tree, and an alias's
  text is its anchor's, elsewhere, so no splice can edit through one anyway. An anchor that no alias uses
  expands nothing and is accepted;
- more than MAX_NODES nodes (scalars, sequences, mappings: what one parse's memory and CPU grow with;
  the bound is 5x the scale benchmark's 10,000-name list; docs/scale.md: one edit's cost at it);
- nesting deeper than MAX_DEPTH: the code that copies and compares documents recurses (libyaml's own limit,
  1,000, is past Python's recursion limit);
- and, while constructing (`load`), an integer of more than MAX_INT_CHARS characters: a YAML 1.1 base-60
  integer (`1:2:3:…`) costs quadratic time, and Python's own 4,300-digit limit covers only base 10.

The common path stays cheap: a text without `*` holds no alias, and counting the characters that can
open a node, plus one regex for the deepest indentation, bounds its nodes and depth from above (a small
fraction of the parse: docs/scale.md). Only a text those bounds cannot clear is scanned
exactly: libyaml's parser, event by event (constant memory), stopping at the first thing refused.
"""

from __future__ import annotations

import functools
import re
from typing import Any

import yaml

# libyaml when present (much faster than pure Python). Its node marks are character offsets, as yaml_splice needs.
FAST_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

MAX_BYTES = 1 << 20
MAX_NODES = 50_000
MAX_DEPTH = 100
MAX_INT_CHARS = 4_300


class Refused(ValueError):
    """A tenant-written document the operator will not parse; the message says what, where and the fix."""


def _refused(problem: str) -> Refused:
    return Refused(f"refused as untrusted input: {problem}")


def _at(mark: Any) -> str:
    return f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else "an unknown place"


# ---------------------------------------------------------------- bounds from above (no parse)


def node_bound(text: str) -> int:
    """At least the node count of the text's first document. Every node but the root is opened by an
    indicator: `-` (a block entry), `[` (a flow sequence's first entry), and, opening a key and its value,
    `?`, `:`, `{` and `,` (a flow mapping's entry); the same characters inside scalars only over-count."""
    return (1 + text.count("-") + text.count("[")
            + 2 * (text.count("?") + text.count(":") + text.count("{") + text.count(",")))


# A block collection nested in another starts to its right, or (a sequence under a mapping key) in the
# same column: two levels at most per column. Its column is at most the run of indentation and block
# indicators that starts its line (`- - a`, `- ? a`; after a tag or an anchor no further entry may follow
# on that line). Lines break at \n, \r, NEL, LS and PS; a BOM may start the stream.
_PREFIX = 32


@functools.lru_cache(maxsize=None)
def _deep_line(prefix: int) -> tuple[re.Pattern[str], re.Pattern[str], re.Pattern[str]]:
    run = "[ \t?-]{%d}" % prefix
    return re.compile("\ufeff?" + run), re.compile("\n" + run), re.compile("[\n\r\x85\u2028\u2029]" + run)


def _has_deep_line(text: str, prefix: int) -> bool:
    first, after_lf, after_any = _deep_line(prefix)
    odd = "\r" in text or "\x85" in text or "\u2028" in text or "\u2029" in text  # the class is slower
    return first.match(text) is not None or (after_any if odd else after_lf).search(text) is not None


def depth_bound(text: str, prefix: int = _PREFIX) -> int | None:
    """At least the text's nesting depth when no line starts with `prefix` characters of indentation and
    block indicators (else None: no bound that cheap): the block levels above, plus one `[` or `{` for
    every flow level."""
    if _has_deep_line(text, prefix):
        return None
    return 2 * (prefix + 1) + text.count("[") + text.count("{")


# ---------------------------------------------------------------- the check


_OPEN = (yaml.SequenceStartEvent, yaml.MappingStartEvent)
_CLOSE = (yaml.SequenceEndEvent, yaml.MappingEndEvent)


def _scan(text: str) -> None:
    """The exact check, over libyaml's events for the first document (a parse would stop after it)."""
    nodes = depth = 0
    for event in yaml.parse(text, Loader=FAST_LOADER):
        if isinstance(event, yaml.AliasEvent):
            raise _refused(f"it holds a YAML alias (`*{event.anchor}` at {_at(event.start_mark)}), and the operator "
                           "never expands aliases in a tenant-written document: write it without anchors and "
                           "aliases (repeat the values where they are used)")
        if isinstance(event, _CLOSE):
            depth -= 1
            continue
        if isinstance(event, yaml.DocumentEndEvent):
            return
        if not isinstance(event, (yaml.ScalarEvent, *_OPEN)):
            continue
        nodes += 1
        if nodes > MAX_NODES:
            raise _refused(f"it holds more than {MAX_NODES:,} YAML nodes (keys, values and lists; the next one is "
                           f"at {_at(event.start_mark)}): shorten it")
        if isinstance(event, _OPEN):
            depth += 1
            if depth > MAX_DEPTH:
                raise _refused(f"it nests more than {MAX_DEPTH} levels deep (at {_at(event.start_mark)}): flatten it")


def check(text: str) -> None:
    """Raise Refused unless one parse of `text` stays within the bounds (module docstring). Text that is
    not valid YAML passes, or raises the parser's own error at the same place the parse would."""
    size = len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_BYTES:
        raise _refused(f"it is {size:,} bytes, more than the {MAX_BYTES:,} the operator parses: shorten it")
    depth = depth_bound(text)
    if "*" in text or node_bound(text) > MAX_NODES or depth is None or depth > MAX_DEPTH:
        _scan(text)


# ---------------------------------------------------------------- parsing through it


def _bounded_int(loader: Any, node: yaml.ScalarNode) -> Any:
    if len(node.value) > MAX_INT_CHARS:
        raise _refused(f"an integer of {len(node.value):,} characters at {_at(node.start_mark)} (at most "
                       f"{MAX_INT_CHARS:,}): shorten it, or quote it to make it a string")
    return yaml.constructor.SafeConstructor.construct_yaml_int(loader, node)


class _Loader(FAST_LOADER):  # type: ignore[misc, valid-type]  # a base chosen at import: libyaml when present
    """The safe loader (libyaml when present) with integers bounded."""


_Loader.add_constructor("tag:yaml.org,2002:int", _bounded_int)


def load(text: str) -> Any:
    """yaml.safe_load of a tenant-written document, once `check` passed it (Refused, or yaml's errors)."""
    check(text)
    return yaml.load(text, Loader=_Loader)  # noqa: S506 - a safe loader


def compose(text: str) -> yaml.Node | None:
    """yaml.compose (the node tree with its marks, for splices), once `check` passed the text."""
    check(text)
    return yaml.compose(text, Loader=FAST_LOADER)
