"""The FluxHelmRelease scope target on a real control plane, the operator as its ServiceAccount.

A HelmRelease CRD with only the fields the operator reads (no Flux controllers run here): the operator
owns the values ConfigMap a HelmRelease reads through spec.valuesFrom, and never writes the HelmRelease.
"""

from __future__ import annotations

import json

import pytest
import yaml
from kubernetes.client.rest import ApiException

from sunk_sandbox_operator.api.keys import SCOPE_HASH_ANNOTATION, SCOPE_LEDGER_ANNOTATION
from sunk_sandbox_operator.core.scope import ledger
from tests.conftest import wait_for
from tests.integration.conftest import binding_spec, create_token_secret, grant_secret_read, make_scheduler
from tests.integration.test_scope import CM as SCHEDULER_CM
from tests.integration.test_scope import prefix, scope_binding

pytestmark = pytest.mark.integration

GROUP, VERSION, PLURAL = "helm.toolkit.fluxcd.io", "v2", "helmreleases"
VALUES_CM = "slurm-sunk-scope"
PATH = ("scheduler", "scope", "namespaces")
WIRED = {"kind": "ConfigMap", "name": VALUES_CM, "valuesKey": "values.yaml"}


@pytest.fixture(scope="session")
def flux_crd(installed):
    """helmreleases.helm.toolkit.fluxcd.io v2, with only the fields used: spec.valuesFrom and spec.values."""
    value_ref = {"type": "object", "required": ["kind", "name"], "properties": {
        "kind": {"type": "string", "enum": ["Secret", "ConfigMap"]}, "name": {"type": "string"},
        "valuesKey": {"type": "string"}, "targetPath": {"type": "string"}, "optional": {"type": "boolean"}}}
    crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
           "metadata": {"name": f"{PLURAL}.{GROUP}"},
           "spec": {"group": GROUP, "scope": "Namespaced",
                    "names": {"kind": "HelmRelease", "listKind": "HelmReleaseList", "plural": PLURAL,
                              "singular": "helmrelease", "shortNames": ["hr"]},
                    "versions": [{"name": VERSION, "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                        "type": "object", "properties": {
                            "spec": {"type": "object", "properties": {
                                "valuesFrom": {"type": "array", "items": value_ref},
                                "values": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}},
                            "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}}}]}}
    installed.apply(crd)

    def established():
        obj = installed.ext.read_custom_resource_definition(f"{PLURAL}.{GROUP}")
        return any(c.type == "Established" and c.status == "True" for c in (obj.status.conditions or []))
    wait_for(established, 30)
    return installed


@pytest.fixture
def slurm_ns(installed, ns) -> str:
    grant_secret_read(installed, ns)
    create_token_secret(installed, ns)
    return ns


def create_helmrelease(kube, ns: str, values_from: list[dict], values: dict | None = None) -> dict:
    spec = {"valuesFrom": values_from, "values": values or {"scheduler": {"enabled": True}}}
    return kube.custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "HelmRelease", "metadata": {"name": "slurm", "namespace": ns},
        "spec": spec})


def get_helmrelease(kube, ns: str) -> dict:
    return kube.custom.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "slurm")


def values_cm(kube, ns: str):
    try:
        return kube.core.read_namespaced_config_map(VALUES_CM, ns)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def flux_listed(kube, ns: str) -> list[str]:
    cm = values_cm(kube, ns)
    value = yaml.safe_load(cm.data["values.yaml"]) if cm is not None else None
    for key in PATH:
        value = (value or {}).get(key)
    return list(value or [])


def flux_binding(kube, emulator, ns: str, names: list[str]) -> dict:
    return scope_binding(kube, emulator, ns, names, scope={
        "target": {"kind": "FluxHelmRelease", "helmRelease": {"name": "slurm"}}, "alwaysInclude": [ns]})


def test_the_operator_owns_the_values_configmap_the_helmrelease_reads(flux_crd, operator, emulator, slurm_ns):
    kube, p = flux_crd, prefix()
    make_scheduler(kube, slurm_ns)
    hr = create_helmrelease(kube, slurm_ns, [WIRED])
    kube.create_namespace(f"{p}-a")
    flux_binding(kube, emulator, slurm_ns, [f"{p}-*"])

    wait_for(lambda: f"{p}-a" in flux_listed(kube, slurm_ns), 15, lambda: str(flux_listed(kube, slurm_ns)))
    kube.create_namespace(f"{p}-b")
    wait_for(lambda: f"{p}-b" in flux_listed(kube, slurm_ns), 15, lambda: str(flux_listed(kube, slurm_ns)))
    assert flux_listed(kube, slurm_ns) == sorted([f"{p}-a", f"{p}-b", slurm_ns])
    cond = kube.wait_condition(slurm_ns, "b", "ScopeSynced", "True", "Synced")
    assert f"ConfigMap {slurm_ns}/{VALUES_CM}" in cond["message"]

    cm = values_cm(kube, slurm_ns)
    assert cm.metadata.labels == {"reconcile.fluxcd.io/watch": "Enabled",
                                  "app.kubernetes.io/managed-by": "sunk-sandbox-operator",
                                  "sunksandbox.dev/binding": f"{slurm_ns}.b"}
    entry = ledger.decode(cm.metadata.annotations[SCOPE_LEDGER_ANNOTATION]).get(f"{slurm_ns}/b")
    # A new document's blank list means the scheduler's own namespace to SUNK: kept as preexisting.
    assert set(entry.added) == {f"{p}-a", f"{p}-b"} and entry.preexisting == (slurm_ns,)
    # Git's objects are left alone: the HelmRelease is never written, the chart's ConfigMap neither,
    # and the scheduler is not rolled by the operator (Flux's upgrade rolls it).
    assert get_helmrelease(kube, slurm_ns)["metadata"]["resourceVersion"] == hr["metadata"]["resourceVersion"]
    assert "namespaces" not in yaml.safe_load(kube.core.read_namespaced_config_map(
        SCHEDULER_CM, slurm_ns).data["scheduler.conf"])["scheduler"]["scope"]
    template = kube.apps.read_namespaced_deployment("slurm-scheduler", slurm_ns).spec.template.metadata
    assert SCOPE_HASH_ANNOTATION not in (template.annotations or {})


def test_a_helmrelease_without_the_values_from_entry_is_reported_and_nothing_is_written(flux_crd, operator, emulator,
                                                                                        slurm_ns):
    kube, p = flux_crd, prefix()
    make_scheduler(kube, slurm_ns)
    create_helmrelease(kube, slurm_ns, [{"kind": "ConfigMap", "name": "chart-defaults"}])
    kube.create_namespace(f"{p}-a")
    flux_binding(kube, emulator, slurm_ns, [f"{p}-*"])

    cond = kube.wait_condition(slurm_ns, "b", "ScopeSynced", "False", "ValuesFromMissing")
    assert f"HelmRelease {slurm_ns}/slurm does not read ConfigMap {VALUES_CM} key values.yaml" in cond["message"]
    assert f"  - kind: ConfigMap\n    name: {VALUES_CM}\n    valuesKey: values.yaml" in cond["message"]
    assert values_cm(kube, slurm_ns) is None   # reported after the read that decided: no write came first

    # The admin adds the entry (in Git; Flux applies it): the HelmRelease watch wakes the binding at once.
    kube.custom.patch_namespaced_custom_object(GROUP, VERSION, slurm_ns, PLURAL, "slurm", {"spec": {"valuesFrom": [
        {"kind": "ConfigMap", "name": "chart-defaults"}, WIRED]}})
    kube.wait_condition(slurm_ns, "b", "ScopeSynced", "True", "Synced", timeout=10)
    assert f"{p}-a" in flux_listed(kube, slurm_ns)

    # An inline value at the same path would win over every valuesFrom entry: reported, nothing written.
    written = values_cm(kube, slurm_ns).metadata.resource_version
    kube.custom.patch_namespaced_custom_object(GROUP, VERSION, slurm_ns, PLURAL, "slurm", {"spec": {"values": {
        "scheduler": {"scope": {"namespaces": ["from-git"]}}}}})
    cond = kube.wait_condition(slurm_ns, "b", "ScopeSynced", "False", "ValuesOverridden", timeout=10)
    assert "remove scheduler.scope.namespaces from spec.values" in cond["message"]
    assert values_cm(kube, slurm_ns).metadata.resource_version == written


def test_the_crd_requires_the_helmrelease_name(kube, emulator, ns):
    spec = binding_spec("runner-x", emulator, scope={"target": {"kind": "FluxHelmRelease"}})
    with pytest.raises(ApiException) as info:
        kube.create_binding(ns, "no-name", spec)
    assert info.value.status == 422
    assert "spec.scope.target.helmRelease.name is required when kind is FluxHelmRelease" in json.loads(
        info.value.body)["message"]
