"""The pause decision (core/pause.py) and what the status says while paused (core/compose.py)."""

from __future__ import annotations

from sunk_sandbox_operator.api.events import EventReason
from sunk_sandbox_operator.api.keys import PAUSED_ANNOTATION
from sunk_sandbox_operator.api.reasons import Common
from sunk_sandbox_operator.core import compose, pause
from sunk_sandbox_operator.core import conditions as c
from sunk_sandbox_operator.core.compose import Part

NOW = "2026-01-01T00:00:00Z"


def meta(value: object = None) -> dict:
    return {"name": "b", "annotations": {} if value is None else {PAUSED_ANNOTATION: value}}


def test_only_the_exact_value_true_pauses():
    assert pause.paused(meta("true"))
    for value in (None, "false", "True", "yes", "1", " true", "", 1, True):
        assert not pause.paused(meta(value)), value
    assert not pause.paused(None)
    assert not pause.paused({"annotations": None})
    assert not pause.paused({"annotations": ["sunksandbox.dev/paused"]})  # hostile shapes are no pause


def test_the_annotation_key_is_the_projects_own_prefix():
    assert PAUSED_ANNOTATION == "sunksandbox.dev/paused"


def healthy() -> dict:
    parts = [Part(t, "True", "Fine", "ok") for t in ("SchedulerReady", "PolicySynced", "ScopeSynced",
                                                     "GracePeriodSafe", "SlurmReady", "PlacementVerified")]
    return compose.compose(None, parts, 4, NOW)


def test_paused_status_says_so_on_ready_and_the_write_conditions_only():
    before = healthy()
    out = compose.compose(before, pause.parts(), 4, NOW, paused=pause.MESSAGE)
    assert out["paused"] is True
    ready = c.find(out["conditions"], "Ready")
    assert (ready["status"], ready["reason"], ready["message"]) == ("False", Common.PAUSED, pause.MESSAGE)
    for ctype in ("PolicySynced", "ScopeSynced"):
        cond = c.find(out["conditions"], ctype)
        assert (cond["status"], cond["reason"]) == ("Unknown", "Paused")
    for ctype in ("SchedulerReady", "GracePeriodSafe", "SlurmReady", "PlacementVerified"):
        assert c.find(out["conditions"], ctype) == c.find(before["conditions"], ctype)  # facts kept as observed
    assert out["observedGeneration"] == 4


def test_paused_wins_over_an_earlier_failing_input():
    before = compose.compose(healthy(), [Part("SchedulerReady", "False", "SchedulerNotFound", "none")], 4, NOW)
    out = compose.compose(before, pause.parts(), 4, NOW, paused=pause.MESSAGE)
    assert c.find(out["conditions"], "Ready")["reason"] == "Paused"


def test_resumed_status_drops_the_flag_and_derives_ready_again():
    paused = compose.compose(healthy(), pause.parts(), 4, NOW, paused=pause.MESSAGE)
    parts = [Part(t, "True", "Fine", "ok") for t in ("PolicySynced", "ScopeSynced")]
    out = compose.compose(paused, parts, 4, NOW)
    assert "paused" not in out
    assert c.find(out["conditions"], "Ready")["status"] == "True"
    assert compose.merge_patch(paused, out)["paused"] is None  # the merge patch removes it


def test_one_event_per_pause_and_per_resume_judged_from_the_stored_status():
    running = healthy()
    paused = compose.compose(running, pause.parts(), 4, NOW, paused=pause.MESSAGE)
    assert pause.transition(True, running) is EventReason.BINDING_PAUSED
    assert pause.transition(True, paused) is None          # already recorded: a restart posts nothing again
    assert pause.transition(False, paused) is EventReason.BINDING_RESUMED
    assert pause.transition(False, running) is None
    assert pause.transition(True, None) is EventReason.BINDING_PAUSED  # a binding paused before its first status
    assert not pause.recorded({"conditions": ["junk", {"type": "Ready"}]})
