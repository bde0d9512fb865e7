"""Integration fixtures: the runner API emulator over loopback, simulated SUNK objects, tokens."""

from __future__ import annotations

import json
import uuid
from typing import Iterator

import pytest
from kubernetes.client.rest import ApiException

from tests.conftest import SECRET_VALUES, Kube

ADMIN_TOKEN = "tok-admin-" + uuid.uuid4().hex
READONLY_TOKEN = "tok-readonly-" + uuid.uuid4().hex
SECRET_VALUES.extend([ADMIN_TOKEN, READONLY_TOKEN])
SECRET_READER = "sunk-sandbox-operator-secret-reader"
TARGETS_ROLE = "sunk-sandbox-operator-targets"  # manifests/rbac-targets.yaml
OPERATOR_SUBJECT = {"kind": "ServiceAccount", "name": "sunk-sandbox-operator", "namespace": "sunk-sandbox-operator-system"}


@pytest.fixture(scope="session")
def emulator() -> Iterator:
    from sunk_sandbox_operator.adapters.runnerapi.emulator import EmulatorState, running_emulator

    state = EmulatorState(admin_tokens={ADMIN_TOKEN}, readonly_tokens={READONLY_TOKEN})
    with running_emulator(state) as emu:
        yield emu


def new_runner(emulator, policy: dict | None = None) -> str:
    runner_id = "runner-" + uuid.uuid4().hex[:8]
    with emulator.state.lock:
        emulator.state.add_runner(runner_id, policy)
    return runner_id


def runner_policy(emulator, runner_id: str):
    with emulator.state.lock:
        return json.loads(json.dumps(emulator.state.runners[runner_id]["policy"]))


def writes(emulator, runner_id: str, who: str | None = None) -> list[dict]:
    with emulator.state.lock:
        return [w for w in emulator.state.write_log
                if w["runner_id"] == runner_id and (who is None or w["who"] == who)]


def calls(emulator, runner_id: str, method: str | None = None) -> list[dict]:
    with emulator.state.lock:
        return [c for c in emulator.state.call_log
                if c.get("runner_id") == runner_id and (method is None or c.get("method") == method)]


def grant_operator(kube: Kube, ns: str, *, secrets: bool = True, targets: bool = True) -> None:
    """What an admin does for each Slurm namespace (bindings, their scheduler and scope target): the
    RoleBindings the shipped ones are in tenant-slurm. `secrets`: `get` on Secrets there
    (rbac-secrets.yaml); `targets`: read and write the scheduler's objects and the scope target there
    (rbac-targets.yaml). One that already exists is kept (tenant-slurm ships both)."""
    for wanted, name, role in ((secrets, "sunk-sandbox-operator-secrets", SECRET_READER),
                               (targets, "sunk-sandbox-operator-targets", TARGETS_ROLE)):
        if not wanted:
            continue
        try:
            kube.rbac.create_namespaced_role_binding(ns, {
                "metadata": {"name": name},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
                "subjects": [OPERATOR_SUBJECT]})
        except ApiException as exc:
            if exc.status != 409:
                raise


def grant_secret_read(kube: Kube, ns: str) -> None:
    """The old name: every caller sets up a namespace holding a binding and its scheduler."""
    grant_operator(kube, ns)


def create_token_secret(kube: Kube, ns: str, token: str = ADMIN_TOKEN, name: str = "coreweave-api") -> None:
    kube.core.create_namespaced_secret(ns, {"metadata": {"name": name}, "stringData": {"token": token}})


def make_scheduler(kube: Kube, ns: str, *, name: str = "slurm-scheduler", style: int = 8, kill_wait: str | None = "60s",
                   ready: bool = True, scope_namespaces=None, extra_conf: str = "", permitted: bool = True) -> None:
    """Simulated SUNK scheduler objects: SUNK 8 (ConfigMap + pod) or SUNK 7 (Deployment + pod with args).
    `permitted`: its ServiceAccount may watch and bind pods everywhere (a ClusterRoleBinding to the
    shipped sunk-scheduler-sandbox, as some installs grant it), so the operator's check passes."""
    if permitted:
        try:
            kube.rbac.create_cluster_role_binding({
                "metadata": {"name": f"sunk-scheduler-{ns}"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                            "name": "sunk-scheduler-sandbox"},
                "subjects": [{"kind": "ServiceAccount", "name": "slurm-scheduler", "namespace": ns}]})
        except ApiException as exc:
            if exc.status != 409:  # a second scheduler in the same namespace
                raise
    labels = {"app.kubernetes.io/name": "sunk-scheduler"}
    args = [f"--slurm-kill-wait={kill_wait}"] if kill_wait else []
    if style == 7:
        args.append(f"--scheduler-name={name}")
    else:
        conf = f"scheduler:\n  name: {name}\n  scope:\n    type: namespace\n"
        if scope_namespaces is not None:
            conf += f"    namespaces: {json.dumps(scope_namespaces)}\n"
        kube.core.create_namespaced_config_map(ns, {
            "metadata": {"name": "slurm-scheduler-config",
                         "labels": {"app.kubernetes.io/component": "scheduler"}},
            "data": {"scheduler.conf": conf + extra_conf}})
    template = {"metadata": {"labels": labels},
                "spec": {"serviceAccountName": "slurm-scheduler",
                         "containers": [{"name": "scheduler", "image": "sunk/scheduler:8", "args": args}]}}
    kube.apps.create_namespaced_deployment(ns, {
        "metadata": {"name": "slurm-scheduler", "labels": labels},
        "spec": {"replicas": 1, "selector": {"matchLabels": labels}, "template": template}})
    pod = kube.core.create_namespaced_pod(ns, {"metadata": {"name": "slurm-scheduler-0", **template["metadata"]},
                                               "spec": template["spec"]})
    set_pod_ready(kube, ns, pod.metadata.name, ready)


def roll_out(kube: Kube, ns: str, name: str = "slurm-scheduler") -> int:
    """Play the Deployment controller (the test control plane runs none): the Deployment's current
    template rolled out, every replica updated and available. Returns the generation rolled out."""
    dep = kube.apps.read_namespaced_deployment(name, ns)
    n = dep.spec.replicas if dep.spec.replicas is not None else 1
    kube.apps.patch_namespaced_deployment_status(name, ns, {"status": {
        "observedGeneration": dep.metadata.generation, "replicas": n, "updatedReplicas": n, "readyReplicas": n,
        "availableReplicas": n}})
    return dep.metadata.generation


def set_pod_ready(kube: Kube, ns: str, name: str, ready: bool) -> None:
    kube.core.patch_namespaced_pod_status(name, ns, {"status": {
        "phase": "Running" if ready else "Pending",
        "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}})


def binding_spec(runner_id: str, emulator, **overrides) -> dict:
    spec = {"runner": {"id": runner_id, "apiURL": emulator.url, "tokenSecretRef": {"name": "coreweave-api"}},
            "partition": "sandboxes",
            "sandboxNamespaces": {"names": ["ds-never-*"]}}
    spec.update(overrides)
    return spec


@pytest.fixture
def binding_ns(installed, ns) -> str:
    """A namespace ready for bindings: token Secret, the operator's grants, a SUNK 8 scheduler."""
    grant_operator(installed, ns)
    create_token_secret(installed, ns)
    make_scheduler(installed, ns)
    return ns


# Each Slurm test runs against every release: 22.05 from the host's packages, 24.11 and 26.05 from the
# chroots `make test` builds in the background (so those run late: the needs_tool marker).
SLURM_RELEASES = [pytest.param("22.05", id="slurm-22.05"),
                  pytest.param("24.11", id="slurm-24.11", marks=pytest.mark.needs_tool("slurm")),
                  pytest.param("26.05", id="slurm-26.05", marks=pytest.mark.needs_tool("slurm"))]


@pytest.fixture(scope="session")
def slurm_pool() -> Iterator:
    """Real Slurms for the session (sunk_sandbox_devtools/slurm.py): slurmctld + slurmd + slurmrestd
    (JWT) on free loopback ports, one per release, started on first use and stopped at the end. Tests
    play the SUNK scheduler's part by submitting placeholder jobs through slurmrestd (`slurm.submit`)."""
    from sunk_sandbox_devtools import slurm as harness

    running: dict[str, object] = {}

    def get(release: str):
        if release not in running:
            cluster = harness.temp_cluster(release)
            print(f"\nSlurm {release} (slurmctld + slurmd + slurmrestd) started in {cluster.started_in:.2f}s at "
                  f"{cluster.url}")
            running[release] = cluster
        return running[release]
    try:
        yield get
    finally:
        for release, cluster in running.items():
            print(f"\nSlurm {release} stopped in {cluster.stop():.2f}s")  # type: ignore[attr-defined]


@pytest.fixture(params=SLURM_RELEASES)
def slurm(request, slurm_pool):
    """A real Slurm of each release in turn (the test runs once per release)."""
    return slurm_pool(request.param)


@pytest.fixture
def slurm_host(slurm_pool):
    """The host's Slurm 22.05 only: for tests whose subject is not Slurm's version."""
    return slurm_pool("22.05")
