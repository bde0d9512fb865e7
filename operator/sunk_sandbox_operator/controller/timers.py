"""Delayed actions on the injected clock: the one timer seam of the shell.

Every "do this in N seconds" of a binding (a kick after a dependency event, a retry with backoff,
a pod-triggered re-read, the folded scheduler roll, the end of the placement window) goes through
`Timers.later`, which sleeps with the Context's `sleep`: unit tests drive it with their FakeClock
instead of waiting on the wall clock, and `BindingState.close()` cancels whatever is pending.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Awaitable, Callable

log = logging.getLogger("sunk_sandbox_operator")


class Timer:
    """One pending call; `cancel()` drops it. `due` is when it fires, on the injected clock."""

    def __init__(self, task: asyncio.Task, due: float) -> None:
        self.task, self.due = task, due

    def cancel(self) -> None:
        self.task.cancel()

    def done(self) -> bool:
        return self.task.done()

    def cancelled(self) -> bool:
        return self.task.cancelled()


class Timers:
    def __init__(self, clock: Callable[[], float], sleep: Callable[[float], Awaitable[None]]) -> None:
        self._clock, self._sleep = clock, sleep

    def later(self, delay: float, fn: Callable[[], None], name: str = "timer") -> Timer:
        async def run() -> None:
            await self._sleep(max(delay, 0.0))
            try:
                fn()
            except Exception:  # a timer's failure is logged, never left as an unretrieved task error
                log.exception("%s failed", name)
        return Timer(asyncio.get_running_loop().create_task(run(), name=name), self._clock() + max(delay, 0.0))
