"""End to end, as a user deploys: CRD + `kustomize build manifests/` applied server-side, the operator
running with a TokenRequest token of the shipped ServiceAccount, the example binding, `kubectl wait`."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO, devtools_env, wait_for
from tests.integration.conftest import ADMIN_TOKEN, make_scheduler
from tests.integration.test_scope import argocd_crd  # noqa: F401  (fixture: can-i needs the resource to exist)
from tests.integration.test_scope_flux import flux_crd  # noqa: F401  (fixture)

pytestmark = pytest.mark.e2e

NS = "tenant-slurm"
EXAMPLES = REPO / "manifests" / "examples"


def _example_binding(emulator) -> dict:
    binding = yaml.safe_load((EXAMPLES / "binding.yaml").read_text())
    binding["spec"]["runner"]["apiURL"] = emulator.url  # the emulator stands in for api.coreweave.com
    return binding


def _example_secret() -> dict:
    secret = yaml.safe_load((EXAMPLES / "secret.yaml").read_text())
    secret.pop("data", None)
    secret["stringData"] = {"token": ADMIN_TOKEN}
    return secret


def test_example_binding_becomes_ready_under_shipped_rbac(installed, operator, emulator):
    with emulator.state.lock:
        emulator.state.add_runner("runner-7f3a", {"constraints": {"network": {"egress": {"allow": ["pypi.org"]}}}})
    installed.apply(_example_secret())
    make_scheduler(installed, NS)
    installed.apply(_example_binding(emulator))
    out = installed.kubectl("wait", "--for=condition=Ready", "ssb/cpu-sandboxes", "-n", NS, "--timeout=60s",
                            check=False)
    binding = installed.binding(NS, "cpu-sandboxes")
    assert out.returncode == 0, (out.stderr, json.dumps(binding.get("status"), indent=1), operator.logs()[-3000:])
    status = binding["status"]
    assert status["observedGeneration"] == binding["metadata"]["generation"]
    assert status["scheduler"]["name"] == "slurm-scheduler"
    policy = emulator.state.runners["runner-7f3a"]["policy"]
    assert policy["base"]["spec"]["schedulerName"] == "slurm-scheduler"
    assert policy["constraints"]["network"]["egress"]["allow"] == ["pypi.org"]
    wide = installed.kubectl("get", "ssb", "-n", NS, "-o", "wide").stdout
    assert "cpu-sandboxes" in wide and "True" in wide

    # metrics after a reconcile
    text = operator.metrics()
    for series in ("ssb_reconciles_total", "ssb_runner_api_calls_total", "ssb_status_patches_total",
                   "ssb_condition", "ssb_scope_namespaces", "ssb_policy_writes_total",
                   "ssb_scope_sync_latency_seconds", "ssb_policy_drift_corrections_total"):
        assert re.search(rf"^# TYPE {series} ", text, re.M), series
    assert 'ssb_runner_api_calls_total{code="ok",method="GetManagedRunner"}' in text  # labels sorted
    assert f'ssb_condition{{binding="{NS}/cpu-sandboxes",condition="Ready",status="True"}} 1' in text
    rss = operator.rss_kib()
    print(f"\noperator RSS after e2e: {rss / 1024:.1f} MiB" if rss else "\noperator RSS unknown")
    doctor_agrees(installed)

    # clean up as a user would: the finalizer restores the policy
    installed.kubectl("delete", "ssb", "-n", NS, "cpu-sandboxes", "--timeout=60s")
    policy = emulator.state.runners["runner-7f3a"]["policy"]
    assert "schedulerName" not in (policy.get("base") or {}).get("spec", {})
    assert policy["constraints"]["network"]["egress"]["allow"] == ["pypi.org"]


def doctor_agrees(installed) -> None:
    """`kubectl ssb doctor` on the Ready binding as the admin runs it, with no settings of its own: it
    judges with those the operator published and allows the binding the operator made Ready (issue 34)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SSB_")}
    env["KUBECONFIG"] = str(installed.cluster.kubeconfig)
    plugin = Path(sys.executable).parent / "kubectl-ssb"
    out = subprocess.run([str(plugin), "doctor", f"{NS}/cpu-sandboxes", "-o", "json"], env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode in (0, 1), out.stderr
    report = json.loads(out.stdout)
    assert report["settings"]["source"] == "operator", report["settings"]
    checks = {c["id"]: c for c in report["checks"]}
    assert checks["binding"]["ok"] is True, checks["binding"]
    print(f"doctor on the e2e binding ({report['settings']['detail']}): failing (no kubelet, no Node, no "
          f"Slurm here): {[i for i, c in checks.items() if c['ok'] is False]}")


def test_operator_logs_are_json_lines(operator):
    """--log-format=json, as the Deployment runs it: one JSON object per line, for log pipelines."""
    lines = [line for line in operator.logs().splitlines() if line.strip()]
    assert lines
    for line in lines:
        record = json.loads(line)
        assert record["message"] is not None and record["severity"] and record["timestamp"]


@pytest.mark.parametrize("verb,resource,namespace,allowed", [
    ("get", "secrets", NS, "yes"),
    ("list", "secrets", NS, "no"),
    ("watch", "secrets", NS, "no"),
    ("delete", "secrets", NS, "no"),
    ("get", "secrets", "kube-system", "no"),
    ("delete", "pods", NS, "no"),
    ("create", "pods", NS, "no"),
    ("delete", "configmaps", NS, "no"),
    ("create", "deployments.apps", NS, "no"),
    ("escalate", "clusterroles", "", "no"),
    ("bind", "clusterroles/cluster-admin", "", "no"),
    ("bind", "clusterroles/sunk-scheduler-sandbox", "", "yes"),
    ("get", "clusterroles/sunk-scheduler-sandbox", "", "yes"),
    ("get", "clusterroles/cluster-admin", "", "no"),
    ("patch", "sunksandboxbindings.sunksandbox.dev/status", NS, "yes"),
    ("list", "namespaces", "", "yes"),
    # Writes to the scheduler's objects and scope targets: only where a RoleBinding grants them
    # (manifests/rbac-targets.yaml, shipped for tenant-slurm); "*" = every namespace at once.
    ("get", "secrets", "default", "no"),
    ("update", "configmaps", NS, "yes"),
    ("create", "configmaps", NS, "yes"),
    ("update", "configmaps", "kube-system", "no"),
    ("update", "configmaps", "default", "no"),
    ("create", "configmaps", "default", "no"),
    ("get", "configmaps", "kube-system", "no"),
    ("list", "configmaps", "*", "no"),
    ("watch", "configmaps", "*", "no"),
    ("patch", "deployments.apps", NS, "yes"),
    ("patch", "deployments.apps", "default", "no"),
    ("patch", "deployments.apps", "kube-system", "no"),
    ("patch", "statefulsets.apps", "default", "no"),
    ("list", "deployments.apps", "*", "no"),
    ("patch", "applications.argoproj.io", NS, "yes"),
    ("patch", "applications.argoproj.io", "argocd", "no"),
    ("get", "applications.argoproj.io", "*", "no"),
    ("get", "helmreleases.helm.toolkit.fluxcd.io", "default", "no"),
    ("patch", "helmreleases.helm.toolkit.fluxcd.io", NS, "no"),  # read only, even where granted
    # Cluster-wide, what must be: sandbox pods by label, RoleBindings for the scheduler in sandbox
    # namespaces, `bind` on the one shipped ClusterRole only (not on its own per-namespace roles).
    ("watch", "pods", "*", "yes"),
    ("patch", "pods", "*", "no"),
    ("create", "rolebindings", "*", "yes"),
    ("update", "rolebindings", "*", "no"),
    ("create", "clusterrolebindings", "", "no"),
    ("bind", "clusterroles/sunk-sandbox-operator-targets", "", "no"),
    ("bind", "clusterroles/sunk-sandbox-operator-secret-reader", "", "no"),
    ("bind", "clusterroles/admin", "", "no"),
])
def test_shipped_rbac_is_least_privilege(installed, argocd_crd, flux_crd, operator_kubeconfig, verb, resource,
                                         namespace, allowed):
    where = ["--all-namespaces"] if namespace == "*" else ["-n", namespace] if namespace else []
    args = ["auth", "can-i", verb, resource] + where
    out = installed.kubectl(*args, kubeconfig=operator_kubeconfig, check=False)
    assert out.stdout.strip() == allowed, (args, out.stdout, out.stderr)


def test_permission_not_shipped_is_denied_by_the_api(installed, operator_kubeconfig):
    installed.kubectl("create", "secret", "generic", "victim", "-n", NS, "--from-literal=k=v", check=False)
    out = installed.kubectl("delete", "secret", "victim", "-n", NS, kubeconfig=operator_kubeconfig, check=False)
    assert out.returncode != 0 and "forbidden" in out.stderr.lower()
    assert installed.core.read_namespaced_secret("victim", NS).metadata.name == "victim"


def test_the_operator_cannot_grant_itself_its_per_namespace_roles(installed, operator_kubeconfig):
    """It may create RoleBindings anywhere, but RBAC's escalation check lets it bind only
    sunk-scheduler-sandbox: a RoleBinding giving itself target or Secret access elsewhere is refused."""
    for role in ("sunk-sandbox-operator-targets", "sunk-sandbox-operator-secret-reader"):
        out = installed.kubectl("create", "rolebinding", "self-grant", "-n", "default", f"--clusterrole={role}",
                                "--serviceaccount=sunk-sandbox-operator-system:sunk-sandbox-operator",
                                kubeconfig=operator_kubeconfig, check=False)
        assert out.returncode != 0 and "forbidden" in out.stderr.lower(), (role, out.stdout, out.stderr)
    assert not [rb for rb in installed.rbac.list_namespaced_role_binding("default").items
                if rb.metadata.name == "self-grant"]


def test_demo_runs_to_completion():
    """The README's first command ends in this; it brings its own control plane and operator."""
    started = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "sunk_sandbox_devtools", "demo"], capture_output=True, text=True,
                         timeout=300, cwd=str(REPO), env=devtools_env())
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    for section in ("local control plane", "policy BEFORE", "scope BEFORE", "policy AFTER", "scope AFTER",
                    "kubectl get ssb -o wide", "demo complete"):
        assert section in out.stdout, section
    after = out.stdout.split("=== policy AFTER")[1]
    assert '"schedulerName": "slurm-scheduler"' in after
    assert "- ds-alice" in out.stdout.split("=== scope AFTER")[1]
    print(f"\ndemo took {time.monotonic() - started:.0f}s")
    assert "demo-" not in out.stdout.replace("ssb-demo-", "")  # the token never printed
