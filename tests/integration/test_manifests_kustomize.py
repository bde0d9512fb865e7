"""`kubectl kustomize` on the shipped manifests, the examples and the documented overlays.

Runs the project's pinned kubectl (built by `make binaries`; a multi-minute Go build when not
cached), so it lives with the integration tests; the static checks are in
tests/unit/test_manifests.py.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import yaml

from sunk_sandbox_operator import api as model
from tests.unit.test_manifests import (ARGOCD_KEY, EXPECTED_CLUSTER_RULES, EXPECTED_TARGET_RULES, HEALTH_LUA, IMAGE,
                                       MANIFESTS, OPERATOR_NS, SA, SECRET_READER, SECRETS_NS, TARGETS_ROLE, flatten)

pytestmark = pytest.mark.integration


# ---------------------------------------------------------------- kustomize build (real kubectl)


def kustomize_build(directory: Path) -> list[dict]:
    from sunk_sandbox_devtools import devcluster

    binary = str(devcluster.ensure_binaries() / "kubectl")  # the pinned kubectl (built by `make binaries`)
    done = subprocess.run([binary, "kustomize", str(directory)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def ids(docs) -> set[tuple[str, str | None, str]]:
    return {(d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"]) for d in docs}


def test_kustomize_build_of_manifests():
    docs = kustomize_build(MANIFESTS)
    assert ids(docs) == {
        ("CustomResourceDefinition", None, f"{model.PLURAL}.{model.GROUP}"),
        ("Namespace", None, OPERATOR_NS),
        ("ServiceAccount", OPERATOR_NS, SA),
        ("ClusterRole", None, "sunk-sandbox-operator"),
        ("ClusterRoleBinding", None, "sunk-sandbox-operator"),
        ("ClusterRole", None, SECRET_READER),
        ("RoleBinding", SECRETS_NS, "sunk-sandbox-operator-secrets"),
        ("ClusterRole", None, TARGETS_ROLE),                      # scheduler objects and scope target, per namespace
        ("RoleBinding", SECRETS_NS, TARGETS_ROLE),
        ("Role", OPERATOR_NS, "sunk-sandbox-operator"),          # ownership records and the leader Lease
        ("RoleBinding", OPERATOR_NS, "sunk-sandbox-operator"),
        ("Deployment", OPERATOR_NS, "sunk-sandbox-operator"),
        ("PodDisruptionBudget", OPERATOR_NS, "sunk-sandbox-operator"),
        ("Service", OPERATOR_NS, "sunk-sandbox-operator-metrics"),
        ("NetworkPolicy", OPERATOR_NS, "sunk-sandbox-operator"),
        ("ClusterRole", None, "sunk-scheduler-sandbox"),         # what the scheduler needs per listed namespace
        ("ClusterRole", None, "sunk-sandbox-operator-view"),     # tenants: bindings in the built-in view,
        ("ClusterRole", None, "sunk-sandbox-operator-edit"),     # edit and admin roles (aggregated)
    }
    for doc in docs:
        assert doc["metadata"]["labels"]["app.kubernetes.io/name"] == "sunk-sandbox-operator", doc["kind"]
        assert "app.kubernetes.io/part-of" in doc["metadata"]["labels"]
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == IMAGE
    assert deployment["spec"]["selector"]["matchLabels"] == {
        "app.kubernetes.io/name": "sunk-sandbox-operator", "app.kubernetes.io/component": "operator"}
    (role,) = [d for d in docs if d["kind"] == "ClusterRole" and d["metadata"]["name"] == "sunk-sandbox-operator"]
    assert flatten(role["rules"]) == EXPECTED_CLUSTER_RULES
    (targets,) = [d for d in docs if d["kind"] == "ClusterRole" and d["metadata"]["name"] == TARGETS_ROLE]
    assert flatten(targets["rules"]) == EXPECTED_TARGET_RULES


def test_kustomize_build_of_examples():
    docs = kustomize_build(MANIFESTS / "examples")
    assert ids(docs) == {("Secret", SECRETS_NS, "coreweave-api"), (model.KIND, SECRETS_NS, "cpu-sandboxes")}


def test_documented_patch_moves_the_secret_and_target_role_bindings(tmp_path):
    """The overlay shown in manifests/rbac-secrets.yaml works: nothing of the operator's is left in tenant-slurm."""
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    patch = '[{"op": "replace", "path": "/metadata/namespace", "value": "slurm-prod"}]'
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump({
        "resources": [os.path.relpath(MANIFESTS, overlay)],
        "patches": [
            {"target": {"group": "rbac.authorization.k8s.io", "kind": "RoleBinding", "name": name}, "patch": patch}
            for name in ("sunk-sandbox-operator-secrets", TARGETS_ROLE)
        ],
    }))
    documented = (MANIFESTS / "rbac-secrets.yaml").read_text()
    assert patch in documented and f"kind: RoleBinding, name: {TARGETS_ROLE}}}" in documented
    docs = ids(kustomize_build(overlay))
    assert ("RoleBinding", "slurm-prod", "sunk-sandbox-operator-secrets") in docs
    assert ("RoleBinding", "slurm-prod", TARGETS_ROLE) in docs
    assert ("ClusterRole", None, SECRET_READER) in docs and ("ClusterRole", None, TARGETS_ROLE) in docs
    assert not any(ns == SECRETS_NS for _, ns, _ in docs)


def test_argocd_component_merges_the_health_check_into_argocd_cm(tmp_path):
    install = tmp_path / "argocd-install"
    install.mkdir()
    (install / "argocd-cm.yaml").write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "argocd-cm", "namespace": "argocd"},
        "data": {"url": "https://argocd.example.test"},
    }))
    (install / "kustomization.yaml").write_text(yaml.safe_dump({
        "resources": ["argocd-cm.yaml"],
        "components": [os.path.relpath(MANIFESTS / "argocd", install)],
    }))
    (cm,) = kustomize_build(install)
    assert cm["metadata"]["name"] == "argocd-cm"
    assert cm["data"]["url"] == "https://argocd.example.test", "merge, not replace"
    assert cm["data"][ARGOCD_KEY] == HEALTH_LUA.read_text()
