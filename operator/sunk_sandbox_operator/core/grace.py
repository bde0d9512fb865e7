"""The grace rule (domain.md step 2), pure.

SUNK requires a pod's terminationGracePeriodSeconds to be *strictly less than* kill-wait − 5 s:
the placeholder job drains the node if the pod is still running just before KillWait.
The runner policy cannot set the grace period, so the only fix is a longer Slurm KillWait.
"""

from __future__ import annotations

from ..api.reasons import GracePeriodSafe
from .conditions import Status

# SUNK's margin: grace must be < kill_wait - MARGIN.
MARGIN_SECONDS = 5
DEFAULT_GRACE_SECONDS = 30  # Kubernetes' default terminationGracePeriodSeconds
USUAL_KILL_WAIT = 60


def is_safe(grace: int, kill_wait: int) -> bool:
    return grace < kill_wait - MARGIN_SECONDS


def min_safe_kill_wait(grace: int) -> int:
    """Smallest whole-second kill-wait that satisfies grace < kill_wait - 5."""
    return grace + MARGIN_SECONDS + 1


def suggested_kill_wait(grace: int) -> int:
    """A round kill-wait with headroom: 60 for the default 30 s grace, 330 for 300 s snapshots.

    grace + 30 rounded up to a multiple of 30, never below 60 — the values the docs recommend.
    """
    headroom = max(grace, 0) + 30
    return max(USUAL_KILL_WAIT, -(-headroom // 30) * 30)


def effective_grace(expected_grace: int, observed_max_grace: int | None) -> int:
    """Observed pods override the expectation upward only: one long-grace pod is enough to drain a node."""
    return max(expected_grace, observed_max_grace) if observed_max_grace is not None else expected_grace


def grace_condition(expected_grace: int, observed_max_grace: int | None, kill_wait: int | None) -> tuple[Status, str, str]:
    """GracePeriodSafe as (status, reason, message)."""
    grace = effective_grace(expected_grace, observed_max_grace)
    seen = " (observed on sandbox pods)" if observed_max_grace is not None and observed_max_grace > expected_grace else ""
    if kill_wait is None:
        return (
            "Unknown",
            GracePeriodSafe.KILL_WAIT_UNKNOWN,
            f"sandbox pods use {grace} s{seen}; the scheduler's kill-wait was not found (no --slurm-kill-wait "
            f"argument, no KillWait in a slurm.conf ConfigMap): set spec.scheduler.killWaitSeconds to Slurm's "
            f"KillWait; it must be at least {min_safe_kill_wait(grace)}",
        )
    if is_safe(grace, kill_wait):
        return (
            "True",
            GracePeriodSafe.WITHIN_KILL_WAIT,
            f"sandbox pods use {grace} s{seen}; kill-wait is {kill_wait} s; grace stays below kill-wait − {MARGIN_SECONDS} s",
        )
    suggested = suggested_kill_wait(grace)
    usual = "is usual" if grace <= DEFAULT_GRACE_SECONDS else "suggested"
    return (
        "False",
        GracePeriodSafe.TOO_LONG,
        f"sandbox pods use {grace} s{seen}; kill-wait is {kill_wait} s; set slurmConfig.KillWait to at least "
        f"{min_safe_kill_wait(grace)} — {suggested} {usual} — and keep the scheduler's kill-wait equal",
    )
