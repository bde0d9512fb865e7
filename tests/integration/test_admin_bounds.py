"""Issue 31, findings 5, 6 and 10 (first half), against a real API server, with the shipped settings.

The module has its own control plane, so its operator runs with the shipped defaults (the session's
trusts every binding author with grants), and its API server audits every request of the identity the
doctor runs as (a ServiceAccount bound to cluster-admin: the admin's credentials).

- 5: a tenant names another tenant's namespace in `sandboxNamespaces.names` and asks for grants: no
  RoleBinding there under the defaults (ScopeSynced=False GrantsNotAllowed), and with the admin's
  `--allow-grant` only the namespaces inside it get one; the scheduler's ServiceAccount the tenant
  picked cannot read the victim's pods (`kubectl auth can-i`).
- 6: an env-file Secret (`SLURM_JWT=…` and `DB_PASSWORD=…`) used as the Slurm token: neither value
  reaches status, events, the operator's log or the doctor's output.
- 10: `doctor ns/name` for a binding the operator refuses reads the binding and nothing else (the
  audit), sends nothing to the allowed runner API or slurmrestd, and says why.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Iterator

import pytest

from sunk_sandbox_operator.api.keys import BINDING_LABEL

from tests.conftest import (FAST_RESYNC, LOOPBACK_API, LOOPBACK_SLURM, OPERATOR_NS, OPERATOR_SA, SECRET_VALUES, Kube,
                            assert_no_secret_leaked, install_manifests, leaked_pieces, wait_for)
from tests.integration.conftest import (ADMIN_TOKEN, READONLY_TOKEN, binding_spec, calls, create_token_secret,
                                        grant_operator, make_scheduler, new_runner)

pytestmark = pytest.mark.integration

BIN = Path(sys.executable).parent
ATTACKER, VICTIM, OWN_SANDBOX = "t-attacker", "t-victim", "att-sbx-1"
SCHEDULER_SA = f"system:serviceaccount:{ATTACKER}:slurm-scheduler"
DOCTOR_NS, DOCTOR_SA = "ssb-audit", "doctor"
DOCTOR_USER = f"system:serviceaccount:{DOCTOR_NS}:{DOCTOR_SA}"
GRANT_ROLE = "sunk-scheduler-sandbox"
# What the shipped settings do not say, and a test needs: the runner API emulator and the stand-in
# slurmrestd listen on loopback ports (plain http is allowed only when named), resyncs every second.
LOCAL = {**LOOPBACK_API, **LOOPBACK_SLURM, **FAST_RESYNC}


def jwt(user: str = "k8sop") -> str:
    enc = lambda d: base64.urlsafe_b64encode(json.dumps(d).encode()).rstrip(b"=").decode()  # noqa: E731
    return f"{enc({'alg': 'HS256', 'typ': 'JWT'})}.{enc({'exp': 4_000_000_000, 'sun': user})}.{uuid.uuid4().hex}"


SLURM_JWT = jwt()
DB_PASSWORD = "db-pw-" + uuid.uuid4().hex
ENV_FILE = f"SLURM_JWT={SLURM_JWT}\nDB_PASSWORD={DB_PASSWORD}"  # `kubectl create secret --from-env-file` gone wrong
SECRET_VALUES.extend([ENV_FILE, SLURM_JWT, DB_PASSWORD])


class Listener:
    """A stand-in slurmrestd on loopback: it counts every connection and request, answers 401."""

    def __init__(self) -> None:
        outer = self
        self.requests: list[str] = []
        self.connections = 0

        class Handler(BaseHTTPRequestHandler):
            def setup(self) -> None:
                outer.connections += 1
                super().setup()

            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                outer.requests.append(self.path)
                self.send_response(401)
                self.end_headers()

            def log_message(self, *args) -> None:
                pass
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()


@dataclass
class Plane:
    kube: Kube
    cluster: object
    kubeconfig: Path           # the operator's ServiceAccount
    doctor_kubeconfig: Path    # the audited admin
    emulator: object
    slurmrestd: Listener
    logs: Path
    runs: list = field(default_factory=list)

    def operator(self, **env: str):
        """The operator with the shipped settings plus `env` (the one before it stopped first: one leader)."""
        from sunk_sandbox_devtools.devcluster import OperatorProcess

        for proc in self.runs:
            proc.stop()
        proc = OperatorProcess(self.kubeconfig, self.logs / f"{len(self.runs):02d}.log", env={**LOCAL, **env},
                               args=("--log-format=json",))
        self.runs.append(proc)
        return proc

    def doctor(self, *args: str) -> subprocess.CompletedProcess[str]:
        """As the admin runs it: the console script, its kubeconfig, nothing of the tests' settings."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("SSB_") and k != "KUBERNETES_SERVICE_HOST"}
        env["KUBECONFIG"] = str(self.doctor_kubeconfig)
        out = subprocess.run([str(BIN / "sunk-sandbox-operator"), "doctor", *args], env=env, capture_output=True,
                             text=True, timeout=120)
        print(f"$ doctor {' '.join(args)} (exit {out.returncode})\n{out.stdout}{out.stderr}")
        return out


@pytest.fixture(scope="module")
def plane(tmp_path_factory) -> Iterator[Plane]:
    from kubernetes.client.rest import ApiException
    from sunk_sandbox_devtools import devcluster
    from sunk_sandbox_operator.adapters.runnerapi.emulator import EmulatorState, running_emulator

    cluster = devcluster.temp_cluster(audited_users=(DOCTOR_USER,))
    listener = Listener()
    try:
        kube = install_manifests(Kube(cluster))
        work = tmp_path_factory.mktemp("admin-bounds")
        kubeconfig = cluster.service_account_kubeconfig(OPERATOR_NS, OPERATOR_SA, work / "operator.kubeconfig")
        kube.create_namespace(DOCTOR_NS)
        kube.core.create_namespaced_service_account(DOCTOR_NS, {"metadata": {"name": DOCTOR_SA}})
        try:
            kube.rbac.create_cluster_role_binding({
                "metadata": {"name": "ssb-audit-doctor"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
                "subjects": [{"kind": "ServiceAccount", "name": DOCTOR_SA, "namespace": DOCTOR_NS}]})
        except ApiException as exc:
            if exc.status != 409:
                raise
        doctor = cluster.service_account_kubeconfig(DOCTOR_NS, DOCTOR_SA, work / "doctor.kubeconfig")
        for ns in (ATTACKER, VICTIM, OWN_SANDBOX):
            kube.create_namespace(ns)
        grant_operator(kube, ATTACKER)
        create_token_secret(kube, ATTACKER)
        make_scheduler(kube, ATTACKER, permitted=False)  # its ServiceAccount may do nothing anywhere yet
        kube.core.create_namespaced_pod(VICTIM, {"metadata": {"name": "db"}, "spec": {"containers": [
            {"name": "db", "image": "postgres", "env": [{"name": "POSTGRES_PASSWORD", "value": DB_PASSWORD}]}]}})
        kube.core.create_namespaced_secret(ATTACKER, {"metadata": {"name": "slurm-env"},
                                                      "stringData": {"token": ENV_FILE}})
        state = EmulatorState(admin_tokens={ADMIN_TOKEN}, readonly_tokens={READONLY_TOKEN})
        with running_emulator(state) as emu:
            p = Plane(kube, cluster, kubeconfig, doctor, emu, listener, work)
            try:
                yield p
            finally:
                for proc in p.runs:
                    proc.stop()
                assert_no_secret_leaked(kube, {f"operator log {proc.log_path.name}": proc.logs() for proc in p.runs})
    finally:
        listener.close()
        cluster.stop()


def our_rolebindings(kube: Kube) -> dict[str, list[str]]:
    """namespace -> the grant RoleBindings the operator made there (label-selected, as it lists them)."""
    out: dict[str, list[str]] = {}
    for rb in kube.rbac.list_role_binding_for_all_namespaces(label_selector=BINDING_LABEL).items:
        out.setdefault(rb.metadata.namespace, []).append(rb.metadata.name)
    return out


def scheduler_may_list_pods(kube: Kube, namespace: str) -> bool:
    out = kube.kubectl("auth", "can-i", "list", "pods", "-n", namespace, f"--as={SCHEDULER_SA}", check=False)
    return out.stdout.strip() == "yes"


def test_a_tenant_naming_another_tenants_namespace_gets_no_grant_there(plane: Plane) -> None:
    """Finding 5. Under the shipped defaults: no RoleBinding anywhere, a condition naming the setting.
    With the admin's bound for the tenant's namespace: a RoleBinding in its own sandbox namespace only."""
    kube = plane.kube
    spec = binding_spec(new_runner(plane.emulator, {}), plane.emulator,
                        sandboxNamespaces={"names": [VICTIM, "att-sbx-*"]},
                        scope={"grantClusterRole": GRANT_ROLE}, resyncInterval="1s")
    kube.create_binding(ATTACKER, "grab", spec)
    plane.operator()  # the shipped settings: --allow-grant unset
    cond = kube.wait_condition(ATTACKER, "grab", "ScopeSynced", "False", "GrantsNotAllowed", timeout=60)
    assert "--allow-grant" in cond["message"]
    assert our_rolebindings(kube) == {}
    assert not scheduler_may_list_pods(kube, VICTIM)
    ready = kube.condition(ATTACKER, "grab", "Ready")
    assert ready is not None and (ready["status"], ready["reason"]) == ("False", "GrantsNotAllowed")

    plane.operator(SSB_ALLOWED_GRANTS=f"{ATTACKER}=att-sbx-*")  # the admin's bound: the tenant's own prefix
    wait_for(lambda: OWN_SANDBOX in our_rolebindings(kube), 60, lambda: f"grants: {our_rolebindings(kube)}")
    cond = kube.wait_condition(ATTACKER, "grab", "ScopeSynced", "False", "SchedulerNotPermitted", timeout=30)
    assert f"{VICTIM} are outside where the operator's admin lets bindings in {ATTACKER} grant" in cond["message"]
    assert set(our_rolebindings(kube)) == {OWN_SANDBOX}
    assert scheduler_may_list_pods(kube, OWN_SANDBOX) and not scheduler_may_list_pods(kube, VICTIM)
    kube.custom.delete_namespaced_custom_object("sunksandbox.dev", "v1alpha1", ATTACKER, "sunksandboxbindings", "grab")
    wait_for(lambda: not kube.binding_exists(ATTACKER, "grab"), 60, lambda: "the binding to be gone")
    assert our_rolebindings(kube) == {}


def test_an_env_file_secret_as_the_slurm_token_is_never_quoted(plane: Plane) -> None:
    """Finding 6's end result at every boundary: status, events, the operator's log (the module's
    closing check), the doctor's output. h11 refuses the value as a header and its error quotes it."""
    kube = plane.kube
    rest = {"url": plane.slurmrestd.url, "user": "k8sop", "tokenSecretRef": {"name": "slurm-env"}}
    spec = binding_spec(new_runner(plane.emulator, {}), plane.emulator, slurm={"restAPI": rest}, resyncInterval="1s")
    kube.create_binding(ATTACKER, "envfile", spec)
    if not plane.runs:
        plane.operator()
    cond = wait_for(lambda: (c := kube.condition(ATTACKER, "envfile", "SlurmReady")) and c["reason"] != "NotReconciled"
                    and c, 60, lambda: f"SlurmReady: {kube.condition(ATTACKER, 'envfile', 'SlurmReady')}")
    assert cond["reason"] in ("SlurmUnreachable", "SlurmAuthFailed", "CredentialsMissing"), cond
    time.sleep(3)  # a few resyncs: each one would quote it again
    doctor = plane.doctor(f"{ATTACKER}/envfile", "-o", "json", "--allowed-api-url", "http://127.0.0.1:*",
                          "--allowed-slurm-url", "http://127.0.0.1:*")
    assert json.loads(doctor.stdout)["binding"] == f"{ATTACKER}/envfile"
    values = [ENV_FILE, SLURM_JWT, DB_PASSWORD]
    shown = {"status": json.dumps(kube.binding(ATTACKER, "envfile")),
             "events": json.dumps(kube.api.sanitize_for_serialization(kube.core.list_namespaced_event(ATTACKER))),
             "operator log": "".join(p.logs() for p in plane.runs), "doctor output": doctor.stdout + doctor.stderr}
    for where, text in shown.items():
        assert not leaked_pieces(text, values), f"a piece of the env-file Secret appeared in the {where}"
    assert plane.slurmrestd.requests == []  # nothing reached slurmrestd with it
    kube.custom.delete_namespaced_custom_object("sunksandbox.dev", "v1alpha1", ATTACKER, "sunksandboxbindings",
                                                "envfile")


def test_the_doctor_reads_nothing_for_a_binding_the_operator_refuses(plane: Plane) -> None:
    """Finding 10 (first half): the spec names another tenant's scheduler namespace (refused), with an
    allowed runner URL and an allowed slurmrestd. The doctor, as the admin, reads the binding and
    nothing else: no Secret, nothing in the victim's namespace, no request to either URL."""
    kube = plane.kube
    runner = new_runner(plane.emulator, {})
    rest = {"url": plane.slurmrestd.url, "user": "k8sop", "tokenSecretRef": {"name": "slurm-env"}}
    spec = binding_spec(runner, plane.emulator, scheduler={"namespace": VICTIM}, sandboxNamespaces={"names": [VICTIM]},
                        slurm={"restAPI": rest})
    kube.create_binding(ATTACKER, "refused", spec)
    connections = plane.slurmrestd.connections
    before = len(plane.cluster.audit_events(DOCTOR_USER))
    out = plane.doctor(f"{ATTACKER}/refused", "-o", "json", "--allowed-api-url", "http://127.0.0.1:*",
                       "--allowed-slurm-url", "http://127.0.0.1:*")
    assert out.returncode == 1, out.stderr
    checks = json.loads(out.stdout)["checks"]
    assert checks[0]["id"] == "binding" and checks[0]["ok"] is False and "spec.scheduler.namespace" in checks[0]["detail"]
    assert all(c["ok"] is None and "the operator refuses this binding" in c["detail"] for c in checks[1:]), checks
    wait_for(lambda: len(plane.cluster.audit_events(DOCTOR_USER)) > before, 10, lambda: "the audit to record it")
    requests = [(e["verb"], e["objectRef"].get("resource"), e["objectRef"].get("namespace"), e["objectRef"].get("name"))
                for e in plane.cluster.audit_events(DOCTOR_USER)[before:]]
    assert requests == [("get", "sunksandboxbindings", ATTACKER, "refused")], requests
    assert calls(plane.emulator, runner) == [] and plane.slurmrestd.connections == connections
