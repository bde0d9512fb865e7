"""One coalescer for every "something changed, write it soon" path: the scope loops and status flushes.

`signal()` asks for a run. At most one run is in flight; signals that arrive while it runs are
folded into exactly one more run after it. Two knobs shape the timing:
- `window`: after the first signal of a burst, wait this long so the burst becomes one run
  (an `urgent` signal cuts the wait short: a stuck pod should not wait for a window);
- `min_interval`: at least this long between the starts of two runs (paces writes under churn).
Clock and sleep are injected, so tests drive time by hand. Runs happen in the context the
coalescer was made in (or the one given): the binding's log fields (adapters/logfields.py) stay on
the lines of a run that a pod or namespace event signalled.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from typing import Awaitable, Callable

log = logging.getLogger("sunk_sandbox_operator")


class Coalescer:
    def __init__(
        self,
        run: Callable[[], Awaitable[None]],
        *,
        window: Callable[[], float] = lambda: 0.0,
        min_interval: Callable[[], float] = lambda: 0.0,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        name: str = "coalescer",
        context: contextvars.Context | None = None,
    ) -> None:
        self._run, self._window, self._min_interval = run, window, min_interval
        self._context = context if context is not None else contextvars.copy_context()
        self._clock, self._sleep, self.name = clock, sleep, name
        self.task: asyncio.Task | None = None
        self.pending = False
        self.urgent = asyncio.Event()
        self.first_signal: float | None = None  # earliest signal not yet folded into a run
        self.last_start: float | None = None
        self.runs = 0
        self.cancelled = False

    def signal(self, urgent: bool = False, at: float | None = None) -> None:
        if self.cancelled:
            return
        at = self._clock() if at is None else at
        if self.first_signal is None or at < self.first_signal:
            self.first_signal = at
        self.pending = True
        if urgent:
            self.urgent.set()
        if self.task is None or self.task.done():
            self.task = asyncio.get_running_loop().create_task(self._loop(), name=self.name, context=self._context)

    def take_first_signal(self) -> float | None:
        """The earliest signal not yet folded into a run; the caller folds it now."""
        first, self.first_signal = self.first_signal, None
        return first

    def _due(self) -> float:
        pace = (self.last_start + self._min_interval()) if self.last_start is not None else float("-inf")
        if self.urgent.is_set():
            return pace
        first = self.first_signal if self.first_signal is not None else self._clock()
        return max(first + self._window(), pace)

    async def _wait(self, delay: float) -> None:
        """Sleep `delay`, or less if an urgent signal arrives."""
        if self.urgent.is_set():
            await self._sleep(delay)
            return
        sleeper = asyncio.ensure_future(self._sleep(delay))
        waker = asyncio.ensure_future(self.urgent.wait())
        try:
            await asyncio.wait({sleeper, waker}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            sleeper.cancel()
            waker.cancel()

    async def _loop(self) -> None:
        while self.pending and not self.cancelled:
            delay = self._due() - self._clock()
            if delay > 0:
                await self._wait(delay)
                if self._due() - self._clock() > 0:
                    continue  # woken early by an urgent signal that is still paced: wait again
            self.pending = False
            self.urgent.clear()
            self.last_start = self._clock()
            self.runs += 1
            try:
                await self._run()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("%s failed", self.name)

    def cancel(self) -> None:
        self.cancelled = True
        self.pending = False
        if self.task is not None and not self.task.done():
            self.task.cancel()

    async def wait_idle(self) -> None:
        """Until no run is pending or in flight (tests, shutdown). Returns, never raises, when the
        task ends cancelled (after `cancel()`); being cancelled itself does not cancel the task."""
        while self.task is not None and not self.task.done():
            await asyncio.wait({self.task})
