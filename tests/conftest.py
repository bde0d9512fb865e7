"""Shared fixtures: one real control plane per session, the operator as its own ServiceAccount.

Integration and e2e tests talk to a real etcd + kube-apiserver (RBAC and admission on). The
operator runs as a subprocess (as in production) authenticated with a TokenRequest token of the
ServiceAccount that manifests/ ships, so a permission the RBAC lacks fails the test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Callable, Iterator

import pytest

REPO = Path(__file__).resolve().parents[1]
OPERATOR_NS = "sunk-sandbox-operator-system"
OPERATOR_SA = "sunk-sandbox-operator"


@pytest.fixture(scope="session")
def cluster():
    from sunk_sandbox_operator import devcluster

    c = devcluster.temp_cluster()
    os.environ["SSB_TEST_KUBECONFIG"] = str(c.kubeconfig)
    try:
        yield c
    finally:
        c.stop()


class Kube:
    """Admin access for test setup and assertions (the operator never uses this)."""

    def __init__(self, cluster) -> None:
        import kubernetes

        self.cluster = cluster
        self.api = kubernetes.config.new_client_from_config(config_file=str(cluster.kubeconfig))
        self.core = kubernetes.client.CoreV1Api(self.api)
        self.apps = kubernetes.client.AppsV1Api(self.api)
        self.rbac = kubernetes.client.RbacAuthorizationV1Api(self.api)
        self.custom = kubernetes.client.CustomObjectsApi(self.api)
        self.ext = kubernetes.client.ApiextensionsV1Api(self.api)

    def kubectl(self, *args: str, input: str | None = None, check: bool = True,
                kubeconfig: Path | None = None) -> subprocess.CompletedProcess:
        return self.cluster.kubectl_run(*args, input=input, check=check, kubeconfig=kubeconfig)

    def apply(self, obj: dict | str, check: bool = True) -> subprocess.CompletedProcess:
        text = obj if isinstance(obj, str) else json.dumps(obj)
        return self.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=text, check=check)

    def binding(self, namespace: str, name: str) -> dict:
        return self.custom.get_namespaced_custom_object("sunksandbox.dev", "v1alpha1", namespace,
                                                        "sunksandboxbindings", name)

    def create_binding(self, namespace: str, name: str, spec: dict) -> dict:
        body = {"apiVersion": "sunksandbox.dev/v1alpha1", "kind": "SunkSandboxBinding",
                "metadata": {"name": name, "namespace": namespace}, "spec": spec}
        return self.custom.create_namespaced_custom_object("sunksandbox.dev", "v1alpha1", namespace,
                                                           "sunksandboxbindings", body)

    def condition(self, namespace: str, name: str, ctype: str) -> dict | None:
        conds = (self.binding(namespace, name).get("status") or {}).get("conditions") or []
        return next((c for c in conds if c["type"] == ctype), None)

    def wait_condition(self, namespace: str, name: str, ctype: str, status: str | None = None,
                       reason: str | None = None, timeout: float = 30.0) -> dict:
        def check():
            cond = self.condition(namespace, name, ctype)
            if cond and (status is None or cond["status"] == status) and (reason is None or cond["reason"] == reason):
                return cond
            return None
        return wait_for(check, timeout, lambda: f"{ctype} status={status} reason={reason}; now: "
                        f"{self.condition(namespace, name, ctype)}")

    def create_namespace(self, name: str, labels: dict | None = None) -> None:
        self.core.create_namespace({"metadata": {"name": name, "labels": labels or {}}})


def wait_for(check: Callable[[], object], timeout: float = 30.0, describe: Callable[[], str] | None = None,
             interval: float = 0.1):
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s" + (f": {describe()}" if describe else ""))
        time.sleep(interval)


@pytest.fixture(scope="session")
def kube(cluster) -> Kube:
    k = Kube(cluster)
    k.kubectl("apply", "--server-side", "-f", str(REPO / "crds" / "sunksandboxbindings.yaml"))
    def established():
        crd = k.ext.read_custom_resource_definition("sunksandboxbindings.sunksandbox.dev")
        return any(c.type == "Established" and c.status == "True" for c in (crd.status.conditions or []))
    wait_for(established, 60)
    return k


@pytest.fixture(scope="session")
def installed(kube) -> Kube:
    """The shipped manifests (CRD, namespace, ServiceAccount, RBAC, Deployment...) applied server-side."""
    kube.kubectl("create", "namespace", "tenant-slurm", check=False)  # the documented prerequisite
    rendered = kube.kubectl("kustomize", str(REPO / "manifests")).stdout
    kube.kubectl("apply", "--server-side", "-f", "-", input=rendered)
    return kube


def token_kubeconfig(kube: Kube, namespace: str, sa: str, path: Path) -> Path:
    """A kubeconfig carrying a real TokenRequest token for the ServiceAccount."""
    from sunk_sandbox_operator import devcluster

    req = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
           "spec": {"expirationSeconds": 86400, "audiences": ["https://kubernetes.default.svc"]}}
    resp = kube.core.create_namespaced_service_account_token(sa, namespace, req)
    path.write_text(devcluster.kubeconfig_text(
        kube.cluster.server, kube.cluster.ca_file.read_bytes(), token=resp.status.token, user=sa))
    return path


@pytest.fixture(scope="session")
def operator_kubeconfig(installed, tmp_path_factory) -> Path:
    return token_kubeconfig(installed, OPERATOR_NS, OPERATOR_SA,
                            tmp_path_factory.mktemp("operator") / "operator.kubeconfig")


class OperatorProcess:
    def __init__(self, kubeconfig: Path, workdir: Path, env: dict[str, str] | None = None,
                 args: tuple[str, ...] = ()) -> None:
        from sunk_sandbox_operator import devcluster

        self.metrics_port = devcluster.free_port()
        self.liveness_port = devcluster.free_port()
        self.log_path = workdir / f"operator-{uuid.uuid4().hex[:6]}.log"
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
        full_env.update({"KUBECONFIG": str(kubeconfig), "SSB_STATUS_MIN_INTERVAL_SECONDS": "1",
                         "SSB_HAZARD_EVENT_INTERVAL_SECONDS": "1", **(env or {})})
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "sunk_sandbox_operator", "run", "--verbose",
             f"--metrics-port={self.metrics_port}",
             f"--liveness=http://127.0.0.1:{self.liveness_port}/healthz", *args],
            stdout=self._log, stderr=subprocess.STDOUT, env=full_env, cwd=str(REPO))
        self._wait_alive()

    def _wait_alive(self, timeout: float = 60.0) -> None:
        import urllib.request

        def alive():
            if self.proc.poll() is not None:
                raise AssertionError(f"operator exited {self.proc.returncode}:\n{self.logs()[-4000:]}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.liveness_port}/healthz", timeout=1) as r:
                    return r.status == 200
            except Exception:
                return False
        wait_for(alive, timeout, lambda: self.logs()[-3000:])

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace")

    def metrics(self) -> str:
        import urllib.request

        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as r:
            return r.read().decode()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


@pytest.fixture(scope="session")
def operator(operator_kubeconfig, tmp_path_factory) -> Iterator[OperatorProcess]:
    """One operator process for the session, as its own ServiceAccount."""
    proc = OperatorProcess(operator_kubeconfig, tmp_path_factory.mktemp("operator-logs"))
    try:
        yield proc
    finally:
        proc.stop()
        # Secrets must never reach the logs (tokens are distinctive strings in tests).
        leaked = [t for t in SECRET_VALUES if t in proc.logs()]
        assert not leaked, "a secret value appeared in the operator log"


SECRET_VALUES: list[str] = []


@pytest.fixture
def ns(kube, request) -> str:
    """A fresh namespace per test (never cleaned up: no controller-manager finishes deletions)."""
    name = f"t-{request.node.name[:30].lower().replace('_', '-').strip('-')}-{uuid.uuid4().hex[:5]}"
    name = "".join(ch for ch in name if ch.isalnum() or ch == "-")
    kube.create_namespace(name)
    return name
