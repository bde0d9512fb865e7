"""Render the CustomResourceDefinition from the pydantic models (model.py is the source of truth).

`python -m sunk_sandbox_operator crd > crds/sunksandboxbindings.yaml` regenerates it; a unit
test fails when the committed CRD and this rendering differ.
"""

from __future__ import annotations

import types
import typing
from typing import Any, Literal, Sequence, Union

import yaml
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from . import keys as m
from .spec import BindingSpec
from .status import BindingStatus

_SCALARS = {str: "string", int: "integer", bool: "boolean", float: "number"}


def _unwrap_optional(tp: Any) -> Any:
    if typing.get_origin(tp) in (Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return tp


def _constraints(metadata: Sequence[Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for c in metadata:
        for attr, key in (("pattern", "pattern"), ("min_length", "minLength"), ("max_length", "maxLength"),
                          ("ge", "minimum"), ("le", "maximum")):
            value = getattr(c, attr, None)
            if value is not None:
                out[key] = value
    return out


def type_schema(tp: Any, metadata: Sequence[Any] = ()) -> dict[str, Any]:
    tp = _unwrap_optional(tp)
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        base, *extra = typing.get_args(tp)
        return type_schema(base, list(metadata) + extra)
    if origin is Literal:
        values = list(typing.get_args(tp))
        return {"type": "string", "enum": values}
    if origin is list:
        (item,) = typing.get_args(tp)
        bounds = {{"minLength": "minItems", "maxLength": "maxItems"}.get(k, k): v for k, v in _constraints(metadata).items()}
        return {"type": "array", "items": type_schema(item), **bounds}
    if origin is dict:
        key, value = typing.get_args(tp)
        bounds = {{"minLength": "minProperties", "maxLength": "maxProperties"}.get(k, k): v
                  for k, v in _constraints(metadata).items()}
        out = {"type": "object", "additionalProperties": type_schema(value), **bounds}
        key_max = type_schema(key).get("maxLength")
        if key_max is not None:  # a structural schema cannot bound a key but through CEL
            out["x-kubernetes-validations"] = [{"rule": f"self.all(k, size(k) <= {key_max})",
                                                "message": f"keys must be at most {key_max} characters"}]
        return out
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return model_schema(tp)
    if tp in _SCALARS:
        return {"type": _SCALARS[tp], **_constraints(metadata)}
    raise TypeError(f"no CRD schema for {tp!r}")


def _default(field: FieldInfo) -> Any:
    """The CRD default for a field, or None when the API server should leave it absent."""
    if field.is_required():
        return None
    value = field.get_default(call_default_factory=True)
    if isinstance(value, BaseModel):
        # An all-defaults object is `{}`: the API server fills the nested defaults itself.
        if value == type(value)():
            return {}
        return _prune(value.model_dump(by_alias=True, exclude_none=True, mode="json"))
    if value in ([], {}):
        return None
    return value


def _prune(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _prune(v) for k, v in obj.items() if v not in ([], {}, None)}
    return obj


def field_schema(field: FieldInfo) -> dict[str, Any]:
    schema = type_schema(field.annotation, field.metadata)
    if field.description:
        schema = {"description": field.description, **schema}
    default = _default(field)
    if default is not None:
        schema["default"] = default
    return schema


def model_schema(cls: type[BaseModel]) -> dict[str, Any]:
    props: dict[str, Any] = {}
    required: list[str] = []
    for name, field in cls.model_fields.items():
        wire = field.alias or name
        props[wire] = field_schema(field)
        if field.is_required():
            required.append(wire)
    schema: dict[str, Any] = {"type": "object"}
    if cls.__doc__:
        schema["description"] = " ".join(cls.__doc__.split())
    schema["properties"] = props
    if required:
        schema["required"] = required
    extra = cls.model_config.get("json_schema_extra")
    if isinstance(extra, dict):
        schema.update(extra)
    return schema


def _status_schema() -> dict[str, Any]:
    schema = model_schema(BindingStatus)
    conds = schema["properties"]["conditions"]
    conds["x-kubernetes-list-type"] = "map"
    conds["x-kubernetes-list-map-keys"] = ["type"]
    # kstatus (Helm 4's --wait, Flux, Argo CD's health check) counts a binding with no status as
    # Current, before the operator has seen it: until its first status write, the API server shows
    # observedGeneration -1, not yet the generation (as Flux's own CRDs do).
    schema["default"] = {"observedGeneration": -1}
    return schema


def _cond(ctype: str, field: str) -> str:
    return f'.status.conditions[?(@.type=="{ctype}")].{field}'


PRINTER_COLUMNS = [
    {"name": "Runner", "type": "string", "jsonPath": ".spec.runner.id"},
    {"name": "Scheduler", "type": "string", "jsonPath": ".status.scheduler.name"},
    {"name": "Partition", "type": "string", "jsonPath": ".spec.partition"},
    {"name": "Namespaces", "type": "integer", "jsonPath": ".status.scope.namespaceCount"},
    {"name": "Ready", "type": "string", "jsonPath": _cond("Ready", "status")},
    {"name": "Reason", "type": "string", "jsonPath": _cond("Ready", "reason")},
    {"name": "Paused", "type": "boolean", "jsonPath": ".status.paused"},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    {"name": "Mode", "type": "string", "jsonPath": ".spec.mode", "priority": 1},
    {"name": "Policy", "type": "string", "jsonPath": _cond("PolicySynced", "reason"), "priority": 1},
    {"name": "Scope", "type": "string", "jsonPath": _cond("ScopeSynced", "reason"), "priority": 1},
    {"name": "Placement", "type": "string", "jsonPath": _cond("PlacementVerified", "reason"), "priority": 1},
    {"name": "KillWait", "type": "integer", "jsonPath": ".status.scheduler.killWaitSeconds", "priority": 1},
]


def render_crd() -> dict[str, Any]:
    spec_schema = model_schema(BindingSpec)
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{m.PLURAL}.{m.GROUP}"},
        "spec": {
            "group": m.GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": m.KIND,
                "listKind": m.KIND + "List",
                "plural": m.PLURAL,
                "singular": m.SINGULAR,
                "shortNames": m.SHORT_NAMES,
                "categories": m.CATEGORIES,
            },
            "versions": [
                {
                    "name": m.VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": PRINTER_COLUMNS,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "description": "SunkSandboxBinding routes a CoreWeave sandbox runner's pods through the "
                            "SUNK Pod Scheduler: it merges schedulerName and Slurm annotations into the runner "
                            "policy and keeps the scheduler's watched-namespace list in sync.",
                            "required": ["spec"],
                            "properties": {
                                "apiVersion": {"type": "string"},
                                "kind": {"type": "string"},
                                "metadata": {"type": "object"},
                                "spec": spec_schema,
                                "status": _status_schema(),
                            },
                        }
                    },
                }
            ],
        },
    }


def render_yaml() -> str:
    header = "# Generated from operator/sunk_sandbox_operator/model.py by `sunk-sandbox-operator crd`. Do not edit.\n"
    body: str = yaml.safe_dump(render_crd(), sort_keys=False, width=120, allow_unicode=True)  # no stream: a str
    return header + body
