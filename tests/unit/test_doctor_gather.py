"""adapters/doctor.py over the in-memory Kubernetes (FakeKube) and a fake runner: what it reads
becomes the observation core/doctor.py checks; it writes nothing, and the token goes only where
the operator's settings allow."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from sunk_sandbox_operator.adapters import doctor as gather
from sunk_sandbox_operator.adapters import kube as k
from sunk_sandbox_operator.api.spec import parse_spec
from sunk_sandbox_operator.core import doctor
from sunk_sandbox_operator.core.slurm_versions import KNOWN
from sunk_sandbox_operator.core.tenancy import TenancyPolicy

from tests.unit.fake_slurm import NEWEST, RELEASES, FakeSlurm
from tests.unit.fakes import FakeClock, FakeKube, FakeRunner
from tests.unit.test_slurm_controller import jwt

NS = "tenant-slurm"
TOKEN = "tok-doctor-unit-secret"
SCHED = {"app.kubernetes.io/name": "sunk-scheduler"}


def pod(ns: str, name: str, *, labels: dict | None = None, node: str = "", containers: list | None = None,
        grace: int | None = None, ready: bool = True, owner: str | None = None) -> dict:
    spec: dict[str, Any] = {"containers": containers or [{"name": "main"}]}
    if node:
        spec["nodeName"] = node
    if grace is not None:
        spec["terminationGracePeriodSeconds"] = grace
    meta: dict[str, Any] = {"name": name, "namespace": ns, "labels": labels or {}}
    if owner:
        meta["ownerReferences"] = [{"apiVersion": "sunk.coreweave.com/v1alpha1", "kind": "NodeSet", "name": owner,
                                    "uid": "u", "controller": True}]
    return {"metadata": meta, "spec": spec,
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def requests(cpu: str, memory: str, name: str = "main") -> dict:
    return {"name": name, "resources": {"requests": {"cpu": cpu, "memory": memory}}}


def cluster(*, slurmd_cpu: str = "8", kill_wait: str = "60s") -> FakeKube:
    kube = FakeKube()
    for ns in (NS, "ds-alice", "ds-bob", "other"):
        kube.add("namespaces", {"metadata": {"name": ns}})
    kube.add("configmaps", {"metadata": {"name": "slurm-scheduler-config", "namespace": NS,
                                         "labels": {"app.kubernetes.io/component": "scheduler"}},
                            "data": {"scheduler.conf": "scheduler:\n  name: slurm-scheduler\n  scope:\n    type: namespace\n"
                                     "    namespaces: [tenant-slurm, ds-alice, ds-bob]\n"}})
    kube.add("configmaps", {"metadata": {"name": "slurm-conf", "namespace": NS}, "data": {"slurm.conf": "KillWait=60\n"}})
    sched = pod(NS, "slurm-scheduler-0", labels=SCHED,
                containers=[{"name": "scheduler", "args": [f"--slurm-kill-wait={kill_wait}"]}])
    sched["spec"]["serviceAccountName"] = "slurm-scheduler"
    kube.add("pods", sched)
    kube.add("pods", pod(NS, "cpu-1", node="n1", owner="cpu", containers=[requests(slurmd_cpu, "32Gi", "slurmd")]))
    kube.add("nodes", {"metadata": {"name": "n1"}, "status": {"allocatable": {"cpu": "16", "memory": "64Gi"}}})
    sandbox = {"sandbox.coreweave.com/sandbox-id": "sbx1"}
    kube.add("pods", pod("ds-alice", "sbx1", labels=sandbox, node="n1", grace=30,
                         containers=[requests("500m", "512Mi")]))
    kube.add("secrets", {"metadata": {"name": "coreweave-api", "namespace": NS},
                         "data": {"token": base64.b64encode(TOKEN.encode()).decode()}})
    return kube


def prerequisites(**over: Any) -> gather.Target:
    raw: dict[str, Any] = {"runner": {"id": "r", "tokenSecretRef": {"name": "none"}}, "scheduler": {"namespace": NS},
                           "sandboxNamespaces": {"names": []}, "partition": "sandboxes"}
    raw.update(over)
    return gather.Target(parse_spec(raw), NS, None, (NS, "coreweave-api", "token"))


class Runners:
    """The runner-client factory: records which URL got a token, answers with a FakeRunner."""

    def __init__(self, policy: dict | None = None) -> None:
        self.sent: list[tuple[str, str]] = []
        self.runner = FakeRunner(policy or {"base": {"spec": {"schedulerName": "slurm-scheduler"}}})

    def __call__(self, url: str, token: Any) -> Any:
        outer = self

        class Client:
            async def get_managed_runner(self, runner_id: str) -> Any:
                outer.sent.append((url, await token()))
                return await outer.runner.get_managed_runner(runner_id)

            async def aclose(self) -> None:
                pass
        return Client()


async def test_a_healthy_cluster_reads_as_every_check_passing_and_nothing_is_written() -> None:
    kube, runners = cluster(), Runners()
    obs = await gather.gather(kube, prerequisites(), TenancyPolicy(), make_runner=runners)
    results = {r.id: r for r in doctor.evaluate(obs)}
    assert {i: r.ok for i, r in results.items()} == {i: (None if i in ("partition", "slurm-token") else True)
                                                     for i in results}, \
        [r for r in results.values() if r.ok is False]
    assert obs.sandbox_namespaces == frozenset({"ds-alice"})  # the namespace holding a sandbox pod
    assert "500m CPU, 512Mi memory" in results["slurmd-room"].detail
    assert runners.sent == [("https://api.coreweave.com", TOKEN)]
    assert TOKEN not in repr(obs)
    with pytest.raises(k.NotLeader):  # the gate is shut: a write would not leave the process
        kube.check_writable()
    writes = {"patch_binding_status", "replace_configmap", "create_configmap", "delete_configmap", "create_event",
              "merge_patch_deployment", "merge_patch_statefulset", "merge_patch_application", "create_rolebinding",
              "delete_rolebinding", "create_lease", "replace_lease"}
    assert not [c for c in kube.calls if c[0] in writes]


async def test_a_url_the_operator_does_not_allow_never_gets_the_token() -> None:
    runners = Runners()
    obs = await gather.gather(cluster(), prerequisites(runner={"id": "r", "apiURL": "https://evil.example.com",
                                                               "tokenSecretRef": {"name": "none"}}),
                              TenancyPolicy(), make_runner=runners)
    assert obs.runner is not None and obs.runner.outcome == "not_allowed"
    assert runners.sent == []


async def test_a_binding_is_judged_by_the_operators_settings_and_its_own_namespaces() -> None:
    kube = cluster()
    spec = parse_spec({"runner": {"id": "r", "tokenSecretRef": {"name": "coreweave-api"}},
                       "sandboxNamespaces": {"names": ["ds-*"]}})
    runners = Runners()
    obs = await gather.gather(kube, gather.Target(spec, NS, f"{NS}/b", (NS, "coreweave-api", "token")),
                              TenancyPolicy(), make_runner=runners)
    assert obs.sandbox_namespaces == frozenset({"ds-alice", "ds-bob"}) and obs.violations == ()
    assert runners.sent == [("https://api.coreweave.com", TOKEN)]


@pytest.mark.parametrize("refusal", [
    {"scheduler": {"namespace": "other"}},                                    # another tenant's scheduler
    {"runner": {"id": "r", "apiURL": "http://10.0.0.1:8080", "tokenSecretRef": {"name": "coreweave-api"}}},
    {"sandboxNamespaces": {"names": ["*"]}},                                   # every namespace
])
async def test_a_refused_binding_is_read_no_further_than_itself(refusal) -> None:
    """Finding 10: the operator reads, asks and sends nothing for a binding its settings refuse; the
    doctor, run with the admin's credentials, does no more: no Secret read (whichever URL is allowed),
    no namespace the spec names listed, no runner or Slurm request; the first line says why."""
    fake = FakeSlurm(FakeClock(), tokens={jwt(): "k8sop"})
    kube, target = with_slurm()
    raw = {"runner": {"id": "r", "tokenSecretRef": {"name": "coreweave-api"}}, "partition": "sandboxes",
           "sandboxNamespaces": {"names": ["ds-*"]},
           "slurm": {"restAPI": {"url": SLURM, "user": "k8sop", "tokenSecretRef": {"name": "slurm-jwt"}}}, **refusal}
    runners = Runners()
    obs = await gather.gather(kube, gather.Target(parse_spec(raw), NS, f"{NS}/b", target.token, slurm_token=target.slurm_token),
                              TenancyPolicy(allowed_slurm_urls=(SLURM,)), make_runner=runners,
                              make_slurm=fake.client_factory())
    assert kube.calls == [] and runners.sent == [] and fake.log == []
    results = doctor.evaluate(obs)
    assert results[0].id == "binding" and results[0].ok is False and "the operator refuses" in results[0].detail
    assert all(r.ok is None and r.detail == doctor.REFUSED for r in results[1:])
    assert {r.id for r in results} == set(doctor.READS)


def test_the_doctor_parses_tenant_text_only_through_the_operators_own_functions() -> None:
    """What the doctor reads from tenants' objects (scheduler.conf, slurm.conf, args, pods) is parsed by
    the operator's core functions, with their bounds: the doctor's reader imports no parser of its own."""
    import ast
    from pathlib import Path

    source = Path(gather.__file__).read_text()
    imported = {a.name.split(".")[0] for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module.split(".")[0] for n in ast.walk(ast.parse(source))
                 if isinstance(n, ast.ImportFrom) and n.module and n.level == 0}
    assert not imported & {"yaml", "json", "re", "shlex", "base64", "zlib", "orjson", "msgspec"}, imported


async def test_broken_reads_become_failing_checks() -> None:
    kube = cluster(slurmd_cpu="15800m", kill_wait="30s")
    kube.access = lambda sa, verb, resource, ns: ns == "ds-bob"  # not cluster-wide, not in ds-alice
    kube.store["secrets"].clear()
    obs = await gather.gather(kube, prerequisites(), TenancyPolicy(), make_runner=Runners())
    results = {r.id: r for r in doctor.evaluate(obs)}
    assert results["kill-wait-matches"].ok is False
    assert results["scheduler-rbac"].ok is False and "ds-alice" in results["scheduler-rbac"].detail
    assert results["slurmd-room"].ok is False and "n1" in results["slurmd-room"].detail
    assert results["runner-token"].ok is False and "not found" in results["runner-token"].detail


async def test_forbidden_reads_say_what_was_denied() -> None:
    kube = cluster()
    kube.deny("list_configmaps", NS)
    results = {r.id: r for r in doctor.evaluate(await gather.gather(kube, prerequisites(), TenancyPolicy(),
                                                                    make_runner=Runners()))}
    assert results["scheduler-running"].ok is False
    assert "may not list pods and ConfigMaps in tenant-slurm" in results["scheduler-running"].detail
    kube = cluster()
    kube.deny("list_pods_everywhere")
    results = {r.id: r for r in doctor.evaluate(await gather.gather(kube, prerequisites(), TenancyPolicy(),
                                                                    make_runner=Runners()))}
    for check in ("grace", "scope"):
        assert results[check].ok is False and "may not list pods in every namespace" in results[check].detail
    assert results["slurmd-room"].ok is False and "may not list pods on Node n1" in results["slurmd-room"].detail


SLURM = "https://slurm.example.com:6820"


def with_slurm(partition: str | None = "sandboxes", token: str | None = None, url: str = SLURM) -> tuple[FakeKube, gather.Target]:
    kube = cluster()
    kube.add("secrets", {"metadata": {"name": "slurm-jwt", "namespace": NS},
                         "data": {"token": base64.b64encode((token or jwt()).encode()).decode()}})
    raw = {"partition": partition, "slurm": {"restAPI": {"url": url, "user": "k8sop",
                                                          "tokenSecretRef": {"name": "slurm-jwt"}}}}
    target = prerequisites(**raw)
    return kube, gather.Target(target.spec, NS, None, target.token, slurm_token=(NS, "slurm-jwt", "token"))


@pytest.mark.parametrize("release", list(RELEASES))
async def test_slurm_is_asked_for_the_partition_with_its_own_token_where_allowed(release) -> None:
    fake = FakeSlurm(FakeClock(), release, tokens={jwt(): "k8sop"})
    allowed = TenancyPolicy(allowed_slurm_urls=(SLURM,))
    kube, target = with_slurm()
    obs = await gather.gather(kube, target, allowed, make_runner=Runners(), make_slurm=fake.client_factory())
    results = {r.id: r for r in doctor.evaluate(obs)}
    assert results["partition"].ok is True and results["slurm-token"].ok is True
    assert f"REST {NEWEST[release]} (negotiated)" in results["partition"].detail
    probes = {"22.05": 7, "24.11": 4, "26.05": 1}[release]   # GET ping from v0.0.45 down to the first served
    assert [p for p, _, _ in fake.log][:probes] == [f"/slurm/{v}/ping" for v in KNOWN[:probes]]
    assert fake.log[probes:] == [(f"/slurm/{NEWEST[release]}/partition/sandboxes", "", 200)]
    kube, target = with_slurm("nosuch")
    obs = await gather.gather(kube, target, allowed, make_runner=Runners(), make_slurm=fake.client_factory())
    r = {r.id: r for r in doctor.evaluate(obs)}["partition"]
    assert r.ok is False and "no partition 'nosuch'" in r.detail
    kube, target = with_slurm(None)  # nothing pinned: a ping says whether the token works
    obs = await gather.gather(kube, target, allowed, make_runner=Runners(), make_slurm=fake.client_factory())
    assert {r.id: r for r in doctor.evaluate(obs)}["partition"].ok is True and fake.log[-1][0].endswith("/ping")


async def test_the_slurm_token_goes_nowhere_unless_allowed_and_sound() -> None:
    fake = FakeSlurm(FakeClock(), tokens={jwt(): "k8sop"})
    kube, target = with_slurm()
    obs = await gather.gather(kube, target, TenancyPolicy(), make_runner=Runners(), make_slurm=fake.client_factory())
    assert obs.slurm is None and obs.slurm_refused and "not a slurmrestd URL the operator allows" in obs.slurm_refused
    kube, target = with_slurm(token=jwt(exp=1))  # expired: told without sending it
    obs = await gather.gather(kube, target, TenancyPolicy(allowed_slurm_urls=(SLURM,)), make_runner=Runners(),
                              make_slurm=fake.client_factory())
    assert obs.slurm is not None and obs.slurm.error == "token" and "expired" in obs.slurm.detail
    assert fake.log == []
    kube, target = with_slurm(token=f"SLURM_JWT={jwt()}\nDB_PASSWORD=hunter2")  # an env file: no header carries it
    obs = await gather.gather(kube, target, TenancyPolicy(allowed_slurm_urls=(SLURM,)), make_runner=Runners(),
                              make_slurm=fake.client_factory())
    results = {r.id: r for r in doctor.evaluate(obs)}
    assert obs.slurm is not None and obs.slurm.error == "credentials" and fake.log == []
    assert results["partition"].ok is False and results["slurm-token"].ok is False
    assert "Secret tenant-slurm/slurm-jwt key token cannot be sent" in results["slurm-token"].detail
    assert "hunter2" not in repr(results) and "Illegal header" not in repr(results)
