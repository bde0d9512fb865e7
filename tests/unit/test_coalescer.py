"""The Coalescer, with time driven by hand (FakeClock): window, urgent, min_interval, one run at a time."""

from __future__ import annotations

import asyncio
import logging

import pytest

from sunk_sandbox_operator.controller.coalescer import Coalescer

from tests.unit.fakes import FakeClock, settle


class Recorder:
    """A run that records when it started; with `hold`, each run waits until released."""

    def __init__(self, clock: FakeClock, hold: bool = False) -> None:
        self.clock = clock
        self.starts: list[float] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.hold = hold
        self.release = asyncio.Event()
        self.before: list = []            # callables run at the start of each run (e.g. take_first_signal)

    async def __call__(self) -> None:
        self.starts.append(self.clock())
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            for action in self.before:
                action()
            if self.hold:
                await self.release.wait()
                self.release.clear()
        finally:
            self.in_flight -= 1


def make(window: float = 0.0, min_interval: float = 0.0, hold: bool = False) -> tuple[Coalescer, Recorder, FakeClock]:
    clock = FakeClock()
    rec = Recorder(clock, hold)
    c = Coalescer(rec, window=lambda: window, min_interval=lambda: min_interval, clock=clock, sleep=clock.sleep,
                  name="test")
    return c, rec, clock


async def test_signals_within_the_window_make_one_run() -> None:
    c, rec, clock = make(window=0.05)
    t0 = clock()
    for _ in range(100):
        c.signal()
        await asyncio.sleep(0)
    await clock.advance(0.049)
    assert rec.starts == []                     # still inside the window
    await clock.advance(0.001)
    assert rec.starts == [t0 + 0.05]            # waited for the window, then one run for the burst
    await c.wait_idle()
    assert len(rec.starts) == 1 and c.runs == 1 and not c.pending


async def test_the_window_counts_from_the_earliest_signal() -> None:
    c, rec, clock = make(window=1.0)
    t0 = clock()
    c.signal(at=t0 - 0.75)                      # the event happened before it reached us
    c.signal()
    await clock.advance(0.25)
    assert rec.starts == [t0 + 0.25]
    await c.wait_idle()


async def test_urgent_signal_skips_the_window() -> None:
    c, rec, clock = make(window=10.0)
    t0 = clock()
    c.signal()
    await clock.advance(0.01)
    assert rec.starts == []
    c.signal(urgent=True)
    await settle()
    assert rec.starts == [t0 + 0.01]            # at once, not after 10 s
    await c.wait_idle()
    assert len(rec.starts) == 1 and not c.urgent.is_set()


async def test_urgent_signal_is_still_paced_by_min_interval() -> None:
    c, rec, clock = make(min_interval=5.0)
    t0 = clock()
    c.signal()
    await settle()
    assert rec.starts == [t0]
    await clock.advance(1.0)
    c.signal(urgent=True)
    await clock.advance(3.9)
    assert rec.starts == [t0]                   # urgent cuts the window, not the pacing
    await clock.advance(0.1)
    assert rec.starts == [t0, t0 + 5.0]
    await c.wait_idle()


async def test_signals_during_a_run_cause_exactly_one_more_run_never_two_at_once() -> None:
    c, rec, clock = make(window=0.01, hold=True)
    c.signal()
    await clock.advance(0.01)
    assert rec.in_flight == 1                   # the first run is in flight
    for _ in range(20):
        c.signal()
        await asyncio.sleep(0)
    await clock.advance(1.0)
    assert len(rec.starts) == 1                 # nothing starts while one runs
    rec.release.set()
    await clock.advance(0.01)                   # the second run: after its own window
    assert len(rec.starts) == 2 and rec.in_flight == 1
    rec.release.set()
    await c.wait_idle()
    assert len(rec.starts) == 2 and rec.max_in_flight == 1 and c.runs == 2


async def test_a_run_with_no_signal_during_it_is_the_last() -> None:
    c, rec, clock = make()
    c.signal()
    await c.wait_idle()
    assert len(rec.starts) == 1 and c.task.done() and not c.pending


async def test_min_interval_paces_the_starts_of_runs() -> None:
    c, rec, clock = make(min_interval=2.0)
    t0 = clock()
    c.signal()
    await settle()
    await clock.advance(0.5)
    c.signal()
    await clock.advance(1.4)
    assert rec.starts == [t0]
    await clock.advance(0.1)
    assert rec.starts == [t0, t0 + 2.0]
    await clock.advance(0.1)
    c.signal()                                  # 0.1 s after a run: waits for the interval
    await clock.advance(2.0)
    assert rec.starts == [t0, t0 + 2.0, t0 + 4.0]
    await clock.advance(10.0)
    c.signal()                                  # long after the last run: at once
    await settle()
    assert rec.starts[-1] == pytest.approx(t0 + 14.1)
    await c.wait_idle()
    assert len(rec.starts) == 4


async def test_take_first_signal_folds_the_earliest_unfolded_signal() -> None:
    c, rec, clock = make(window=10.0)
    c.signal(at=5.0)
    c.signal(at=3.0)
    c.signal(at=7.0)
    assert c.take_first_signal() == 3.0
    assert c.take_first_signal() is None
    c.cancel()


async def test_a_run_that_takes_the_first_signal_gives_the_next_burst_its_own_window() -> None:
    c, rec, clock = make(window=1.0)
    taken: list[float | None] = []
    rec.before.append(lambda: taken.append(c.take_first_signal()))
    t0 = clock()
    c.signal()
    await clock.advance(1.0)
    await clock.advance(5.0)
    c.signal()                                  # a new burst, 6 s later
    await clock.advance(0.5)
    assert rec.starts == [t0 + 1.0]
    await clock.advance(0.5)
    assert rec.starts == [t0 + 1.0, t0 + 7.0]
    assert taken == [t0, t0 + 6.0]
    await c.wait_idle()


async def test_cancel_drops_what_is_pending_and_ignores_later_signals() -> None:
    c, rec, clock = make(window=10.0)
    c.signal()
    await settle()
    c.cancel()
    await c.wait_idle()                         # returns (does not raise) once the task is cancelled
    assert c.task.cancelled() and not c.pending
    c.signal()
    assert c.task.done() and not c.pending      # no new task
    await clock.advance(20.0)
    assert rec.starts == []


async def test_cancel_stops_a_run_in_flight() -> None:
    c, rec, clock = make(hold=True)
    c.signal()
    await settle()
    assert rec.in_flight == 1
    c.cancel()
    await c.wait_idle()
    assert rec.in_flight == 0 and c.task.cancelled()


async def test_wait_idle_being_cancelled_does_not_cancel_the_run() -> None:
    c, rec, clock = make(hold=True)
    c.signal()
    await settle()
    waiter = asyncio.ensure_future(c.wait_idle())
    await settle()
    waiter.cancel()
    await settle()
    assert waiter.cancelled() and not c.task.done() and rec.in_flight == 1
    rec.release.set()
    await c.wait_idle()
    assert rec.in_flight == 0 and not c.task.cancelled()


async def test_wait_idle_without_any_signal_returns() -> None:
    c, rec, clock = make()
    await c.wait_idle()
    assert c.task is None and rec.starts == []


async def test_a_failing_run_is_logged_and_the_next_signal_runs_again(caplog) -> None:
    clock = FakeClock()
    runs = 0

    async def run() -> None:
        nonlocal runs
        runs += 1
        if runs == 1:
            raise RuntimeError("boom")

    c = Coalescer(run, clock=clock, sleep=clock.sleep, name="flaky")
    with caplog.at_level(logging.ERROR, logger="sunk_sandbox_operator"):
        c.signal()
        await c.wait_idle()
    assert runs == 1 and "flaky failed" in caplog.text and "boom" in caplog.text
    c.signal()
    await c.wait_idle()
    assert runs == 2
