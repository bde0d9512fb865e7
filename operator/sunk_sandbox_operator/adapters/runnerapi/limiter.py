"""The runner API's call budget: one process-wide token bucket, and a share of it per binding.

Every binding's calls go through its `Share`: a token from the binding's own bucket first (a
few calls a second, small bursts), and only then one from the process-wide bucket every binding
shares. A binding calling faster than its share waits for its own tokens before it asks for a
shared one, so it never books shared slots ahead of the others: whatever one tenant does (a storm
of reconcile requests), another binding's call waits only for the calls that are due at that moment.

Every wait is bounded: a call that would wait longer than `max_wait` books nothing and raises
`Throttled` (the caller reports it and backs off), instead of booking a slot far in the future, so
no queue builds up behind a burst. Reservation-based under a thread lock (each caller books its slot,
then sleeps outside the lock): one instance serves every event loop and thread of the process.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, Awaitable, Callable, Hashable, Protocol

from .errors import RunnerAPIError


class Throttled(RunnerAPIError):
    """The operator's own budget refused the call before anything was sent (not the API's answer).
    Not retried by the client: the caller backs off (the next reconcile comes with backoff)."""

    code = "resource_exhausted"
    retryable = False


class Limiter(Protocol):
    """What the client needs of a limiter: wait for a token, or raise Throttled."""

    async def acquire(self) -> None: ...


class RateLimiter:
    """Token bucket: `rate` requests per second on average, bursts up to `burst`; a caller that would
    wait longer than `max_wait` seconds (None: no bound) is refused with `Throttled`."""

    def __init__(
        self,
        rate: float = 10.0,
        burst: int = 20,
        *,
        max_wait: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
    ) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError("rate must be > 0 and burst >= 1")
        self.rate = float(rate)
        self.burst = int(burst)
        self.max_wait = max_wait
        self._clock = clock
        self._sleep = sleep
        self._tokens = float(burst)
        self._last = clock()
        self._lock = threading.Lock()

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(float(self.burst), self._tokens + (now - self._last) * self.rate)
        self._last = now

    def reserve(self) -> float:
        """Book one token; return how long to wait before using it (no bound)."""
        with self._lock:
            self._refill()
            self._tokens -= 1.0
            return 0.0 if self._tokens >= 0 else -self._tokens / self.rate

    def try_reserve(self, max_wait: float | None) -> float | None:
        """Book one token if its wait is at most `max_wait` (None: any); else book nothing and return None."""
        with self._lock:
            self._refill()
            wait = 0.0 if self._tokens >= 1.0 else (1.0 - self._tokens) / self.rate
            if max_wait is not None and wait > max_wait:
                return None
            self._tokens -= 1.0
            return wait

    def give_back(self) -> None:
        """Return a token booked by a call that was then refused elsewhere (never above `burst`)."""
        with self._lock:
            self._tokens = min(float(self.burst), self._tokens + 1.0)

    def next_free(self) -> float:
        """Seconds until a token would be free (0 when one is)."""
        with self._lock:
            self._refill()
            return 0.0 if self._tokens >= 1.0 else (1.0 - self._tokens) / self.rate

    async def acquire(self) -> None:
        wait = self.try_reserve(self.max_wait)
        if wait is None:
            raise Throttled(f"the runner API budget ({self.rate:g} calls/s) is spent for the next "
                            f"{self.next_free():.0f} s or more; retrying later", retry_after=self.next_free())
        if wait > 0:
            await self._sleep(wait)

    def __repr__(self) -> str:
        return f"RateLimiter(rate={self.rate}, burst={self.burst})"


class Share:
    """One binding's bucket under the process-wide one (see the module docstring)."""

    def __init__(self, parent: RateLimiter, own: RateLimiter, max_wait: float,
                 sleep: Callable[[float], Awaitable[Any]]) -> None:
        self.parent, self.own, self.max_wait, self._sleep = parent, own, max_wait, sleep

    async def acquire(self) -> None:
        wait = self.own.try_reserve(self.max_wait)
        if wait is None:
            free = self.own.next_free()
            raise Throttled(f"this binding's share of the runner API budget ({self.own.rate:g} calls/s) is spent "
                            f"for the next {free:.0f} s or more; retrying later", retry_after=free)
        if wait > 0:
            await self._sleep(wait)
        # Only now, with the binding's own token in hand, is a shared slot booked.
        wait = self.parent.try_reserve(self.max_wait)
        if wait is None:
            self.own.give_back()
            free = self.parent.next_free()
            raise Throttled(f"the operator's runner API budget ({self.parent.rate:g} calls/s for every binding) is "
                            f"spent for the next {free:.0f} s or more; retrying later", retry_after=free)
        if wait > 0:
            await self._sleep(wait)

    def __repr__(self) -> str:
        return f"Share(rate={self.own.rate}, burst={self.own.burst}, of {self.parent!r})"


class Budget:
    """The per-binding shares of one process-wide limiter, by binding key (`forget` when it goes)."""

    def __init__(self, parent: RateLimiter, rate: float = 1.0, burst: int = 5, max_wait: float = 30.0, *,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep) -> None:
        self.parent, self.rate, self.burst, self.max_wait = parent, rate, burst, max_wait
        self._clock, self._sleep = clock, sleep
        self._shares: dict[Hashable, Share] = {}

    def share(self, key: Hashable) -> Share:
        """The binding's share: the same one for as long as the binding exists (a new client, after a
        change of credentials, does not get a fresh burst)."""
        found = self._shares.get(key)
        if found is None:
            own = RateLimiter(self.rate, self.burst, clock=self._clock, sleep=self._sleep)
            found = self._shares[key] = Share(self.parent, own, self.max_wait, self._sleep)
        return found

    def forget(self, key: Hashable) -> None:
        self._shares.pop(key, None)

    def __len__(self) -> int:
        return len(self._shares)
