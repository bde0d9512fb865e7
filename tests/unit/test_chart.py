"""The Helm chart's static parts, with no helm binary: its copies equal their one source, the CRD
template is crds/'s CRD, docs/configuration.md's values table and values.schema.json equal values.yaml, every value
is documented, and the templates read only values that exist.

`helm lint`, `helm template` against `kubectl kustomize manifests/`, and `helm install` /
`uninstall` on a real control plane are in tests/integration/test_helm_chart.py.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from sunk_sandbox_devtools import chart

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "sunk-sandbox-operator"
FIX = "run `make chart-sync` (or `make crd` after a model change)"


@pytest.mark.parametrize(("source", "copy"), chart.COPIES, ids=[c.name for _, c in chart.COPIES])
def test_the_charts_copies_equal_their_source(source: Path, copy: Path) -> None:
    assert copy.read_bytes() == source.read_bytes(), f"{copy.relative_to(ROOT)} differs from " \
        f"{source.relative_to(ROOT)}: {FIX}"


def templates() -> list[Path]:
    return sorted(p for p in (CHART / "templates").rglob("*") if p.is_file())


def test_the_crd_is_a_template_made_from_crds() -> None:
    """A template (Helm never upgrades a chart's crds/), made from the one CRD; no other copy."""
    assert not (CHART / "crds").exists(), "a chart's crds/ is installed once and never upgraded"
    assert chart.CRD_TEMPLATE.read_text() == chart.crd_template(), f"{chart.CRD_TEMPLATE.name} is stale: {FIX}"
    for template in templates():
        if template != chart.CRD_TEMPLATE:
            assert "CustomResourceDefinition" not in template.read_text(), template.name


def test_the_crd_template_keeps_the_spec_verbatim_and_escapes_template_braces() -> None:
    text = ("# comment\napiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n"
            "  name: things.example.com\nspec:\n  group: example.com\n  description: '{{ not a template }}'\n")
    out = chart.crd_template(text)
    assert out.startswith("{{- /* Generated") and out.endswith("  description: '{{ \"{{\" }} not a template }}'\n{{- end }}\n")
    assert "  name: things.example.com\n  labels:" in out and "helm.sh/resource-policy: keep" in out
    with pytest.raises(ValueError, match="metadata other than its name"):
        chart.crd_template(text.replace("  name: things.example.com\n", "  name: t\n  labels: {a: b}\n"))


def test_readme_values_table_is_the_one_values_yaml_documents() -> None:
    table = chart.readme_table((ROOT / "docs" / "configuration.md").read_text())
    assert table == chart.values_table(), f"docs/configuration.md's chart values table is stale: {FIX}"


def test_values_schema_is_the_one_values_yaml_documents() -> None:
    assert chart.SCHEMA.read_text() == chart.schema_text(), f"{chart.SCHEMA.name} is stale: {FIX}"


def test_the_schema_closes_every_object_but_the_documented_maps() -> None:
    """additionalProperties false wherever a key could be misspelt: every object that groups values."""
    schema = json.loads(chart.SCHEMA.read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    documented = {row.key for row in chart.documented_values((CHART / "values.yaml").read_text())}

    def walk(node: dict, value: dict, path: str) -> None:
        assert node["additionalProperties"] is False, path or "the root"
        assert set(value) <= set(node["properties"]), (path, set(value) - set(node["properties"]))
        for key, sub in value.items():
            child = f"{path}.{key}" if path else key
            if child not in documented:
                walk(node["properties"][key], sub, child)
    walk(schema, values, "")
    assert schema["properties"]["metrics"]["properties"]["serviceMonitor"]["additionalProperties"] is False
    assert schema["properties"]["logFormat"]["enum"] == ["plain", "full", "json"]
    assert schema["properties"]["replicas"]["type"] == "integer"


def test_the_log_format_enum_is_what_the_operator_accepts() -> None:
    """The schema's enum comes from `run --help`; each value passes the operator's own parser, another fails it."""
    for value, code in [*((v, 0) for v in chart.enums()["logFormat"]), ("xml", 2)]:
        done = subprocess.run([sys.executable, "-m", "sunk_sandbox_operator", "run", f"--log-format={value}", "--help"],
                              capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT / "operator")})
        assert done.returncode == code, (value, done.stderr[-500:])


def test_the_schema_generator_on_a_small_document() -> None:
    text = ("a:\n  # -- (port) A port.\n  port: 80\n  # -- Free-form.\n  labels: {x: y}\n"
            "# -- (list of strings) Names.\nnames: []\n# -- One of three.\nmode: b\n")
    schema = chart.values_schema(text, closed={"mode": ("a", "b", "c")})
    assert schema["additionalProperties"] is False
    assert schema["properties"]["a"] == {"type": "object", "additionalProperties": False, "properties": {
        "port": {"description": "A port.", "type": "integer", "minimum": 1, "maximum": 65535},
        "labels": {"description": "Free-form.", "type": "object"}}}
    assert schema["properties"]["names"] == {"description": "Names.", "type": "array", "items": {"type": "string"}}
    assert schema["properties"]["mode"] == {"description": "One of three.", "type": "string", "enum": ["a", "b", "c"]}
    assert chart.values_table(text, closed={"mode": ("a", "b", "c")}).splitlines()[2:] == [
        "| `a.port` | port | `80` | A port. |", '| `a.labels` | object | `{"x": "y"}` | Free-form. |',
        "| `names` | list of strings | `[]` | Names. |", '| `mode` | a \\| b \\| c | `"b"` | One of three. |']


@pytest.mark.parametrize(("text", "closed", "message"), [
    ("# -- Untyped.\nitems: []\n", {}, "items: its default [] does not show its type"),
    ("# -- Null.\nseconds: null\n", {}, "seconds: its default None does not show its type"),
    ("# -- (duration) What?\nwait: 1s\n", {}, "wait: unknown type (duration)"),
    ("# -- A mode.\nmode: d\n", {"mode": ("a", "b")}, "mode: default 'd' is not one of"),
    ("# -- A mode.\nmode: a\n", {"other": ("a",)}, "enums for values that are not documented: ['other']"),
], ids=["empty list", "null", "unknown type", "default outside the enum", "enum of nothing"])
def test_the_schema_generator_refuses_what_it_cannot_type(text, closed, message) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        chart.values_schema(text, closed=closed)


def _leaves(node, path=()) -> list[str]:
    if isinstance(node, dict) and node:
        return [leaf for key, value in node.items() for leaf in _leaves(value, (*path, key))]
    return [".".join(path)]


def test_every_value_is_documented() -> None:
    text = (CHART / "values.yaml").read_text()
    documented = {row.key for row in chart.documented_values(text)}
    for leaf in _leaves(yaml.safe_load(text)):
        assert any(leaf == key or leaf.startswith(key + ".") for key in documented), \
            f"values.yaml: {leaf} has no `# --` comment (the docs/configuration.md table row)"


def test_the_table_reader_on_a_small_document() -> None:
    text = ("# header, not a value\n\na:\n  # -- First line\n  # and its continuation.\n  b: 1\n"
            "  # not documented\n  c: [x]\n# -- A map.\nd:\n  e: {f: g}\n")
    rows = chart.documented_values(text)
    assert [(r.key, r.default, r.description, r.type) for r in rows] == [
        ("a.b", 1, "First line and its continuation.", "int"), ("d", {"e": {"f": "g"}}, "A map.", "object")]
    assert chart.values_table(text, closed={}).splitlines()[2:] == [
        "| `a.b` | int | `1` | First line and its continuation. |", '| `d` | object | `{"e": {"f": "g"}}` | A map. |']


def test_templates_read_only_values_that_exist() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    used = set()
    for template in templates():
        used |= set(re.findall(r"\.Values\.([A-Za-z0-9_.]+)", template.read_text()))
    assert used
    for path in sorted(used):
        node = values
        for part in path.split("."):
            assert isinstance(node, dict) and part in node, f".Values.{path} is not in values.yaml"
            node = node[part]


def test_the_default_values_are_the_kustomize_install() -> None:
    """What manifests/ hard-codes is the chart's default (the rendered objects are compared in
    tests/integration/test_helm_chart.py; these are the values that feed them)."""
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    kustomization = yaml.safe_load((ROOT / "manifests" / "kustomization.yaml").read_text())
    (image,) = kustomization["images"]
    assert values["image"]["repository"] == image["newName"]
    assert values["image"]["tag"] == "", "the tag defaults to the chart's appVersion"
    # The release's namespace (manifests/ makes sunk-sandbox-operator-system; README installs the chart there).
    assert values["namespace"] == {"name": "", "create": False}
    assert values["crds"] == {"enabled": True, "keep": True} and values["rbac"] == {"aggregateClusterRoles": True}
    assert values["slurmNamespaces"] == ["tenant-slurm"]
    assert values["tenancy"]["grantRoles"] == ["sunk-scheduler-sandbox"]
    assert not values["webhook"]["enabled"] and not values["metrics"]["serviceMonitor"]["enabled"]
    assert not values["monitoring"]["prometheusRule"]["enabled"] and not values["monitoring"]["dashboard"]["enabled"]


def test_the_grant_roles_default_is_the_operators() -> None:
    """deployment.yaml sets SSB_ALLOWED_GRANT_ROLES only when the list differs from this default."""
    from sunk_sandbox_operator.core.tenancy import DEFAULT_GRANT_ROLES

    assert '(join "," $t.grantRoles) "' + ",".join(DEFAULT_GRANT_ROLES) + '"' in \
        (CHART / "templates" / "deployment.yaml").read_text()


def test_chart_metadata() -> None:
    meta = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert meta["apiVersion"] == "v2" and meta["name"] == "sunk-sandbox-operator" and meta["type"] == "application"
    assert re.fullmatch(r"\d+\.\d+\.\d+", meta["version"])


def test_kube_version_is_the_minor_the_oldest_tests_run_on() -> None:
    """kubeVersion names the minor of hack/kube-oldest (tests/integration/test_oldest_kubernetes.py):
    raise both together. `-0`: managed clusters report pre-release-tagged versions (v1.31.4-eks-...)."""
    from sunk_sandbox_devtools import devcluster

    major, minor, _ = devcluster.oldest_kube_version().lstrip("v").split(".")
    assert yaml.safe_load((CHART / "Chart.yaml").read_text())["kubeVersion"] == f">={major}.{minor}.0-0"
def test_the_helm_test_script_is_standard_library_python() -> None:
    """It runs in the operator's image with `python -I`: no third-party import, no syntax the image's
    Python (3.11) lacks."""
    import ast

    tree = ast.parse((CHART / "files" / "helm-test.py").read_text(), feature_version=(3, 11))
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    assert imported and imported <= set(sys.stdlib_module_names), imported - set(sys.stdlib_module_names)


def schema_errors(values: dict) -> list[str]:
    """What values.schema.json says about VALUES (Helm validates the merged values the same way, draft 7)."""
    import jsonschema

    schema = json.loads(chart.SCHEMA.read_text())
    validator = jsonschema.Draft7Validator(schema)
    return [f"/{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(values)]


def with_value(key: str, value) -> dict:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    node = values
    *parents, leaf = key.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    node[leaf] = value
    return values


def test_the_default_values_pass_the_schema() -> None:
    assert schema_errors(yaml.safe_load((CHART / "values.yaml").read_text())) == []


# The three (`--set` gives strings), and more of the same kinds.
@pytest.mark.parametrize(("key", "value", "message"), [
    ("replicas", "abc", "/replicas: 'abc' is not of type 'integer'"),
    ("logFormat", "xml", "/logFormat: 'xml' is not one of ['plain', 'full', 'json']"),
    ("metrics.serviceMonitr", {"enabled": True}, "/metrics: Additional properties are not allowed ('serviceMonitr' was unexpected)"),
    ("healthPort", 70000, "/healthPort: 70000 is greater than the maximum of 65535"),
    ("crds.keep", "yes", "/crds/keep: 'yes' is not of type 'boolean'"),
    ("rbac.aggregateClusterRole", False, "/rbac: Additional properties are not allowed ('aggregateClusterRole' was unexpected)"),
    ("priorityClassName", 5, "/priorityClassName: 5 is not of type 'string'"),
    ("topologySpreadConstraints", {"maxSkew": 1}, "/topologySpreadConstraints: {'maxSkew': 1} is not of type 'array'"),
    ("podLabels", ["team=a"], "/podLabels: ['team=a'] is not of type 'object'"),
    ("commonLabels.cost-center", 42, "/commonLabels/cost-center: 42 is not of type 'string'"),
    ("tenancy.allowedReach", {"tenant-slurm": "argocd"}, "/tenancy/allowedReach/tenant-slurm: 'argocd' is not of type 'array'"),
    ("image.pullPolicy", "always", "/image/pullPolicy: 'always' is not one of ['Always', 'IfNotPresent', 'Never']"),
    ("replica", 2, "/: Additional properties are not allowed ('replica' was unexpected)"),
], ids=lambda v: v if isinstance(v, str) and not v.startswith("/") else "")
def test_the_schema_refuses_a_wrong_type_or_an_unknown_key_naming_it(key, value, message) -> None:
    assert schema_errors(with_value(key, value)) == [message]


@pytest.mark.parametrize(("key", "value"), [
    ("affinity", {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {}}}),
    ("topologySpreadConstraints", [{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}]),
    ("podLabels", {"team": "a"}), ("commonLabels", {"cost-center": "42"}),
    ("serviceAccount.annotations", {"eks.amazonaws.com/role-arn": "arn"}),
    ("podSecurityContext", {"fsGroupChangePolicy": "OnRootMismatch"}), ("securityContext", {"runAsUser": 1000}),
    ("podDisruptionBudget.minAvailable", "50%"), ("leaderElection.leaseDurationSeconds", 30),
    ("global", {"imageRegistry": "mirror"}),
])
def test_the_schema_accepts_what_the_documented_types_allow(key, value) -> None:
    assert schema_errors(with_value(key, value)) == []

