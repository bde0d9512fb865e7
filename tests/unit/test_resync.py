"""The resync floor (core/resync.py): the operator admin's setting bounds how often a binding makes
the operator read the runner policy, the target and every namespace; a shorter spec.resyncInterval
is raised to it and Ready says so, written once (no churn)."""

from __future__ import annotations

import pytest

from sunk_sandbox_operator.controller import config, reconcile
from sunk_sandbox_operator.core import resync

from tests.unit.fakes import harness_fixture  # noqa: F401 (fixture)
from tests.unit.test_reconcile import cluster, conditions, new_binding, NS


def test_a_spec_interval_below_the_floor_is_raised_with_a_note() -> None:
    assert resync.decide("5m", 30) == resync.Resync(300.0)
    assert resync.decide("30s", 30) == resync.Resync(30.0)
    raised = resync.decide("1s", 30)
    assert raised.seconds == 30.0
    assert raised.note == ("spec.resyncInterval 1s is below the operator's minimum (--min-resync-interval 30s): "
                           "resynced every 30s")
    assert resync.decide("1s", 1) == resync.Resync(1.0)               # test clusters lower the floor
    assert resync.decide("0s", 0).seconds == resync.HARD_MINIMUM_SECONDS  # a loop never spins
    assert resync.decide(None, 30) == resync.Resync(300.0)           # no spec: the default
    assert resync.decide("junk", 30) == resync.Resync(300.0)


def test_format_and_parse_the_setting() -> None:
    assert [resync.format_seconds(s) for s in (0.5, 1, 30, 90, 300, 3600, 5400, 1.5)] == \
        ["500ms", "1s", "30s", "1m30s", "5m", "1h", "1h30m", "1.5s"]
    assert resync.parse_setting("30s") == 30 and resync.parse_setting("1m") == 60 and resync.parse_setting("5") == 5
    assert resync.parse_setting("0.5") == 0.5
    for bad in ("soon", "-1s", ""):
        with pytest.raises(ValueError, match="--min-resync-interval"):
            resync.parse_setting(bad)


def test_the_setting_is_read_from_the_environment(monkeypatch) -> None:
    monkeypatch.delenv("SSB_MIN_RESYNC_INTERVAL", raising=False)
    assert config.load().min_resync_seconds == 30.0                  # the default
    monkeypatch.setenv("SSB_MIN_RESYNC_INTERVAL", "1s")
    assert config.load().min_resync_seconds == 1.0


def test_a_bad_setting_stops_the_start(monkeypatch, capsys) -> None:
    from sunk_sandbox_operator.__main__ import main

    monkeypatch.setenv("SSB_MIN_RESYNC_INTERVAL", "soon")
    with pytest.raises(SystemExit) as exc:
        main(["run"])
    assert exc.value.code == 2 and "--min-resync-interval / SSB_MIN_RESYNC_INTERVAL: 'soon'" in capsys.readouterr().err


async def test_ready_says_the_interval_was_raised_and_status_is_written_once(harness) -> None:
    h = harness(min_resync_seconds=30.0)
    cluster(h)
    state, _ = new_binding(h, resyncInterval="1s")
    await reconcile.reconcile(h.ctx, state)
    assert conditions(h)["Ready"] == ("True", "Ready")
    ready = next(c for c in h.kube.get("bindings", NS, "b")["status"]["conditions"] if c["type"] == "Ready")
    assert ready["message"].endswith("; note: spec.resyncInterval 1s is below the operator's minimum "
                                     "(--min-resync-interval 30s): resynced every 30s"), ready
    assert reconcile.resync_seconds(state, h.ctx.config.min_resync_seconds) == 30.0
    patches = h.kube.count("patch_binding_status")
    await reconcile.reconcile(h.ctx, state)
    assert h.kube.count("patch_binding_status") == patches          # nothing changed: nothing written


async def test_no_note_when_the_spec_is_above_the_floor(harness) -> None:
    h = harness(min_resync_seconds=1.0)
    cluster(h)
    state, _ = new_binding(h, resyncInterval="1s")
    await reconcile.reconcile(h.ctx, state)
    ready = next(c for c in h.kube.get("bindings", NS, "b")["status"]["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "True" and "note" not in ready["message"]
    assert reconcile.resync_seconds(state, 1.0) == 1.0
