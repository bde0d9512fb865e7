"""The shared slurmrestd pollers: one per (URL, Slurm user, API version), for every binding naming it.

Modelled on depends.py: `refresh()` after bindings change keeps exactly the pollers some binding
needs, started and stopped as bindings come, go and change `spec.slurm.restAPI`. slurmrestd has no
name filter, so a poller reads the whole job list (`GET /jobs?update_time=T`, HTTP 304 when nothing
changed) and the partitions (`GET /partitions?update_time=T`) every `SSB_SLURM_POLL_SECONDS`: two
requests per interval whatever the number of bindings, pods or jobs. After each answer:

- the job facts advance (core/slurm.py: a PENDING reason becomes `stuck` once it persisted) and the
  names that changed go to each binding's JobTracker (controller/placement.py `on_jobs`), which
  re-judges only the pods with those names and flushes status (coalesced) if its summary moved;
- a binding whose pinned partition changed state, or that waits for Slurm to answer again, is woken
  for a reconcile (its own check reports SlurmReady).

Tokens: the poller reads the Secret of a binding whose own check passed Slurm's authentication
(`state.slurm.outcome`), at each poll; only such bindings get the job list. A token refused mid-way
drops its binding back to `refused` (and wakes it); Slurm not answering drops every view (the
placement verdict goes back to the policy alone) and backs off; its return wakes the bindings.

`update_time` is in slurmctld's seconds: the skew of our clock is measured with GET /diag
(`req_time`) when the poller starts and at every full read (every FULL_READ_POLLS polls, which also
bounds what a missed change could cost); without it the next `update_time` lags by SKEW_MARGIN.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from typing import Any, Callable

from ..adapters import slurmrest as sr
from ..core import slurm as core
from ..core.slurm_jobs import JobView
from . import placement
from ..core.problems import Problem
from .slurm import PollerKey, key_of, read_token, wall
from .state import BindingState, Key

# The controller Context (bindings, config, metrics, sleep, clocks); not imported (see context.py).
Context = Any

log = logging.getLogger("sunk_sandbox_operator")

FULL_READ_POLLS = 30       # every 30th poll reads without update_time (5 min at the default 10 s)
SKEW_MARGIN = 30           # seconds update_time lags when slurmctld's clock is not known
BACKOFF_MAX_SECONDS = 300.0

ClientFactory = Callable[[str, str], sr.SlurmClient]


def pollers(ctx: Context) -> "Pollers":
    """The context's pollers, made on first use."""
    if ctx.slurm is None:
        ctx.slurm = Pollers(ctx)
    return ctx.slurm


def _wake(ctx: Context, state: BindingState) -> None:
    if ctx.bindings.is_current(state):
        state.wake.set()


class Poller:
    """One slurmrestd URL and user: the job list and the partitions, for its subscribers."""

    def __init__(self, owner: "Pollers", key: PollerKey, client: sr.SlurmClient) -> None:
        self.owner, self.key, self.client = owner, key, client
        self.subscribers: dict[Key, BindingState] = {}
        self.view: JobView | None = None
        self.jobs: dict[str, core.Job] = {}          # the last list read (a 304 keeps it)
        self.memo: dict[int, core.Pending] = {}
        self.partitions: dict[str, str] = {}
        self.update_time: int | None = None
        self.skew: float | None = None
        self.polls = 0
        self.failures = 0
        self.reachable: bool | None = None
        self.requests: Counter[tuple[str, str]] = Counter()   # (endpoint, code): what the benchmark prints
        self.task: asyncio.Task | None = None

    def _token_of(self) -> BindingState | None:
        """A subscriber whose token may be used: verified first, then one waiting for Slurm to answer."""
        for wanted in ("verified", "unreachable"):
            for key in sorted(self.subscribers):
                state = self.subscribers[key]
                if state.slurm.key == self.key and state.slurm.outcome == wanted:
                    return state
        return None

    def _verified(self, state: BindingState) -> bool:
        return state.slurm.key == self.key and state.slurm.outcome == "verified"

    async def run(self) -> None:
        while True:
            try:
                delay = await self.poll()
            except asyncio.CancelledError:
                raise
            except Exception:  # never let one bad answer stop the poller
                log.exception("Slurm poller for %s failed", self.key.url)
                delay = self._backoff()
            await self.owner.ctx.sleep(delay)

    def _backoff(self) -> float:
        self.failures += 1
        return min(self.owner.ctx.config.slurm_poll_seconds * 2 ** self.failures, BACKOFF_MAX_SECONDS)

    async def poll(self) -> float:
        """One round; returns the delay until the next."""
        ctx, cfg = self.owner.ctx, self.owner.ctx.config
        state = self._token_of()
        if state is None:
            return cfg.slurm_poll_seconds  # nobody's token is usable: their next reconcile checks again

        async def token() -> str:
            return await read_token(ctx, state)

        user, full = self.key.user, self.polls % FULL_READ_POLLS == 0
        started = wall(ctx)
        try:
            if full:
                self.skew = await self._skew(token)
            since = None if full else self.update_time
            jobs = await self.client.jobs(user, token, since)
            parts = await self.client.partitions(user, token, since)
        except (Problem, sr.SlurmAuthFailed):  # the Secret gone, or the token refused
            state.slurm.outcome = "refused"  # its reconcile says why; the next poll tries another token
            placement.on_jobs(ctx, state, None, None, None)
            _wake(ctx, state)
            return cfg.slurm_poll_seconds
        except sr.SlurmError as exc:
            if self.reachable is not False:
                log.warning("Slurm at %s: %s", self.key.url, exc)
                self.reachable = False
                self._publish(None, None)
                for s in self.subscribers.values():
                    _wake(ctx, s)  # their own checks report SlurmUnreachable
            return self._backoff()
        # Slurm answers again, or for the first time: the bindings whose own check found it unreachable
        # are woken once to check again (the one whose token just passed among them).
        recovered = self.reachable is not True
        self.reachable, self.failures = True, 0
        self.polls += 1
        waiting = [s for s in self.subscribers.values() if s.slurm.key == self.key and s.slurm.outcome == "unreachable"]
        if state.slurm.outcome == "unreachable":
            state.slurm.outcome = "verified"  # its token just passed
        self.update_time = int(started + (self.skew if self.skew is not None else -SKEW_MARGIN)) - 1
        if jobs is not None:
            self.jobs = core.parse_jobs(jobs.body)
        old = self.view
        self.memo, facts = core.advance(self.memo, self.jobs, now=ctx.monotonic(), now_wall=wall(ctx),
                                        seconds=cfg.slurm_pending_seconds, polls=cfg.slurm_pending_polls)
        names = core.changed(old.jobs, facts) if old is not None else None
        self._publish(JobView(facts, wall(ctx)), names, old)
        if parts is not None:
            self.partitions = core.partition_states(parts.body)
        for s in self.subscribers.values():
            if (recovered and s in waiting) or self._partition_moved(s):
                _wake(ctx, s)
        return cfg.slurm_poll_seconds

    async def _skew(self, token: Any) -> float | None:
        """slurmctld's clock minus ours (seconds), or None when /diag does not tell."""
        ctx = self.owner.ctx
        before = wall(ctx)
        try:
            server = await self.client.server_time(self.key.user, token)
        except (sr.SlurmAPIError, sr.SlurmNotFound):
            return None
        return None if server is None else server - (before + wall(ctx)) / 2

    def _partition_moved(self, state: BindingState) -> bool:
        """Has the partition this binding pins changed state since its own check saw it?"""
        spec = state.spec
        if spec is None or spec.partition is None or not self._verified(state) or state.slurm.partition_seen is None:
            return False
        now = self.partitions.get(spec.partition, "")
        if now == state.slurm.partition_seen:
            return False
        state.slurm.partition_seen = now  # one wake per change; the reconcile's check records it again
        return True

    def _publish(self, view: JobView | None, names: set[str] | None, previous: JobView | None = None) -> None:
        self.view = view
        for s in self.subscribers.values():
            placement.on_jobs(self.owner.ctx, s, view if self._verified(s) else None, names, previous)

    def view_for(self, state: BindingState) -> JobView | None:
        return self.view if self._verified(state) else None


class Pollers:
    """The running pollers and the HTTP clients they share with the bindings' own checks."""

    def __init__(self, ctx: Context, client_factory: ClientFactory | None = None) -> None:
        self.ctx = ctx
        self._factory = client_factory
        self._pollers: dict[PollerKey, Poller] = {}
        self._clients: dict[tuple[str, str], sr.SlurmClient] = {}
        self._closing: set[asyncio.Future] = set()
        ctx.metrics.slurm_pollers.set_function(lambda: len(self._pollers))
        ctx.metrics.slurm_jobs.set_function(lambda: sum(len(p.jobs) for p in self._pollers.values()))

    @property
    def running(self) -> dict[PollerKey, Poller]:
        return dict(self._pollers)

    def client(self, url: str, api_version: str) -> sr.SlurmClient:
        key = (url.rstrip("/"), api_version)
        client = self._clients.get(key)
        if client is None:
            if self._factory is not None:
                client = self._factory(*key)
            else:
                requests = self.ctx.metrics.slurm_requests
                client = sr.SlurmClient(key[0], api_version, timeout=self.ctx.config.slurm_timeout_seconds,
                                        on_request=lambda endpoint, code: requests.labels(endpoint, code).inc())
            self._clients[key] = client
        return client

    def view_for(self, state: BindingState) -> JobView | None:
        poller = self._pollers.get(key_of(state.spec)) if state.spec is not None else None  # type: ignore[arg-type]
        return poller.view_for(state) if poller is not None else None

    def checked(self, state: BindingState) -> None:
        """After the binding's own check: it sees the job list only if its token passed."""
        placement.on_jobs(self.ctx, state, self.view_for(state), None, None)

    def refresh(self) -> None:
        """Exactly one poller per key some live, admitted binding names; subscribers updated."""
        want: dict[PollerKey, dict[Key, BindingState]] = {}
        for state in self.ctx.bindings:
            key = key_of(state.spec) if not state.deleted else None
            if key is not None:
                want.setdefault(key, {})[state.key] = state
        for key in [k for k in self._pollers if k not in want]:
            stopped = self._pollers.pop(key)
            if stopped.task is not None:
                stopped.task.cancel()
            stopped._publish(None, None)
        for key, subscribers in want.items():
            found = self._pollers.get(key)
            if found is not None:
                poller = found
            else:
                poller = self._pollers[key] = Poller(self, key, self.client(key.url, key.api_version))
                poller.task = asyncio.get_running_loop().create_task(poller.run(), name=f"Slurm poller {key.url}")
            gone = [s for k, s in poller.subscribers.items() if subscribers.get(k) is not s]
            poller.subscribers = subscribers
            for s in gone:
                placement.on_jobs(self.ctx, s, None, None, None)
        used = {(k.url, k.api_version) for k in want}
        for ckey in [c for c in self._clients if c not in used]:
            closing = asyncio.ensure_future(self._clients.pop(ckey).aclose())
            self._closing.add(closing)
            closing.add_done_callback(self._closing.discard)

    async def close(self) -> None:
        """Stop every poller and close every client (shutdown)."""
        tasks = [p.task for p in self._pollers.values() if p.task is not None]
        for t in tasks:
            t.cancel()
        self._pollers.clear()
        await asyncio.gather(*tasks, return_exceptions=True)
        clients, self._clients = list(self._clients.values()), {}
        await asyncio.gather(*(c.aclose() for c in clients), *self._closing, return_exceptions=True)
