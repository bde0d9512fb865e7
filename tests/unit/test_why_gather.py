"""adapters/why.py over the in-memory Kubernetes (FakeKube), a fake runner and a fake slurmrestd: what it
reads becomes the observation core/why.py judges; it writes nothing, reads only what the cluster
records (no operator runs here), and a binding the operator's settings refuse gets nothing read."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from sunk_sandbox_operator.adapters import kube as k
from sunk_sandbox_operator.adapters import why as gather
from sunk_sandbox_operator.api.keys import SCOPE_GENERATION_ANNOTATION, SCOPE_HASH_ANNOTATION, SCOPE_LEDGER_ANNOTATION
from sunk_sandbox_operator.core import why
from sunk_sandbox_operator.core.scope.grants import rolebinding
from sunk_sandbox_operator.core.scope.ledger import Entry, Ledger, encode
from sunk_sandbox_operator.core.scope.template import scope_hash
from sunk_sandbox_operator.core.tenancy import TenancyPolicy

from tests.unit.fake_slurm import FakeSlurm
from tests.unit.fakes import FakeClock, FakeKube
from tests.unit.test_doctor_gather import SCHED, TOKEN, Runners, cluster, pod
from tests.unit.test_slurm_controller import jwt

NS, SBX = "tenant-slurm", "ds-alice"
SLURM_URL = "https://slurm.example.com:6820"
ALLOWED = TenancyPolicy(allowed_slurm_urls=(SLURM_URL,))
WRITES = {"patch_binding_status", "replace_configmap", "create_configmap", "delete_configmap", "create_event",
          "merge_patch_deployment", "merge_patch_statefulset", "merge_patch_application", "create_rolebinding",
          "delete_rolebinding", "create_lease", "replace_lease"}


def binding_body(name: str = "b", ns: str = NS, *, api_url: str = "https://api.coreweave.com", uid: str = "uid-b",
                 status: dict | None = None, **over: Any) -> dict:
    spec: dict[str, Any] = {"runner": {"id": "r", "apiURL": api_url, "tokenSecretRef": {"name": "coreweave-api"}},
                            "partition": "sandboxes", "sandboxNamespaces": {"names": ["ds-*"]},
                            "slurm": {"restAPI": {"url": SLURM_URL, "user": "k8sop",
                                                  "tokenSecretRef": {"name": "slurm-jwt"}}}}
    spec.update(over)
    return {"metadata": {"name": name, "namespace": ns, "uid": uid, "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": spec, "status": status or {}}


def world(*, held: bool = False) -> tuple[FakeKube, Runners, FakeSlurm]:
    kube = cluster()
    listed = [NS, SBX, "ds-bob"]
    kube.edit("configmaps", NS, "slurm-scheduler-config", lambda cm: cm["metadata"].setdefault("annotations", {})
              .update({SCOPE_LEDGER_ANNOTATION: encode(Ledger({f"{NS}/b": Entry((SBX,), (NS,))}, generation=3))}))
    rolled = {SCOPE_HASH_ANNOTATION: scope_hash(listed), SCOPE_GENERATION_ANNOTATION: "3"}
    kube.add("deployments", {"metadata": {"name": "slurm-scheduler", "namespace": NS},
                             "spec": {"template": {"metadata": {"labels": SCHED, "annotations": rolled}}}})
    kube.edit("pods", NS, "slurm-scheduler-0", lambda p: p["metadata"].update(annotations=rolled))
    sbx = pod(SBX, "sbx-2", labels={"sandbox.coreweave.com/sandbox-id": "s2"}, grace=30)
    sbx["spec"]["schedulerName"] = "slurm-scheduler"
    sbx["metadata"].update(annotations={"sunk.coreweave.com/partition": "sandboxes"}, uid="u2",
                           creationTimestamp="2026-01-01T00:00:00Z")
    kube.add("pods", sbx)
    kube.add("bindings", binding_body())
    kube.add("secrets", {"metadata": {"name": "slurm-jwt", "namespace": NS},
                         "data": {"token": base64.b64encode(jwt().encode()).decode()}})
    kube.add("rolebindings", rolebinding(NS, "b", "uid-b", SBX, "sunk-scheduler-sandbox", "slurm-scheduler", NS))
    fake = FakeSlurm(FakeClock(), url=SLURM_URL, tokens={jwt(): "k8sop"})
    job = fake.submit(f"{SBX}/sbx-2", state="PENDING" if held else "RUNNING", reason="JobHeldUser" if held else "None")
    fake.set_job(job, submit_time=1_700_000_000)
    runners = Runners({"base": {"spec": {"schedulerName": "slurm-scheduler"},
                                "metadata": {"annotations": {"sunk.coreweave.com/partition": "sandboxes"}}}})
    return kube, runners, fake


async def look(kube: FakeKube, runners: Runners, fake: FakeSlurm, ask: gather.Ask,
               policy: TenancyPolicy = ALLOWED) -> Any:
    return await gather.gather(kube, ask, policy, make_runner=runners, make_slurm=fake.client_factory(),
                               now=lambda: 1_700_000_600.0)


async def test_a_pod_reads_as_the_chain_from_its_binding_to_its_job_and_nothing_is_written() -> None:
    kube, runners, fake = world()
    obs = await look(kube, runners, fake, gather.Ask(SBX, "sbx-2"))
    links = {x.id: x for x in why.evaluate(obs)}
    assert obs.binding is not None and obs.binding.ref == f"{NS}/b"
    assert obs.target is not None and obs.target.values == (NS, SBX, "ds-bob") and obs.target.ledger.generation == 3
    assert obs.access is not None and obs.access.allowed is True
    assert [(g.namespace, g.role[2]) for g in obs.access.grants] == [(SBX, "sunk-scheduler-sandbox")]  # ours, by UID
    assert obs.policy is not None and obs.policy.source == "runner" and runners.sent == [("https://api.coreweave.com", TOKEN)]
    assert obs.jobs is not None and obs.jobs.job is not None and obs.jobs.job.state == "RUNNING"
    assert obs.jobs.submitted == 1_700_000_000.0
    assert {i: x.ok for i, x in links.items()} == {i: True for i in links}, [x for x in links.values() if not x.ok]
    assert why.verdict(list(links.values())).text(obs) == "placeable"
    with pytest.raises(k.NotLeader):  # the gate is shut: a write would not leave the process
        kube.check_writable()
    assert not [c for c in kube.calls if c[0] in WRITES]
    assert TOKEN not in repr(obs) and jwt() not in repr(obs)


async def test_a_held_job_is_the_broken_link() -> None:
    kube, runners, fake = world(held=True)
    obs = await look(kube, runners, fake, gather.Ask(SBX, "sbx-2"))
    broken = why.verdict(why.evaluate(obs)).broken
    assert broken is not None and broken.id == "job" and "JobHeldUser" in broken.detail


async def test_a_slurm_token_no_header_can_carry_is_told_without_it_and_never_sent() -> None:
    kube, runners, fake = world()
    bad = f"{jwt()}\n{jwt()}"  # two lines in one key: httpx's own error would quote the header
    kube.edit("secrets", NS, "slurm-jwt", lambda s: s.update(data={"token": base64.b64encode(bad.encode()).decode()}))
    obs = await look(kube, runners, fake, gather.Ask(SBX, "sbx-2"))
    assert obs.jobs is not None and obs.jobs.error is not None and f"a line break at offset {len(jwt())}" in obs.jobs.error
    assert fake.count("jobs") == 0 and jwt() not in repr(obs)


async def test_a_namespace_reads_the_grace_of_its_sandbox_pods_and_asks_slurm_nothing() -> None:
    kube, runners, fake = world()
    kube.add("pods", pod(SBX, "long", labels={"sandbox.coreweave.com/sandbox-id": "s3"}, grace=300))
    obs = await look(kube, runners, fake, gather.Ask(SBX))
    assert obs.kind == "namespace" and obs.sandbox_grace == 300 and obs.jobs is None
    assert why.verdict(why.evaluate(obs)).broken.id == "grace"  # type: ignore[union-attr]
    assert fake.count("jobs") == 0


async def test_a_binding_the_operator_refuses_matches_nothing_and_nothing_is_read_for_it() -> None:
    kube, runners, fake = world()
    kube.store["bindings"].clear()
    kube.add("bindings", binding_body(api_url="https://evil.example.com"))
    obs = await look(kube, runners, fake, gather.Ask(SBX, "sbx-2"))
    assert obs.candidates == () and "spec.runner.apiURL" in obs.refused[0]
    broken = why.verdict(why.evaluate(obs)).broken
    assert broken is not None and broken.id == "binding"
    assert runners.sent == [] and fake.log == [] and kube.count("read_secret_key") == 0


async def test_an_unreadable_token_falls_back_to_what_status_records_the_operator_owns() -> None:
    kube, runners, fake = world()
    kube.store["secrets"].pop((NS, "coreweave-api"))
    owned = [{"path": "base.spec.schedulerName", "value": "slurm-scheduler"},
             {"path": 'base.metadata.annotations["sunk.coreweave.com/partition"]', "value": "sandboxes"}]
    kube.edit("bindings", NS, "b", lambda b: b.update(status={"policy": {"owned": owned}}))
    obs = await look(kube, runners, fake, gather.Ask(SBX, "sbx-2"))
    assert obs.policy is not None and obs.policy.source == "status" and "not found" in obs.policy.unread
    assert {x.id: x for x in why.evaluate(obs)}["policy"].ok is True and runners.sent == []


async def test_the_binding_whose_scheduler_placed_the_pod_is_judged_first() -> None:
    kube, runners, fake = world()
    kube.add("bindings", binding_body("a-older", uid="uid-a", scheduler={"name": "other-scheduler"}))
    obs = await look(kube, runners, fake, gather.Ask(SBX, "sbx-2"))
    assert [c.ref for c in obs.candidates] == [f"{NS}/b", f"{NS}/a-older"]  # a's scheduler is not the pod's
    kube.add("bindings", binding_body("a-first", uid="uid-c", status={"scheduler": {"name": "slurm-scheduler"}}))
    obs = await look(kube, runners, fake, gather.Ask(SBX, "sbx-2"))
    assert [c.ref for c in obs.candidates] == [f"{NS}/a-first", f"{NS}/b", f"{NS}/a-older"]


async def test_a_missing_pod_or_namespace() -> None:
    kube, runners, fake = world()
    with pytest.raises(gather.PodNotFound, match="pod ds-alice/nope not found"):
        await look(kube, runners, fake, gather.Ask(SBX, "nope"))
    obs = await look(kube, runners, fake, gather.Ask("ds-nope"))
    assert why.verdict(why.evaluate(obs)).broken.detail == "namespace ds-nope not found"  # type: ignore[union-attr]


async def test_rbac_denied_there_and_no_grant_of_ours() -> None:
    kube, runners, fake = world()
    kube.access = lambda sa, verb, resource, ns: ns != SBX
    kube.store["rolebindings"].clear()
    obs = await look(kube, runners, fake, gather.Ask(SBX, "sbx-2"))
    assert obs.access is not None and obs.access.allowed is False and obs.access.grants == ()
    assert why.verdict(why.evaluate(obs)).broken.id == "rbac"  # type: ignore[union-attr]


async def test_an_argo_cd_target_is_read_and_the_scheduler_judged_by_what_it_rendered() -> None:
    """The list lives in the Application's values; the scheduler reads its own rendered scheduler.conf
    (which does not list ds-alice yet: Argo CD has not synced)."""
    kube, runners, fake = world()
    kube.add("applications", {"metadata": {"name": "slurm", "namespace": "argocd"}, "spec": {
        "source": {"repoURL": "r", "chart": "slurm", "helm": {"valuesObject": {
            "scheduler": {"scope": {"namespaces": [NS, SBX]}}}}}}})
    kube.edit("configmaps", NS, "slurm-scheduler-config", lambda cm: cm["data"].update({
        "scheduler.conf": "scheduler:\n  name: slurm-scheduler\n  scope:\n    type: namespace\n    namespaces: [tenant-slurm]\n"}))
    kube.store["bindings"].clear()
    kube.add("bindings", binding_body(scope={"target": {"kind": "ArgoCDApplication",
                                                        "application": {"name": "slurm", "namespace": "argocd"}}}))
    reach = TenancyPolicy(allowed_slurm_urls=(SLURM_URL,), reach={NS: ("argocd",)})
    obs = await look(kube, runners, fake, gather.Ask(SBX, "sbx-2"), reach)
    assert obs.target is not None and obs.target.values == (NS, SBX) and obs.target.renders == "argocd/slurm"
    assert obs.scheduler.rendered == (NS,)
    broken = why.verdict(why.evaluate(obs)).broken
    assert broken is not None and broken.id == "rolled" and "argocd app sync argocd/slurm" in broken.fix
