"""Label-selector matching and rendering, pure.

Selectors arrive either as `model.LabelSelector` or as the raw camelCase dict the API server
stores (`{"matchLabels": {...}, "matchExpressions": [...]}`). Semantics follow
apimachinery's `LabelSelectorAsSelector`: an empty selector matches everything; a malformed
one matches nothing (better to watch too little and report than to act on every namespace).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Union

from ..api.spec import LabelSelector

SelectorLike = Union[LabelSelector, Mapping[str, Any]]

_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
# A label value the server-side selector grammar can carry verbatim (qualified-name charset).
_RENDERABLE = re.compile(r"^[A-Za-z0-9_./-]*$")


@dataclass(frozen=True, slots=True)
class Requirement:
    key: str
    operator: str
    values: tuple[str, ...]
    # The values as a set: a match costs one lookup per requirement, whatever the number of values.
    members: frozenset[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "members", frozenset(self.values))


@dataclass(frozen=True, slots=True)
class ParsedSelector:
    """A selector as a flat list of requirements (matchLabels become `In [v]`)."""

    requirements: tuple[Requirement, ...]
    error: str | None = None


def parse_selector(selector: SelectorLike) -> ParsedSelector:
    """Normalise a model or raw dict into requirements; malformed input sets `error`."""
    if isinstance(selector, LabelSelector):
        reqs = [Requirement(k, "In", (v,)) for k, v in selector.match_labels.items()]
        reqs += [Requirement(e.key, e.operator, tuple(e.values)) for e in selector.match_expressions]
        return _validated(reqs)
    if not isinstance(selector, Mapping):
        return ParsedSelector((), f"label selector must be a mapping, got {type(selector).__name__}")
    reqs = []
    labels = selector.get("matchLabels") or {}
    if not isinstance(labels, Mapping):
        return ParsedSelector((), "matchLabels must be a mapping of key to value")
    for k, v in labels.items():
        if not isinstance(k, str) or not isinstance(v, str):
            return ParsedSelector((), f"matchLabels entry {k!r}: {v!r} must map a string to a string")
        reqs.append(Requirement(k, "In", (v,)))
    exprs = selector.get("matchExpressions") or []
    if not isinstance(exprs, list):
        return ParsedSelector((), "matchExpressions must be a list")
    for i, e in enumerate(exprs):
        if not isinstance(e, Mapping):
            return ParsedSelector((), f"matchExpressions[{i}] must be a mapping")
        key, op, values = e.get("key"), e.get("operator"), e.get("values") or []
        if not isinstance(key, str) or not isinstance(op, str):
            return ParsedSelector((), f"matchExpressions[{i}] needs string key and operator")
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            return ParsedSelector((), f"matchExpressions[{i}].values must be a list of strings")
        reqs.append(Requirement(key, op, tuple(values)))
    return _validated(reqs)


# The string grammar's tokens: a label key (optional DNS prefix and /) and a label value.
_K, _V = r"[A-Za-z0-9][A-Za-z0-9_./-]*", r"[A-Za-z0-9_.-]*"
# The values of a set are split on commas, not matched by one regex: `{_V}(?:\s*,\s*{_V})*` has two ways
# to match the blanks between two commas, so refusing a list of empty values took exponential time.
_SET = re.compile(rf"({_K})\s+(in|notin)\s*\(([^()]*)\)")
_VALUE = re.compile(_V)
_EQUALS = re.compile(rf"({_K})\s*(==|=|!=)\s*({_V})")
_ABSENT = re.compile(rf"!\s*({_K})")
_KEY = re.compile(_K)


def _split_requirements(text: str) -> list[str]:
    """Commas outside parentheses separate requirements."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += (ch == "(") - (ch == ")")
        if ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


def parse_selector_string(text: str) -> ParsedSelector:
    """A selector in the `kubectl -l` / `labelSelector=` grammar (`a=b,c!=d,e in (x,y),f notin (z),g,!h`),
    as apimachinery's `labels.Parse` reads it; `error` says what is wrong. Empty: matches everything."""
    if not text.strip():
        return ParsedSelector(())
    reqs: list[Requirement] = []
    for part in _split_requirements(text):
        part = part.strip()
        m = _SET.fullmatch(part)
        values = tuple(v.strip() for v in m.group(3).split(",")) if m else ()
        if m and all(_VALUE.fullmatch(v) for v in values):
            reqs.append(Requirement(m.group(1), "In" if m.group(2) == "in" else "NotIn",
                                    () if values == ("",) else values))
        elif m := _EQUALS.fullmatch(part):
            reqs.append(Requirement(m.group(1), "NotIn" if m.group(2) == "!=" else "In", (m.group(3),)))
        elif m := _ABSENT.fullmatch(part):
            reqs.append(Requirement(m.group(1), "DoesNotExist", ()))
        elif _KEY.fullmatch(part):
            reqs.append(Requirement(part, "Exists", ()))
        else:
            return ParsedSelector((), f"{part!r} is not a requirement (key, !key, key=value, key!=value, "
                                  "key in (a,b), key notin (a,b))")
    return _validated(reqs)


def _validated(reqs: list[Requirement]) -> ParsedSelector:
    for r in reqs:
        if not r.key:
            return ParsedSelector((), "a selector requirement has an empty key")
        if r.operator not in _OPERATORS:
            return ParsedSelector((), f"{r.key}: unknown operator {r.operator!r} (use {', '.join(_OPERATORS)})")
        if r.operator in ("In", "NotIn") and not r.values:
            return ParsedSelector((), f"{r.key}: operator {r.operator} needs at least one value")
        if r.operator in ("Exists", "DoesNotExist") and r.values:
            return ParsedSelector((), f"{r.key}: operator {r.operator} takes no values")
    return ParsedSelector(tuple(reqs))


def selector_error(selector: SelectorLike) -> str | None:
    """Why a selector is malformed, or None."""
    return parse_selector(selector).error


def _holds(r: Requirement, labels: Mapping[str, str]) -> bool:
    present = r.key in labels
    if r.operator == "In":
        return present and labels[r.key] in r.members
    if r.operator == "NotIn":
        return not present or labels[r.key] not in r.members
    if r.operator == "Exists":
        return present
    return not present  # DoesNotExist


def matches(selector: SelectorLike | ParsedSelector, labels: Mapping[str, str] | None) -> bool:
    """True iff `labels` satisfy every requirement; malformed selectors match nothing."""
    parsed = selector if isinstance(selector, ParsedSelector) else parse_selector(selector)
    if parsed.error:
        return False
    labels = labels or {}
    return all(_holds(r, labels) for r in parsed.requirements)


def to_label_selector_string(selector: SelectorLike) -> str | None:
    """The server-side `labelSelector=` string, "" for an empty selector.

    None when the selector is malformed or holds a value the string grammar cannot express
    (the caller then lists unfiltered and filters with `matches`).
    """
    parsed = parse_selector(selector)
    if parsed.error:
        return None
    parts: list[str] = []
    for r in parsed.requirements:
        if not _RENDERABLE.match(r.key) or not all(_RENDERABLE.match(v) for v in r.values):
            return None
        if r.operator == "In" and len(r.values) == 1:
            parts.append(f"{r.key}={r.values[0]}")
            continue
        if r.operator in ("In", "NotIn") and "" in r.values:
            return None  # an empty member of a set has no unambiguous spelling
        if r.operator == "In":
            parts.append(f"{r.key} in ({','.join(sorted(set(r.values)))})")
        elif r.operator == "NotIn":
            parts.append(f"{r.key} notin ({','.join(sorted(set(r.values)))})")
        elif r.operator == "Exists":
            parts.append(r.key)
        else:
            parts.append(f"!{r.key}")
    return ",".join(parts)
