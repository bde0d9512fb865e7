"""`python -m sunk_sandbox_devtools demo`: the whole loop on this machine, in about a minute.

A local control plane, the runner API emulator, simulated SUNK scheduler objects, the operator
(as its own ServiceAccount under the shipped RBAC), the example binding; then a new user's
sandbox namespace with a Pending sandbox pod. Prints the binding, the policy and the scope
before and after.
"""

from __future__ import annotations

import argparse
import json
import secrets
import tempfile
import time
from pathlib import Path

import yaml

from sunk_sandbox_operator.adapters.runnerapi.emulator import EmulatorState, running_emulator

from . import devcluster

NS = "tenant-slurm"
RUNNER = "runner-7f3a"
INITIAL_POLICY = {
    "base": {"metadata": {"annotations": {"team": "rl-research"}}},
    "constraints": {"network": {"egress": {"allow": ["pypi.org"]}}},
}
SCHEDULER_CONF = """\
# SUNK 8 scheduler configuration (rendered by the Slurm Helm chart)
scheduler:
  name: slurm-scheduler
  scope:
    type: namespace
    namespaces:
      - tenant-slurm
"""


def _section(title: str) -> None:
    print(f"\n=== {title} " + "=" * max(0, 66 - len(title)), flush=True)


def _wait(check, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.2)
    raise RuntimeError(f"timed out waiting for {what}")


def _apply(cluster: devcluster.DevCluster, obj) -> None:
    text = obj if isinstance(obj, str) else json.dumps(obj)
    cluster.kubectl_run("apply", "--server-side", "-f", "-", input=text)


def _simulated_sunk(cluster: devcluster.DevCluster) -> None:
    """What SUNK's Helm chart would have created: scheduler ConfigMap, Deployment, a Ready pod."""
    labels = {"app.kubernetes.io/name": "sunk-scheduler"}
    container = {"name": "scheduler", "image": "registry.example/sunk-scheduler:8.1",
                 "args": ["--slurm-kill-wait=60s"]}
    _apply(cluster, {"apiVersion": "v1", "kind": "ConfigMap",
                     "metadata": {"name": "slurm-scheduler-config", "namespace": NS,
                                  "labels": {"app.kubernetes.io/component": "scheduler"}},
                     "data": {"scheduler.conf": SCHEDULER_CONF}})
    _apply(cluster, {"apiVersion": "apps/v1", "kind": "Deployment",
                     "metadata": {"name": "slurm-scheduler", "namespace": NS, "labels": labels},
                     "spec": {"replicas": 1, "selector": {"matchLabels": labels},
                              "template": {"metadata": {"labels": labels},
                                           "spec": {"serviceAccountName": "slurm-scheduler",
                                                    "containers": [container]}}}})
    _apply(cluster, {"apiVersion": "v1", "kind": "Pod",
                     "metadata": {"name": "slurm-scheduler-7d9f-abcde", "namespace": NS, "labels": labels},
                     "spec": {"serviceAccountName": "slurm-scheduler", "containers": [container]}})
    # No kubelet here: mark the scheduler pod Ready ourselves.
    cluster.kubectl_run("patch", "pod", "-n", NS, "slurm-scheduler-7d9f-abcde", "--subresource=status",
                        "--type=merge", "-p", json.dumps({"status": {
                            "phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}))


def _scope(cluster: devcluster.DevCluster) -> str:
    out = cluster.kubectl_run("get", "configmap", "-n", NS, "slurm-scheduler-config",
                              "-o", "jsonpath={.data.scheduler\\.conf}").stdout
    return out.strip()


def _binding(cluster: devcluster.DevCluster) -> dict:
    return json.loads(cluster.kubectl_run("get", "ssb", "-n", NS, "cpu-sandboxes", "-o", "json").stdout)


def _condition(binding: dict, ctype: str) -> dict:
    return next((c for c in (binding.get("status") or {}).get("conditions", []) if c["type"] == ctype), {})


def run(workdir: Path, keep: bool = False) -> int:
    repo = devcluster.REPO_ROOT
    _section("1. local control plane (etcd + kube-apiserver)")
    cluster = devcluster.DevCluster(workdir / "cluster").start()
    token = "demo-" + secrets.token_hex(16)
    state = EmulatorState(admin_tokens={token})
    state.add_runner(RUNNER, INITIAL_POLICY)
    operator = None
    try:
        with running_emulator(state) as emu:
            print(f"kube-apiserver {cluster.server}; runner API emulator {emu.url}")
            _section("2. install: CRD + manifests (kubectl apply --server-side -k manifests/)")
            cluster.kubectl_run("create", "namespace", NS)
            rendered = cluster.kubectl_run("kustomize", str(repo / "manifests")).stdout
            print(cluster.kubectl_run("apply", "--server-side", "-f", "-", input=rendered).stdout.strip())
            _wait(lambda: "True" in cluster.kubectl_run(
                "get", "crd", "sunksandboxbindings.sunksandbox.dev", "-o",
                "jsonpath={.status.conditions[?(@.type=='Established')].status}", check=False).stdout, 30,
                "the CRD to be established")
            _simulated_sunk(cluster)
            # Through stdin, not argv: the token never shows in a process list or an error message.
            _apply(cluster, {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "coreweave-api", "namespace": NS},
                             "stringData": {"token": token}})

            _section("3. operator (as ServiceAccount sunk-sandbox-operator, shipped RBAC)")
            kubeconfig = cluster.service_account_kubeconfig("sunk-sandbox-operator-system", "sunk-sandbox-operator",
                                                            workdir / "operator.kubeconfig")
            # The emulator stands in for api.coreweave.com on a loopback port: the operator allows plain
            # http only to a loopback URL it is told to allow (the default is https://api.coreweave.com).
            # The example binding grants the scheduler's role in its sandbox namespaces (ds-*) and its own:
            # the admin says where bindings of tenant-slurm may (--allow-grant; none by default).
            operator = devcluster.OperatorProcess(kubeconfig, workdir / "operator.log",
                                                  env={"SSB_ALLOWED_API_URLS": "http://127.0.0.1:*",
                                                       "SSB_ALLOWED_GRANTS": f"{NS}=ds-*,{NS}"})
            print(f"operator running (pid {operator.proc.pid}), log: {operator.log_path}")

            _section("policy BEFORE (runner " + RUNNER + ")")
            print(json.dumps(state.runners[RUNNER]["policy"], indent=2))
            _section("scope BEFORE (scheduler.conf)")
            print(_scope(cluster))

            _section("4. kubectl apply -f manifests/examples/binding.yaml")
            binding = yaml.safe_load((repo / "manifests" / "examples" / "binding.yaml").read_text())
            binding["spec"]["runner"]["apiURL"] = emu.url  # the emulator stands in for api.coreweave.com
            _apply(cluster, binding)
            started = time.monotonic()
            _wait(lambda: _condition(_binding(cluster), "PolicySynced").get("status") == "True", 60,
                  "PolicySynced=True")
            print(f"PolicySynced=True after {time.monotonic() - started:.1f}s")

            _section("5. a new user's sandbox namespace ds-alice with a Pending sandbox pod")
            cluster.kubectl_run("create", "namespace", "ds-alice")
            _apply(cluster, {"apiVersion": "v1", "kind": "Pod", "metadata": {
                "name": "sandbox-5f2c", "namespace": "ds-alice",
                "labels": {"sandbox.coreweave.com/sandbox-id": "5f2c"},
                "annotations": {"sunk.coreweave.com/partition": "sandboxes", "sunk.coreweave.com/account": "ml",
                                "sunk.coreweave.com/qos": "normal", "sunk.coreweave.com/constraint": "cpu",
                                "sunk.coreweave.com/exclusive": "none"}},
                "spec": {"schedulerName": "slurm-scheduler", "containers": [{
                    "name": "sandbox", "image": "python:3.12",
                    "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "1Gi"}}}]}})
            started = time.monotonic()
            _wait(lambda: "ds-alice" in _scope(cluster), 30, "ds-alice in the scheduler scope")
            print(f"ds-alice in the scheduler's scope after {time.monotonic() - started:.2f}s")
            _wait(lambda: _condition(_binding(cluster), "PlacementVerified").get("status") == "True", 30,
                  "PlacementVerified=True")

            _section("policy AFTER")
            print(json.dumps(state.runners[RUNNER]["policy"], indent=2))
            _section("scope AFTER (scheduler.conf)")
            print(_scope(cluster))
            _section("kubectl get ssb -o wide")
            print(cluster.kubectl_run("get", "ssb", "-A", "-o", "wide").stdout.rstrip())
            _section("conditions")
            for cond in _binding(cluster)["status"]["conditions"]:
                print(f"{cond['type']:<18} {cond['status']:<8} {cond['reason']:<22} {cond.get('message', '')[:90]}")
            if keep:
                print(f"\nkept running: export KUBECONFIG={cluster.kubeconfig}  (Ctrl-C to stop)")
                while True:
                    time.sleep(3600)
        print("\ndemo complete")
        return 0
    finally:
        if operator is not None:
            operator.stop()
        cluster.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sunk_sandbox_devtools demo", description=__doc__.splitlines()[0])
    parser.add_argument("--keep", action="store_true", help="keep everything running at the end")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="ssb-demo-") as tmp:
        try:
            return run(Path(tmp), keep=args.keep)
        except KeyboardInterrupt:
            return 130
