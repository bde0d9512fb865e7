"""The propagation window: a pod created soon after the policy write that lacks it is Unknown
PolicyPropagating until the window ends, then False PolicyNotPropagated; a newer matching pod
verifies it at any time. The verdict is pure (summary, write time, window, now); the controller
re-judges once at the window's end."""

from __future__ import annotations

import datetime as dt

from hypothesis import given, settings
from hypothesis import strategies as st

from sunk_sandbox_operator.api import keys
from sunk_sandbox_operator.controller import placement as cplacement
from sunk_sandbox_operator.controller import reconcile, watch
from sunk_sandbox_operator.core.placement import PlacementTracker, placement_condition, propagating_until

from tests.unit.fakes import binding_body, harness_fixture  # noqa: F401 (fixture)
from tests.unit.test_placement import facts, sandbox

WRITE = dt.datetime(2025, 9, 10, 12, 0, 0, tzinfo=dt.timezone.utc)
APPLIED = "2025-09-10T12:00:00Z"
WINDOW = 60


def at(seconds: int) -> str:
    """The time `seconds` after the policy write, as the API server writes it."""
    return (WRITE + dt.timedelta(seconds=seconds)).isoformat().replace("+00:00", "Z")


def bad(name: str, created: int) -> dict:
    return sandbox(name, created=at(created), spec__schedulerName="default-scheduler")


def good(name: str, created: int) -> dict:
    return sandbox(name, created=at(created))


def judge(pods: list[dict], now: int | None, window: float = WINDOW, applied: str | None = APPLIED
          ) -> tuple[str, str, str]:
    t = PlacementTracker()
    for p in pods:
        t.apply("ADDED", facts(p))
    return placement_condition(t.summary(applied), applied, window_seconds=window,
                               now=at(now) if now is not None else None)


def until(pods: list[dict], now: int, window: float = WINDOW) -> float | None:
    t = PlacementTracker()
    for p in pods:
        t.apply("ADDED", facts(p))
    return propagating_until(t.summary(APPLIED), APPLIED, window_seconds=window, now=at(now))


def test_a_mismatch_inside_the_window_is_propagating_and_says_when_it_ends() -> None:
    status, reason, message = judge([bad("bad", 10)], now=15)
    assert (status, reason) == ("Unknown", "PolicyPropagating")
    assert "ds-alice/bad" in message and "'default-scheduler'" in message
    assert f"ends at {at(60)}" in message and "re-checked" in message
    assert until([bad("bad", 10)], now=15) == (WRITE + dt.timedelta(seconds=60)).timestamp()


def test_a_matching_pod_after_a_mismatch_in_the_window_verifies_it() -> None:
    assert judge([bad("bad", 10), good("good", 20)], now=25)[:2] == ("True", "Verified")
    assert judge([bad("bad", 10), good("good", 90)], now=95)[:2] == ("True", "Verified")
    assert until([bad("bad", 10), good("good", 20)], now=25) is None       # nothing to re-check


def test_once_the_window_is_over_a_mismatch_from_inside_it_is_not_propagated() -> None:
    """Created during propagation, but nothing newer has shown the policy arriving: no longer "wait"."""
    assert judge([bad("bad", 10)], now=61)[:2] == ("False", "PolicyNotPropagated")
    assert until([bad("bad", 10)], now=61) is None


def test_a_mismatch_created_after_the_window_is_not_propagated() -> None:
    assert judge([bad("bad", 61)], now=62)[:2] == ("False", "PolicyNotPropagated")
    # even if the operator's clock lags the API server's and still says "inside the window"
    assert judge([bad("bad", 61)], now=30)[:2] == ("False", "PolicyNotPropagated")


def test_a_mismatch_newer_than_a_match_inside_the_window_is_still_propagating() -> None:
    assert judge([good("good", 5), bad("bad", 10)], now=15)[:2] == ("Unknown", "PolicyPropagating")
    assert judge([good("good", 5), bad("bad", 10)], now=70)[:2] == ("False", "PolicyNotPropagated")


def test_the_window_s_last_second_is_inside_it() -> None:
    """One-second resolution: a pod of the window's last second, or a `now` of it, may be inside."""
    assert judge([bad("bad", 60)], now=60)[:2] == ("Unknown", "PolicyPropagating")
    assert judge([bad("bad", 59)], now=60)[:2] == ("Unknown", "PolicyPropagating")
    assert judge([bad("bad", 60)], now=61)[:2] == ("False", "PolicyNotPropagated")
    assert judge([bad("bad", 61)], now=61)[:2] == ("False", "PolicyNotPropagated")


def test_the_write_s_own_second_still_proves_nothing() -> None:
    assert judge([bad("same", 0)], now=5)[:2] == ("Unknown", "NoNewSandboxPods")


def test_no_window_no_clock_or_no_write_time_judges_at_once() -> None:
    assert judge([bad("bad", 10)], now=15, window=0)[:2] == ("False", "PolicyNotPropagated")
    assert judge([bad("bad", 10)], now=None)[:2] == ("False", "PolicyNotPropagated")
    assert judge([bad("bad", 10)], now=15, applied=None)[:2] == ("False", "PolicyNotPropagated")
    assert judge([bad("bad", 10)], now=15, applied="garbage")[:2] == ("False", "PolicyNotPropagated")


def test_no_pods_and_old_pods_are_unchanged_by_the_window() -> None:
    assert judge([], now=5)[:2] == ("Unknown", "NoSandboxPods")
    assert judge([bad("old", -10)], now=5)[:2] == ("Unknown", "NoNewSandboxPods")


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(-30, 150), st.booleans()), min_size=1, max_size=12, unique_by=lambda x: x[0]),
       st.integers(0, 200), st.sampled_from([0, 1, 30, 60, 120]))
def test_the_window_only_ever_softens_false_to_propagating_and_only_while_it_lasts(pods, now, window) -> None:
    objs = [(good if ok else bad)(f"p{s + 100}", s) for s, ok in pods]
    without = judge(objs, now=None)
    status, reason, _ = judge(objs, now=now, window=window)
    if (status, reason) != without[:2]:
        # the only difference the window makes: a failure judged too early becomes "propagating"
        assert without[:2] == ("False", "PolicyNotPropagated") and (status, reason) == ("Unknown", "PolicyPropagating")
        assert now <= window
    if now > window:
        assert (status, reason) == without[:2]  # after the window, today's verdict


# ---------------------------------------------------------------- the controller


def _pod(name: str, created: str, partition: str = "p") -> dict:
    return {"metadata": {"namespace": "ds-a", "name": name, "uid": f"uid-{name}", "creationTimestamp": created,
                         "labels": {keys.SANDBOX_ID_LABEL: name},
                         "annotations": {"sunk.coreweave.com/partition": partition}},
            "spec": {"schedulerName": "slurm-scheduler", "containers": [
                {"name": "c", "image": "i", "resources": {"requests": {"cpu": "1", "memory": "1Gi"},
                                                          "limits": {"cpu": "2", "memory": "2Gi"}}}]},
            "status": {"phase": "Running"}}


def _condition(h, ctype: str) -> dict:
    return next(c for c in h.kube.get("bindings", "slurm", "b")["status"]["conditions"] if c["type"] == ctype)


async def test_the_controller_re_judges_at_the_window_s_end(harness) -> None:
    h = harness(policy_propagation_seconds=60.0, status_min_interval_seconds=2.0)
    written = h.clock.iso()
    body = binding_body(partition="p")
    body["status"] = {"policy": {"lastAppliedTime": written}}
    state = h.binding(body, active=False, judged=True)

    await h.clock.advance(10)                      # a sandbox created right after the write, old values
    watch.on_pod(h.ctx, "ADDED", _pod("early", h.clock.iso(), partition="default"))
    await h.run_until_idle()
    cond = _condition(h, "PlacementVerified")
    assert (cond["status"], cond["reason"]) == ("Unknown", "PolicyPropagating")
    end = (dt.datetime.fromisoformat(written.replace("Z", "+00:00")) + dt.timedelta(seconds=60))
    assert end.isoformat().replace("+00:00", "Z") in cond["message"]
    assert _condition(h, "Ready")["reason"] != "PolicyNotPropagated"
    assert state.placement.recheck is not None

    await h.clock.advance(50)                      # the window's last second: still propagating
    assert _condition(h, "PlacementVerified")["reason"] == "PolicyPropagating"
    await h.clock.advance(1)                       # over: one re-judge, no pod event, no resync
    await h.run_until_idle()
    cond = _condition(h, "PlacementVerified")
    assert (cond["status"], cond["reason"]) == ("False", "PolicyNotPropagated")
    assert (_condition(h, "Ready")["status"], _condition(h, "Ready")["reason"]) == ("False", "PolicyNotPropagated")
    assert state.placement.recheck is None

    await h.clock.advance(5)                       # the policy arrives: a newer pod matches
    watch.on_pod(h.ctx, "ADDED", _pod("later", h.clock.iso()))
    await h.run_until_idle()
    assert _condition(h, "PlacementVerified")["status"] == "True"


async def test_a_match_inside_the_window_drops_the_re_judge_and_forget_cancels_it(harness) -> None:
    h = harness(policy_propagation_seconds=60.0)
    body = binding_body(partition="p")
    body["status"] = {"policy": {"lastAppliedTime": h.clock.iso()}}
    state = h.binding(body, active=False, judged=True)
    await h.clock.advance(5)
    watch.on_pod(h.ctx, "ADDED", _pod("early", h.clock.iso(), partition="default"))
    await h.run_until_idle()
    first = state.placement.recheck
    assert first is not None
    await h.clock.advance(5)
    watch.on_pod(h.ctx, "ADDED", _pod("second", h.clock.iso(), partition="default"))
    await h.run_until_idle()
    assert state.placement.recheck is first        # the same window end: the same single re-judge

    await h.clock.advance(5)
    watch.on_pod(h.ctx, "ADDED", _pod("good", h.clock.iso()))
    await h.run_until_idle()
    assert _condition(h, "PlacementVerified")["status"] == "True"
    assert state.placement.recheck is None and first.cancelled()

    await h.clock.advance(5)
    watch.on_pod(h.ctx, "ADDED", _pod("late-bad", h.clock.iso(), partition="default"))
    await h.run_until_idle()
    task = state.placement.recheck
    assert task is not None and _condition(h, "PlacementVerified")["reason"] == "PolicyPropagating"
    reconcile.forget(h.ctx, state)
    await h.clock.advance(0)
    assert task.cancelled() and state.placement.recheck is None


def test_forget_without_a_re_judge_is_harmless() -> None:
    from sunk_sandbox_operator.controller.state import BindingState

    state = BindingState("slurm", "b", binding_body())
    state.close()
    assert state.placement.recheck is None
