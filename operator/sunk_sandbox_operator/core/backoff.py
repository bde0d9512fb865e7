"""The one backoff: how long to wait before retry n of anything that failed and is tried again.

Every retry of the operator takes its delay from `Backoff.delay`: lost races on one object and
transient reconcile failures (controller/retry.py, whose `Backoff` is this one with the process's
random draw), the runner API client (`hinted`: the server's Retry-After wins, within a bound),
the informers' relist and rewatch, the Slurm poller. One formula, so every cadence is read and
tuned here, and a test injects the draw instead of patching a clock or `random`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

# Past this many doublings every ceiling is the cap anyway; the bound keeps 2ⁿ a small float.
MAX_DOUBLINGS = 30


@dataclass(frozen=True)
class Backoff:
    """Delay before retry n (0-based): min(cap, base·2ⁿ), scaled by a jitter in [1-jitter, 1].

    `jitter=1.0` is full jitter (anywhere up to the ceiling: many clients that failed together
    spread out); 0 is the ceiling itself."""

    base: float = 0.05
    cap: float = 2.0
    jitter: float = 0.5

    def ceiling(self, attempt: int) -> float:
        return min(self.cap, self.base * 2.0 ** min(max(attempt, 0), MAX_DOUBLINGS))

    def delay(self, attempt: int, rand: Callable[[], float]) -> float:
        """`rand()` draws in [0, 1): the caller's random source, injected."""
        return self.ceiling(attempt) * (1.0 - self.jitter * rand())


def hinted(backoff: Backoff, attempt: int, rand: Callable[[], float], hint: float | None, bound: float) -> float:
    """The server's hint (an HTTP Retry-After) when it gave one, within [0, bound]: it knows when it
    can take the call again, which our ceiling only guesses; else the backoff's delay."""
    if hint is not None:
        return min(max(hint, 0.0), bound)
    return backoff.delay(attempt, rand)
