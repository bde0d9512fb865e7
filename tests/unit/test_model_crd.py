"""The CRD in crds/ and the pydantic models must agree: fields, required, enums, defaults."""

from __future__ import annotations

import typing
from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel, ValidationError

from sunk_sandbox_operator.api import crd as crdgen
from sunk_sandbox_operator import api as m

CRD_PATH = Path(__file__).resolve().parents[2] / "crds" / "sunksandboxbindings.yaml"


def load_crd() -> dict:
    return yaml.safe_load(CRD_PATH.read_text())


def version_schema(crd: dict) -> dict:
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def test_committed_crd_is_rendered_from_models():
    assert CRD_PATH.read_text() == crdgen.render_yaml(), (
        "crds/ is stale: run `sunk-sandbox-operator crd > crds/sunksandboxbindings.yaml`")


def _model_of(tp):
    tp = crdgen._unwrap_optional(tp)
    if typing.get_origin(tp) is list:
        tp = typing.get_args(tp)[0]
    return tp if isinstance(tp, type) and issubclass(tp, BaseModel) else None


def _walk(model: type[BaseModel], schema: dict, path: str, seen: list[str]):
    props = schema["properties"]
    wire_names = {(f.alias or n) for n, f in model.model_fields.items()}
    assert set(props) == wire_names, f"{path}: CRD fields {sorted(props)} != model fields {sorted(wire_names)}"
    required = {(f.alias or n) for n, f in model.model_fields.items() if f.is_required()}
    assert set(schema.get("required", [])) == required, f"{path}: required differs"
    for name, field in model.model_fields.items():
        wire = field.alias or name
        sub = props[wire]
        seen.append(f"{path}.{wire}")
        assert sub.get("description"), f"{path}.{wire} has no description"
        tp = crdgen._unwrap_optional(field.annotation)
        if typing.get_origin(tp) is typing.Literal:
            assert sub["enum"] == list(typing.get_args(tp)), f"{path}.{wire}: enum differs"
        if not field.is_required():
            default = field.get_default(call_default_factory=True)
            if isinstance(default, BaseModel):
                # the API server fills an object default from the nested defaults
                assert sub.get("default") is not None, f"{path}.{wire}: object default missing in CRD"
            elif default not in (None, [], {}):
                assert sub.get("default") == default, f"{path}.{wire}: default {sub.get('default')} != {default}"
            else:
                assert "default" not in sub, f"{path}.{wire}: CRD has a default the model lacks"
        nested = _model_of(field.annotation)
        if nested is not None:
            _walk(nested, sub["items"] if sub["type"] == "array" else sub, f"{path}.{wire}", seen)


def test_spec_and_status_schemas_match_models():
    schema = version_schema(load_crd())
    seen: list[str] = []
    _walk(m.BindingSpec, schema["properties"]["spec"], "spec", seen)
    _walk(m.BindingStatus, schema["properties"]["status"], "status", seen)
    assert "spec.scope.target.configMap.path" in seen and "status.placement.lastMismatch.pod" in seen


def test_object_defaults_reproduce_model_defaults():
    """Applying the CRD's object defaults then the nested ones yields the model's defaults."""
    spec = m.parse_spec({"runner": {"id": "r", "tokenSecretRef": {"name": "s"}}, "sandboxNamespaces": {"names": ["ds-*"]}})
    props = version_schema(load_crd())["properties"]["spec"]["properties"]
    assert props["scheduler"]["properties"]["podSelector"]["default"] == {"matchLabels": m.DEFAULT_SCHEDULER_POD_LABELS}
    assert spec.scheduler.pod_selector.match_labels == m.DEFAULT_SCHEDULER_POD_LABELS
    assert props["scope"]["default"] == {} and spec.scope.target.kind == "SchedulerConfigMap"


def test_printer_columns_and_names():
    crd = load_crd()
    version = crd["spec"]["versions"][0]
    names = [c["name"] for c in version["additionalPrinterColumns"] if not c.get("priority")]
    assert names == ["Runner", "Scheduler", "Partition", "Namespaces", "Ready", "Reason", "Paused", "Age"]
    assert crd["spec"]["names"]["shortNames"] == ["ssb"]
    assert "sunk" in crd["spec"]["names"]["categories"]
    assert version["subresources"] == {"status": {}}


MINIMAL = {"runner": {"id": "r1", "tokenSecretRef": {"name": "tok"}}, "sandboxNamespaces": {"names": ["ds-*"]}}


def test_minimal_spec_defaults():
    spec = m.parse_spec(MINIMAL)
    assert spec.runner.api_url == "https://api.coreweave.com"
    assert spec.runner.token_secret_ref.key == "token"
    assert spec.mode == "Enforce" and spec.deletion_policy == "Restore" and spec.resync_interval == "5m"
    assert spec.expected_grace_period_seconds == 30
    assert spec.scope.target.config_map.key == "scheduler.conf"
    assert spec.scope.target.application.namespace == "argocd"
    assert spec.pinned_annotations() == {}


def test_pinned_annotations():
    spec = m.parse_spec({**MINIMAL, "partition": "sandboxes",
                         "slurm": {"account": "ml", "exclusive": "user", "userId": "1000"}})
    assert spec.pinned_annotations() == {
        "sunk.coreweave.com/partition": "sandboxes", "sunk.coreweave.com/account": "ml",
        "sunk.coreweave.com/exclusive": "user", "sunk.coreweave.com/user-id": "1000"}


@pytest.mark.parametrize("patch,field", [
    ({"slurm": {"userId": "alice"}}, "userId"),
    ({"slurm": {"exclusive": "always"}}, "exclusive"),
    ({"resyncInterval": "soon"}, "resyncInterval"),
    ({"partition": "sandboxes", "clientAnnotations": ["sunk.coreweave.com/partition"]}, "clientAnnotations"),
    ({"runner": {"id": "", "tokenSecretRef": {"name": "t"}}}, "id"),
])
def test_models_reject_what_the_crd_rejects(patch, field):
    with pytest.raises(ValidationError) as info:
        m.parse_spec({**MINIMAL, **patch})
    assert field in str(info.value)


def test_wire_round_trip_uses_camel_case():
    spec = m.parse_spec({**MINIMAL, "runner": {"id": "r", "apiURL": "http://127.0.0.1:1", "tokenSecretRef": {"name": "t"}}})
    wire = spec.wire()
    assert wire["runner"]["apiURL"] == "http://127.0.0.1:1"
    assert "sandboxNamespaces" in wire and "expectedGracePeriodSeconds" in wire
    assert m.parse_spec(wire) == spec


def _unbounded(schema: dict, path: str) -> list[str]:
    """Every string, list and map of the spec schema without a bound (enums are bounded by their values)."""
    out: list[str] = []
    kind = schema.get("type")
    if kind == "string" and "maxLength" not in schema and "enum" not in schema:
        out.append(path)
    if kind == "array":
        if "maxItems" not in schema:
            out.append(path)
        out += _unbounded(schema["items"], path + "[]")
    if kind == "object":
        if "additionalProperties" in schema:
            if "maxProperties" not in schema:
                out.append(path)
            out += _unbounded(schema["additionalProperties"], path + "{}")
        for name, sub in (schema.get("properties") or {}).items():
            out += _unbounded(sub, f"{path}.{name}")
    return out


def test_every_string_list_and_map_of_the_spec_is_bounded():
    spec = version_schema(load_crd())["properties"]["spec"]
    assert _unbounded(spec, "spec") == []
    selector = spec["properties"]["sandboxNamespaces"]["properties"]["selector"]["properties"]
    assert selector["matchExpressions"]["maxItems"] == 16
    assert selector["matchExpressions"]["items"]["properties"]["values"]["maxItems"] == 64
    assert selector["matchLabels"]["maxProperties"] == 32
    assert selector["matchLabels"]["additionalProperties"]["maxLength"] == 63  # Kubernetes' label value limit
    assert selector["matchLabels"]["x-kubernetes-validations"][0]["rule"] == "self.all(k, size(k) <= 317)"


@pytest.mark.parametrize("change, where", [
    ({"selector": {"matchExpressions": [{"key": f"k{i}", "operator": "DoesNotExist"} for i in range(17)]}},
     ("sandboxNamespaces", "selector", "matchExpressions")),
    ({"selector": {"matchLabels": {f"k{i}": "v" for i in range(33)}}}, ("sandboxNamespaces", "selector", "matchLabels")),
    ({"selector": {"matchExpressions": [{"key": "a", "operator": "In", "values": [str(i) for i in range(65)]}]}},
     ("sandboxNamespaces", "selector", "matchExpressions", 0, "values")),
    ({"names": [f"ds-{i}-*" for i in range(65)]}, ("sandboxNamespaces", "names")),
    ({"names": ["*a*a*a*a*"]}, ("sandboxNamespaces", "names", 0)),   # five stars: each one a scan of the name
])
def test_the_models_refuse_what_the_crd_refuses(change, where):
    """A binding stored before the bounds (or with the CRD not upgraded) is InvalidSpec, never compiled."""
    with pytest.raises(ValidationError) as exc:
        m.parse_spec({"runner": {"id": "r", "tokenSecretRef": {"name": "s"}}, "sandboxNamespaces": change})
    assert exc.value.errors()[0]["loc"] == where
