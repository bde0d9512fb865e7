"""core/doctor/checks.py: each check over a healthy observation and over one broken in its own way (pure:
no cluster, no network). The table of what each check reads (docs/operations.md) is READS."""

from __future__ import annotations

import dataclasses
import re
from decimal import Decimal
from pathlib import Path
from typing import Any, Callable

import pytest

from sunk_sandbox_operator.core.doctor import checks as doctor
from sunk_sandbox_operator.core.doctor.facts import Access, Observation, Runner, SandboxPods, Scope
from sunk_sandbox_operator.core.doctor.node_room import NodeRoom, Resources
from sunk_sandbox_operator.core.scheduler.discovery import Discovery
from sunk_sandbox_operator.core.slurm.facts import SlurmObservation

GI = Decimal(2**30)
MI = Decimal(2**20)
README = Path(__file__).resolve().parents[2] / "docs" / "operations.md"  # the doctor-reads table


def discovery(**over: Any) -> Discovery:
    base: dict[str, Any] = dict(
        namespace="tenant-slurm", selector="app.kubernetes.io/name=sunk-scheduler", name="slurm-scheduler",
        name_source="configMap", discovered_name="slurm-scheduler", kill_wait_seconds=60, kill_wait_source="args",
        ready_replicas=1, pods_found=1, service_account="slurm-scheduler", configmap_name="slurm-scheduler-config",
        scope_type="namespace", scheduler_kill_wait=(60, "args"),
        slurm_kill_wait=(60, "slurm.conf in ConfigMap slurm-conf"))
    base.update(over)
    return Discovery(**base)


def slurm(**over: Any) -> SlurmObservation:
    return SlurmObservation("http://127.0.0.1:6820", "k8sop", "sandboxes", **{
        "api_version": "v0.0.44", "release": "25.11.8", "token_where": "Secret tenant-slurm/slurm-jwt key token", **over})


NOW = 1_796_000_000


def healthy(**over: Any) -> Observation:
    base: dict[str, Any] = dict(
        binding=None, scheduler_namespace="tenant-slurm", discovery=discovery(),
        scope=Scope("scheduler.conf of ConfigMap tenant-slurm/slurm-scheduler-config", "namespace",
                    ("tenant-slurm", "ds-alice", "ds-bob")),
        sandbox_namespaces=frozenset({"ds-alice", "ds-bob"}), sandbox_how="sandbox namespaces (holding sandbox pods)",
        pods=SandboxPods(2, {30: 2}, {30: "ds-alice/sbx-1"}, Resources(Decimal("0.5"), 512 * MI)),
        access=Access("ServiceAccount tenant-slurm/slurm-scheduler", True),
        nodes=(NodeRoom("cpu-1", ("cpu",), Resources(Decimal(16), 64 * GI), Resources(Decimal(8), 32 * GI),
                        Resources(Decimal("0.5"), GI)),),
        slurmd_pods=1, sandbox_request=Resources(Decimal("0.5"), 512 * MI), sandbox_request_how="the largest seen",
        runner=Runner("runner-1", "https://api.coreweave.com", "Secret tenant-slurm/coreweave-api key token", "ok",
                      policy={"base": {"spec": {"schedulerName": "slurm-scheduler"}}}, etag="e1"),
        partition="sandboxes", slurm=slurm(answer={"name": "sandboxes", "partition": {"state": ["UP"]}}),
        slurm_token_exp=NOW + 86400, now=NOW)
    base.update(over)
    return Observation(**base)


def by_id(obs: Observation) -> dict[str, doctor.Result]:
    return {r.id: r for r in doctor.evaluate(obs)}


def test_a_healthy_observation_passes_every_check() -> None:
    results = doctor.evaluate(healthy())
    assert [r.id for r in results] == ["scheduler-running", "scheduler-name", "kill-wait", "kill-wait-matches", "grace",
                                       "scope", "scheduler-rbac", "slurmd-room", "runner-token", "policy", "slurm-token",
                                       "partition"]
    assert all(r.ok is True for r in results), [r for r in results if r.ok is not True]
    got = {r.id: r.detail for r in results}
    assert "Slurm 25.11.8, REST v0.0.44 (negotiated)" in got["partition"]   # which version, and why
    assert got["slurm-token"] == ("the JWT in Secret tenant-slurm/slurm-jwt key token (user k8sop) expires at "
                                  "2026-12-01T00:53:20Z")
    assert not doctor.failed(results)


def test_a_binding_adds_its_own_check_first() -> None:
    results = doctor.evaluate(healthy(binding="tenant-slurm/b"))
    assert results[0].id == "binding" and results[0].ok is True


def _sched(**over: Any) -> Callable[[Observation], Observation]:
    return lambda o: dataclasses.replace(o, discovery=discovery(**over))


def _with(**over: Any) -> Callable[[Observation], Observation]:
    return lambda o: dataclasses.replace(o, **over)


def _runner(**over: Any) -> Callable[[Observation], Observation]:
    return lambda o: dataclasses.replace(o, runner=dataclasses.replace(o.runner, **over))  # type: ignore[arg-type]


TIGHT = NodeRoom("cpu-2", ("cpu",), Resources(Decimal(16), 64 * GI), Resources(Decimal("15.8"), 63 * GI),
                 Resources(Decimal("0.1"), 256 * MI))

# check id, how it breaks, words of its detail, words of its fix
BROKEN: list[tuple[str, Callable[[Observation], Observation], str, str]] = [
    ("binding", _with(binding="t/b", violations=("spec.runner.apiURL: http://evil is not allowed",)),
     "refuses t/b", "--allowed-api-url"),
    ("scheduler-running", _sched(pods_found=0, ready_replicas=0), "no pods", "scheduler.enabled: true"),
    ("scheduler-running", _sched(ready_replicas=0), "none Ready", "kubectl logs"),
    # SUNK's upgrade-order hazard: the scheduler crash-loops right after a Slurm chart upgrade
    ("scheduler-running", _sched(ready_replicas=0, crash_looping=("slurm-scheduler-0",)),
     "slurm-scheduler-0 in CrashLoopBackOff", "upgrade the `sunk` chart (operator and CRDs) to the matching release "
     "first, then the Slurm chart again (a SUNK 8.2 scheduler has no --slurm-kill-wait flag"),
    ("scheduler-running", _with(scheduler_error="these credentials may not list pods"), "may not list",
     "credentials"),
    ("scheduler-name", _sched(name=None, name_source=None, discovered_name=None), "names it", "scheduler.name"),
    ("scheduler-name", _sched(name="mine", name_source="spec"), "calls itself 'slurm-scheduler'",
     "'slurm-scheduler'"),
    ("kill-wait", _sched(kill_wait_seconds=None, kill_wait_source=None, scheduler_kill_wait=None,
                         slurm_kill_wait=None), "no --slurm-kill-wait", "slurmConfig.KillWait"),
    ("kill-wait-matches", _sched(scheduler_kill_wait=(30, "args"), kill_wait_seconds=30),
     "30 s (--slurm-kill-wait) but Slurm's KillWait is 60 s", "keep them equal"),
    ("kill-wait-matches", _sched(slurm_kill_wait=None), "not found", "scontrol show config"),
    ("grace", _with(pods=SandboxPods(3, {30: 2, 300: 1}, {30: "ds-a/x", 300: "ds-a/snap"})),
     "1 of 3 pod(s) too long, e.g. ds-a/snap (300 s)", "KillWait"),
    ("grace", _with(pods_error="these credentials may not list pods in every namespace"), "may not list",
     "credentials"),
    ("scope", _with(scope=Scope("scheduler.conf of ConfigMap x", "namespace", ("tenant-slurm", "ds-alice"))),
     "1 of the 2 sandbox namespaces (holding sandbox pods) missing: ds-bob", "scheduler.scope.type: cluster"),
    ("scope", _with(scope=Scope("scheduler.conf of ConfigMap x", "namespace", None, "not valid YAML")),
     "not valid YAML", "fix that document"),
    ("scope", _with(scope=None), "no scheduler.conf", "scheduler.scope.type: cluster"),
    ("scheduler-rbac", _with(access=Access("ServiceAccount t/s", False, ("ds-bob",))), "not in ds-bob",
     "grantClusterRole: sunk-scheduler-sandbox"),
    ("scheduler-rbac", _with(access=Access("ServiceAccount t/s", None, error="may not create")), "may not create",
     "SubjectAccessReviews"),
    ("slurmd-room", _with(nodes=(healthy().nodes[0], TIGHT)), "1 of 2 Node(s) of NodeSet(s) cpu have no room: cpu-2 "
     "(allocatable 16 CPU, 64Gi memory; slurmd 15800m CPU, 63Gi memory; other pods 100m CPU, 256Mi memory; left 100m "
     "CPU, 768Mi memory)", "lower the slurmd container's resource requests"),
    ("slurmd-room", _with(slurmd_pods=0, nodes=()), "no slurmd pod", "--scheduler-namespace"),
    ("slurmd-room", _with(slurmd_pods=0, nodes=(), nodeset_filter=("gpu",)), "no slurmd pod of NodeSet(s) gpu",
     "--nodeset"),
    ("slurmd-room", _with(nodes=(NodeRoom("cpu-3", ("cpu",), None, Resources(), Resources(), "Node cpu-3: forbidden"),)),
     "cpu-3: Node cpu-3: forbidden", "slurmd"),
    ("runner-token", _runner(outcome="error", code="unauthenticated", message="missing or invalid bearer token"),
     "unauthenticated", "put a current CoreWeave API token in Secret tenant-slurm/coreweave-api"),
    ("runner-token", _runner(outcome="error", code="permission_denied", message="lacks sandbox_admin"),
     "permission_denied", "sandbox_admin role"),
    ("runner-token", _runner(outcome="error", code="not_found", message="no runner"), "not_found", "--runner-id"),
    ("runner-token", _runner(outcome="error", code="unavailable", message="ConnectError"), "unavailable",
     "--api-url"),
    ("runner-token", _runner(outcome="not_allowed", message="http://x is not an API URL the operator allows"),
     "the token was not sent", "--allowed-api-url"),
    ("runner-token", _runner(outcome="credentials", message="Secret t/s not found"), "nothing was sent",
     "kubectl create secret"),
    ("policy", _runner(policy={"base": {"spec": {"nodeSelector": {"pool": "cpu"}, "schedulerName": "s"}}}),
     "nodeSelector", "cwic sandbox runner policy edit runner-1"),
    ("policy", _runner(policy={"base": {"spec": {"terminationGracePeriodSeconds": 30}}}),
     "terminationGracePeriodSeconds", "cwic"),
    ("policy", _runner(policy={"base": "nope"}), "must be an object", "cwic"),
    ("partition", _with(slurm=slurm(error="not_found", detail="HTTP 500: Invalid partition name specified")),
     "no partition 'sandboxes'", "sinfo -h -o %P"),
    ("partition", _with(slurm=slurm(answer={"name": "sandboxes", "state": "DOWN"})), "is DOWN", "State=UP"),
    ("partition", _with(slurm=slurm(error="unreachable", detail="ConnectError")), "did not answer: ConnectError",
     "spec.slurm.restAPI.url"),
    ("partition", _with(slurm=slurm(error="token", detail="the token expired at 2026-01-01T00:00:00Z")),
     "the token expired", "scontrol token"),
    ("partition", _with(slurm=None, slurm_refused="http://x:6820 is not a slurmrestd URL the operator allows"),
     "the Slurm token was not sent", "--allowed-api-url"),
    ("partition", _with(slurm=slurm(error="version", api_version="v0.0.38", negotiated=False, detail=(
        "spec.slurm.restAPI.apiVersion v0.0.38 is not served by slurmrestd (HTTP 404); of the versions this operator "
        "knows it serves v0.0.41–v0.0.44"))), "REST v0.0.38 (spec.slurm.restAPI.apiVersion)", "remove `apiVersion`"),
    ("slurm-token", _with(slurm_token_exp=NOW + 1800), "expires at 2026-11-30T01:23:20Z, within the hour",
     "scontrol token username=k8sop"),
    ("slurm-token", _with(slurm=slurm(error="credentials", detail="the value of Secret tenant-slurm/slurm-jwt key "
                                      "token cannot be sent: it holds a line break at offset 180")),
     "Secret tenant-slurm/slurm-jwt key token cannot be sent", "the JWT alone"),
]


@pytest.mark.parametrize("check, breaks, detail, fix", BROKEN,
                         ids=[f"{c}-{i}" for i, (c, *_) in enumerate(BROKEN)])
def test_each_check_fails_on_its_own_breakage_and_names_the_fix(check: str, breaks: Callable[[Observation], Observation],
                                                                 detail: str, fix: str) -> None:
    results = by_id(breaks(healthy()))
    r = results[check]
    assert r.ok is False, r
    assert detail in r.detail, r.detail
    assert fix in r.fix, r.fix
    assert doctor.failed(list(results.values()))


def test_every_check_has_a_broken_case() -> None:
    assert {c for c, *_ in BROKEN} == set(doctor.READS)


def test_checks_behind_a_missing_scheduler_say_so_instead_of_failing_again() -> None:
    results = by_id(healthy(discovery=discovery(pods_found=0, ready_replicas=0, name=None, configmap_name=None,
                                                kill_wait_seconds=None, scheduler_kill_wait=None, slurm_kill_wait=None),
                            scope=None, access=None))
    assert results["scheduler-running"].ok is False
    assert all(results[c].ok is None and "not checked" in results[c].detail
               for c in ("scheduler-name", "scope", "scheduler-rbac", "grace"))


def test_what_does_not_apply_is_neither_passed_nor_failed() -> None:
    results = by_id(healthy(runner=None, partition=None, slurm=None))
    assert results["runner-token"].ok is None and "--runner-id" in results["runner-token"].detail
    assert results["policy"].ok is None
    assert results["partition"].ok is None and "no partition pinned" in results["partition"].detail
    assert results["slurm-token"].ok is None
    unconfigured = by_id(healthy(slurm=None))["partition"]
    assert unconfigured.ok is None and "--slurm-url" in unconfigured.detail
    assert by_id(healthy(binding="t/b", slurm=None))["partition"].detail.count("spec.slurm.restAPI") == 1
    pinged = by_id(healthy(partition=None, slurm=SlurmObservation("http://s", "k8sop", None, answer={})))["partition"]
    assert pinged.ok is True and "answers with the token" in pinged.detail


def test_fixes_name_the_binding_field_or_the_flag() -> None:
    broken = _sched(name=None, name_source=None, discovered_name=None)
    assert "--scheduler-name" in by_id(broken(healthy()))["scheduler-name"].fix
    assert "spec.scheduler.name" in by_id(broken(healthy(binding="t/b")))["scheduler-name"].fix


def test_healthy_variants_pass() -> None:
    """SUNK 8.2 (no flag: Slurm's KillWait is the scheduler's), cluster scope, a null policy, no pod yet."""
    r = by_id(healthy(discovery=discovery(scheduler_kill_wait=None, kill_wait_source="slurmConf"),
                      scope=Scope("x", "cluster", None), pods=SandboxPods(),
                      runner=Runner("r", "u", "Secret a/b key token", "ok", policy=None)))
    assert r["kill-wait-matches"].ok and "uses Slurm's KillWait, 60 s" in r["kill-wait-matches"].detail
    assert r["kill-wait"].ok and "Slurm's KillWait" in r["kill-wait"].detail
    assert r["scope"].ok and "type cluster" in r["scope"].detail
    assert r["grace"].ok and "no sandbox pod seen yet" in r["grace"].detail
    assert r["policy"].ok and "null" in r["policy"].detail
    none = by_id(healthy(access=Access("ServiceAccount t/s", False), sandbox_namespaces=frozenset()))
    assert none["scheduler-rbac"].ok and "each new one needs its grant" in none["scheduler-rbac"].detail
    blank = by_id(healthy(scope=Scope("x", "namespace", ()), sandbox_namespaces=frozenset({"tenant-slurm"})))
    assert blank["scope"].ok, blank["scope"]  # a blank list is the scheduler's own namespace


def test_the_readme_table_says_what_each_check_reads() -> None:
    text = README.read_text()
    block = text.split("<!-- doctor-reads:begin")[1].split("<!-- doctor-reads:end -->")[0]
    rows = dict(re.findall(r"^\| `([a-z-]+)` \| (.+?) \|$", block, re.M))
    assert rows == doctor.READS
