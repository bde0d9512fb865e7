"""core/slurm_jobs.py: sandbox pods matched to their placeholder jobs per binding, kept per event;
and how the jobs weigh in PlacementVerified (core/placement.py)."""

from __future__ import annotations

import dataclasses
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from sunk_sandbox_operator.core.quantity import parse_quantity
from sunk_sandbox_operator.api import keys
from sunk_sandbox_operator.api.reasons import PlacementVerified
from sunk_sandbox_operator.core import slurm as s
from sunk_sandbox_operator.core.placement import PlacementTracker, observe_pod, placement_condition
from sunk_sandbox_operator.core.pods import decode_pod, parse_time
from sunk_sandbox_operator.core.slurm_jobs import JobTracker, JobView, job_names, jobs_condition

SCHED = "slurm-scheduler"
T0 = parse_time("2026-01-01T00:00:00Z")


def pod(ns: str, name: str, *, created: int = 0, scheduler: str = SCHED, phase: str = "Pending",
        sandbox_id: str | None = None, job: str | None = None):
    labels = {keys.SANDBOX_ID_LABEL: sandbox_id} if sandbox_id else {}
    if job:
        labels["batch.kubernetes.io/job-name"] = job
    meta = {"namespace": ns, "name": name, "uid": f"uid-{ns}-{name}",
            "creationTimestamp": f"2026-01-01T00:{created // 60:02d}:{created % 60:02d}Z", "labels": labels}
    return decode_pod({"metadata": meta, "spec": {"schedulerName": scheduler, "containers": [
        {"name": "c", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]}, "status": {"phase": phase}},
        parse_quantity)


def fact(job_id: int, name: str, state="RUNNING", reason="None", stuck=False, since=None) -> s.JobFact:
    return s.JobFact(job_id, name, state, reason, "", stuck, since)


def view(*facts: s.JobFact, at: float = T0 + 600) -> JobView:
    return JobView({f.name: f for f in facts}, at)


def test_job_names_from_templates() -> None:
    p = pod("ds-a", "sbx-1", sandbox_id="abc123")
    assert job_names(("{namespace}/{name}", "sandbox-{sandboxId}", "{uid}"), p) == (
        "ds-a/sbx-1", "sandbox-abc123", "uid-ds-a-sbx-1")
    assert job_names(("{sandboxId}", "{name}"), pod("ds-a", "sbx-1")) == ("", "sbx-1")  # no label: skipped
    assert job_names(("{name}{name}",), p) == ("sbx-1sbx-1",)


def test_one_job_may_stand_for_several_pods_sunk_8_2_gang_scheduling() -> None:
    """SUNK 8.2 places a Job's pods as one gang: one placeholder job for all of them. Matching never
    assumes one pod per job: each pod counts, a change of that one job re-judges every pod of it."""
    assert job_names(("{namespace}/{jobName}", "{namespace}/{name}"), pod("ds-a", "w-0", job="train")) == (
        "ds-a/train", "ds-a/w-0")
    assert job_names(("{jobName}",), pod("ds-a", "solo")) == ("",)   # no Job: skipped
    t = JobTracker(("{namespace}/{jobName}", "{namespace}/{name}"), SCHED)
    gang = [pod("ds-a", f"w-{i}", job="train") for i in range(4)]
    for p in [*gang, pod("ds-a", "solo")]:
        t.apply("ADDED", p)
    t.set_view(view(fact(7, "ds-a/train"), fact(8, "ds-a/solo")))
    got = t.summary(T0 + 3600)
    assert (got.matched, got.pending, got.missing) == (5, 0, 0)
    assert got.templates == {"{namespace}/{jobName}": 4, "{namespace}/{name}": 1}
    old = t.view
    stuck = fact(7, "ds-a/train", "PENDING", "Resources", stuck=True, since=T0 + 60)
    assert t.set_view(view(stuck, fact(8, "ds-a/solo")), {"ds-a/train"})
    assert old is not t.view
    got = t.summary(T0 + 3600)
    assert (got.matched, got.pending, got.missing) == (5, 4, 0) and got.stuck[1].job_id == 7
    t.apply("DELETED", gang[0])
    assert t.summary(T0 + 3600).pending == 3
    t.set_view(view(fact(8, "ds-a/solo")), {"ds-a/train"})   # the gang's job gone: each of its pods misses it
    got = t.summary(T0 + 3600)
    assert (got.matched, got.pending, got.missing) == (1, 0, 3)
    assert got.missing_example[1] == ("ds-a/train", f"ds-a/{got.missing_example[0].split('/')[1]}")


def test_matched_pending_and_missing() -> None:
    t = JobTracker(("{namespace}/{name}", "sandbox-{sandboxId}"), SCHED)
    for p in (pod("ds-a", "run"), pod("ds-a", "held", sandbox_id="h1"), pod("ds-a", "none", created=30),
              pod("ds-a", "other", scheduler="default-scheduler"), pod("ds-a", "done", phase="Succeeded")):
        t.apply("ADDED", p)
    assert len(t) == 3  # not placed by our scheduler, finished: no job expected
    assert t.summary(T0) is None  # no job list yet
    t.set_view(view(fact(1, "ds-a/run"), fact(2, "sandbox-h1", "PENDING", "JobHeldUser", stuck=True, since=T0 + 5)))
    got = t.summary(T0 + 10)  # the pod without a job is younger than the cutoff: not missing yet
    assert (got.matched, got.pending, got.missing) == (2, 1, 0)
    assert got.templates == {"{namespace}/{name}": 1, "sandbox-{sandboxId}": 1}
    assert got.stuck == ("ds-a/held", fact(2, "sandbox-h1", "PENDING", "JobHeldUser", stuck=True, since=T0 + 5))
    assert t.due(T0 + 30) and not t.due(T0 + 29)
    got = t.summary(T0 + 30)
    assert (got.missing, got.missing_pods) == (1, ("ds-a/none",))
    assert got.missing_example == ("ds-a/none", ("ds-a/none",))
    status = got.to_status().wire()
    assert status["stuck"] == {"pod": "ds-a/held", "jobId": 2, "job": "sandbox-h1", "reason": "JobHeldUser",
                               "since": "2026-01-01T00:00:05Z"}
    assert status["missingPods"] == ["ds-a/none"]


def test_a_new_list_rejudges_only_the_pods_whose_names_changed() -> None:
    t = JobTracker(("{namespace}/{name}",), SCHED)
    for i in range(100):
        t.apply("ADDED", pod("ds-a", f"p{i}"))
    first = view(*(fact(i, f"ds-a/p{i}") for i in range(100)))
    assert t.set_view(first)
    second = view(*(fact(i, f"ds-a/p{i}") for i in range(99)), fact(99, "ds-a/p99", "PENDING", "Resources", True, T0))
    judged = []
    original = t._judge
    t._judge = lambda e: (judged.append(e.ref), original(e))[1]  # count the work, not the result
    assert t.set_view(second, s.changed(first.jobs, second.jobs))
    assert judged == ["ds-a/p99"]
    assert not t.set_view(view(*second.jobs.values()), set())  # nothing changed: nothing judged
    assert t.summary(T0).pending == 1


def test_losing_the_list_and_getting_it_back() -> None:
    t = JobTracker(("{namespace}/{name}",), SCHED)
    t.apply("ADDED", pod("ds-a", "p"))
    t.set_view(view(fact(1, "ds-a/p")))
    assert t.set_view(None) and t.summary(T0) is None
    t.set_view(view())
    assert t.summary(T0 + 600).missing == 1
    t.apply("DELETED", pod("ds-a", "p"))
    assert t.summary(T0 + 600).missing == 0 and len(t) == 0


def _oracle(pods: dict, jobs: dict[str, s.JobFact], templates, cutoff: float) -> tuple[int, int, int]:
    """From scratch, the way a person would count: each expected pod's first matching name."""
    matched = pending = missing = 0
    for p in pods.values():
        if p.scheduler_name != SCHED or p.phase in ("Succeeded", "Failed"):
            continue
        found = next((jobs[n] for n in job_names(templates, p) if n and n in jobs), None)
        if found is None:
            missing += (p.created_ts or 0) <= cutoff
        else:
            matched += 1
            pending += found.stuck
    return matched, pending, missing


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10_000))
def test_incremental_counts_equal_a_count_from_scratch(seed: int) -> None:
    rng = random.Random(seed)
    templates = ("{namespace}/{name}", "sbx-{sandboxId}")
    t = JobTracker(templates, SCHED)
    pods: dict = {}
    jobs: dict[str, s.JobFact] = {}
    cutoff = T0
    t.set_view(JobView(dict(jobs), cutoff))
    for _ in range(60):
        action = rng.random()
        name = f"p{rng.randrange(8)}"
        if action < 0.35:
            p = pod("ds", name, created=rng.randrange(120), scheduler=rng.choice([SCHED, SCHED, "other"]),
                    phase=rng.choice(["Pending", "Running", "Succeeded"]), sandbox_id=rng.choice([None, name]))
            pods[p.uid] = p
            t.apply("MODIFIED", p)
        elif action < 0.5 and pods:
            uid = rng.choice(sorted(pods))
            t.apply("DELETED", pods.pop(uid))
        else:
            old = dict(jobs)
            jname = rng.choice([f"ds/{name}", f"sbx-{name}"])
            if rng.random() < 0.3:
                jobs.pop(jname, None)
            else:
                jobs[jname] = fact(rng.randrange(50), jname, rng.choice(["RUNNING", "PENDING"]), "Resources",
                                   stuck=rng.random() < 0.4, since=T0)
            cutoff = max(cutoff, T0 + rng.randrange(130))  # the list's time moves forward
            t.set_view(JobView(dict(jobs), cutoff), s.changed(old, jobs))
        got = t.summary(cutoff)
        assert (got.matched, got.pending, got.missing) == _oracle(pods, jobs, templates, cutoff)


# ---------------------------------------------------------------- the verdict


def _placement(pods: list, jobs_view: JobView, cutoff: float):
    tracker, jt = PlacementTracker(), JobTracker(("{namespace}/{name}",), SCHED)
    jt.set_view(jobs_view)
    for p in pods:
        tracker.apply("ADDED", observe_pod(p, scheduler_name=SCHED, partition=None, pinned={}, kill_wait=None))
        jt.apply("ADDED", p)
    return tracker.summary(None), jt.summary(cutoff)


def test_a_stuck_job_beats_a_missing_one_and_names_pod_job_and_reason() -> None:
    summary, jobs = _placement([pod("ds-a", "held"), pod("ds-a", "none")],
                               view(fact(7, "ds-a/held", "PENDING", "PartitionDown", True, T0 + 3)), T0 + 100)
    status, reason, message = placement_condition(summary, None, jobs=jobs)
    assert (status, reason) == ("False", PlacementVerified.SLURM_JOB_PENDING)
    assert "ds-a/held" in message and "job 7 (ds-a/held)" in message and "PartitionDown" in message
    assert "SlurmReady" in message  # the hint for a partition that is down
    status, reason, message = jobs_condition(dataclasses.replace(jobs, stuck=None, pending=0))
    assert (status, reason) == ("False", PlacementVerified.SLURM_JOB_MISSING) and "ds-a/none" in message


def test_all_jobs_found_verifies_and_says_so() -> None:
    summary, jobs = _placement([pod("ds-a", "run")], view(fact(1, "ds-a/run")), T0 + 100)
    status, reason, message = placement_condition(summary, None, jobs=jobs)
    assert (status, reason) == ("True", PlacementVerified.VERIFIED)
    assert "1 placeholder job(s) found ('{namespace}/{name}' ×1)" in message


def test_the_policy_verdict_comes_first_when_false() -> None:
    """The newest pod lacks the scheduler name: SUNK never saw it, so its job says nothing."""
    stale = pod("ds-a", "stale", scheduler="default-scheduler", created=10)
    summary, jobs = _placement([stale, pod("ds-a", "held")],
                               view(fact(7, "ds-a/held", "PENDING", "JobHeldUser", True, T0)), T0 + 100)
    assert placement_condition(summary, None, jobs=jobs)[:2] == ("False", PlacementVerified.POLICY_NOT_PROPAGATED)
    assert jobs_condition(jobs)[1] == PlacementVerified.SLURM_JOB_PENDING
