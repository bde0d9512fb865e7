"""Scheduler rolls are rationed (issue 20): at most one per scope.minRollInterval, the first change at once,
later ones folded into one roll at the interval's end. The pure rule, property-tested, then the shell over
the fakes on the injected clock (no wall-clock sleep)."""

from __future__ import annotations

import datetime as dt

from hypothesis import given, settings
from hypothesis import strategies as st

from sunk_sandbox_operator.api.keys import SCOPE_ROLLED_AT_ANNOTATION
from sunk_sandbox_operator.controller import scope, watch
from sunk_sandbox_operator.core.scope import pacing
from sunk_sandbox_operator.core.scope.template import scope_hash

from tests.unit.fakes import Harness, harness_fixture, namespace  # noqa: F401
from tests.unit.test_scope_controller import listed, scope_hash_of, world


def simulate(changes: list[float], interval: float) -> list[float]:
    """The roll times a scheduler sees for list changes at `changes`, following roll_wait as the shell
    does: at a change (or at the folded roll's timer) roll when the wait is 0, else set the timer."""
    rolls: list[float] = []
    due, timer = False, None
    events = sorted(changes)
    i = 0
    while i < len(events) or timer is not None:
        if timer is not None and (i >= len(events) or timer <= events[i]):
            now, timer = timer, None
        else:
            now, due = events[i], True
            i += 1
        if not due:
            continue
        wait = pacing.roll_wait(rolls[-1] if rolls else None, now, interval)
        if wait == 0:
            rolls.append(now)
            due = False
        elif timer is None:
            timer = now + wait
    return rolls


@settings(max_examples=300, deadline=None)
@given(st.lists(st.floats(0, 600, allow_nan=False), max_size=60), st.sampled_from([0.0, 5.0, 30.0, 120.0]))
def test_never_two_rolls_inside_an_interval_and_never_a_change_left_unrolled_past_it(changes, interval) -> None:
    rolls = simulate(changes, interval)
    eps = 1e-6  # float sums of the timer
    assert all(b - a >= interval - eps for a, b in zip(rolls, rolls[1:]))
    for t in changes:  # every change is carried by a roll at or after it, within the interval
        assert any(t <= r <= t + interval + eps for r in rolls), (t, rolls)
    if changes:
        assert rolls[0] == min(changes)  # the first change rolls at once


def test_zero_rolls_at_every_change_and_a_first_roll_is_never_delayed() -> None:
    assert simulate([1.0, 2.0, 3.0], 0.0) == [1.0, 2.0, 3.0]
    assert pacing.roll_wait(None, 100.0, 30.0) == 0.0 and pacing.roll_wait(90.0, 100.0, 30.0) == 20.0
    assert pacing.after("2026-01-01T00:00:00Z", 20.2) == "2026-01-01T00:00:21Z"


def iso(seconds: float) -> str:
    """A wall-clock time in whole seconds, as status and the operator's clock record it."""
    return (dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(seconds=seconds)).replace(
        microsecond=0).isoformat().replace("+00:00", "Z")


def test_a_recorded_roll_time_reads_back_as_the_end_of_its_second() -> None:
    """A roll at 100.5 s is recorded as 100 s: read as made at 101 s, never at 100 (which let the next
    roll come 29.5 s after it), on the monotonic clock of a process whose wall clock reads `now_iso`."""
    assert pacing.monotonic_of(iso(100.5), iso(105.2), 1005.2) == 1001.2    # 4 s ago by the wall: at 101
    assert pacing.monotonic_of(iso(100.5), iso(101.2), 1001.2) == 1001.2    # the next second: not after now
    assert pacing.monotonic_of(iso(100.5), iso(100.9), 1000.9) == 1000.9    # ... nor in the same second
    assert pacing.monotonic_of("not a time", iso(100.0), 1000.0) is None


@settings(max_examples=300, deadline=None)
@given(st.floats(0, 1000), st.floats(0, 100), st.floats(-1e6, 1e6))
def test_a_recorded_roll_is_never_read_earlier_than_it_was(roll, later, offset) -> None:
    """For a roll at wall time `roll`, read `later` seconds after it by a process whose monotonic clock
    is the wall clock plus `offset`: the estimate is at or after the roll, not after the read, and less
    than 2 s late (1 s for the roll's whole second, 1 s for the reader's)."""
    now = roll + later
    estimate = pacing.monotonic_of(iso(roll), iso(now), now + offset)
    assert estimate is not None
    eps = 1e-6 * max(1.0, abs(offset))  # float sums
    assert roll + offset - eps <= estimate <= now + offset + eps and estimate - offset < roll + 2 + eps


async def test_a_trickle_of_namespaces_rolls_the_scheduler_at_most_once_per_interval(harness) -> None:
    """15 namespaces one every 2 s (new users through a busy hour) made 15 restarts before."""
    h = harness()
    state = world(h)                                        # the default minRollInterval: 30s
    state.report(await scope.sync(h.ctx, state))
    assert h.kube.count("merge_patch_deployment") == 1      # the first change rolls at once
    for i in range(15):
        watch.on_namespace(h.ctx, "ADDED", namespace(f"ds-t{i}"))
        await h.run_until_idle(horizon=2.0)
        await h.clock.advance(2.0)
    assert h.kube.count("replace_configmap") >= 15          # every namespace listed at once...
    assert h.kube.count("merge_patch_deployment") == 2      # ...one folded roll at the interval's end
    watch.on_namespace(h.ctx, "ADDED", namespace("ds-late"))  # just after that roll: folded into the next
    await h.run_until_idle(horizon=2.0)
    state.report(await scope.sync(h.ctx, state))            # (a resync: no roll either)
    rolls = state.scope.roll_loop
    assert h.kube.count("merge_patch_deployment") == 2 and rolls.latest.due is not None  # one folded roll due
    assert state.section("scope")["nextRollTime"] == rolls.latest.next_roll_at
    await h.clock.advance(30.0)
    await h.run_until_idle()
    assert h.kube.count("merge_patch_deployment") == 3 and rolls.latest.due is None
    assert scope_hash_of(h) == scope_hash(listed(h))        # the running scheduler has the whole list


async def test_a_roll_records_its_time_on_the_template_so_a_successor_whose_status_lost_it_still_waits(
        harness) -> None:
    """status.scope.lastRollTime reaches the API server with a later status flush: a process that dies
    before it leaves the roll's time only on the template (the rolled-at annotation, in the roll's own
    patch). Its successor waits the interval from that roll instead of rolling again at once."""
    h = harness()
    state = world(h)
    state.report(await scope.sync(h.ctx, state))                  # ds-known: the first roll, at once
    template = h.kube.get("deployments", "slurm", "slurm-scheduler")["spec"]["template"]["metadata"]
    assert template["annotations"][SCOPE_ROLLED_AT_ANNOTATION] == state.scope.roll_loop.latest.last_roll_at == h.clock.iso()
    stored = h.kube.store["bindings"][("slurm", "b")]
    assert "lastRollTime" not in (stored.get("status") or {}).get("scope", {})  # the process dies here
    successor = Harness(kube=h.kube)
    successor.clock.now = h.clock.now + 1.0
    successor.ctx.namespaces.load(h.kube.store["namespaces"].values())
    again = successor.binding(stored, stored=False)
    try:
        again.report(await successor.drive(scope.sync(successor.ctx, again)))   # its first sync reads the template
        assert again.section("scope")["lastRollTime"] == h.clock.iso()         # ... and says so in status again
        watch.on_namespace(successor.ctx, "ADDED", successor.kube.add("namespaces", namespace("ds-new")))
        await successor.run_until_idle(horizon=2.0)
        assert "ds-new" in listed(successor) and h.kube.count("merge_patch_deployment") == 1  # folded
        assert again.scope.roll_loop.latest.next_roll_at == pacing.after(h.clock.iso(), 31.0)    # the end of its second + 30 s
        await successor.clock.advance(30.0)
        await successor.run_until_idle()
        assert h.kube.count("merge_patch_deployment") == 2 and scope_hash_of(successor) == scope_hash(listed(h))
    finally:
        await successor.close()
