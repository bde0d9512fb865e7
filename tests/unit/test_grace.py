"""The grace rule: terminationGracePeriodSeconds < kill-wait − 5, strictly."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sunk_sandbox_operator.core.grace import grace_condition, min_safe_kill_wait, suggested_kill_wait


@pytest.mark.parametrize(
    ("grace", "kill_wait", "status"),
    [
        (30, 36, "True"),  # kill-wait − 6: safe
        (30, 35, "False"),  # kill-wait − 5: UNSAFE (strictly less is required)
        (30, 30, "False"),  # Kubernetes default grace with SUNK's default kill-wait
        (24, 30, "True"),
        (25, 30, "False"),
        (30, 60, "True"),
        (300, 60, "False"),
        (300, 305, "False"),
        (300, 306, "True"),
        (0, 6, "True"),
        (0, 5, "False"),
    ],
)
def test_boundaries(grace: int, kill_wait: int, status: str) -> None:
    assert grace_condition(grace, None, kill_wait)[0] == status


def test_default_grace_message_names_the_fix() -> None:
    status, reason, message = grace_condition(30, None, 30)
    assert (status, reason) == ("False", "GracePeriodTooLong")
    assert message == (
        "sandbox pods use 30 s; kill-wait is 30 s; set slurmConfig.KillWait to at least 36 — 60 is usual — "
        "and keep the scheduler's kill-wait equal"
    )


def test_snapshot_pods_override_expected_upward() -> None:
    status, reason, message = grace_condition(30, 300, 60)
    assert (status, reason) == ("False", "GracePeriodTooLong")
    assert "use 300 s" in message and "at least 306" in message and "330" in message


def test_observed_lower_than_expected_does_not_lower_grace() -> None:
    assert grace_condition(300, 10, 60)[0] == "False"
    assert grace_condition(30, 10, 36)[0] == "True"


def test_safe_message() -> None:
    status, reason, message = grace_condition(30, 30, 60)
    assert (status, reason) == ("True", "GracePeriodWithinKillWait")
    assert "30 s" in message and "60 s" in message


def test_kill_wait_unknown() -> None:
    status, reason, message = grace_condition(300, None, None)
    assert (status, reason) == ("Unknown", "KillWaitUnknown")
    assert "spec.scheduler.killWaitSeconds" in message and "306" in message


def test_min_and_suggested() -> None:
    assert min_safe_kill_wait(30) == 36
    assert min_safe_kill_wait(300) == 306
    assert suggested_kill_wait(30) == 60
    assert suggested_kill_wait(0) == 60
    assert suggested_kill_wait(300) == 330


@given(st.integers(0, 100_000), st.one_of(st.none(), st.integers(0, 100_000)), st.integers(0, 200_000))
def test_rule_and_helpers_agree(expected: int, observed: int | None, kill_wait: int) -> None:
    grace = max(expected, observed) if observed is not None else expected
    status, _, _ = grace_condition(expected, observed, kill_wait)
    assert (status == "True") == (grace < kill_wait - 5)
    assert grace_condition(expected, observed, min_safe_kill_wait(grace))[0] == "True"
    assert grace_condition(expected, observed, min_safe_kill_wait(grace) - 1)[0] == "False"
    assert suggested_kill_wait(grace) >= min_safe_kill_wait(grace)
    assert suggested_kill_wait(grace) % 30 == 0
