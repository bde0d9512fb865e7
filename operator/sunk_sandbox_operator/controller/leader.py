"""Leader election on a coordination.k8s.io/v1 Lease, after client-go's tools/leaderelection.

One replica writes; the others wait. The rules that keep it to one writer at any instant:
- Expiry is judged on OUR monotonic clock, never by comparing the remote renewTime with our wall
  clock: we remember when we last saw the Lease change (holderIdentity, renewTime,
  resourceVersion) and call it expired once its leaseDurationSeconds (the holder's promise; ours
  when absent) have passed on our clock since that observation.
- A holder believes it leads only until `renew_deadline` after the START of its last successful
  acquire/renew attempt (taken before the GET, so before the write landed and before anyone saw
  it). Since renew_deadline < lease_duration, it stops writing before any other replica may take
  over, and `hold` calls `on_lost` at that deadline even when a renew call hangs.
- Every take-over and renew is a PUT with the read's resourceVersion as precondition, so two
  replicas racing for an expired Lease cannot both win; the loser sees Conflict and waits.

Usage: `await acquire()` → open the write gate, start writing → `await hold(on_lost)`; `on_lost`
closes the gate (synchronously, first), then `hold` returns: stop writing, go back to `acquire`.
`on_renewed(until)` hears each successful attempt's write deadline (the start of the attempt +
renew_deadline), for a gate kept in another process (controller/keeper.py).
On clean shutdown: cancel `hold`, stop writing, `await release()` so a standby takes over at once.
Clock, wall clock, sleep and jitter are injected, so tests drive time by hand.

Hygiene: a standby polls every `standby_poll` (×1–1.2, jittered) while another holder's Lease is
valid; an error (the API server away, the Lease's namespace or RBAC gone after an uninstall) backs
off with the project's one backoff (controller/retry.py: from the poll interval, doubling, capped at
ERROR_BACKOFF_CAP, jittered). Each state is logged once when it begins (held by whom, which error,
leading, lost, working again), not at every attempt. What is written to the Lease (its bodies,
the identities): controller/lease.py.
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
import time
from typing import Awaitable, Callable, TypeVar

from ..adapters.kube import Conflict, NotFound
from . import lease as lease_
from .lease import DEFAULT_LEASE_NAME, LeaseAPI, micro_time_now
from .retry import Backoff

log = logging.getLogger("sunk_sandbox_operator")

T = TypeVar("T")

JITTER_FACTOR = 1.2      # client-go's acquire retry: retry_period · (1 + 1.2·rand)
_EPSILON = 1e-6          # a deadline this close is due (float sums are not exact)
ERROR_BACKOFF_CAP = 30.0  # seconds: at most this long between two attempts while acquiring fails


class _DeadlinePassed(Exception):
    pass


def _kind(exc: BaseException) -> str:
    """What tells two errors apart for the log: the type, and the HTTP code when there is one."""
    code = getattr(exc, "code", None)
    return f"{type(exc).__name__} {code}" if isinstance(code, int) else type(exc).__name__


def _text(exc: BaseException) -> str:
    """The error's message, or its type when it has none (a timeout)."""
    return str(exc) or type(exc).__name__


class _Said:
    """The state last logged: a line when the state changes, not one per attempt."""

    def __init__(self) -> None:
        self.last: tuple | None = None

    def __call__(self, state: tuple, level: int, msg: str, *args: object) -> None:
        if state != self.last:
            self.last = state
            log.log(level, msg, *args)


class LeaderElector:
    def __init__(
        self,
        kube: LeaseAPI,
        namespace: str,
        name: str = DEFAULT_LEASE_NAME,
        *,
        identity: str,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
        wall_now: Callable[[], str] = micro_time_now,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        jitter: Callable[[], float] = random.random,
        on_change: Callable[[bool], None] | None = None,
        standby_poll: float | None = None,
        on_renewed: Callable[[float], None] | None = None,
    ) -> None:
        if not identity:
            raise ValueError("identity must not be empty")
        if retry_period <= 0:
            raise ValueError("retry_period must be positive")
        if not lease_duration > renew_deadline:
            raise ValueError("lease_duration must be greater than renew_deadline")
        if not renew_deadline > JITTER_FACTOR * retry_period:
            raise ValueError(f"renew_deadline must be greater than {JITTER_FACTOR} × retry_period")
        self.kube, self.namespace, self.name, self.identity = kube, namespace, name, identity
        self.lease_duration, self.renew_deadline, self.retry_period = lease_duration, renew_deadline, retry_period
        self._clock, self._wall_now, self._sleep, self._jitter = clock, wall_now, sleep, jitter
        self._on_change = on_change
        # How often a standby reads the Lease (None: client-go's retry_period with its 1.2 jitter).
        # Expiry is measured from when the standby SAW the last renew, so a shorter poll means an
        # earlier take-over after the leader died: lease_duration + poll, not + 2 × retry_period.
        self.standby_poll = standby_poll
        self._on_renewed = on_renewed
        # Errors while acquiring: from the poll interval, doubling to the cap (jitter: 1/2 to 1 of it).
        self.error_backoff = Backoff(base=standby_poll if standby_poll is not None else retry_period,
                                     cap=ERROR_BACKOFF_CAP, jitter=0.5)
        self._said = _Said()
        self._lease_seconds = max(1, math.ceil(lease_duration))
        self._observed_key: tuple | None = None      # (holderIdentity, renewTime, resourceVersion)
        self._observed_spec: dict = {}
        self._observed_at = float("-inf")             # our clock when the key last changed
        self._renewed_at: float | None = None         # our clock at the start of the last successful attempt
        self._leading = False                         # what on_change last reported

    # ------------------------------------------------------------ queries

    def is_leader(self) -> bool:
        """True only within renew_deadline of the last successful renew (on our clock), whoever noticed."""
        return self._renewed_at is not None and self._clock() - self._renewed_at < self.renew_deadline

    def holder(self) -> str:
        """The holderIdentity last seen on the Lease ("" when free or never read)."""
        return self._observed_spec.get("holderIdentity") or ""

    # ------------------------------------------------------------ the loops

    async def acquire(self) -> None:
        """Return once we hold the Lease (created, taken over when expired, or renewed when ours)."""
        where = f"{self.namespace}/{self.name}"
        failures = 0  # consecutive errors: the backoff's exponent
        while True:
            try:
                if await self._try_acquire_or_renew():
                    if self.is_leader():
                        break
                    self._said(("slow",), logging.INFO, "leader election: taking %s took longer than the renew "
                               "deadline (%gs); trying again", where, self.renew_deadline)
                else:
                    self._said(("held", self.holder()), logging.INFO, "leader election: %s is held by %r; standing "
                               "by", where, self.holder())
                failures = 0
            except Conflict as exc:
                failures = 0
                self._said(("race",), logging.INFO, "leader election: lost a race for %s (%s); standing by", where, exc)
            except Exception as exc:
                failures += 1
                self._said(("error", _kind(exc)), logging.WARNING, "leader election: cannot acquire %s: %s; retrying "
                           "with backoff (up to %gs apart), logged again only when this changes", where, _text(exc),
                           ERROR_BACKOFF_CAP)
            await self._sleep(self._next_attempt(failures))
        log.info("leader election: %s leads (%s)", self.identity, where)
        self._said.last = ("leading",)
        self._set_leading(True)

    def _next_attempt(self, failures: int) -> float:
        """Seconds to the next acquire attempt: the poll (jittered) or, after errors, the backoff."""
        if failures:
            return self.error_backoff.delay(failures - 1, self._jitter)
        if self.standby_poll is not None:
            return self.standby_poll * (1.0 + 0.2 * self._jitter())
        return self.retry_period * (1.0 + JITTER_FACTOR * self._jitter())

    async def hold(self, on_lost: Callable[[], None]) -> None:
        """Renew every retry_period until leadership is lost; then call on_lost() first, and return.

        Lost: no successful renew for renew_deadline (any error, Conflict, a hung call), or the Lease
        names another holder (stepping down at once is always safe). Called when not leading, it
        calls on_lost() and returns at once. Cancelling it (shutdown) calls nothing: then release().
        """
        while True:
            remaining = self._remaining()
            if remaining <= _EPSILON:
                break
            await self._sleep(min(self.retry_period, remaining))
            remaining = self._remaining()
            if remaining <= _EPSILON:
                break
            try:
                held = await self._within(remaining, self._try_acquire_or_renew())
            except _DeadlinePassed:
                log.warning("leader election: renewing %s/%s did not answer by the deadline", self.namespace, self.name)
                break
            except Conflict as exc:
                self._said(("renew race",), logging.INFO, "leader election: renewing %s/%s lost a race, retrying "
                           "until the renew deadline: %s", self.namespace, self.name, exc)
                continue
            except Exception as exc:
                self._said(("renew error", _kind(exc)), logging.WARNING, "leader election: cannot renew %s/%s, "
                           "retrying until the renew deadline: %s", self.namespace, self.name, _text(exc))
                continue
            if not held:
                log.warning("leader election: %s/%s is now held by %r", self.namespace, self.name, self.holder())
                break
            if self._said.last != ("leading",):
                self._said(("leading",), logging.INFO, "leader election: renewing %s/%s works again",
                           self.namespace, self.name)
        self._said.last = ("lost",)
        log.warning("leader election: %s lost leadership of %s/%s", self.identity, self.namespace, self.name)
        self._renewed_at = None
        try:
            on_lost()
        finally:
            self._set_leading(False)

    async def release(self) -> bool:
        """On clean shutdown (hold cancelled, writing stopped): free the Lease if it still names us.

        holderIdentity "" and leaseDurationSeconds 1, as client-go's ReleaseOnCancel, so a standby
        takes over on its next retry. Errors are logged; returns whether the Lease was released.
        """
        self._renewed_at = None
        self._set_leading(False)
        try:
            lease = await self.kube.get_lease(self.namespace, self.name)
            spec = lease.get("spec") or {}
            if spec.get("holderIdentity") != self.identity:
                return False
            released = await self.kube.replace_lease(self.namespace, self.name,
                                                     lease_.released(lease, self._wall_now()))
        except Exception as exc:
            log.warning("leader election: cannot release %s/%s: %s", self.namespace, self.name, exc)
            return False
        self._observe(released, self._clock())
        self._said.last = ("released",)
        log.info("leader election: %s released %s/%s", self.identity, self.namespace, self.name)
        return True

    # ------------------------------------------------------------ one attempt (client-go's tryAcquireOrRenew)

    async def _try_acquire_or_renew(self) -> bool:
        """True when we now hold the Lease; False when another holder's Lease is still valid. Errors raise."""
        start = self._clock()
        try:
            lease = await self.kube.get_lease(self.namespace, self.name)
        except NotFound:
            body = lease_.new(self.namespace, self.name, self.identity, self._lease_seconds, self._wall_now())
            created = await self.kube.create_lease(self.namespace, body)
            self._observe(created, self._clock())
            self._renewed(start)
            return True
        self._observe(lease, self._clock())
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        ours = holder == self.identity
        if holder and not ours and self._observed_valid():
            return False
        body = lease_.held(lease, self.identity, self._lease_seconds, self._wall_now())
        replaced = await self.kube.replace_lease(self.namespace, self.name, body)
        self._observe(replaced, self._clock())
        self._renewed(start)
        return True

    def _renewed(self, start: float) -> None:
        """A successful attempt that started at `start`: we may write until start + renew_deadline."""
        self._renewed_at = start
        if self._on_renewed is not None:
            self._on_renewed(start + self.renew_deadline)

    def _observe(self, lease: dict, at: float) -> None:
        key = lease_.change_key(lease)
        if key != self._observed_key:
            self._observed_key, self._observed_at = key, at
        self._observed_spec = lease.get("spec") or {}

    def _observed_valid(self) -> bool:
        seconds = self._observed_spec.get("leaseDurationSeconds")
        duration = float(seconds) if isinstance(seconds, (int, float)) and seconds > 0 else self.lease_duration
        return self._clock() < self._observed_at + duration

    # ------------------------------------------------------------ helpers

    def _remaining(self) -> float:
        if self._renewed_at is None:
            return float("-inf")
        return self._renewed_at + self.renew_deadline - self._clock()

    async def _within(self, timeout: float, coro: Awaitable[T]) -> T:
        """`coro`'s result, or _DeadlinePassed after `timeout` on the injected clock (the call is abandoned)."""
        work = asyncio.ensure_future(coro)
        timer = asyncio.ensure_future(self._sleep(timeout))
        try:
            await asyncio.wait({work, timer}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            timer.cancel()
            if not work.done():
                work.cancel()
        if work.done() and not work.cancelled():
            return work.result()
        raise _DeadlinePassed()

    def _set_leading(self, leading: bool) -> None:
        if leading == self._leading:
            return
        self._leading = leading
        if self._on_change is not None:
            try:
                self._on_change(leading)
            except Exception:
                log.exception("leader election: the on_change hook failed")
