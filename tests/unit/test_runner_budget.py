"""The runner API budget (issue 31, finding 8): each binding's share of the process-wide limiter, the
limiter's bounded queue, and reconcile requests folded per binding. All on the limiter's injected
clock: the figures are the bucket's, whatever the machine's load."""

from __future__ import annotations

import asyncio
import copy

import pytest

from sunk_sandbox_operator.adapters.runnerapi.limiter import Budget, RateLimiter, Throttled
from sunk_sandbox_operator.controller import lifecycle
from sunk_sandbox_operator.core.resync import request_wait

from tests.unit.fakes import FakeClock, harness_fixture, settle  # noqa: F401
from tests.unit.test_reconcile import NS, Stopped, cluster, new_binding


def budget(clock: FakeClock, *, rate: float = 10.0, burst: int = 20, share_rate: float = 1.0, share_burst: int = 5,
           max_wait: float = 30.0) -> Budget:
    parent = RateLimiter(rate, burst, clock=clock, sleep=clock.sleep)
    return Budget(parent, share_rate, share_burst, max_wait, clock=clock, sleep=clock.sleep)


async def test_a_binding_calling_without_pause_gets_its_share_and_no_more() -> None:
    clock = FakeClock()
    b = budget(clock)
    a = b.share(("t", "a"))
    done: list[float] = []

    async def hammer() -> None:
        while True:
            try:
                await a.acquire()
            except Throttled:
                await clock.sleep(1.0)  # the caller's backoff
                continue
            done.append(clock.now)

    tasks = [asyncio.ensure_future(hammer()) for _ in range(10)]  # 10 callers at once, as many as it likes
    await clock.advance(20.0)
    for t in tasks:
        t.cancel()
    # 5 at once (its burst), then one a second: 25 in 20 s, whatever the number of callers.
    assert 20 <= len(done) <= 26, len(done)


async def test_one_binding_hammering_cannot_push_anothers_call_beyond_a_bound() -> None:
    """Binding A calls as fast as 50 concurrent callers can; binding B's calls, one every 2 s, each go
    at once: A's calls wait for A's own tokens and never book the shared bucket ahead of B."""
    clock = FakeClock()
    b = budget(clock)
    a, victim = b.share(("t", "a")), b.share(("t", "b"))

    async def hammer() -> None:
        while True:
            try:
                await a.acquire()
            except Throttled:
                await clock.sleep(0.01)

    waits: list[float] = []

    async def calls() -> None:
        for _ in range(20):
            start = clock.now
            await victim.acquire()
            waits.append(clock.now - start)
            await clock.sleep(2.0)

    tasks = [asyncio.ensure_future(hammer()) for _ in range(10)]
    victim_task = asyncio.ensure_future(calls())
    await clock.advance(45.0)
    for t in tasks:
        t.cancel()
    assert victim_task.done() and len(waits) == 20
    assert max(waits) == 0.0, waits


async def test_with_every_binding_hammering_each_waits_at_most_the_bound_or_is_told_to_back_off() -> None:
    """Forty bindings each at their share exceed the process-wide 10/s: the shared bucket's queue stays
    bounded (a call that would wait past max_wait books nothing and raises Throttled)."""
    clock = FakeClock()
    b = budget(clock, share_rate=2.0, max_wait=3.0)
    waits: list[float] = []
    refused = 0

    async def hammer(key: str) -> None:
        nonlocal refused
        share = b.share(key)
        while True:
            start = clock.now
            try:
                await share.acquire()
            except Throttled as exc:
                refused += 1
                assert exc.retry_after is not None and exc.retry_after > 0
                await clock.sleep(1.0)
                continue
            waits.append(clock.now - start)

    tasks = [asyncio.ensure_future(hammer(f"b{i}")) for i in range(40)]
    await clock.advance(20.0)
    for t in tasks:
        t.cancel()
    assert refused > 0
    # Each wait is at most the binding's own (1 / its rate) plus the bounded shared wait.
    assert max(waits) <= 0.5 + 3.0 + 1e-6, max(waits)
    # The shared bucket's rate held: at most 20 at once + 10/s.
    assert len(waits) <= 20 + 10 * 20 + 1


def test_a_refused_call_books_nothing() -> None:
    clock = FakeClock()
    limiter = RateLimiter(1.0, 1, clock=clock, sleep=clock.sleep)
    assert limiter.try_reserve(0.5) == 0.0                 # the burst
    assert limiter.try_reserve(0.5) is None                # would wait 1 s: refused...
    assert limiter.try_reserve(None) == pytest.approx(1.0)  # ...and booked nothing: the next waits 1 s, not 2


async def test_an_unbounded_limiter_behaves_as_before() -> None:
    clock = FakeClock()
    limiter = RateLimiter(10, 3, clock=clock, sleep=clock.sleep)
    assert [limiter.reserve() for _ in range(4)] == [0.0, 0.0, 0.0, pytest.approx(0.1)]
    limiter = RateLimiter(10, 1, max_wait=0.05, clock=clock, sleep=clock.sleep)
    await limiter.acquire()
    with pytest.raises(Throttled, match="10 calls/s"):
        await limiter.acquire()


def test_a_share_lives_as_long_as_its_binding() -> None:
    clock = FakeClock()
    b = budget(clock)
    first = b.share(("t", "a"))
    assert b.share(("t", "a")) is first and len(b) == 1    # a new client does not get a fresh burst
    b.forget(("t", "a"))
    assert len(b) == 0 and b.share(("t", "a")) is not first


def test_request_wait() -> None:
    assert request_wait(None, 100.0, 5.0) == 0.0
    assert request_wait(98.0, 100.0, 5.0) == 3.0
    assert request_wait(90.0, 100.0, 5.0) == 0.0


async def test_reconcile_requests_are_folded_into_one_per_interval(harness) -> None:
    """1,000 reconcile-requested-at values in 4 s: the first is honoured at once, the rest make one
    reconcile (one runner read) at the end of SSB_RECONCILE_REQUEST_INTERVAL_SECONDS."""
    h = harness(reconcile_request_interval_seconds=5.0)
    cluster(h)
    state, runner = new_binding(h)
    stopped = Stopped()
    loop = asyncio.ensure_future(lifecycle.binding_loop(h.ctx, h.kube.get("bindings", NS, "b"), stopped))
    registry = h.ctx.metrics.registry

    def reconciles() -> float:
        return registry.get_sample_value("ssb_reconciles_total", {"handler": "binding"}) or 0

    def request(value: str) -> None:
        body = copy.deepcopy(h.kube.get("bindings", NS, "b"))
        body["metadata"].setdefault("annotations", {})["sunksandbox.dev/reconcile-requested-at"] = value
        lifecycle.binding_event(h.ctx, "MODIFIED", body)

    try:
        await settle()
        assert reconciles() == 1
        request("r0")
        await settle()
        assert reconciles() == 2 and state.handled_request == "r0"   # the first: at once
        gets = runner.gets
        for i in range(1, 1001):
            request(f"r{i}")
            if i % 250 == 0:
                await h.clock.advance(1.0)
        await settle()
        assert reconciles() == 2 and runner.gets == gets               # folded, nothing read yet
        await h.clock.advance(1.0)                                     # the interval's end
        await settle()
        assert reconciles() == 3 and state.handled_request == "r1000" and runner.gets == gets + 1
        changed = copy.deepcopy(h.kube.get("bindings", NS, "b"))
        changed["metadata"]["annotations"] = {"sunksandbox.dev/reconcile-requested-at": "r1001"}
        changed["spec"]["partition"] = "other"
        changed["metadata"]["generation"] = 2
        lifecycle.binding_event(h.ctx, "MODIFIED", changed)            # a spec change is not held back
        await settle()
        assert reconciles() == 4
    finally:
        stopped.set()
        await asyncio.wait_for(loop, timeout=5)
