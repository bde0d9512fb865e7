"""tests.conftest.assert_stays: the helper integration tests use to say "nothing happens"."""

from __future__ import annotations

import time

import pytest

from tests.conftest import assert_stays


def test_holds_for_the_whole_window_and_polls_to_its_end():
    seen = []
    started = time.monotonic()
    polls = assert_stays(lambda: seen.append(time.monotonic() - started), 0.3, interval=0.05)
    assert polls == len(seen) >= 5
    assert seen[0] < 0.05, "checked at once"
    assert seen[-1] >= 0.3, "and once more at the end of the window"


def test_fails_at_the_first_violation_with_the_observed_count():
    count = [0]

    def stays_below_three():
        count[0] += 1
        assert count[0] < 3, f"count is {count[0]}"

    started = time.monotonic()
    with pytest.raises(AssertionError) as failed:
        assert_stays(stays_below_three, 30, interval=0.01)
    assert time.monotonic() - started < 5, "did not wait out the window"
    message = str(failed.value)
    assert "count is 3" in message and "(poll 3)" in message and "30s window" in message


def test_other_errors_are_not_swallowed():
    def broken():
        raise KeyError("status")

    with pytest.raises(KeyError):
        assert_stays(broken, 1)
