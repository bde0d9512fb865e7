"""core/why.py: the chain of pure checks over one observation. A healthy pod is "placeable"; each
broken link is named with its fix, and the verdict is the first broken link of the chain."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from sunk_sandbox_operator.api.keys import (SCOPE_GENERATION_ANNOTATION, SCOPE_HASH_ANNOTATION,
                                            SCOPE_ROLLED_AT_ANNOTATION)
from sunk_sandbox_operator.api.spec import parse_spec
from sunk_sandbox_operator.core import why, why_facts
from sunk_sandbox_operator.core.scope.grants import Grant
from sunk_sandbox_operator.core.scope.ledger import Entry, Ledger
from sunk_sandbox_operator.core.pods import decode_pod
from sunk_sandbox_operator.core.units import parse_quantity
from sunk_sandbox_operator.core.scheduler.discovery import Discovery
from sunk_sandbox_operator.core.scope.template import scope_hash
from sunk_sandbox_operator.core.slurm.facts import Job
from sunk_sandbox_operator.core.scope.target_ref import APPLICATION, CONFIGMAP
from sunk_sandbox_operator.core.why_facts import (WAITS, Access, Candidate, Jobs, Observation, Policy, Scheduler,
                                                  TargetList)

NS, SBX = "tenant-slurm", "ds-alice"
NOW = 1_800_000_000.0
LIST = (NS, SBX)
HASH = scope_hash(LIST)
SCHED_LABELS = {"app.kubernetes.io/name": "sunk-scheduler"}
PARTITION_PATH = 'base.metadata.annotations["sunk.coreweave.com/partition"]'


def iso(ts: float) -> str:
    return why_facts.iso(ts)


def spec(**over: Any) -> Any:
    raw: dict[str, Any] = {"runner": {"id": "runner-1", "tokenSecretRef": {"name": "coreweave-api"}},
                           "partition": "sandboxes", "sandboxNamespaces": {"names": ["ds-*"]},
                           "slurm": {"restAPI": {"url": "http://127.0.0.1:6820", "user": "k8sop",
                                                 "tokenSecretRef": {"name": "slurm-jwt"}}}}
    raw.update(over)
    return parse_spec(raw)


def sandbox_pod(*, scheduler: str = "slurm-scheduler", partition: str | None = "sandboxes", grace: int = 30,
                created: float = NOW - 600, phase: str = "Pending") -> Any:
    annotations = {"sunk.coreweave.com/partition": partition} if partition else {}
    return decode_pod({"metadata": {"name": "sbx-1", "namespace": SBX, "uid": "u1", "creationTimestamp": iso(created),
                                    "labels": {"sandbox.coreweave.com/sandbox-id": "s1"}, "annotations": annotations},
                       "spec": {"schedulerName": scheduler, "terminationGracePeriodSeconds": grace,
                                "containers": [{"name": "m", "resources": {"requests": {"cpu": "500m",
                                                                                          "memory": "512Mi"}}}]},
                       "status": {"phase": phase}}, parse_quantity)


def workload(annotations: dict[str, str]) -> dict:
    return {"kind": "Deployment", "metadata": {"name": "slurm-scheduler", "namespace": NS},
            "spec": {"template": {"metadata": {"labels": SCHED_LABELS, "annotations": annotations}}}}


def scheduler_pod(annotations: dict[str, str], *, created: float = NOW - 100, ready: bool = True) -> dict:
    return {"metadata": {"name": "slurm-scheduler-1", "namespace": NS, "labels": SCHED_LABELS,
                         "annotations": annotations, "creationTimestamp": iso(created)},
            "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


ROLLED = {SCOPE_HASH_ANNOTATION: HASH, SCOPE_GENERATION_ANNOTATION: "1", SCOPE_ROLLED_AT_ANNOTATION: iso(NOW - 120)}


def healthy(**over: Any) -> Observation:
    b = Candidate(f"{NS}/b", NS, spec(), "uid-b", {})
    obs = Observation(
        kind="pod", namespace=SBX, now=NOW, pod_name="sbx-1", namespace_labels={}, pod=sandbox_pod(),
        candidates=(b,),
        discovery=Discovery(namespace=NS, selector="app.kubernetes.io/name=sunk-scheduler", name="slurm-scheduler",
                            name_source="configMap", kill_wait_seconds=60, kill_wait_source="args", ready_replicas=1,
                            pods_found=1, service_account="slurm-scheduler", configmap_name="slurm-scheduler-config"),
        target=TargetList("ConfigMap tenant-slurm/slurm-scheduler-config key scheduler.conf at scheduler.scope.namespaces",
                          CONFIGMAP, LIST, "namespace", NS,
                          ledger=Ledger({f"{NS}/b": Entry((SBX,), (NS,))}, generation=1),
                          changed_at=iso(NOW - 130), written_at=iso(NOW - 130)),
        scheduler=Scheduler((workload(ROLLED),), None, (scheduler_pod(ROLLED),)),
        access=Access(f"{NS}/slurm-scheduler", True),
        policy=Policy("runner", {"base.spec.schedulerName": "slurm-scheduler", PARTITION_PATH: "sandboxes"}),
        jobs=Jobs("slurmrestd at http://127.0.0.1:6820 (user k8sop)", names=(f"{SBX}/sbx-1",),
                  job=Job(12, f"{SBX}/sbx-1", "RUNNING", "None", ""), submitted=NOW - 500))
    return replace(obs, **over)


def links(obs: Observation) -> dict[str, why.Link]:
    return {x.id: x for x in why.evaluate(obs)}


def broken_first(obs: Observation) -> why.Link:
    v = why.verdict(why.evaluate(obs))
    assert v.broken is not None and not v.placeable, why.evaluate(obs)
    assert v.text(obs).startswith(f"not placeable: {v.broken.name} — fix: ")
    return v.broken


def with_binding(obs: Observation, **spec_over: Any) -> Observation:
    b = obs.candidates[0]
    return replace(obs, candidates=(replace(b, spec=spec(**spec_over)),))


def test_a_healthy_pod_is_placeable_and_every_link_holds() -> None:
    obs = healthy()
    got = links(obs)
    assert list(got) == ["binding", "scheduler", "listed", "rolled", "rbac", "policy", "pod", "grace", "job"]
    assert all(x.ok is True for x in got.values()), [x for x in got.values() if x.ok is not True]
    v = why.verdict(list(got.values()))
    assert v.placeable and v.text(obs) == "placeable"
    assert "tenant-slurm/b (spec.sandboxNamespaces: names ds-*)" in got["binding"].detail
    assert "added by the operator for tenant-slurm/b" in got["listed"].detail
    assert f"scope-hash {HASH}" in got["rolled"].detail and "1 Ready scheduler pod(s) run it" in got["rolled"].detail
    assert "job 12 (ds-alice/sbx-1) RUNNING" in got["job"].detail


def test_a_placed_pod_says_where() -> None:
    obs = healthy(pod=replace(sandbox_pod(), node_name="node-a"))
    assert why.verdict(why.evaluate(obs)).text(obs) == "placeable (placed on node node-a)"


def test_no_binding_matching_the_namespace_is_the_first_link() -> None:
    broken = broken_first(healthy(candidates=(), refused=("t/x: spec.runner.apiURL: not allowed",)))
    assert broken.id == "binding" and "no SunkSandboxBinding's spec.sandboxNamespaces matches namespace ds-alice" in \
        broken.detail
    assert "refused by the operator's settings" in broken.detail and "spec.sandboxNamespaces" in broken.fix
    got = links(healthy(candidates=()))
    assert all(got[i].ok is None for i in ("scheduler", "listed", "rolled", "rbac", "policy", "pod", "grace", "job"))
    assert broken_first(healthy(namespace_labels=None)).detail == "namespace ds-alice not found"


def test_an_unlisted_namespace_names_the_list_and_why_it_is_not_written() -> None:
    target = replace(healthy().target, values=(NS,))
    broken = broken_first(healthy(target=target))
    assert broken.id == "listed" and "does not list ds-alice (1 namespace(s) listed)" in broken.detail
    assert "check that it runs" in broken.fix
    assert "Observe mode" in broken_first(with_binding(healthy(target=target), mode="Observe")).fix
    status = {"conditions": [{"type": "ScopeSynced", "status": "False", "reason": "TargetNotFound", "message": "gone"}]}
    b = replace(healthy().candidates[0], status=status)
    assert "ScopeSynced is False, TargetNotFound: gone" in broken_first(healthy(target=target, candidates=(b,))).fix
    assert links(healthy(target=target))["rolled"].ok is None  # waits on the list


def test_a_blank_list_is_the_schedulers_own_namespace_and_cluster_scope_lists_everything() -> None:
    blank = replace(healthy().target, values=())
    assert broken_first(healthy(target=blank)).id == "listed"
    obs = healthy(namespace=NS, target=blank)
    assert links(obs)["listed"].ok is True
    cluster = replace(healthy().target, values=None, scope_type="cluster")
    got = links(healthy(target=cluster))
    assert got["listed"].ok is True and got["rolled"].ok is True and "every namespace" in got["listed"].detail


def test_a_scheduler_not_rolled_onto_the_list_is_broken_and_says_when_it_will_be() -> None:
    old = {**ROLLED, SCOPE_HASH_ANNOTATION: scope_hash((NS,))}
    obs = healthy(scheduler=Scheduler((workload(old),), None, (scheduler_pod(old),)))
    broken = broken_first(obs)
    assert broken.id == "rolled" and f"but the list hashes to {HASH}" in broken.detail
    assert "rollout restart deployment/slurm-scheduler" in broken.fix
    b = replace(obs.candidates[0], status={"scope": {"nextRollTime": iso(NOW + 20)}})
    assert f"the operator rolls it at {iso(NOW + 20)}" in broken_first(replace(obs, candidates=(b,))).fix
    # the list written again since the roll (a revert put back): the same names, a newer ledger generation
    stale = replace(healthy().target, ledger=Ledger(healthy().target.ledger.entries, generation=2))
    assert broken_first(healthy(target=stale)).id == "rolled"


def test_a_rollout_that_has_not_finished_is_broken() -> None:
    obs = healthy(scheduler=Scheduler((workload(ROLLED),), None, (scheduler_pod({}),)))
    broken = broken_first(obs)
    assert broken.id == "rolled" and "no Ready scheduler pod carries that hash yet" in broken.detail
    assert "rollout status deployment/slurm-scheduler" in broken.fix


def test_without_a_scope_hash_the_pods_start_is_compared_with_the_lists_last_change() -> None:
    never = replace(healthy().target, ledger=Ledger(), written_at=None)
    plain = Scheduler((workload({}),), None, (scheduler_pod({}, created=NOW - 100),))
    assert links(healthy(target=never, scheduler=plain))["rolled"].ok is True
    earlier = Scheduler((workload({}),), None, (scheduler_pod({}, created=NOW - 1000),))
    link = links(healthy(target=never, scheduler=earlier))["rolled"]
    assert link.ok is None and link.unknown and "before its last change" in link.detail
    v = why.verdict(why.evaluate(healthy(target=never, scheduler=earlier)))
    assert not v.placeable and v.broken is None and v.text(healthy()).startswith("no broken link found, but not told")


def test_an_application_target_is_judged_by_what_argo_cd_rendered_for_the_scheduler() -> None:
    target = replace(healthy().target, kind=APPLICATION, where="Application argocd/slurm at scheduler.scope.namespaces",
                     renders="argocd/slurm")
    rendered = Scheduler((workload({}),), None, (scheduler_pod({}),), "ConfigMap tenant-slurm/slurm-scheduler-config "
                         "key scheduler.conf", (NS,), "namespace", iso(NOW - 200))
    broken = broken_first(healthy(target=target, scheduler=rendered))
    assert broken.id == "rolled" and "Argo CD has not rendered it" in broken.detail
    assert "argocd app sync argocd/slurm" in broken.fix
    assert links(healthy(target=target, scheduler=replace(rendered, rendered=LIST)))["rolled"].ok is True
    flux = replace(target, kind="FluxHelmRelease", renders="tenant-slurm/slurm")
    assert "flux reconcile helmrelease slurm -n tenant-slurm" in broken_first(healthy(target=flux, scheduler=rendered)).fix
    assert links(healthy(target=None, scheduler_error="denied"))["listed"].detail == WAITS.format("the scheduler runs")


def test_rbac_missing_names_who_should_grant_it() -> None:
    denied = Access(f"{NS}/slurm-scheduler", False)
    broken = broken_first(healthy(access=denied))
    assert broken.id == "rbac" and "may not watch pods and create pods/binding in ds-alice" in broken.detail
    assert "spec.scope.grantClusterRole" in broken.fix
    granting = with_binding(healthy(access=denied), scope={"grantClusterRole": "sunk-scheduler-sandbox"})
    assert "has not granted ClusterRole sunk-scheduler-sandbox in ds-alice" in broken_first(granting).fix
    rb = Grant(SBX, "sunk-scheduler-abc", "u", "tenant-slurm.b", "uid-b", True,
               ("rbac.authorization.k8s.io", "ClusterRole", "sunk-scheduler-sandbox"), ())
    bound = replace(granting, access=replace(denied, grants=(rb,)))
    assert "lacks watch on pods or create on pods/binding" in broken_first(bound).fix
    unknown = links(healthy(access=Access(f"{NS}/slurm-scheduler", None, "forbidden")))["rbac"]
    assert unknown.ok is None and unknown.unknown


def test_a_policy_without_the_scheduler_is_broken_from_the_runner_or_from_status() -> None:
    wrong = Policy("runner", {"base.spec.schedulerName": "default-scheduler"})
    broken = broken_first(healthy(policy=wrong))
    assert broken.id == "policy" and "base.spec.schedulerName is 'default-scheduler'" in broken.detail
    assert f"{PARTITION_PATH} is unset" in broken.detail and "check that it runs" in broken.fix
    owned = Policy("status", {"base.spec.schedulerName": "slurm-scheduler", PARTITION_PATH: "sandboxes"},
                   "not_allowed http://x is not allowed")
    link = links(healthy(policy=owned))["policy"]
    assert link.ok is True and "status.policy.owned (the runner's policy was not read: not_allowed" in link.detail
    link = links(healthy(policy=Policy("", {}, "no token")))["policy"]
    assert link.ok is None and link.unknown
    assert "add base.spec.schedulerName" in broken_first(with_binding(healthy(policy=wrong),
                                                                      policy={"management": "Observe"})).fix


def test_a_pod_with_another_scheduler_is_broken_and_says_whether_it_predates_the_policy() -> None:
    obs = healthy(pod=sandbox_pod(scheduler="default-scheduler", created=NOW - 900),
                  policy=replace(healthy().policy, applied_at=iso(NOW - 300)))
    broken = broken_first(obs)
    assert broken.id == "pod" and "spec.schedulerName is 'default-scheduler', expected 'slurm-scheduler'" in broken.detail
    assert "before the policy was last written" in broken.fix
    later = replace(obs, pod=sandbox_pod(scheduler="default-scheduler", created=NOW - 100))
    assert "not runner runner-1" in broken_first(later).fix
    assert "annotation sunk.coreweave.com/partition is unset" in broken_first(healthy(pod=sandbox_pod(partition=None))).detail


def test_a_grace_too_long_is_broken_and_an_unknown_kill_wait_is_not_told() -> None:
    broken = broken_first(healthy(pod=sandbox_pod(grace=300)))
    assert broken.id == "grace" and "the pod's terminationGracePeriodSeconds is 300 s; kill-wait is 60 s" in broken.detail
    assert "at least 306 (330 suggested)" in broken.detail
    assert "KillWait" in broken.fix
    d = replace(healthy().discovery, kill_wait_seconds=None)  # type: ignore[arg-type]
    link = links(healthy(discovery=d))["grace"]
    assert link.ok is None and link.unknown


def test_a_job_pending_for_a_persistent_reason_is_broken_with_slurms_hint() -> None:
    held = Job(12, f"{SBX}/sbx-1", "PENDING", "JobHeldUser", "")
    jobs = replace(healthy().jobs, job=held, submitted=NOW - 90)  # type: ignore[type-var]
    broken = broken_first(healthy(jobs=jobs))
    assert broken.id == "job" and "job 12 (ds-alice/sbx-1) PENDING for JobHeldUser" in broken.detail
    assert broken.fix == "the job is held: `scontrol release 12`"
    young = links(healthy(jobs=replace(jobs, submitted=NOW - 10)))["job"]
    assert young.ok is None and young.unknown and "a reason counts after 60 s" in young.detail
    assert links(healthy(jobs=replace(jobs, submitted=NOW - 10), pending_seconds=5))["job"].ok is False


def test_a_missing_job_is_broken_once_the_pod_is_old_enough() -> None:
    jobs = replace(healthy().jobs, job=None)  # type: ignore[type-var]
    broken = broken_first(healthy(jobs=jobs))
    assert broken.id == "job" and "no placeholder job in slurmrestd" in broken.detail and "ds-alice/sbx-1" in broken.detail
    young = links(healthy(jobs=jobs, pod=sandbox_pod(created=NOW - 5)))["job"]
    assert young.ok is None and young.unknown
    assert links(healthy(jobs=replace(jobs, error="refused")))["job"].unknown
    no_slurm = links(with_binding(healthy(), slurm={}))["job"]
    assert no_slurm.ok is None and not no_slurm.unknown and "not configured" in no_slurm.detail


def test_the_first_broken_link_in_the_chain_is_the_verdict() -> None:
    obs = healthy(access=Access(f"{NS}/slurm-scheduler", False), pod=sandbox_pod(grace=300))
    assert broken_first(obs).id == "rbac"
    assert {x.id for x in why.evaluate(obs) if x.ok is False} == {"rbac", "grace"}


def test_a_namespace_has_no_pod_links_and_judges_the_grace_pods_there_use() -> None:
    obs = healthy(kind="namespace", pod_name=None, pod=None, jobs=None, sandbox_grace=300)
    got = links(obs)
    assert "pod" not in got and "job" not in got
    assert got["grace"].ok is False and "sandbox pods use 300 s (observed on sandbox pods)" in got["grace"].detail
    assert why.verdict(why.evaluate(replace(obs, sandbox_grace=None))).placeable


def test_the_wire_form_names_the_broken_link() -> None:
    obs = healthy(access=Access(f"{NS}/slurm-scheduler", False))
    doc = json.loads(json.dumps(why.wire(obs, why.evaluate(obs))))
    assert doc["placeable"] is False and doc["brokenLink"] == "rbac" and doc["binding"] == "tenant-slurm/b"
    assert doc["pod"] == "sbx-1" and [x["id"] for x in doc["links"]][:2] == ["binding", "scheduler"]
    ok = why.wire(healthy(), why.evaluate(healthy()))
    assert ok["placeable"] is True and ok["verdict"] == "placeable" and ok["brokenLink"] is None


def test_the_readme_says_what_each_link_reads() -> None:
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "operations.md").read_text()
    block = text.split("<!-- why-reads:begin")[1].split("<!-- why-reads:end -->")[0]
    rows = {i: reads for i, _, reads in re.findall(r"^\| `([a-z-]+)` \| (.+?) \| (.+?) \|$", block, re.M)}
    assert rows == why.READS
    assert list(why.READS) == [c.__name__ for c in why.CHAIN]
