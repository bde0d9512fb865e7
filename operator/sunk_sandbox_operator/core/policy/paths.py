"""Policy document paths and constants (pure): the path grammar recorded in status.

`base.spec.schedulerName`, `base.metadata.annotations["sunk.coreweave.com/partition"]`, `$` (the
whole document). A segment made only of ``[A-Za-z0-9_-]`` is written after a dot; any other
segment (annotation keys hold dots and slashes) as a JSON string in brackets.
"""

from __future__ import annotations

import json
import re
from typing import Any, Sequence

Path = tuple[str, ...]

ROOT = "$"
# Value recorded for an object the operator created (compared with a live empty object).
CREATED = "{}"

SCHEDULER_NAME_PATH: Path = ("base", "spec", "schedulerName")
ANNOTATIONS_PATH: Path = ("base", "metadata", "annotations")
LABELS_PATH: Path = ("base", "metadata", "labels")
NODE_SELECTOR_PATH: Path = ("base", "spec", "nodeSelector")
GRACE_PATH: Path = ("base", "spec", "terminationGracePeriodSeconds")
DENIED_PREFIX_PATHS: tuple[Path, ...] = (
    ("constraints", "metadata", "denied_annotation_prefixes"),
    ("constraints", "metadata", "deniedAnnotationPrefixes"),
)
# Pod spec fields the runner API rejects in `base` (domain.md §5).
FORBIDDEN_BASE_SPEC = ("affinity", "securityContext", "runtimeClassName", "initContainers",
                       "terminationGracePeriodSeconds")

_PLAIN = re.compile(r"[A-Za-z0-9_-]+")
_MISSING: Any = object()


class PolicyError(ValueError):
    """A binding/policy combination that must not be written; the message names field and fix."""


# ---------------------------------------------------------------- paths


def format_path(segments: Sequence[str]) -> str:
    """('base','metadata','annotations','a.b/c') -> base.metadata.annotations["a.b/c"]."""
    if not segments:
        return ROOT
    out = []
    for i, seg in enumerate(segments):
        if _PLAIN.fullmatch(seg):
            out.append(seg if i == 0 else "." + seg)
        else:
            out.append("[" + json.dumps(seg, ensure_ascii=False) + "]")
    return "".join(out)


def parse_path(text: str) -> Path:
    """Inverse of format_path; raises PolicyError on a malformed path."""
    if text == ROOT:
        return ()
    decoder = json.JSONDecoder()
    segments: list[str] = []
    pos = 0
    while pos < len(text):
        ch = text[pos]
        if ch == "[":
            try:
                seg, end = decoder.raw_decode(text, pos + 1)
            except json.JSONDecodeError:
                seg, end = None, pos
            if not isinstance(seg, str) or end >= len(text) or text[end] != "]":
                raise PolicyError(f"malformed policy path {text!r} at {pos}: expected [\"key\"]")
            segments.append(seg)
            pos = end + 1
            continue
        if segments:
            if ch != ".":
                raise PolicyError(f"malformed policy path {text!r} at {pos}: expected . or [")
            pos += 1
        m = _PLAIN.match(text, pos)
        if not m:
            raise PolicyError(f"malformed policy path {text!r} at {pos}: expected a name")
        segments.append(m.group())
        pos = m.end()
    if not segments:
        raise PolicyError("malformed policy path '': use $ for the whole document")
    return tuple(segments)


def annotation_path(key: str) -> str:
    return format_path(ANNOTATIONS_PATH + (key,))


# ---------------------------------------------------------------- small helpers


def _json_type(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, (int, float)):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    if isinstance(v, dict):
        return "object"
    return type(v).__name__


def _show(v: Any) -> str:
    return json.dumps(v, ensure_ascii=False)


def _get(doc: Any, path: Path) -> Any:
    """Value at path, or _MISSING (also when a container on the way is not an object)."""
    node = doc
    for seg in path:
        if not isinstance(node, dict) or seg not in node:
            return _MISSING
        node = node[seg]
    return node


def strict_equal(a: Any, b: Any) -> bool:
    """JSON equality that tells true from 1 and 1 from 1.0 (Python's == does not)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(strict_equal(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(strict_equal(x, y) for x, y in zip(a, b))
    return bool(a == b)
