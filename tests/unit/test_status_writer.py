"""The status writer over the fake Kube: patch only what changed, coalesced flushes paced by the injected clock,
one event per condition change."""

from __future__ import annotations

from sunk_sandbox_operator.api.reasons import CONDITION_TYPES
from sunk_sandbox_operator.controller import reconcile
from sunk_sandbox_operator.controller.context import Context
from sunk_sandbox_operator.controller.status_writer import condition_events, flush, request_flush
from sunk_sandbox_operator.core.compose import Part

from tests.unit.fakes import binding_body, harness_fixture  # noqa: F401 (fixture)


def _patches(h) -> list[dict]:
    return [c[3] for c in h.kube.calls if c[0] == "patch_binding_status"]


async def test_the_first_flush_writes_every_condition_then_nothing_changed_means_no_patch(harness) -> None:
    h = harness()
    state = h.binding()
    assert await flush(h.ctx, state) is True
    stored = h.kube.get("bindings", "slurm", "b")["status"]
    assert [c["type"] for c in stored["conditions"]] == ["Ready", "SchedulerReady", "PolicySynced", "ScopeSynced",
                                                          "GracePeriodSafe", "SlurmReady", "PlacementVerified"]
    assert {c["reason"] for c in stored["conditions"]} == {"NotReconciled"}
    assert stored["observedGeneration"] == 1 and state.status == stored
    await h.clock.advance(60.0)                                  # a later time alone changes nothing
    assert await flush(h.ctx, state) is False
    assert len(_patches(h)) == 1 and state.counters.status_patches == 1
    assert h.events == []                                        # NotReconciled is not worth an event


async def test_a_change_patches_only_what_changed(harness) -> None:
    h = harness()
    state = h.binding()
    await flush(h.ctx, state)
    state.report(Part("ScopeSynced", "True", "Synced", "all listed", "scope", {"namespaceCount": 2, "missing": []}))
    await h.clock.advance(1.0)
    assert await flush(h.ctx, state) is True
    patch = _patches(h)[-1]
    assert set(patch) == {"conditions", "scope"}                 # observedGeneration unchanged: not sent
    assert patch["scope"] == {"namespaceCount": 2, "missing": []}
    assert h.kube.get("bindings", "slurm", "b")["status"]["scope"] == {"namespaceCount": 2, "missing": []}


async def test_volatile_check_times_alone_do_not_cause_a_patch(harness) -> None:
    h = harness()
    state = h.binding()
    state.report(Part("PolicySynced", "True", "Synced", "ok", "policy", {"etag": "1", "lastCheckedTime": "t1"}))
    await flush(h.ctx, state)
    state.report(Part("PolicySynced", "True", "Synced", "ok", "policy", {"etag": "1", "lastCheckedTime": "t2"}))
    assert await flush(h.ctx, state) is False
    assert len(_patches(h)) == 1


async def test_nothing_is_composed_before_every_concern_was_observed_again(harness) -> None:
    """A restart (or a new leader) with nothing changed flips no condition: until every part has
    been reported by this process, the stored status is left as it is."""
    h = harness()
    state = h.binding(observed=False)
    state.report(Part("ScopeSynced", "True", "Synced", "all listed", "scope", {"namespaceCount": 2}))
    assert await flush(h.ctx, state) is False and _patches(h) == []
    for ctype in ("SchedulerReady", "PolicySynced", "GracePeriodSafe", "SlurmReady"):
        state.report(Part(ctype, "True", "Fine", "ok"))
    assert await flush(h.ctx, state) is False                    # PlacementVerified not observed yet
    state.report(Part("PlacementVerified", "Unknown", "NoSandboxPods", "none yet"))
    assert await flush(h.ctx, state) is True and len(_patches(h)) == 1


async def test_a_deleted_or_vanished_binding_is_not_written(harness) -> None:
    h = harness()
    state = h.binding()
    reconcile.forget(h.ctx, state)
    assert await flush(h.ctx, state) is False and _patches(h) == []
    gone = h.binding(binding_body("gone", uid="u2"), stored=False)                               # not (or no longer) on the API server
    assert await flush(h.ctx, gone) is False                     # NotFound: nothing to write to
    assert gone.counters.status_patches == 0


async def test_requests_that_change_nothing_are_paced_too(harness) -> None:
    """Pod churn that changes nothing must not recompute the placement summary per event."""
    h = harness(status_min_interval_seconds=0.3)
    state = h.binding()
    evaluations = 0

    def before(_ctx, _state) -> None:
        nonlocal evaluations
        evaluations += 1

    await flush(h.ctx, state)                                    # the first status, written
    await h.clock.advance(0.35)
    for _ in range(12):                                          # 0.24 s of requests, none changing anything
        request_flush(h.ctx, state, before=before)
        await h.clock.advance(0.02)
    assert evaluations == 1                                      # the first at once, the rest wait for the interval
    await h.clock.advance(0.06)
    assert evaluations == 2                                      # one more run for all of them, 0.3 s later
    await h.run_until_idle()
    assert evaluations == 2 and len(_patches(h)) == 1


async def test_request_flush_refreshes_derived_parts_right_before_writing(harness) -> None:
    h = harness(status_min_interval_seconds=2.0)
    state = h.binding()
    counter = {"n": 0}

    def before(_ctx, s) -> None:
        counter["n"] += 1
        s.report(Part("PlacementVerified", "Unknown", "NoSandboxPods", f"seen {counter['n']}"))

    request_flush(h.ctx, state, before=before)
    await h.run_until_idle()
    request_flush(h.ctx, state, before=before)
    request_flush(h.ctx, state, before=before)
    await h.clock.advance(1.9)
    assert len(_patches(h)) == 1
    await h.clock.advance(0.1)
    assert len(_patches(h)) == 2
    placement = [c for c in h.kube.get("bindings", "slurm", "b")["status"]["conditions"]
                 if c["type"] == "PlacementVerified"][0]
    assert placement["message"] == "seen 2"


async def test_request_flush_after_forget_does_nothing(harness) -> None:
    h = harness()
    state = h.binding()
    request_flush(h.ctx, state)
    await h.run_until_idle()
    reconcile.forget(h.ctx, state)
    request_flush(h.ctx, state)
    await h.run_until_idle()
    assert len(_patches(h)) == 1 and state.flusher.cancelled


def _cond(ctype: str, status: str, reason: str, message: str = "m") -> dict:
    return {"type": ctype, "status": status, "reason": reason, "message": message}


async def test_condition_events(harness) -> None:
    h = harness()
    state = h.binding()
    old = [_cond("Ready", "False", "X"), _cond("PolicySynced", "False", "APIUnavailable"),
           _cond("ScopeSynced", "True", "Synced"), _cond("SchedulerReady", "False", "SchedulerNotFound"),
           _cond("GracePeriodSafe", "True", "GracePeriodWithinKillWait")]
    new = [_cond("Ready", "True", "Ready"),                                  # Ready: never an event
           _cond("PolicySynced", "True", "Synced", "routed"),                # False → True
           _cond("ScopeSynced", "False", "Forbidden", "no RBAC"),            # True → False
           _cond("SchedulerReady", "False", "SchedulerNotRunning"),          # False, another reason
           _cond("GracePeriodSafe", "True", "DriftCorrected"),               # True → True: its own event elsewhere
           _cond("PlacementVerified", "Unknown", "NotReconciled")]           # not looked at yet
    condition_events(h.ctx, state, old, new)
    assert h.events == [("Normal", "Synced", "PolicySynced: routed"), ("Warning", "Forbidden", "ScopeSynced: no RBAC"),
                        ("Warning", "SchedulerNotRunning", "SchedulerReady: m")]
    h.events.clear()
    condition_events(h.ctx, state, new, new)
    assert h.events == []
    # A first state (no condition before, or NotReconciled) is no change: only a False one is said.
    first = [_cond("PlacementVerified", "Unknown", "NoSandboxPods", "none yet"), _cond("PolicySynced", "True", "Synced"),
             _cond("ScopeSynced", "False", "Forbidden", "no RBAC")]
    condition_events(h.ctx, state, [], first)
    assert h.events == [("Warning", "Forbidden", "ScopeSynced: no RBAC")]
    h.events.clear()
    condition_events(h.ctx, state, [_cond(c["type"], "Unknown", "NotReconciled") for c in first], first)
    assert h.events == [("Warning", "Forbidden", "ScopeSynced: no RBAC")]


async def test_a_healthy_first_flush_posts_no_condition_event(harness) -> None:
    """Issue 34: a healthy binding's first reconcile said 6 condition events (one per first state)."""
    h = harness()
    state = h.binding()
    for ctype in CONDITION_TYPES[1:]:
        state.report(Part(ctype, "True", "Fine", "all good"))
    assert await flush(h.ctx, state)
    assert h.events == []
    state.report(Part("ScopeSynced", "False", "Forbidden", "no RBAC"))  # a change from a known state: said
    assert await flush(h.ctx, state)
    assert h.events == [("Warning", "Forbidden", "ScopeSynced: no RBAC")]


async def test_a_flush_posts_the_events_of_what_it_wrote(harness) -> None:
    h = harness()
    state = h.binding()
    await flush(h.ctx, state)
    state.report(Part("SchedulerReady", "False", "SchedulerNotFound", "no pods"))
    await flush(h.ctx, state)
    assert ("Warning", "SchedulerNotFound", "SchedulerReady: no pods") in h.events
    h.events.clear()
    await flush(h.ctx, state)                                    # nothing new: no event either
    assert h.events == []


async def test_a_failing_event_sink_never_breaks_a_flush(harness) -> None:
    h = harness()

    def broken(*_args) -> None:
        raise RuntimeError("events API down")

    ctx = Context(config=h.config, kube=h.kube, event_sink=broken, monotonic=h.clock, sleep=h.clock.sleep,
                  now_iso=h.clock.iso)
    state = ctx.bindings.ensure(h.kube.add("bindings", binding_body()))
    for ctype in ("PolicySynced", "ScopeSynced", "GracePeriodSafe", "SlurmReady", "PlacementVerified"):
        state.report(Part(ctype, "Unknown", "NotReconciled", "not yet"))
    state.report(Part("SchedulerReady", "False", "SchedulerNotFound", "no pods"))
    assert await flush(ctx, state) is True


async def test_a_late_echo_of_an_older_write_does_not_hide_a_change(harness) -> None:
    """kopf may hand over the echo of an older status write after a newer one was written: the change
    after it is still said (the previous state is what this process last wrote)."""
    h = harness()
    state = h.binding()
    for ctype in CONDITION_TYPES[1:]:
        state.report(Part(ctype, "True", "Fine", "all good"))
    await flush(h.ctx, state)
    echo = {**state.body, "status": dict(state.status)}        # the first write, as kopf will hand it over
    state.report(Part("SchedulerReady", "False", "SchedulerNotRunning", "none Ready"))
    await flush(h.ctx, state)
    state.update_body(echo)                                     # late: says SchedulerReady is True
    state.report(Part("SchedulerReady", "True", "SchedulerFound", "1 Ready"))
    await flush(h.ctx, state)
    assert [(kind, reason) for kind, reason, _ in h.events] == [("Warning", "SchedulerNotRunning"),
                                                                ("Normal", "SchedulerFound")]
