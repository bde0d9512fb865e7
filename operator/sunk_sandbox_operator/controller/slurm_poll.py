"""The shared slurmrestd pollers: one per (URL, Slurm user, API version), for every binding naming it.

Modelled on depends.py: `refresh()` after bindings change keeps exactly the pollers some binding
needs, started and stopped as bindings come, go and change `spec.slurm.restAPI`. slurmrestd has no
name filter, so a poller reads the whole job list (`GET /jobs?update_time=T`: unchanged answers
are 22.05's 304 or 24.11+'s empty 200, adapters/slurmrest.py) and the partitions every
`SSB_SLURM_POLL_SECONDS`: two requests per interval whatever the number of bindings, pods or jobs.

Each wake is gather → decide → act: the round is read with one subscriber's token (one whose own
check passed Slurm's authentication, read from its Secret at each poll), `core/slurm_poll.decide`
makes the one decision, and this shell applies it: token outcomes, the job facts published to each
binding's JobTracker (controller/placement.py `on_jobs`: only bindings whose token passed see
them), the bindings woken for a reconcile, and the delay — the regular interval, or the project's
one backoff (controller/retry.py) while Slurm does not answer.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections import Counter
from collections.abc import Hashable
from dataclasses import replace
from typing import Any, Callable, cast

from ..adapters import slurmrest as sr
from ..core import slurm as core
from ..core import slurm_poll as sp
from ..core.slurm_jobs import JobView
from ..core.slurm_poll import Met, Round, Subscriber, TokenOutcome
from . import placement
from ..core.problems import Problem
from .retry import Backoff
from .slurm import PollerKey, key_of, read_token, wall
from .state import BindingState, Key

# The controller Context (bindings, config, metrics, sleep, clocks); not imported (see context.py).
Context = Any

log = logging.getLogger("sunk_sandbox_operator")

BACKOFF_MAX_SECONDS = 300.0

ClientFactory = Callable[[str, "str | None"], sr.SlurmClient]


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
        self.memory = sp.PollMemory()
        self.view: JobView | None = None
        self.backoff = Backoff(base=owner.ctx.config.slurm_poll_seconds, cap=BACKOFF_MAX_SECONDS)
        self.requests: Counter[tuple[str, str]] = Counter()   # (endpoint, code): what the benchmark prints
        self.task: asyncio.Task | None = None

    @property
    def jobs(self) -> dict[str, core.Job]:
        return dict(self.memory.jobs)

    def _state(self, key: Hashable) -> BindingState | None:
        """A subscriber by key (the set may have changed during the round's awaits)."""
        return self.subscribers.get(cast(Key, key))

    def _mine(self, state: BindingState) -> bool:
        return state.slurm.key == self.key

    def _verified(self, state: BindingState) -> bool:
        return self._mine(state) and state.slurm.outcome is TokenOutcome.VERIFIED

    def _facts(self) -> list[Subscriber]:
        out = []
        for key, s in self.subscribers.items():
            outcome = s.slurm.outcome if self._mine(s) else TokenOutcome.UNCHECKED
            out.append(Subscriber(key, outcome, s.spec.partition if s.spec is not None else None,
                                  s.slurm.partition_seen))
        return out

    async def run(self) -> None:
        while True:
            try:
                delay = await self.poll()
            except asyncio.CancelledError:
                raise
            except Exception:  # never let one bad answer stop the poller
                log.exception("Slurm poller for %s failed", self.key.url)
                self.memory = replace(self.memory, failures=self.memory.failures + 1)
                delay = self.backoff.delay(self.memory.failures, self.owner.rand)
            await self.owner.ctx.sleep(delay)

    async def _round(self, subscribers: list[Subscriber]) -> Round:
        """Gather: the lists, read with one subscriber's token, or what stopped that."""
        ctx, m = self.owner.ctx, self.memory
        chosen = sp.token_of(subscribers)
        if chosen is None:
            return Round(Met.NO_TOKEN)
        state = self.subscribers[cast(Key, chosen)]

        async def token() -> str:
            return await read_token(ctx, state)

        user, since, skew = self.key.user, sp.since(m), None
        started = wall(ctx)
        try:
            if sp.full_read(m):
                skew = await self._skew(token)
            jobs = await self.client.jobs(user, token, since)
            parts = await self.client.partitions(user, token, since)
        except (Problem, sr.SlurmAuthFailed, sr.SlurmTokenUnusable):  # the Secret gone, or the token refused
            return Round(Met.REFUSED, chosen)
        except sr.SlurmError as exc:
            return Round(Met.FAILED, chosen, error=str(exc))
        return Round(Met.ANSWERED, chosen, started, skew, core.parse_jobs(jobs.body) if jobs is not None else None,
                     core.partition_states(parts.body) if parts is not None else None)

    async def poll(self) -> float:
        """One wake: gather, decide, act; returns the delay until the next."""
        ctx, cfg = self.owner.ctx, self.owner.ctx.config
        subscribers = self._facts()
        r = await self._round(subscribers)
        d = sp.decide(self.memory, subscribers, r, now=ctx.monotonic(), now_wall=wall(ctx),
                      pending_seconds=cfg.slurm_pending_seconds, pending_polls=cfg.slurm_pending_polls)
        self.memory = d.memory
        if d.outcome is not None and (state := self._state(d.outcome[0])) is not None:
            state.slurm.outcome = d.outcome[1]
        if d.announce is not None:
            log.warning("Slurm at %s: %s", self.key.url, d.announce)
        for key, seen in d.partition_seen.items():
            if (state := self._state(key)) is not None:
                state.slurm.partition_seen = seen
        if d.met is Met.REFUSED and (state := self._state(r.token)) is not None:  # its reconcile says why
            placement.on_jobs(ctx, state, None, None, None)
        if d.publish:
            facts = d.memory.facts
            self._publish(JobView(facts, wall(ctx)) if facts is not None else None,
                          set(d.names) if d.names is not None else None, self.view)
        for key in d.wake:
            if (state := self._state(key)) is not None:
                _wake(ctx, state)
        return self.backoff.delay(d.backoff, self.owner.rand) if d.backoff is not None else cfg.slurm_poll_seconds

    async def _skew(self, token: Any) -> float | None:
        """slurmctld's clock minus ours (seconds), or None when /diag does not tell."""
        ctx = self.owner.ctx
        before = wall(ctx)
        try:
            server = await self.client.server_time(self.key.user, token)
        except (sr.SlurmAPIError, sr.SlurmNotFound):
            return None
        return None if server is None else server - (before + wall(ctx)) / 2

    def _publish(self, view: JobView | None, names: set[str] | None, previous: JobView | None = None) -> None:
        self.view = view
        for s in self.subscribers.values():
            placement.on_jobs(self.owner.ctx, s, view if self._verified(s) else None, names, previous)

    def view_for(self, state: BindingState) -> JobView | None:
        return self.view if self._verified(state) else None


class Pollers:
    """The running pollers and the HTTP clients they share with the bindings' own checks."""

    def __init__(self, ctx: Context, client_factory: ClientFactory | None = None,
                 rand: Callable[[], float] = random.random) -> None:
        self.ctx = ctx
        self.rand = rand   # the backoff's jitter
        self._factory = client_factory
        self._pollers: dict[PollerKey, Poller] = {}
        self._clients: dict[tuple[str, str | None], sr.SlurmClient] = {}
        self._closing: set[asyncio.Future] = set()
        ctx.metrics.slurm_pollers.set_function(lambda: len(self._pollers))
        ctx.metrics.slurm_jobs.set_function(lambda: sum(len(p.memory.jobs) for p in self._pollers.values()))

    @property
    def running(self) -> dict[PollerKey, Poller]:
        return dict(self._pollers)

    def client(self, url: str, api_version: str | None) -> sr.SlurmClient:
        """The client of a slurmrestd and version (None: negotiated, once per client and server)."""
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
