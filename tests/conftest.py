"""Shared fixtures: one real control plane per session, the operator as its own ServiceAccount.

Integration and e2e tests talk to a real etcd + kube-apiserver (RBAC and admission on). The
operator runs as a subprocess (as in production) authenticated with a TokenRequest token of the
ServiceAccount that manifests/ ships, so a permission the RBAC lacks fails the test.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from pathlib import Path
from typing import Callable

import pytest

REPO = Path(__file__).resolve().parents[1]
DEVTOOLS_PATH = REPO / "operator"  # sunk_sandbox_devtools is not installed (not in the wheel)
OPERATOR_NS = "sunk-sandbox-operator-system"
OPERATOR_SA = "sunk-sandbox-operator"
OPERATOR_USER = f"system:serviceaccount:{OPERATOR_NS}:{OPERATOR_SA}"


def pytest_collection_modifyitems(config, items):
    """Tests that need a tool `make test` builds in the background (sunk_sandbox_devtools.tools) run
    last, in the order the tools are built: the rest of the suite runs while they build."""
    from sunk_sandbox_devtools.tools import ORDER

    def late(item) -> int:  # a test that needs several tools waits for the last one built
        return max((ORDER.index(mark.args[0]) + 1 for mark in item.iter_markers("needs_tool")), default=0)
    items.sort(key=late)  # stable: the order within each group is kept


@pytest.fixture(scope="session")
def cluster():
    from sunk_sandbox_devtools import devcluster

    # The API server audits the operator's requests (metadata only): tests check what it wrote.
    c = devcluster.temp_cluster(audited_users=(OPERATOR_USER,))
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

    def binding_exists(self, namespace: str, name: str) -> bool:
        """False once the API server has removed it (404); any other error is raised."""
        from kubernetes.client.rest import ApiException

        try:
            self.binding(namespace, name)
            return True
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise

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


def assert_stays(check: Callable[[], None], seconds: float, interval: float = 0.25) -> int:
    """Assert that something does not happen during the next `seconds`.

    `check` asserts the invariant (plain `assert`s in a test module: pytest's rewriting shows
    the observed counts). It runs now, every `interval` seconds, and once more at the end of the
    window; the first violation fails at once, saying when it was seen. Returns the number of polls.
    """
    started = time.monotonic()
    deadline = started + seconds
    polls = 0
    while True:
        done = time.monotonic() >= deadline
        polls += 1
        try:
            check()
        except AssertionError as exc:
            raise AssertionError(f"stopped holding {time.monotonic() - started:.2f}s into a {seconds:g}s window "
                                 f"(poll {polls}): {exc}") from exc
        if done:
            return polls
        time.sleep(max(0.0, min(interval, deadline - time.monotonic())))


def devtools_env(**extra: str) -> dict[str, str]:
    """The environment for `python -m sunk_sandbox_devtools` in a subprocess (as the Makefile runs it)."""
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(DEVTOOLS_PATH), *([path] if path else [])]), **extra}


@pytest.fixture(scope="session")
def kube(cluster) -> Kube:
    return apply_crd(Kube(cluster))


def apply_crd(k: Kube) -> Kube:
    k.kubectl("apply", "--server-side", "-f", str(REPO / "crds" / "sunksandboxbindings.yaml"))

    def established():
        crd = k.ext.read_custom_resource_definition("sunksandboxbindings.sunksandbox.dev")
        return any(c.type == "Established" and c.status == "True" for c in (crd.status.conditions or []))
    wait_for(established, 60)
    return k


def install_manifests(k: Kube, slurm_ns: str = "tenant-slurm") -> Kube:
    """The CRD and the shipped manifests (namespace, ServiceAccount, RBAC, Deployment...), server-side."""
    apply_crd(k)
    k.kubectl("create", "namespace", slurm_ns, check=False)  # the documented prerequisite
    rendered = k.kubectl("kustomize", str(REPO / "manifests")).stdout
    k.kubectl("apply", "--server-side", "-f", "-", input=rendered)
    return k


@pytest.fixture(scope="session")
def installed(kube) -> Kube:
    """The shipped manifests (CRD, namespace, ServiceAccount, RBAC, Deployment...) applied server-side."""
    return install_manifests(kube)


@pytest.fixture(scope="session")
def operator_kubeconfig(installed, tmp_path_factory) -> Path:
    return installed.cluster.service_account_kubeconfig(
        OPERATOR_NS, OPERATOR_SA, tmp_path_factory.mktemp("operator") / "operator.kubeconfig")


# A short propagation window, so the placement tests see it open and close in seconds. The runner
# API is the emulator on a loopback port: plain http to it must be allowed explicitly (the default
# allows only https://api.coreweave.com). Tests resync bindings every second or two: the admin's
# floor (default 30 s) is lowered to let them.
LOOPBACK_API = {"SSB_ALLOWED_API_URLS": "http://127.0.0.1:*"}
FAST_RESYNC = {"SSB_MIN_RESYNC_INTERVAL": "1s"}
# An allowed entry with a path (never resolved: nothing in the tests uses it), for the path-escape
# attacks (tests/integration/attacks.py): `.../runner/../admin` must not pass as below it.
GATEWAY_API = "https://gw.example.com/runner"
# The test Slurm's slurmrestd listens on a free loopback port (tests/integration/conftest.py `slurm`);
# the poller reads it every second and a pending reason counts once it lasted 3 s over 2 polls.
LOOPBACK_SLURM = {"SSB_ALLOWED_SLURM_URLS": "http://127.0.0.1:*"}
FAST_SLURM = {"SSB_SLURM_POLL_SECONDS": "1", "SSB_SLURM_PENDING_SECONDS": "3", "SSB_SLURM_PENDING_POLLS": "2"}
# The tests' bindings live in random namespaces and grant in random ones: the admin trusts every binding
# author here (`*=*`). The shipped default, no grant anywhere, is tested by its own operator
# (tests/integration/test_grants_bound.py).
ALL_GRANTS = {"SSB_ALLOWED_GRANTS": "*=*"}
TEST_ENV = {"SSB_STATUS_MIN_INTERVAL_SECONDS": "1", "SSB_HAZARD_EVENT_INTERVAL_SECONDS": "1", **ALL_GRANTS,
            "SSB_RESTORE_RETRIES": "3", "SSB_RESTORE_RETRY_DELAY_SECONDS": "1",
            "SSB_POLICY_PROPAGATION_SECONDS": "6", **FAST_RESYNC, **LOOPBACK_SLURM, **FAST_SLURM,
            "SSB_ALLOWED_API_URLS": f"{LOOPBACK_API['SSB_ALLOWED_API_URLS']},{GATEWAY_API}"}
PROPAGATION_SECONDS = 6.0


@pytest.fixture(scope="session")
def operator(operator_kubeconfig, installed, tmp_path_factory):
    """One operator process for the session, as its own ServiceAccount."""
    from sunk_sandbox_devtools.devcluster import OperatorProcess

    proc = OperatorProcess(operator_kubeconfig, tmp_path_factory.mktemp("operator-logs") / "operator.log",
                           env=TEST_ENV, args=("--log-format=json",))  # as the shipped Deployment runs it
    try:
        yield proc
    finally:
        proc.stop()
        assert_no_secret_leaked(installed, {"operator log": proc.logs()})


# Secret values the tests made (tokens are distinctive strings in tests). The closing check also reads
# every Opaque Secret left in the cluster, so a value a test forgot to add here (a Slurm JWT, an
# env-file Secret) is covered too.
SECRET_VALUES: list[str] = []
MIN_SECRET_PIECE = 8  # shorter pieces of a value (a key name, `token`) are ordinary words


def secret_pieces(value: str) -> set[str]:
    """The forms a secret value may take in a text that leaked it: whole, each line, the value of each
    `KEY=VALUE` line (an env-file Secret), each part of a JWT, and escaped as a repr or JSON prints it
    (h11 quotes `b'...\\n...'`)."""
    value = value.strip()
    pieces = {value, repr(value)[1:-1], json.dumps(value)[1:-1]}
    for line in value.splitlines():
        pieces.add(line.strip())
        pieces.add(line.partition("=")[2].strip())
    for part in list(pieces):
        pieces.update(part.split("."))  # a JWT's header, claims and signature
    return {p for p in pieces if len(p) >= MIN_SECRET_PIECE}


def cluster_secret_values(k: "Kube") -> list[str]:
    """The values of every Opaque Secret in the cluster (the tests' tokens), decoded."""
    import base64

    out = []
    for secret in k.core.list_secret_for_all_namespaces().items:
        if secret.type not in (None, "Opaque"):
            continue
        for raw in (secret.data or {}).values():
            try:
                out.append(base64.b64decode(raw).decode())
            except (ValueError, UnicodeDecodeError):
                continue
    return out


def leaked_pieces(text: str, values: list[str]) -> list[str]:
    return sorted({p for v in values for p in secret_pieces(v) if p in text})


def assert_no_secret_leaked(k: "Kube", texts: dict[str, str]) -> None:
    """No secret value, nor a piece of one, in `texts` (logs, doctor output), in any Event or in any
    binding's status."""
    events = json.dumps(k.api.sanitize_for_serialization(k.core.list_event_for_all_namespaces()))
    bindings = json.dumps(k.custom.list_cluster_custom_object("sunksandbox.dev", "v1alpha1", "sunksandboxbindings"))
    values = [*SECRET_VALUES, *cluster_secret_values(k)]
    for where, text in {**texts, "events": events, "binding status": bindings}.items():
        found = leaked_pieces(text, values)
        assert not found, f"{len(found)} piece(s) of a secret value appeared in the {where}"


@pytest.fixture
def ns(kube, request) -> str:
    """A fresh namespace per test (never cleaned up: no controller-manager finishes deletions)."""
    name = f"t-{request.node.name[:30].lower().replace('_', '-').strip('-')}-{uuid.uuid4().hex[:5]}"
    name = "".join(ch for ch in name if ch.isalnum() or ch == "-")
    kube.create_namespace(name)
    return name
