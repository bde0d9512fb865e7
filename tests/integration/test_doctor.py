"""`doctor` as a user runs it: a subprocess with the admin's kubeconfig against the real control
plane, the runner API emulator behind the runner token and the real Slurm (slurmrestd, JWT) behind
the Slurm one. A healthy set-up passes every line (exit 0, `-o json` parses); broken ones fail each
check at least once, the ✗ line naming the fix. The Slurm checks (healthy, a partition missing or
DOWN, slurmrestd unreachable, a token about to expire) run against Slurm 22.05, 24.11 and 26.05 with
the API version negotiated; the others against 22.05. There is no kubelet: Nodes, slurmd pods
(owned by a NodeSet) and sandbox pods are objects made by hand."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from sunk_sandbox_operator.core import doctor

from tests.conftest import SECRET_VALUES
from tests.integration.conftest import (ADMIN_TOKEN, READONLY_TOKEN, calls, create_token_secret, make_scheduler,
                                        new_runner)

pytestmark = pytest.mark.integration

BIN = Path(sys.executable).parent
ALLOW = ["--allowed-api-url", "http://127.0.0.1:*", "--allowed-slurm-url", "http://127.0.0.1:*"]
PARTITION = "sandboxes"  # one of the test Slurm's partitions (sunk_sandbox_devtools/slurm.py)
SANDBOX_ID = "sandbox.coreweave.com/sandbox-id"


def run(kube, *args: str, plugin: bool = False) -> subprocess.CompletedProcess[str]:
    """As a user would: the console script, KUBECONFIG, nothing of the test process's settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SSB_") and k != "KUBERNETES_SERVICE_HOST"}
    env["KUBECONFIG"] = str(kube.cluster.kubeconfig)
    cmd = [str(BIN / "kubectl-ssb"), "doctor", *args] if plugin else [str(BIN / "sunk-sandbox-operator"), "doctor", *args]
    started = time.monotonic()
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    print("$", Path(cmd[0]).name, *cmd[1:], f"(exit {out.returncode}, {time.monotonic() - started:.2f} s)\n"
          f"{out.stdout}{out.stderr}")  # shown on failure
    return out


def uniq(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def slurm_conf(kube, ns: str, kill_wait: int) -> None:
    kube.core.create_namespaced_config_map(ns, {"metadata": {"name": "slurm-conf"},
                                                "data": {"slurm.conf": f"ClusterName=ci\nKillWait={kill_wait}\n"}})


def node(kube, cpu: str = "16", memory: str = "64Gi") -> str:
    name = uniq("node")
    kube.core.create_node({"metadata": {"name": name}})
    kube.core.patch_node_status(name, {"status": {"allocatable": {"cpu": cpu, "memory": memory, "pods": "110"},
                                                  "capacity": {"cpu": cpu, "memory": memory, "pods": "110"}}})
    return name


def slurmd(kube, ns: str, node_name: str, cpu: str, memory: str, nodeset: str = "cpu") -> None:
    """A NodeSet's slurmd pod as SUNK's NodeSet controller makes it: owned by the NodeSet, on its Node."""
    kube.core.create_namespaced_pod(ns, {
        "metadata": {"name": f"{nodeset}-{node_name}", "labels": {"app.kubernetes.io/name": "slurmd"},
                     "ownerReferences": [{"apiVersion": "sunk.coreweave.com/v1alpha1", "kind": "NodeSet",
                                          "name": nodeset, "uid": str(uuid.uuid4()), "controller": True}]},
        "spec": {"nodeName": node_name, "containers": [
            {"name": "slurmd", "image": "sunk/slurmd", "resources": {"requests": {"cpu": cpu, "memory": memory}}}]}})


def sandbox_pod(kube, ns: str, node_name: str, grace: int = 30) -> None:
    kube.core.create_namespaced_pod(ns, {
        "metadata": {"name": uniq("sbx"), "labels": {SANDBOX_ID: uuid.uuid4().hex[:8]}},
        "spec": {"schedulerName": "slurm-scheduler", "nodeName": node_name, "terminationGracePeriodSeconds": grace,
                 "containers": [{"name": "main", "image": "sandbox", "resources": {
                     "requests": {"cpu": "500m", "memory": "512Mi"}, "limits": {"cpu": "1", "memory": "1Gi"}}}]}})


def slurm_secret(kube, ns: str, slurm, lifespan: int = 86400) -> None:
    token = slurm.token(lifespan=lifespan)
    SECRET_VALUES.append(token)
    kube.core.create_namespaced_secret(ns, {"metadata": {"name": "slurm-jwt"}, "stringData": {"token": token}})


def setup(kube, emulator, slurm, ns: str, *, kill_wait: str = "60s", slurm_kill_wait: int = 60, covered: bool = True,
          permitted: bool = True, slurmd_cpu: str = "8", grace: int = 30, token: str = ADMIN_TOKEN,
          policy: dict | None = None, ready: bool = True, lifespan: int = 86400) -> tuple[str, str]:
    """A Slurm namespace with its scheduler, slurm.conf, a NodeSet's Node and slurmd pod, one sandbox
    namespace with a sandbox pod, a runner and its token. (runner id, sandbox namespace)"""
    sandbox_ns = uniq("ds")
    kube.create_namespace(sandbox_ns)
    make_scheduler(kube, ns, kill_wait=kill_wait, scope_namespaces=[ns, sandbox_ns] if covered else [ns],
                   permitted=permitted, ready=ready)
    slurm_conf(kube, ns, slurm_kill_wait)
    n = node(kube)
    slurmd(kube, ns, n, slurmd_cpu, "32Gi")
    sandbox_pod(kube, sandbox_ns, n, grace)
    create_token_secret(kube, ns, token)
    slurm_secret(kube, ns, slurm, lifespan)
    return new_runner(emulator, policy if policy is not None else {"base": {"spec": {}}}), sandbox_ns


def prerequisites(ns: str, runner: str, emulator, slurm, sandbox_ns: str, partition: str = PARTITION,
                  slurm_url: str | None = None) -> list[str]:
    """The flags of a set-up (its sandbox namespace named: other tests' sandbox pods are not its own)."""
    return ["--scheduler-namespace", ns, "--runner-id", runner, "--api-url", emulator.url,
            "--token-secret", f"{ns}/coreweave-api", "--sandbox-namespaces", sandbox_ns, "--partition", partition,
            "--slurm-url", slurm_url or slurm.url, "--slurm-user", slurm.api_user, "--slurm-token-secret",
            f"{ns}/slurm-jwt", *ALLOW]


def binding(ns: str, runner: str, api_url: str, slurm, sandbox_ns: str, partition: str = PARTITION) -> dict:
    return {"runner": {"id": runner, "apiURL": api_url, "tokenSecretRef": {"name": "coreweave-api"}},
            "partition": partition, "sandboxNamespaces": {"names": [sandbox_ns]},
            "slurm": {"restAPI": {"url": slurm.url, "user": slurm.api_user, "tokenSecretRef": {"name": "slurm-jwt"}}}}


def test_healthy_prerequisites_pass_every_line(installed, emulator, slurm, ns) -> None:
    runner, sandbox_ns = setup(installed, emulator, slurm, ns)
    out = run(installed, *prerequisites(ns, runner, emulator, slurm, sandbox_ns))
    assert out.returncode == 0, out.stdout + out.stderr
    body = out.stdout.splitlines()
    assert body[0].startswith("sunk-sandbox-operator doctor: prerequisites") and body[-1] == "every check passed"
    checks = body[1:-1]
    assert len(checks) == len(doctor.READS) - 1  # no binding line
    assert all(line.startswith("✓") for line in checks), out.stdout
    assert any(line.startswith("✓ room beside slurmd") and "500m CPU, 512Mi memory" in line for line in checks)
    assert calls(emulator, runner, "GetManagedRunner")
    partition = next(line for line in checks if line.startswith("✓ partition exists in Slurm"))
    assert f"Slurm {slurm.release}" in partition and f"REST {slurm.api_version} (negotiated)" in partition


def test_healthy_binding_through_kubectl_ssb_and_json(installed, emulator, slurm_host, ns) -> None:
    slurm = slurm_host
    runner, sandbox_ns = setup(installed, emulator, slurm, ns)
    installed.create_binding(ns, "b", binding(ns, runner, emulator.url, slurm, sandbox_ns))
    out = run(installed, f"{ns}/b", *ALLOW, plugin=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.splitlines()[1].startswith(f"✓ binding allowed: {ns}/b")
    parsed = json.loads(run(installed, f"{ns}/b", "-o", "json", *ALLOW).stdout)
    assert parsed["ok"] is True and parsed["binding"] == f"{ns}/b"
    assert {c["id"] for c in parsed["checks"]} == set(doctor.READS)
    assert all(c["ok"] is True for c in parsed["checks"]), parsed
    assert f"partition {PARTITION} is UP" in next(c["detail"] for c in parsed["checks"] if c["id"] == "partition")


# Each broken set-up, and the checks it fails with a word of their fix: together every check.
BROKEN: dict[str, tuple[dict[str, Any], dict[str, str]]] = {
    "scheduler-not-ready": ({"ready": False}, {"scheduler-running": "kubectl logs"}),
    "sunk7-naming-nothing": ({"bare": True},
                             {"scheduler-name": "scheduler.name", "kill-wait": "slurmConfig.KillWait",
                              "kill-wait-matches": "slurmConfig.KillWait", "scope": "scheduler.scope.type: cluster"}),
    "slurm-side": ({"kill_wait": "30s", "covered": False, "permitted": False, "slurmd_cpu": "15900m",
                    "token": READONLY_TOKEN},
                   {"kill-wait-matches": "keep them equal", "grace": "KillWait", "scope": "scheduler.scope.namespaces",
                    "scheduler-rbac": "grantClusterRole", "slurmd-room": "slurmd container's resource requests",
                    "runner-token": "sandbox_admin role"}),
    "policy": ({"policy": {"base": {"spec": {"nodeSelector": {"pool": "cpu"}}}}},
               {"policy": "cwic sandbox runner policy edit"}),
    # A binding the operator refuses: the first line fails, and nothing else is read for it (the rest '-').
    "binding-url": ({"binding_url": "https://api.example.com"}, {"binding": "--allowed-api-url"}),
    "partition": ({"partition": "nosuch"}, {"partition": "sinfo -h -o %P"}),
    "partition-down": ({"partition_state": "DOWN"}, {"partition": "State=UP"}),
    "slurmrestd-unreachable": ({"slurm_url": "dead"}, {"partition": "that slurmrestd runs"}),
    "slurm-token": ({"lifespan": 1800}, {"slurm-token": "scontrol token username=k8sop"}),
}
SLURM_CASES = ["partition", "partition-down", "slurmrestd-unreachable", "slurm-token"]


def test_the_broken_set_ups_fail_every_check() -> None:
    assert {c for _, fails in BROKEN.values() for c in fails} == set(doctor.READS)


def _bare_scheduler(kube, emulator, slurm, ns: str) -> tuple[list[str], str]:
    """A Ready SUNK 7 scheduler pod without --scheduler-name or --slurm-kill-wait, no scheduler.conf,
    no slurm.conf: nothing says its name, kill-wait or scope."""
    kube.core.create_namespaced_pod(ns, {
        "metadata": {"name": "slurm-scheduler-0", "labels": {"app.kubernetes.io/name": "sunk-scheduler"}},
        "spec": {"serviceAccountName": "slurm-scheduler", "containers": [{"name": "scheduler", "image": "sunk:7"}]}})
    kube.core.patch_namespaced_pod_status("slurm-scheduler-0", ns, {"status": {
        "phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}})
    n = node(kube)
    slurmd(kube, ns, n, "8", "32Gi")
    create_token_secret(kube, ns)
    slurm_secret(kube, ns, slurm)
    runner = new_runner(emulator, {"base": {}})
    return prerequisites(ns, runner, emulator, slurm, uniq("ds-none")), runner


def _broken(kube, emulator, slurm, ns: str, how: dict[str, Any]) -> tuple[list[str], str]:
    from sunk_sandbox_devtools.devcluster import free_port

    if how.get("bare"):
        return _bare_scheduler(kube, emulator, slurm, ns)
    knobs = {k: v for k, v in how.items() if k in ("kill_wait", "covered", "permitted", "slurmd_cpu", "token", "policy",
                                                   "ready", "lifespan")}
    runner, sandbox_ns = setup(kube, emulator, slurm, ns, **knobs)
    if "binding_url" in how:
        kube.create_binding(ns, "b", binding(ns, runner, how["binding_url"], slurm, sandbox_ns))
        return [f"{ns}/b", *ALLOW], runner
    partition = how.get("partition", PARTITION)
    if "partition_state" in how:
        partition = uniq("down")
        slurm.create_partition(partition, how["partition_state"])
    url = f"http://127.0.0.1:{free_port()}" if how.get("slurm_url") == "dead" else None   # nothing listens there
    return prerequisites(ns, runner, emulator, slurm, sandbox_ns, partition, url), runner


@pytest.mark.parametrize("case", [c for c in BROKEN if c not in SLURM_CASES])
def test_a_broken_set_up_fails_its_checks_and_names_the_fix(installed, emulator, slurm_host, ns, case) -> None:
    _fails_its_checks(installed, emulator, slurm_host, ns, case)


@pytest.mark.parametrize("case", SLURM_CASES)
def test_a_broken_slurm_side_fails_its_checks_on_each_release(installed, emulator, slurm, ns, case) -> None:
    _fails_its_checks(installed, emulator, slurm, ns, case)


def _fails_its_checks(installed, emulator, slurm, ns: str, case: str) -> None:
    how, fails = BROKEN[case]
    args, runner = _broken(installed, emulator, slurm, ns, how)
    out = run(installed, *args)
    assert out.returncode == 1, out.stdout + out.stderr
    parsed = {c["id"]: c for c in json.loads(run(installed, *args, "-o", "json").stdout)["checks"]}
    for check, fix in fails.items():
        c = parsed[check]
        assert c["ok"] is False and fix in c["fix"], (check, c)
        line = next(x for x in out.stdout.splitlines() if x.startswith(f"✗ {c['name']}:"))
        assert line.endswith(f"— fix: {c['fix']}"), line
    others = [c for i, c in parsed.items() if i not in fails and c["ok"] is False]
    assert not others, others  # each set-up breaks only what it means to
    assert out.stdout.splitlines()[-1] == f"{len(fails)} check(s) failed"
    if case == "binding-url":  # refused: the token was sent nowhere, and no other check read anything
        assert not calls(emulator, runner, "GetManagedRunner")
        assert all(c["ok"] is None for i, c in parsed.items() if i != "binding")
