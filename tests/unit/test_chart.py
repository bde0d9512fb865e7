"""The Helm chart's static parts, with no helm binary: its copies equal their one source, README's
values table equals values.yaml, every value is documented, and the templates read only values
that exist.

`helm lint`, `helm template` against `kubectl kustomize manifests/`, and `helm install` /
`uninstall` on a real control plane are in tests/integration/test_helm_chart.py.
"""

from __future__ import annotations

import re
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


def test_the_crd_is_in_the_charts_crds_directory_only() -> None:
    """Helm's convention: crds/ is installed before the templates and never deleted (nor upgraded)."""
    assert [p.name for p in (CHART / "crds").iterdir()] == ["sunksandboxbindings.yaml"]
    for template in (CHART / "templates").iterdir():
        assert "CustomResourceDefinition" not in template.read_text(), template.name


def test_readme_values_table_is_the_one_values_yaml_documents() -> None:
    table = chart.readme_table((ROOT / "README.md").read_text())
    assert table == chart.values_table(), f"README's chart values table is stale: {FIX}"


def _leaves(node, path=()) -> list[str]:
    if isinstance(node, dict) and node:
        return [leaf for key, value in node.items() for leaf in _leaves(value, (*path, key))]
    return [".".join(path)]


def test_every_value_is_documented() -> None:
    text = (CHART / "values.yaml").read_text()
    documented = {row.key for row in chart.documented_values(text)}
    for leaf in _leaves(yaml.safe_load(text)):
        assert any(leaf == key or leaf.startswith(key + ".") for key in documented), \
            f"values.yaml: {leaf} has no `# --` comment (the README table row)"


def test_the_table_reader_on_a_small_document() -> None:
    text = ("# header, not a value\n\na:\n  # -- First line\n  # and its continuation.\n  b: 1\n"
            "  # not documented\n  c: [x]\n# -- A map.\nd:\n  e: {f: g}\n")
    rows = chart.documented_values(text)
    assert [(r.key, r.default, r.description) for r in rows] == [
        ("a.b", 1, "First line and its continuation."), ("d", {"e": {"f": "g"}}, "A map.")]
    assert chart.values_table(text).splitlines()[2:] == ["| `a.b` | `1` | First line and its continuation. |",
                                                         '| `d` | `{"e": {"f": "g"}}` | A map. |']


def test_templates_read_only_values_that_exist() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    used = set()
    for template in (CHART / "templates").iterdir():
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
    assert values["namespace"] == {"name": "sunk-sandbox-operator-system", "create": True}
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
