"""The devcluster CLI: up, env, down, and no stray processes left behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from sunk_sandbox_devtools import devcluster
from tests.conftest import devtools_env

pytestmark = pytest.mark.integration


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sunk_sandbox_devtools", "devcluster", *args],
                          capture_output=True, text=True, timeout=180, env=devtools_env())


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is dead for our purposes
    with open(f"/proc/{pid}/stat") as f:
        return f.read().split()[2] != "Z"


def test_up_env_down(tmp_path):
    state_dir = tmp_path / "dc"
    up = _cli("up", "--dir", str(state_dir))
    assert up.returncode == 0, up.stderr
    state = json.loads((state_dir / "state.json").read_text())
    pids = state["pids"]
    assert all(_alive(p) for p in pids.values())
    env = _cli("env", "--dir", str(state_dir))
    assert env.stdout.startswith(f"export KUBECONFIG={state_dir / 'admin.kubeconfig'}")
    kubectl = devcluster.ensure_binaries() / "kubectl"
    out = subprocess.run([str(kubectl), f"--kubeconfig={state_dir / 'admin.kubeconfig'}", "auth", "can-i", "*", "*"],
                         capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "yes"  # admin is system:masters
    down = _cli("down", "--dir", str(state_dir))
    assert down.stdout.strip() == "stopped"
    assert not any(_alive(p) for p in pids.values())
    assert _cli("down", "--dir", str(state_dir)).stdout.strip() == "not running"


def test_versions_are_pinned_by_the_wrapper_modules():
    kube, etcd = devcluster.versions()
    assert kube.startswith("v1.") and etcd.startswith("v3.")
    go_mod = (devcluster.HACK / "kube" / "go.mod").read_text()
    # every staging module is replaced by its published tag of the same minor
    minor = kube.split(".")[1]
    assert go_mod.count(f"v0.{minor}.") >= 30


def test_rbac_is_on(cluster, tmp_path):
    """A ServiceAccount without bindings is denied: authorization is real."""
    cluster.kubectl_run("create", "namespace", "rbac-probe", check=False)
    cluster.kubectl_run("create", "serviceaccount", "nobody", "-n", "rbac-probe", check=False)
    kubeconfig = cluster.service_account_kubeconfig("rbac-probe", "nobody", tmp_path / "nobody.kubeconfig")
    out = cluster.kubectl_run("get", "pods", "-n", "rbac-probe", kubeconfig=kubeconfig, check=False)
    assert out.returncode != 0 and "forbidden" in out.stderr.lower()
