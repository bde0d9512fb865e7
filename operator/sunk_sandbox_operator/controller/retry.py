"""The one optimistic-concurrency retry helper, and the shell's handle on the one backoff (core/backoff.py).

Every write that carries a precondition (a runner-policy etag, a resourceVersion) and every
restore goes through `optimistic`: run the attempt (which reads, decides and writes); if the
write lost the race, wait a jittered, exponentially growing delay and run it again from the
read, so another writer's change is re-read and merged, never overwritten. After `retries`
lost races it raises `RetriesExhausted` and the caller reports it on its condition.
"""

from __future__ import annotations

import asyncio
import random
from typing import Awaitable, Callable, TypeVar

from ..core import backoff as core_backoff

T = TypeVar("T")


class Backoff(core_backoff.Backoff):
    """The one backoff (core/backoff.py), drawing from the process's `random` unless told otherwise."""

    def delay(self, attempt: int, rand: Callable[[], float] = random.random) -> float:
        return super().delay(attempt, rand)


# Lost races on one object are resolved in well under a second; a failed sync comes back
# within seconds and backs off to a minute; both are far below the resync interval.
CONFLICT_BACKOFF = Backoff(base=0.05, cap=1.0)
FAILURE_BACKOFF = Backoff(base=1.0, cap=60.0)


class RetriesExhausted(Exception):
    def __init__(self, attempts: int, last: BaseException) -> None:
        super().__init__(f"lost the race {attempts} times in a row: {last}")
        self.attempts, self.last = attempts, last


async def optimistic(
    attempt: Callable[[int], Awaitable[T]],
    *,
    lost_race: Callable[[BaseException], bool],
    retries: int,
    backoff: core_backoff.Backoff = CONFLICT_BACKOFF,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    rand: Callable[[], float] = random.random,
) -> T:
    """`attempt(n)` until it returns; retry only when `lost_race(exc)`; at most retries+1 attempts."""
    for n in range(retries + 1):
        try:
            return await attempt(n)
        except Exception as exc:
            if not lost_race(exc):
                raise
            if n == retries:
                raise RetriesExhausted(n + 1, exc) from None
            await sleep(backoff.delay(n, rand))
    raise AssertionError("unreachable")
