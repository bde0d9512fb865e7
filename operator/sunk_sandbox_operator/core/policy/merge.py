"""Pure merge / restore / diff of a runner policy document.

The runner API replaces the whole policy on update, so the operator reads it, changes only the
paths it owns and writes the rest back untouched. Everything here is pure: no I/O, no clock.

Paths are strings recorded in status (`status.policy.owned[].path`):

    base.spec.schedulerName
    base.metadata.annotations["sunk.coreweave.com/partition"]
    $                                   (the whole document)

A segment made only of ``[A-Za-z0-9_-]`` is written after a dot; any other segment (annotation
keys hold dots and slashes) as a JSON string in brackets.

Owned entries come in two kinds, told apart by the value found at their path:

* a field we set: ``value`` is the string we wrote, ``previous`` what was there before
  (``None``: the key did not exist);
* an object we created to hold our fields (``value`` is ``{}``, ``previous`` ``None``), so that
  restore can remove it again once it is empty. ``$`` with ``{}`` means the policy was ``null``.

Restore only puts back a path whose current value is still ours: a later change by another
admin wins. A JSON ``null`` on one of our paths counts as absent (proto3 JSON semantics).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from ...api.spec import BindingSpec
from ...api.status import OwnedPath
from .checks import policy_warnings, validate_policy  # noqa: F401  (part of this module's API)
from .paths import (
    ANNOTATIONS_PATH, CREATED, FORBIDDEN_BASE_SPEC, ROOT, SCHEDULER_NAME_PATH, Path, PolicyError, _get,
    _json_type, _show, annotation_path, format_path, parse_path, strict_equal,
)


@dataclass(frozen=True)
class Desired:
    """The fields the operator wants in the policy: formatted path -> string value."""

    values: dict[str, str]


@dataclass(frozen=True)
class MergeResult:
    policy: dict[str, Any] | None  # None only when current was None and nothing is desired
    owned: list[OwnedPath]
    changed: bool  # False: the caller writes nothing
    warnings: list[str] = field(default_factory=list)


# ---------------------------------------------------------------- desired


def desired_fields(spec: BindingSpec, scheduler_name: str) -> Desired:
    """The scheduler name plus the annotations the binding pins."""
    if not scheduler_name or scheduler_name != scheduler_name.strip() or any(c.isspace() for c in scheduler_name):
        raise PolicyError(
            f"scheduler name {scheduler_name!r} is empty or holds whitespace: set spec.scheduler.name "
            "or let discovery find the SUNK scheduler"
        )
    pinned = spec.pinned_annotations()
    # The model rejects this too; kept because a spec can be built without validation.
    clash = sorted(k for k in pinned if k in spec.client_annotations)
    if clash:
        raise PolicyError(
            f"{clash[0]} is both pinned (spec.partition/spec.slurm) and in spec.clientAnnotations: "
            "remove one of the two"
        )
    values = {format_path(SCHEDULER_NAME_PATH): scheduler_name}
    for key, value in pinned.items():
        values[annotation_path(key)] = value
    return Desired(values)


def _check_desired(paths: dict[Path, str], client_annotations: Sequence[str]) -> None:
    for path, value in paths.items():
        shown = format_path(path)
        if not path:
            raise PolicyError("desired path $: the operator never replaces the whole policy")
        if not isinstance(value, str):
            raise PolicyError(f"desired {shown}: value must be a string, got {_json_type(value)}")
        if path[:2] == ("base", "spec") and len(path) > 2 and path[2] in FORBIDDEN_BASE_SPEC:
            raise PolicyError(f"desired {shown}: the runner API rejects base.spec.{path[2]}; never set it")
        if path[:3] == ANNOTATIONS_PATH and len(path) == 4 and path[3] in client_annotations:
            raise PolicyError(
                f"{path[3]} is both pinned and in spec.clientAnnotations: remove one of the two"
            )
        for other in paths:
            if other != path and other[: len(path)] == path:
                raise PolicyError(f"desired {shown} and {format_path(other)} overlap")


# ---------------------------------------------------------------- merge / restore


def _ours(current: Any, entry: OwnedPath) -> bool:
    """Does the live value still hold what we wrote (a string, or an object we created)?"""
    if isinstance(current, str):
        return current == entry.value
    return entry.value == CREATED and isinstance(current, dict) and not current


def _release(doc: dict[str, Any] | None, entries: list[tuple[Path, OwnedPath]]) -> dict[str, Any] | None:
    """Put back `previous` where the value is still ours, deepest paths first; mutates doc."""
    for path, entry in sorted(entries, key=lambda pe: len(pe[0]), reverse=True):
        if not path:
            if doc is not None and _ours(doc, entry):
                doc = None  # the policy was null before we created it
            continue
        parent = _get(doc, path[:-1])
        if not isinstance(parent, dict) or path[-1] not in parent or not _ours(parent[path[-1]], entry):
            continue  # gone or changed by someone else: theirs now
        if entry.previous is None:
            del parent[path[-1]]
        else:
            parent[path[-1]] = entry.previous
    return doc


def _index(owned: Iterable[OwnedPath]) -> dict[Path, OwnedPath]:
    out: dict[Path, OwnedPath] = {}
    for entry in owned:
        out.setdefault(parse_path(entry.path), entry)  # first record wins on duplicates
    return out


def merge(
    current: dict[str, Any] | None,
    desired: Desired,
    owned: Sequence[OwnedPath] = (),
    client_annotations: Sequence[str] = (),
) -> MergeResult:
    """Set every desired path in a copy of current, touching nothing else."""
    validate_policy(current)
    paths = {parse_path(p): v for p, v in desired.values.items()}
    _check_desired(paths, list(client_annotations))
    entries = _index(owned)
    containers = {path[:i] for path in paths for i in range(len(path))}

    doc = copy.deepcopy(current)
    # Owned paths no longer desired go back to what they were (if still ours).
    stale = [(p, e) for p, e in entries.items() if p not in paths and p not in containers]
    doc = _release(doc, stale)
    for p, _ in stale:
        del entries[p]

    if paths and doc is None:
        doc = {}
        entries.setdefault((), OwnedPath(path=ROOT, value=CREATED))
    for path, value in paths.items():
        assert doc is not None  # made above whenever there are paths
        node = doc
        for i, seg in enumerate(path[:-1]):
            child = node.get(seg)
            if child is None:  # absent or null: ours to create (and remove again)
                child = node[seg] = {}
                entries.setdefault(path[: i + 1], OwnedPath(path=format_path(path[: i + 1]), value=CREATED))
            elif not isinstance(child, dict):
                raise PolicyError(
                    f"policy {format_path(path[: i + 1])}: is a {_json_type(child)}, not an object, "
                    f"so {format_path(path)} cannot be set: fix the policy"
                )
            node = child
        old = node.get(path[-1])
        if old is not None and not isinstance(old, str):
            raise PolicyError(
                f"policy {format_path(path)}: holds a {_json_type(old)}, expected a string: fix the policy"
            )
        prior = entries.get(path)
        # Keep the original previous: our own earlier value is never "what was there before".
        previous = prior.previous if prior is not None else old
        entries[path] = OwnedPath(path=format_path(path), value=value, previous=previous)
        node[path[-1]] = value

    # Deterministic order: for each desired path, the objects we created on its way, then it.
    ordered: list[OwnedPath] = []
    seen: set[Path] = set()
    for path in paths:
        for i in range(len(path) + 1):
            key = path[:i]
            if key in entries and key not in seen:
                seen.add(key)
                ordered.append(entries[key])

    changed = not strict_equal(doc, current)
    return MergeResult(
        policy=doc, owned=ordered, changed=changed,
        warnings=policy_warnings(doc, client_annotations),
    )


def restore(current: dict[str, Any] | None, owned: Sequence[OwnedPath]) -> dict[str, Any] | None:
    """Remove our fields where they still hold our value; later admin changes win."""
    if current is not None and not isinstance(current, dict):
        raise PolicyError(f"policy: must be a JSON object or null, got {_json_type(current)}")
    entries = list(_index(owned).items())
    return _release(copy.deepcopy(current), entries)


def drifted(current: dict[str, Any] | None, desired: Desired, owned: Iterable[OwnedPath]) -> bool:
    """Did someone change a field we wrote and still want (not: did the binding's spec change)?"""
    for entry in owned:
        want = desired.values.get(entry.path)
        if want is None or want != entry.value:
            continue  # no longer desired, or desired differently now: a spec change, not drift
        try:
            path = parse_path(entry.path)
        except PolicyError:
            continue
        if _get(current, path) != want:
            return True
    return False


# ---------------------------------------------------------------- diff


def _leaves(sign: str, path: Path, v: Any, out: list[str]) -> None:
    # A whole added/removed object is listed leaf by leaf: one line per field is easier to review.
    if isinstance(v, dict) and v:
        for k, child in v.items():
            _leaves(sign, path + (k,), child, out)
    elif sign == "+":
        out.append(f"+ {format_path(path)} = {_show(v)}")
    else:
        out.append(f"- {format_path(path)}")


def _diff(path: Path, a: Any, b: Any, out: list[str]) -> None:
    if isinstance(a, dict) and isinstance(b, dict):
        for k, v in a.items():
            if k in b:
                _diff(path + (k,), v, b[k], out)
            else:
                _leaves("-", path + (k,), v, out)
        for k, v in b.items():
            if k not in a:
                _leaves("+", path + (k,), v, out)
    elif not strict_equal(a, b):
        out.append(f"{format_path(path)}: {_show(a)} -> {_show(b)}")


def diff(before: dict[str, Any] | None, after: dict[str, Any] | None) -> list[str]:
    """Readable changes: 'p: "a" -> "b"', '+ p = v', '- p'; null <-> object shown at $."""
    out: list[str] = []
    if before is None and after is None:
        return out
    if before is None:
        out.append(f"{ROOT}: null -> {{}}")
        _diff((), {}, after, out)
    elif after is None:
        _diff((), before, {}, out)
        out.append(f"{ROOT}: {{}} -> null")
    else:
        _diff((), before, after, out)
    return out


__all__ = [
    "CREATED", "Desired", "MergeResult", "PolicyError", "ROOT",
    "annotation_path", "desired_fields", "diff", "drifted", "format_path", "merge", "parse_path",
    "policy_warnings", "restore", "strict_equal", "validate_policy",
]
