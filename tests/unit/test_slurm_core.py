"""core/slurm.py: reading slurmrestd's answers (v0.0.38 and v0.0.40+ shapes), the persistence of
pending reasons, the offline token check and SlurmReady. Pure: no HTTP, no clock but the one passed."""

from __future__ import annotations

import base64
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sunk_sandbox_operator.api.reasons import SlurmReady
from sunk_sandbox_operator.core import slurm as s


def job(job_id: int, name: str, state="PENDING", reason="None", **extra) -> dict:
    return {"job_id": job_id, "name": name, "job_state": state, "state_reason": reason, **extra}


# ---------------------------------------------------------------- shapes


def test_numbers_states_and_partitions_in_both_shapes() -> None:
    assert s.number(5) == 5 and s.number({"set": True, "infinite": False, "number": 7}) == 7
    assert s.number({"set": False, "number": 7}) is None and s.number({"infinite": True}) is None
    assert s.number(True) is None and s.number("5") is None
    assert s.job_state("pending") == "PENDING" and s.job_state(["RUNNING", "COMPLETING"]) == "RUNNING"
    assert s.job_state(None) == "UNKNOWN" and s.job_state([]) == "UNKNOWN"
    assert s.partition_state({"name": "p", "state": "UP"}) == "UP"                     # v0.0.38
    assert s.partition_state({"name": "p", "partition": {"state": ["DOWN"]}}) == "DOWN"  # v0.0.40+
    assert s.partition_state({"name": "p"}) is None and s.partition_state("UP") is None
    assert s.partition_states({"partitions": [{"name": "a", "state": "UP"}, {"name": "b", "partition": {
        "state": ["DRAIN"]}}, "junk", {"state": "UP"}]}) == {"a": "UP", "b": "DRAIN"}


def test_the_job_of_a_name_is_the_live_one_then_the_newest() -> None:
    jobs = s.parse_jobs({"jobs": [
        job(3, "ns/a", "COMPLETED"), job(2, "ns/a", "RUNNING"),            # requeued: the live one wins
        job(4, "ns/b", "PENDING"), job(9, "ns/b", "PENDING"),              # the newest
        job({"set": True, "number": 11}, "ns/c", ["RUNNING"]),             # v0.0.40 shapes
        job(5, "", "RUNNING"), job(None, "ns/d"), "junk", job(6, "x" * 2000),
        {"job_id": 7, "name": "ns/e", "job_state": "PENDING", "state_reason": 3},
    ]})
    assert sorted(jobs) == ["ns/a", "ns/b", "ns/c", "ns/e"]
    assert (jobs["ns/a"].job_id, jobs["ns/b"].job_id, jobs["ns/c"].state) == (2, 9, "RUNNING")
    assert jobs["ns/e"].reason == ""
    assert s.parse_jobs(None) == {} and s.parse_jobs({"jobs": "x"}) == {}


# ---------------------------------------------------------------- persistence


def run(polls: list[tuple[float, str, str]], seconds: float = 30, needed: int = 3) -> list[s.JobFact]:
    """Feed one job through polls of (time, state, reason); the fact after each."""
    memo: dict = {}
    out = []
    for t, state, reason in polls:
        memo, facts = s.advance(memo, s.parse_jobs({"jobs": [job(1, "ns/p", state, reason)]}), now=t,
                                now_wall=1000 + t, seconds=seconds, polls=needed)
        out.append(facts["ns/p"])
    return out


def test_a_reason_is_stuck_once_it_lasted_the_seconds_and_the_polls() -> None:
    facts = run([(0, "PENDING", "JobHeldUser"), (10, "PENDING", "JobHeldUser"), (20, "PENDING", "JobHeldUser"),
                 (30, "PENDING", "JobHeldUser"), (40, "PENDING", "JobHeldUser")])
    assert [f.stuck for f in facts] == [False, False, False, True, True]
    assert facts[3].since == facts[4].since == 1000  # when first seen: the fact does not change per poll
    assert facts[3] == facts[4]


def test_a_brief_backfill_reason_never_counts() -> None:
    facts = run([(0, "PENDING", "ReqNodeNotAvail"), (10, "PENDING", "None"), (20, "RUNNING", "None"),
                 (30, "PENDING", "ReqNodeNotAvail"), (40, "PENDING", "Resources"), (50, "PENDING", "ReqNodeNotAvail")])
    assert not any(f.stuck for f in facts)


def test_many_polls_in_a_short_time_are_not_enough() -> None:
    facts = run([(t, "PENDING", "PartitionDown") for t in (0, 1, 2, 3, 4, 5)], seconds=30)
    assert not any(f.stuck for f in facts)
    assert run([(0, "PENDING", "PartitionDown"), (60, "PENDING", "PartitionDown")], needed=3)[-1].stuck is False


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 20), st.sampled_from(["None", "Resources", "JobHeldUser"]),
                          st.sampled_from(["PENDING", "RUNNING"])), min_size=1, max_size=15))
def test_stuck_iff_the_latest_run_of_one_reason_is_long_enough(steps) -> None:
    t, polls = 0, []
    for gap, reason, state in steps:
        t += gap
        polls.append((t, state, reason))
    last = run(polls, seconds=25, needed=3)[-1]
    t_last, state, reason = polls[-1]
    run_len, first = 0, t_last
    for pt, pstate, preason in reversed(polls):
        if pstate != "PENDING" or preason != reason:
            break
        run_len, first = run_len + 1, pt
    expected = state == "PENDING" and reason != "None" and run_len >= 3 and t_last - first >= 25
    assert last.stuck is expected


def test_changed_names() -> None:
    a = s.JobFact(1, "x", "PENDING", "Resources", "")
    assert s.changed({"x": a, "y": a}, {"x": a, "z": a}) == {"y", "z"}
    assert s.changed({"x": a}, {"x": s.JobFact(1, "x", "RUNNING", "None", "")}) == {"x"}
    assert s.changed({"x": a}, {"x": s.JobFact(1, "x", "PENDING", "Resources", "")}) == set()


# ---------------------------------------------------------------- tokens


def jwt(claims: dict) -> str:
    enc = lambda d: base64.urlsafe_b64encode(json.dumps(d).encode()).rstrip(b"=").decode()  # noqa: E731
    return f"{enc({'alg': 'HS256'})}.{enc(claims)}.c2ln"


def test_what_can_be_told_about_a_token_without_sending_it() -> None:
    assert s.token_problem(jwt({"exp": 2000, "iat": 1000, "sun": "k8sop"}), "k8sop", 1500) is None
    assert s.token_problem(jwt({"sun": "k8sop"}), "k8sop", 1500) is None         # no exp: Slurm decides
    assert "expired at 1970-01-01T00:33:20Z" in s.token_problem(jwt({"exp": 2000, "sun": "k8sop"}), "k8sop", 2000)
    assert "for Slurm user 'root'" in s.token_problem(jwt({"exp": 9999, "sun": "root"}), "k8sop", 1500)
    for garbage in ("", "abc", "a.b", "a.!!.c", jwt([1, 2]).replace(".c2ln", ""), "x.eyJhIjo.y"):
        assert "not a JWT" in s.token_problem(garbage, "k8sop", 1500)


def test_no_problem_message_holds_the_token() -> None:
    for token in (jwt({"exp": 1, "sun": "k8sop"}), jwt({"exp": 9999, "sun": "bob"}), "secret-garbage-value"):
        assert token not in (s.token_problem(token, "k8sop", 1500) or "")


# ---------------------------------------------------------------- SlurmReady


def obs(**kw) -> s.SlurmObservation:
    return s.SlurmObservation(**{"url": "https://slurm:6820", "user": "k8sop", "partition": "hpc", **kw})


@pytest.mark.parametrize(("observation", "status", "reason", "verified"), [
    (None, "True", SlurmReady.NOT_CONFIGURED, False),
    (obs(answer={"name": "hpc", "state": "UP"}), "True", SlurmReady.PARTITION_UP, True),
    (obs(answer={"name": "hpc", "partition": {"state": ["UP"]}}), "True", SlurmReady.PARTITION_UP, True),
    (obs(answer={"name": "hpc", "state": "DOWN"}), "False", SlurmReady.PARTITION_DOWN, True),
    (obs(answer={"name": "hpc", "state": "DRAIN"}), "False", SlurmReady.PARTITION_DOWN, True),
    (obs(partition=None, answer={"pings": []}), "True", SlurmReady.SLURM_REACHABLE, True),
    (obs(error="not_found", detail="HTTP 500"), "False", SlurmReady.PARTITION_NOT_FOUND, True),
    (obs(error="auth", detail="HTTP 401"), "False", SlurmReady.SLURM_AUTH_FAILED, False),
    (obs(error="token", detail="expired"), "False", SlurmReady.SLURM_AUTH_FAILED, False),
    (obs(error="credentials", detail="no Secret"), "False", SlurmReady.CREDENTIALS_MISSING, False),
    (obs(error="unreachable", detail="refused"), "Unknown", SlurmReady.SLURM_UNREACHABLE, False),
    (obs(error="api", detail="HTTP 404"), "False", SlurmReady.SLURM_API_ERROR, False),
])
def test_slurm_ready(observation, status, reason, verified) -> None:
    got = s.ready_condition(observation)
    assert got[:2] == (status, reason)
    assert s.verified(observation) is verified
    if observation is not None and observation.error == "unreachable":
        assert "nothing else about this binding depends on it" in got[2]
    if reason == SlurmReady.PARTITION_DOWN:
        assert "State=UP" in got[2] and observation.answer["state"] in got[2]
