"""The reconcile budget: a binding whose reconcile costs more CPU than the operator allows is reported
and backed off, so that it delays no other binding again.

Why: every binding is reconciled on the one event loop of the main process; a tenant's object that
costs CPU to read (a quadratic parse, a huge expansion) holds that loop for every tenant. The Lease
and the probes no longer wait on it (controller/keeper.py); this bounds how often it can happen.

How it is measured: `Metered` drives a coroutine step by step and adds the main thread's CPU time
(`time.thread_time`) of each step to a counter: exactly the code of this reconcile between its
awaits, not the other tasks that ran while it waited, nor the time it waited for the API server.
The reconcile as a whole has one counter (lifecycle.binding_loop) and each concern inside it one
more (`step`: discovery, policy, scope, Slurm, placement), so the report names the concern and,
for discovery, the heaviest objects it read (`core.budget.heaviest`, noted by reconcile.discover).

What follows an overrun (core/budget.py decides the words): the concern's condition says
`OverBudget` (Ready follows), the status writer posts the Warning event, `ssb_reconcile_over_budget_total`
counts it, and the binding's loop waits OVERRUN_BACKOFF (the project's one Backoff: 1 min, doubling
per consecutive overrun, to 30 min) ignoring every wake: an edit of the tenant's own object could
otherwise make the costly step run again at once. A reconcile within budget ends the backoff.

What it does not do: interrupt a step. A pure step cannot be stopped from the same thread, so an
overrun is seen when the step ends; the first one costs its full time, the backoff bounds how
often. A new leader (or a restart) starts without the memory and pays once more. Deletion
(the finalizer's Restore) is not budgeted: it runs once. Work a reconcile hands to other tasks
(grant creates, a scope sync signalled by a namespace event between reconciles) is not counted:
those parse nothing but the target document, bounded by core/untrusted.py and parsed once per
resourceVersion.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Coroutine, Generator, Iterator
from typing import Any, Callable, TypeVar

from ..api.reasons import ConditionType
from ..core import budget as core
from .context import Context
from .retry import Backoff
from .state import BindingState
from .status_writer import flush

T = TypeVar("T")

OVERRUN_BACKOFF = Backoff(base=60.0, cap=1800.0)


class Metered:
    """Awaits `coro` and adds the main thread's CPU seconds of each of its steps through `add`."""

    def __init__(self, coro: Coroutine[Any, Any, T], add: Callable[[float], None],
                 cpu: Callable[[], float] = time.thread_time) -> None:
        self._coro, self._add, self._cpu = coro, add, cpu

    def __await__(self) -> Generator[Any, Any, Any]:
        it = self._coro.__await__()
        value: Any = None
        error: BaseException | None = None
        while True:
            began = self._cpu()
            try:
                yielded = it.send(value) if error is None else it.throw(error)
            except StopIteration as stop:
                self._add(self._cpu() - began)
                return stop.value
            except BaseException:
                self._add(self._cpu() - began)
                raise
            self._add(self._cpu() - began)
            try:
                value, error = (yield yielded), None
            except GeneratorExit:
                self._coro.close()
                raise
            except BaseException as exc:  # noqa: BLE001 - CancelledError and the like go to the coroutine
                value, error = None, exc


class Meter:
    """CPU seconds of everything awaited through `run` (one reconcile)."""

    def __init__(self, cpu: Callable[[], float] = time.thread_time) -> None:
        self.seconds = 0.0
        self._cpu = cpu

    def _add(self, seconds: float) -> None:
        self.seconds += seconds

    def run(self, coro: Coroutine[Any, Any, T]) -> Metered:
        return Metered(coro, self._add, self._cpu)


def step(ctx: Context, state: BindingState, condition: ConditionType, coro: Coroutine[Any, Any, T]) -> Metered:
    """Await `coro` as the concern that reports `condition`, its CPU added to the reconcile's tally."""
    spent = state.cost.spent

    def add(seconds: float) -> None:
        spent[condition] = spent.get(condition, 0.0) + seconds
    return Metered(coro, add, ctx.cpu)


@contextlib.contextmanager
def timed(ctx: Context, state: BindingState, condition: ConditionType) -> Iterator[None]:
    """A synchronous step of the concern that reports `condition` (no await inside: all of it is its own)."""
    began = ctx.cpu()
    try:
        yield
    finally:
        spent = state.cost.spent
        spent[condition] = spent.get(condition, 0.0) + ctx.cpu() - began


def begin(state: BindingState) -> None:
    """A reconcile starts: a new tally."""
    state.cost.spent = {}


async def wait_out(ctx: Context, seconds: float, stopped: Awaitable[Any]) -> None:
    """The backoff after an overrun, on the context's clock; nothing but `stopped` ends it early."""
    sleeper, stop = asyncio.ensure_future(ctx.sleep(seconds)), asyncio.ensure_future(stopped)
    try:
        await asyncio.wait({sleeper, stop}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        sleeper.cancel()
        stop.cancel()


async def judge(ctx: Context, state: BindingState, meter: Meter) -> float | None:
    """After a reconcile: over the budget, report it (status written now) and return the seconds the
    binding's loop waits before the next reconcile; within it, None (and the backoff ends)."""
    cost = state.cost
    budget = ctx.config.reconcile_cpu_seconds
    if budget <= 0 or meter.seconds <= budget or state.deleted:
        cost.overruns = 0
        return None
    delay = OVERRUN_BACKOFF.delay(cost.overruns)
    cost.overruns += 1
    part = core.overrun(cost.spent, meter.seconds, budget, cost.inputs, delay)
    if part is None:  # cannot be: over budget is an overrun (kept for the type checker)
        return None
    ctx.metrics.over_budget.inc()
    state.report(part)
    await flush(ctx, state)
    return delay
