"""The runner API's wire, as the emulator reads it: field names, the requests' shapes, the forbidden
`base` fields, and the error a request earns (the state those requests act on: `emulator_state.py`).

Field names as Connect's protojson treats them: a request field is read under its JSON name
(lowerCamelCase: `runnerId`, `managedRunner`, `updateMask`, `deniedAnnotationPrefixes`) or its
original proto name (`runner_id`, `managed_runner`, `update_mask`, `denied_annotation_prefixes`),
the same field under both names is an error, and every answer uses the JSON names. The keys of
map fields (annotations, labels, node selectors, resource lists) are data and keep their
spelling.
"""

from __future__ import annotations

import re
from typing import Any, Mapping


SERVICE = "coreweave.sandbox.v1.RunnerManagementService"

# Fields the policy may not set in `base`, as paths under `base` (both pod-spec spellings).
_FORBIDDEN_IN_BASE: tuple[tuple[str, ...], ...] = tuple(
    path
    for name in ("affinity", "securityContext", "runtimeClassName", "initContainers", "terminationGracePeriodSeconds")
    for path in (("spec", name), (name,))
)
_SNAKE = {
    "securityContext": "security_context",
    "runtimeClassName": "runtime_class_name",
    "initContainers": "init_containers",
    "terminationGracePeriodSeconds": "termination_grace_period_seconds",
}


# Map-valued fields (by JSON name): their keys are data, never field names, so never renamed.
MAP_FIELDS = frozenset({"annotations", "labels", "nodeSelector", "matchLabels", "limits", "requests", "overhead"})
_PROTO_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class ApiError(Exception):
    """An error answer of the emulated service."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


def json_name(name: str) -> str:
    """protoc's JSON name of a field: each underscore dropped and the letter after it upper-cased
    (`denied_annotation_prefixes` -> `deniedAnnotationPrefixes`); a JSON name is its own."""
    if "_" not in name or not _PROTO_NAME.fullmatch(name):
        return name
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def json_names(value: Any, *, map_keys: bool = False) -> Any:
    """`value` with every field under its JSON name, recursively; the keys of a map field (and of
    `value` itself when `map_keys`) kept as they are. A field given under two names raises
    invalid_argument, as protojson refuses a duplicate field."""
    if isinstance(value, list):
        return [json_names(item) for item in value]
    if not isinstance(value, Mapping):
        return value
    out: dict[str, Any] = {}
    for key, item in value.items():
        name = key if map_keys else json_name(key)
        if name in out:
            raise ApiError("invalid_argument", f"field {name!r} is given twice (as {name!r} and as {key!r})")
        out[name] = json_names(item, map_keys=not map_keys and name in MAP_FIELDS)
    return out


def _spellings(name: str) -> tuple[str, ...]:
    return (name, _SNAKE[name]) if name in _SNAKE else (name,)


def forbidden_fields(policy: Any) -> list[str]:
    """Paths of forbidden fields set in `policy.base`, e.g. `base.spec.securityContext`."""
    if not isinstance(policy, Mapping):
        return []
    base = policy.get("base")
    if not isinstance(base, Mapping):
        return []
    found: list[str] = []
    for path in _FORBIDDEN_IN_BASE:
        parent: Any = base
        for part in path[:-1]:
            parent = parent.get(part) if isinstance(parent, Mapping) else None
        if not isinstance(parent, Mapping):
            continue
        for spelling in _spellings(path[-1]):
            if spelling in parent:
                found.append(".".join(("base", *path[:-1], spelling)))
    spec = base.get("spec")
    containers = spec.get("containers") if isinstance(spec, Mapping) else None
    if isinstance(containers, list):
        for i, container in enumerate(containers):
            if isinstance(container, Mapping):
                for spelling in _spellings("securityContext"):
                    if spelling in container:
                        found.append(f"base.spec.containers[{i}].{spelling}")
    return found


def read_request(body: Any) -> dict[str, Any]:
    """A request body under the JSON names (proto names accepted), or invalid_argument."""
    if not isinstance(body, Mapping):
        raise ApiError("invalid_argument", "request body must be a JSON object")
    return json_names(body)


def validate_get(body: Any) -> str:
    """Check a GetManagedRunner request; return the runner id."""
    runner_id = read_request(body).get("runnerId")
    if not isinstance(runner_id, str) or not runner_id:
        raise ApiError("invalid_argument", "runnerId is required")
    return runner_id


def validate_update(body: Any) -> tuple[str, Any, dict | None, str]:
    """Check an UpdateManagedRunner request; return (runner_id, identity, policy, etag), the policy
    and identity under their JSON names."""
    body = read_request(body)
    runner_id = body.get("runnerId")
    if not isinstance(runner_id, str) or not runner_id:
        raise ApiError("invalid_argument", "runnerId is required")
    mask = body.get("updateMask")
    # Connect JSON renders a FieldMask as a comma-separated string; accept {"paths": [...]} too.
    paths = mask.get("paths") if isinstance(mask, Mapping) else mask.split(",") if isinstance(mask, str) else None
    if not paths or [p.strip() for p in paths] != ["policy"]:
        raise ApiError("invalid_argument", f"updateMask must be \"policy\", got {mask!r}")
    managed = body.get("managedRunner")
    if not isinstance(managed, Mapping):
        raise ApiError("invalid_argument", "managedRunner is required")
    etag = managed.get("etag")
    if not isinstance(etag, str) or not etag:
        raise ApiError("invalid_argument", "etag is required")
    policy = managed.get("policy")
    if policy is not None and not isinstance(policy, dict):
        raise ApiError("invalid_argument", "policy must be an object or null")
    if isinstance(policy, dict) and "base" in policy and not isinstance(policy["base"], Mapping):
        raise ApiError("invalid_argument", "policy.base must be an object")
    bad = forbidden_fields(policy)
    if bad:
        raise ApiError("invalid_argument", f"policy.{bad[0]} is not allowed in a runner policy")
    return runner_id, managed.get("identity"), policy, etag
