"""Checks of a runner policy document (pure): is it well-formed, and what should an admin know.

`validate_policy` refuses a malformed document (the operator then leaves it alone);
`policy_warnings` reports what conflicts with SUNK placement or blocks a client annotation,
without changing anything.
"""

from __future__ import annotations

from typing import Any, Iterable

from .paths import (
    ANNOTATIONS_PATH, DENIED_PREFIX_PATHS, FORBIDDEN_BASE_SPEC, LABELS_PATH, NODE_SELECTOR_PATH,
    SCHEDULER_NAME_PATH, _MISSING, Path, PolicyError, _get, _json_type, _show, annotation_path, format_path,
)


# ---------------------------------------------------------------- validation


def _expect(policy: dict[str, Any], path: Path, kind: str) -> Any:
    """Check the value at path is absent, null or of `kind` (object/string/array)."""
    value = _get(policy, path)
    if value is _MISSING or value is None:
        return None
    if _json_type(value) != kind:
        article = "an" if kind[0] in "aeiou" else "a"
        raise PolicyError(
            f"policy {format_path(path)}: must be {article} {kind}, got {_json_type(value)} {_show(value)[:60]}"
        )
    return value


def _expect_string_map(policy: dict[str, Any], path: Path) -> None:
    value = _expect(policy, path, "object")
    for k, v in (value or {}).items():
        if not isinstance(v, str):
            raise PolicyError(
                f"policy {format_path(path + (k,))}: must be a string, got {_json_type(v)} {_show(v)[:60]}"
            )


def validate_policy(policy: Any) -> None:
    """Raise PolicyError, naming the path, for a document the merge cannot safely edit."""
    if policy is None:
        return
    if not isinstance(policy, dict):
        raise PolicyError(f"policy: must be a JSON object or null, got {_json_type(policy)}")
    path: Path
    for path in (("base",), ("base", "metadata"), ("base", "spec"), ("constraints",),
                 ("constraints", "metadata")):
        _expect(policy, path, "object")
    _expect_string_map(policy, ANNOTATIONS_PATH)
    _expect_string_map(policy, LABELS_PATH)
    _expect_string_map(policy, NODE_SELECTOR_PATH)
    _expect(policy, SCHEDULER_NAME_PATH, "string")
    for path in DENIED_PREFIX_PATHS:
        for i, entry in enumerate(_expect(policy, path, "array") or []):
            if not isinstance(entry, str):
                raise PolicyError(
                    f"policy {format_path(path)}[{i}]: must be a string, got {_json_type(entry)}"
                )


# ---------------------------------------------------------------- warnings


def _denied_prefixes(policy: dict[str, Any]) -> list[tuple[Path, str]]:
    out: list[tuple[Path, str]] = []
    for path in DENIED_PREFIX_PATHS:
        value = _get(policy, path)
        if isinstance(value, list):
            out.extend((path, p) for p in value if isinstance(p, str))
    return out


def _instance_type_fields(node: Any, path: Path) -> Iterable[Path]:
    """Keys naming instance types (instanceTypes, instance_types, ...) anywhere below node."""
    if isinstance(node, dict):
        for k, v in node.items():
            if "instancetype" in k.lower().replace("_", "").replace("-", "") and v not in (None, [], {}, ""):
                yield path + (k,)
            else:
                yield from _instance_type_fields(v, path + (k,))
    elif isinstance(node, list):
        for item in node:
            yield from _instance_type_fields(item, path)


def policy_warnings(policy: dict[str, Any] | None, client_annotations: Iterable[str] = ()) -> list[str]:
    """Findings worth reporting; never a reason to delete anything from the policy."""
    if not isinstance(policy, dict):
        return []
    clients = list(client_annotations)
    out: list[str] = []
    spec = _get(policy, ("base", "spec"))
    spec = spec if isinstance(spec, dict) else {}

    node_selector = spec.get("nodeSelector")
    if node_selector not in (None, {}):
        out.append(
            f"{format_path(NODE_SELECTOR_PATH)} {_show(node_selector)} conflicts with Slurm placement, "
            "causes NodeAffinity errors: target nodes with partition/constraint annotations instead "
            "(spec.partition, spec.slurm.constraint) and remove it from the policy"
        )
    if spec.get("nodeName") not in (None, ""):
        out.append(
            "base.spec.nodeName bypasses the SUNK scheduler entirely: remove it from the policy"
        )
    for name in FORBIDDEN_BASE_SPEC:
        if name in spec:
            extra = (" (sandbox grace periods must stay below the Slurm kill-wait minus 5 s; set them per sandbox)"
                     if name == "terminationGracePeriodSeconds" else "")
            out.append(
                f"base.spec.{name} is present but the runner API rejects it in base{extra}: remove it, "
                "or policy updates will be rejected"
            )
    for kind in ("containers",):  # initContainers are rejected as a whole above
        containers = spec.get(kind)
        for i, c in enumerate(containers if isinstance(containers, list) else []):
            if isinstance(c, dict) and "securityContext" in c:
                out.append(
                    f"base.spec.{kind}[{i}].securityContext is present but the runner API rejects "
                    "container securityContext in base: remove it"
                )
    # nodeSelector is reported above; labels and annotations do not restrict placement.
    spec_rest = {k: v for k, v in spec.items() if k != "nodeSelector"}
    places = [(("constraints",), _get(policy, ("constraints",))), (("base", "spec"), spec_rest)]
    for path in (p for root, node in places for p in _instance_type_fields(node, root)):
        out.append(
            f"{format_path(path)} limits instance types, which can conflict with Slurm placement "
            "(NodeAffinity errors): target nodes with partition/constraint annotations instead"
        )

    annotations = _get(policy, ANNOTATIONS_PATH)
    annotations = annotations if isinstance(annotations, dict) else {}
    for key in clients:
        if key in annotations:
            out.append(
                f"{annotation_path(key)} is set by the policy, but spec.clientAnnotations leaves "
                f"{key} to clients: policy annotations win, so clients cannot choose it; remove it "
                "from the policy"
            )
    for path, prefix in _denied_prefixes(policy):
        for key in clients:
            if key.startswith(prefix):
                out.append(
                    f"{format_path(path)} entry {_show(prefix)} denies client annotation {_show(key)} "
                    "(spec.clientAnnotations): clients cannot set it; remove or narrow that prefix"
                )
    return out
