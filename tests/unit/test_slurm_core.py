"""core/slurm.py: reading slurmrestd's answers (v0.0.38 and v0.0.40+ shapes), the persistence of
pending reasons, the offline token check and SlurmReady; core/slurm_versions.py: the negotiation and
the answers that differ by release; core/slurm_poll.py: the poller's decision. Pure: no HTTP, no
clock but the one passed."""

from __future__ import annotations

import base64
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sunk_sandbox_operator.api.reasons import SlurmReady
from sunk_sandbox_operator.core import slurm as s
from sunk_sandbox_operator.core import slurm_poll as sp
from sunk_sandbox_operator.core import slurm_versions as v


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


def test_a_tenant_written_token_is_decoded_within_bounds() -> None:
    nested = "x." + base64.urlsafe_b64encode(b"[" * 2500 + b"]" * 2500).rstrip(b"=").decode() + ".y"
    assert len(nested) < s.TOKEN_MAX and "not a JWT" in s.token_problem(nested, "k8sop", 0)  # no RecursionError
    huge = "a." * (s.TOKEN_MAX // 2) + "b"
    assert "longer than any Slurm JWT" in s.token_problem(huge, "k8sop", 0) and huge not in s.token_problem(huge, "k8sop", 0)
    assert s.token_expiry(jwt({"exp": 10 ** 18, "sun": "k8sop"})) == 10 ** 18
    assert s.iso(10 ** 18) == f"epoch {10 ** 18}"   # no OverflowError from a hostile exp
    assert "expired at epoch" in s.token_problem(jwt({"exp": -10 ** 18}), "k8sop", 0)


def test_expiring_within_the_hour() -> None:
    assert s.token_expiry(jwt({"exp": 5000})) == 5000 and s.token_expiry("garbage") is None
    assert s.expiring(5000, 5000 - 3600) and s.expiring(5000, 4999)
    assert not s.expiring(5000, 5000 - 3601) and not s.expiring(5000, 5000) and not s.expiring(None, 0)


def test_header_problem_names_the_place_never_the_value() -> None:
    assert s.header_problem("eyJ.eyJ.sig") is None
    for value, what in (("a.b.c\nDB=pw", "a line break at offset 5"), ("a b", "a space at offset 1"),
                        ("a\x7f", "a control character"), ("jwt-é", "a non-ASCII character")):
        said = s.header_problem(value)
        assert what in said and value not in said


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
    (obs(error="api", detail="HTTP 418"), "False", SlurmReady.SLURM_API_ERROR, False),
    (obs(error="version", detail="v0.0.38 is not served"), "False", SlurmReady.API_VERSION_NOT_SERVED, False),
])
def test_slurm_ready(observation, status, reason, verified) -> None:
    got = s.ready_condition(observation)
    assert got[:2] == (status, reason)
    assert s.verified(observation) is verified
    if observation is not None and observation.error == "unreachable":
        assert "nothing else about this binding depends on it" in got[2]
    if reason == SlurmReady.PARTITION_DOWN:
        assert "State=UP" in got[2] and observation.answer["state"] in got[2]


def test_the_version_and_an_expiring_token_in_the_message() -> None:
    o = obs(answer={"name": "hpc", "partition": {"state": ["UP"]}}, api_version="v0.0.42", release="24.11.5",
            token_where="Secret ns/jwt key token", token_expires=1796307062)
    message = s.ready_condition(o)[2]
    assert "(user k8sop; Slurm 24.11.5, REST v0.0.42 (negotiated))" in message
    assert "The token (Secret ns/jwt key token) expires at 2026-12-03T14:11:02Z" in message
    spec = s.ready_condition(obs(answer={"name": "hpc", "state": "UP"}, api_version="v0.0.38", negotiated=False))[2]
    assert "REST v0.0.38 (spec.slurm.restAPI.apiVersion)" in spec and "expires" not in spec


# ---------------------------------------------------------------- shapes by release (slurm-versions.md)


def test_negotiation_probes_down_and_stops_at_the_first_answer_not_404() -> None:
    assert v.probe([]).ask == "v0.0.45"
    assert v.probe([("v0.0.45", 404), ("v0.0.44", 404)]).ask == "v0.0.43"
    assert v.probe([("v0.0.45", 404), ("v0.0.44", 200)]).chosen == "v0.0.44"
    assert v.probe([(x, 404) for x in v.KNOWN]) == v.Probe()
    assert v.spans(["v0.0.40", "v0.0.42", "v0.0.41", "v0.0.38"]) == "v0.0.38, v0.0.40–v0.0.42"
    assert v.spans(v.KNOWN) == "v0.0.38, v0.0.40–v0.0.45" and v.spans([]) == "none"


def test_the_unchanged_job_list_of_24_11_on() -> None:
    quiet = {"jobs": [], "last_update": {"set": True, "infinite": False, "number": 0},
             "warnings": [{"description": "No job changes since update_time[1796307162]=2026-12-03T14:12:42"}]}
    assert v.unchanged(quiet)
    assert v.unchanged({**quiet, "warnings": []}) and v.unchanged({"jobs": [], "warnings": quiet["warnings"]})
    assert not v.unchanged({"jobs": [], "last_update": {"set": True, "number": 1796307062}, "warnings": []})
    assert not v.unchanged({"jobs": [{"job_id": 1}], "last_update": {"number": 0}}) and not v.unchanged([])


def test_update_time_refused_ping_and_release() -> None:
    assert v.update_time_refused({"errors": [{"description": "Parsing of 1 for timestamp failed", "error_number": 9202}]})
    assert not v.update_time_refused({"errors": [{"error_number": 9000}]}) and not v.update_time_refused(None)
    assert v.responding({"pings": [{"ping": "UP"}]}) and v.responding({"pings": [{"responding": True}]})
    assert v.responding({"pings": [{"pinged": "UP", "responding": True}]})
    assert v.responding({"pings": [{"pinged": "DOWN"}]}) is False and v.responding({"pings": []}) is None
    assert v.ping_status({"pings": [{"responding": False, "status": "Protocol authentication error"}]}) == \
        "Protocol authentication error" and v.ping_status({"pings": [{"ping": "UP"}]}) == ""
    assert v.release({"meta": {"Slurm": {"release": "22.05.8"}}}) == "22.05.8"
    assert v.release({"meta": {"slurm": {"version": {"major": "26", "minor": "05", "micro": "5"}}}}) == "26.05.5"
    assert v.release({"meta": {"slurm": {"version": {"major": 24, "minor": 11, "micro": 5}}}}) == "24.11.5"
    assert v.release({"meta": {"slurm": {"release": "x" * 100}}}) is None and v.release({"meta": 1}) is None


# ---------------------------------------------------------------- the poller's decision (core/slurm_poll.py)


def subs(*outcomes: sp.TokenOutcome, partition: str | None = None, seen: str | None = None) -> list[sp.Subscriber]:
    return [sp.Subscriber(f"b{i}", o, partition, seen) for i, o in enumerate(outcomes)]


def decide(memory: sp.PollMemory, subscribers, r: sp.Round) -> sp.Decision:
    return sp.decide(memory, subscribers, r, now=100.0, now_wall=1000.0, pending_seconds=30, pending_polls=2)


def test_whose_token_a_round_uses() -> None:
    V, U, R = sp.TokenOutcome.VERIFIED, sp.TokenOutcome.UNREACHABLE, sp.TokenOutcome.REFUSED
    assert sp.token_of(subs(R, U, V)) == "b2" and sp.token_of(subs(R, U)) == "b1" and sp.token_of(subs(R)) is None


def test_slurm_failing_is_said_once_drops_the_views_once_and_backs_off() -> None:
    V = sp.TokenOutcome.VERIFIED
    m = sp.PollMemory(reachable=True, facts={})
    d = decide(m, subs(V, V), sp.Round(sp.Met.FAILED, "b0", error="ConnectError"))
    assert d.announce == "ConnectError" and d.publish and d.memory.facts is None and d.wake == {"b0", "b1"}
    assert d.backoff == 1
    d = decide(d.memory, subs(V, V), sp.Round(sp.Met.FAILED, "b0", error="ConnectError"))
    assert d.announce is None and not d.publish and not d.wake and d.backoff == 2  # attempt 2 of the one backoff


def test_an_answer_after_an_outage_wakes_the_waiting_once_and_verifies_the_token() -> None:
    U, V = sp.TokenOutcome.UNREACHABLE, sp.TokenOutcome.VERIFIED
    m = sp.PollMemory(reachable=False, failures=3)
    jobs = {"ns/p": s.Job(1, "ns/p", "RUNNING", "None", "")}
    d = decide(m, subs(U, U, V), sp.Round(sp.Met.ANSWERED, "b0", started=1000.0, jobs=jobs, partitions={}))
    assert d.wake == {"b0", "b1"} and d.outcome == ("b0", V) and d.backoff is None and d.publish
    assert d.memory.failures == 0 and d.memory.polls == 1 and d.names is None
    assert d.memory.update_time == 1000 - sp.SKEW_MARGIN - 1   # no skew known: lag by the margin
    again = decide(d.memory, subs(V, V, V), sp.Round(sp.Met.ANSWERED, "b0", started=1010.0))   # unchanged
    assert not again.wake and again.names == frozenset() and again.memory.jobs == jobs


def test_a_partition_that_moved_wakes_its_binding_once() -> None:
    V = sp.TokenOutcome.VERIFIED
    m = sp.PollMemory(reachable=True, polls=1)
    d = decide(m, subs(V, partition="hpc", seen="UP"), sp.Round(sp.Met.ANSWERED, "b0", partitions={"hpc": "DOWN"}))
    assert d.wake == {"b0"} and d.partition_seen == {"b0": "DOWN"}
    d = decide(d.memory, subs(V, partition="hpc", seen="DOWN"), sp.Round(sp.Met.ANSWERED, "b0"))
    assert not d.wake


def test_a_refused_token_drops_its_binding() -> None:
    d = decide(sp.PollMemory(), subs(sp.TokenOutcome.VERIFIED), sp.Round(sp.Met.REFUSED, "b0"))
    assert d.outcome == ("b0", sp.TokenOutcome.REFUSED) and d.wake == {"b0"} and d.backoff is None
    assert decide(sp.PollMemory(), [], sp.Round(sp.Met.NO_TOKEN)) == sp.Decision(sp.PollMemory(), sp.Met.NO_TOKEN)


def test_full_reads_and_since() -> None:
    assert sp.full_read(sp.PollMemory()) and sp.since(sp.PollMemory(update_time=5)) is None
    assert sp.since(sp.PollMemory(polls=1, update_time=5)) == 5
    assert sp.full_read(sp.PollMemory(polls=sp.FULL_READ_POLLS))
