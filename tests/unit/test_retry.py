"""retry.optimistic and Backoff: only lost races are retried, a bounded number of times, with jittered backoff."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sunk_sandbox_operator.controller import retry


class LostRace(Exception):
    pass


class Recorder:
    def __init__(self) -> None:
        self.slept: list[float] = []

    async def sleep(self, delay: float) -> None:
        self.slept.append(delay)


def attempts_that(fail: list[BaseException | None]):
    """An attempt raising fail[n] on attempt n (None: return n)."""
    seen: list[int] = []

    async def attempt(n: int):
        seen.append(n)
        exc = fail[n] if n < len(fail) else None
        if exc is not None:
            raise exc
        return f"done at {n}"

    return attempt, seen


async def test_returns_the_first_success_without_sleeping() -> None:
    attempt, seen = attempts_that([])
    rec = Recorder()
    assert await retry.optimistic(attempt, lost_race=lambda e: True, retries=5, sleep=rec.sleep) == "done at 0"
    assert seen == [0] and rec.slept == []


async def test_retries_lost_races_then_succeeds_rereading_each_time() -> None:
    attempt, seen = attempts_that([LostRace(), LostRace(), None])
    rec = Recorder()
    got = await retry.optimistic(attempt, lost_race=lambda e: isinstance(e, LostRace), retries=5, sleep=rec.sleep,
                                 rand=lambda: 0.0)
    assert got == "done at 2" and seen == [0, 1, 2]
    b = retry.CONFLICT_BACKOFF
    assert rec.slept == [b.base, b.base * 2]     # rand 0: the full delay


async def test_other_errors_are_not_retried() -> None:
    attempt, seen = attempts_that([ValueError("permanent")])
    rec = Recorder()
    with pytest.raises(ValueError, match="permanent"):
        await retry.optimistic(attempt, lost_race=lambda e: isinstance(e, LostRace), retries=5, sleep=rec.sleep)
    assert seen == [0] and rec.slept == []


async def test_bounded_then_retries_exhausted_with_the_last_error() -> None:
    last = LostRace("third")
    attempt, seen = attempts_that([LostRace("first"), LostRace("second"), last, None])
    rec = Recorder()
    with pytest.raises(retry.RetriesExhausted) as info:
        await retry.optimistic(attempt, lost_race=lambda e: isinstance(e, LostRace), retries=2, sleep=rec.sleep)
    assert seen == [0, 1, 2]                     # retries + 1 attempts, no more
    assert len(rec.slept) == 2                   # no sleep after the last attempt
    assert info.value.attempts == 3 and info.value.last is last
    assert "3 times in a row" in str(info.value) and "third" in str(info.value)


async def test_zero_retries_is_one_attempt() -> None:
    attempt, seen = attempts_that([LostRace()])
    with pytest.raises(retry.RetriesExhausted) as info:
        await retry.optimistic(attempt, lost_race=lambda e: True, retries=0, sleep=Recorder().sleep)
    assert seen == [0] and info.value.attempts == 1


async def test_the_backoff_given_is_the_one_used() -> None:
    attempt, _ = attempts_that([LostRace()] * 4)
    rec = Recorder()
    await retry.optimistic(attempt, lost_race=lambda e: True, retries=4, backoff=retry.Backoff(1.0, 3.0, 0.5),
                           sleep=rec.sleep, rand=lambda: 1.0)
    assert rec.slept == [0.5, 1.0, 1.5, 1.5]     # min(cap, base·2ⁿ) × (1 - 0.5)


def test_backoff_values_grow_exponentially_up_to_the_cap() -> None:
    b = retry.Backoff(base=0.05, cap=1.0, jitter=0.5)
    assert [b.delay(n, rand=lambda: 0.0) for n in range(7)] == [0.05, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    assert b.delay(10_000, rand=lambda: 0.0) == 1.0  # no overflow for huge attempt numbers
    assert retry.FAILURE_BACKOFF.delay(0, rand=lambda: 0.0) == 1.0
    assert retry.FAILURE_BACKOFF.delay(20, rand=lambda: 0.0) == 60.0


@given(st.integers(0, 100), st.floats(0.0, 1.0))
def test_jitter_stays_within_its_bounds(attempt: int, r: float) -> None:
    b = retry.Backoff(base=0.05, cap=2.0, jitter=0.5)
    ceiling = min(b.cap, b.base * 2 ** attempt)
    assert ceiling * (1 - b.jitter) - 1e-12 <= b.delay(attempt, rand=lambda: r) <= ceiling + 1e-12


def test_no_jitter_is_the_ceiling() -> None:
    assert retry.Backoff(base=1.0, cap=8.0, jitter=0.0).delay(2, rand=lambda: 0.99) == 4.0
