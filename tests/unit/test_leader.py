"""controller.leader: Lease leader election, driven by a simulated clock against an in-memory Lease API.

Time moves only when a test steps the SimClock (no real sleeping, no network): each step wakes the
earliest sleeper and lets every task run that can, so a check after every step sees every instant
at which anything changed.
"""

from __future__ import annotations

import asyncio
import copy
import datetime as dt
import heapq
import logging
import random
import re
from typing import Callable

import pytest

from sunk_sandbox_operator.adapters import kube as k
from sunk_sandbox_operator.controller import leader as leader_mod
from sunk_sandbox_operator.controller.leader import JITTER_FACTOR, LeaderElector
from sunk_sandbox_operator.controller.lease import micro_time_now, new_identity

NS, NAME = "sunk-system", "sunk-sandbox-operator"
EPOCH = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
SETTLE_STEPS = 25


# ---------------------------------------------------------------- simulated time


class SimClock:
    """A monotonic clock, its wall clock and its sleep; `step` wakes the earliest sleeper."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start
        self._queue: list[tuple[float, int, asyncio.Future]] = []
        self._seq = 0

    def __call__(self) -> float:
        return self.now

    def wall(self, offset: float = 0.0) -> str:
        return (EPOCH + dt.timedelta(seconds=self.now + offset)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")

    async def sleep(self, delay: float) -> None:
        future = asyncio.get_running_loop().create_future()
        self._seq += 1
        heapq.heappush(self._queue, (self.now + max(0.0, delay), self._seq, future))
        await future

    @staticmethod
    async def settle() -> None:
        for _ in range(SETTLE_STEPS):
            await asyncio.sleep(0)

    def _next(self) -> float | None:
        while self._queue and self._queue[0][2].done():      # cancelled sleeps
            heapq.heappop(self._queue)
        return self._queue[0][0] if self._queue else None

    async def run_until(self, target: float, check: Callable[[], None] = lambda: None) -> None:
        await self.settle()
        check()
        while (when := self._next()) is not None and when <= target:
            _, _, future = heapq.heappop(self._queue)
            self.now = max(self.now, when)
            future.set_result(None)
            await self.settle()
            check()
        self.now = max(self.now, target)
        await self.settle()
        check()


# ---------------------------------------------------------------- the Lease API, in memory


class FakeLeaseAPI:
    """The API server's Lease endpoints: resourceVersion preconditions (Conflict), NotFound, copies in and out."""

    def __init__(self) -> None:
        self.leases: dict[tuple[str, str], dict] = {}
        self._rv = 100

    def _next_rv(self) -> str:
        self._rv += 1
        return str(self._rv)

    def get(self, namespace: str, name: str) -> dict:
        try:
            return copy.deepcopy(self.leases[(namespace, name)])
        except KeyError:
            raise k.NotFound(f'leases.coordination.k8s.io "{name}" not found') from None

    def create(self, namespace: str, body: dict) -> dict:
        name = body["metadata"]["name"]
        if (namespace, name) in self.leases:
            raise k.Conflict(f'leases.coordination.k8s.io "{name}" already exists')
        if "resourceVersion" in body["metadata"]:
            raise k.Invalid("resourceVersion should not be set on objects to be created")
        stored = copy.deepcopy(body)
        stored["metadata"] = {**stored["metadata"], "namespace": namespace, "uid": f"uid-{name}",
                              "resourceVersion": self._next_rv()}
        self.leases[(namespace, name)] = stored
        return copy.deepcopy(stored)

    def replace(self, namespace: str, name: str, body: dict) -> dict:
        current = self.get(namespace, name)
        rv = (body.get("metadata") or {}).get("resourceVersion")
        assert rv is not None, "every PUT of the Lease carries its read's resourceVersion"
        if rv != current["metadata"]["resourceVersion"]:
            raise k.Conflict(f'Operation cannot be fulfilled on leases.coordination.k8s.io "{name}": '
                             "the object has been modified; please apply your changes to the latest version")
        stored = copy.deepcopy(body)
        stored["metadata"] = {**stored["metadata"], "namespace": namespace, "name": name,
                              "uid": current["metadata"]["uid"], "resourceVersion": self._next_rv()}
        self.leases[(namespace, name)] = stored
        return copy.deepcopy(stored)

    # another client's writes

    def put(self, **spec) -> None:
        """Write the Lease as another client would (create or overwrite, new resourceVersion)."""
        spec = {"leaseDurationSeconds": 15, "leaseTransitions": 0, **spec}
        old = self.leases.get((NS, NAME))
        md = {"name": NAME, "namespace": NS, "uid": old["metadata"]["uid"] if old else f"uid-{NAME}",
              "resourceVersion": self._next_rv()}
        self.leases[(NS, NAME)] = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": md,
                                   "spec": spec}

    def touch(self) -> None:
        """Another client's write that leaves the spec alone (a label): only the resourceVersion moves."""
        lease = self.leases[(NS, NAME)]
        lease["metadata"].setdefault("labels", {})["touched"] = str(self._rv)
        lease["metadata"]["resourceVersion"] = self._next_rv()

    def spec(self) -> dict:
        return copy.deepcopy(self.leases[(NS, NAME)]["spec"])


class Link:
    """One replica's connection to the FakeLeaseAPI: latency and faults, what the elector was told.

    mode: None (healthy); "down" (requests never arrive); "forbidden"; "hang" (no answer until the
    mode changes); "slow" (each leg takes `slow` seconds); "drop" (writes land, their answers are lost).
    """

    def __init__(self, api: FakeLeaseAPI, clock: SimClock, latency: Callable[[], float] = lambda: 0.0) -> None:
        self.api, self.clock, self.latency = api, clock, latency
        self.mode: str | None = None
        self.slow = 7.0
        self.calls: list[str] = []
        self.errors: list[Exception] = []
        self.before_replace: Callable[[], None] | None = None

    async def _leg(self) -> None:
        delay = self.slow if self.mode == "slow" else self.latency()
        if delay > 0:
            await self.clock.sleep(delay)

    async def _do(self, method: str, op: Callable[[], dict]) -> dict:
        self.calls.append(method)
        try:
            if self.mode == "hang":
                while self.mode == "hang":
                    await self.clock.sleep(0.5)
                raise TimeoutError("no answer")
            await self._leg()
            if self.mode == "down":
                raise ConnectionError("partitioned")
            if self.mode == "forbidden":
                raise k.Forbidden("leases.coordination.k8s.io is forbidden")
            result = op()
            await self._leg()
            if self.mode == "drop" and method != "get":
                raise TimeoutError("the answer was lost")
            return result
        except Exception as exc:
            self.errors.append(exc)
            raise

    async def get_lease(self, namespace: str, name: str) -> dict:
        return await self._do("get", lambda: self.api.get(namespace, name))

    async def create_lease(self, namespace: str, body: dict) -> dict:
        return await self._do("create", lambda: self.api.create(namespace, body))

    async def replace_lease(self, namespace: str, name: str, body: dict) -> dict:
        def op() -> dict:
            if self.before_replace is not None:
                self.before_replace()
            return self.api.replace(namespace, name, body)
        return await self._do("replace", op)

    def count(self, method: str) -> int:
        return self.calls.count(method)


# ---------------------------------------------------------------- helpers


def make(link: Link, clock: SimClock, identity: str, jitter: Callable[[], float] = lambda: 0.0,
         **kwargs) -> LeaderElector:
    """An elector on the simulated clock; `.changes` records (leading, when), `.slept` its own sleeps."""
    changes: list[tuple[bool, float]] = []
    slept: list[float] = []

    async def sleep(delay: float) -> None:
        slept.append(delay)
        await clock.sleep(delay)

    el = LeaderElector(link, NS, NAME, identity=identity, clock=clock, wall_now=clock.wall, sleep=sleep,
                       jitter=jitter, on_change=lambda leading: changes.append((leading, clock.now)), **kwargs)
    el.changes, el.slept = changes, slept  # type: ignore[attr-defined]
    return el


def always(cond: Callable[[], bool], what: str, tasks: "Tasks | None" = None) -> Callable[[], None]:
    """A check for run_until: `cond` holds after every step (and no task failed)."""
    def check() -> None:
        if tasks is not None:
            tasks.raise_failures()
        assert cond(), what
    return check


class Tasks:
    def __init__(self) -> None:
        self.tasks: list[asyncio.Task] = []

    def start(self, coro) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coro)
        self.tasks.append(task)
        return task

    def raise_failures(self) -> None:
        for task in self.tasks:
            if task.done() and not task.cancelled() and task.exception() is not None:
                raise task.exception()


@pytest.fixture
async def tasks():
    t = Tasks()
    yield t
    for task in t.tasks:
        task.cancel()
    await asyncio.gather(*t.tasks, return_exceptions=True)


class Gate:
    """The caller's write gate: opened after acquire(), closed by on_lost."""

    def __init__(self) -> None:
        self.open = False

    def close(self) -> None:
        self.open = False


async def replica(el: LeaderElector, gate: Gate, others: list[LeaderElector], gates: list[Gate]) -> None:
    """The caller's loop: acquire → open the gate → hold(on_lost=close the gate) → again."""
    while True:
        await el.acquire()
        assert el.is_leader()
        assert not any(o.is_leader() for o in others) and not any(g.open for g in gates), "two leaders"
        gate.open = True
        await el.hold(gate.close)
        assert not gate.open and not el.is_leader()


# ---------------------------------------------------------------- acquiring


async def test_acquire_creates_the_lease_when_absent() -> None:
    clock, api = SimClock(), FakeLeaseAPI()
    link = Link(api, clock)
    a = make(link, clock, "a")
    assert not a.is_leader()
    await a.acquire()
    assert a.is_leader() and a.changes == [(True, 1000.0)] and a.slept == []
    lease = api.leases[(NS, NAME)]
    assert lease["apiVersion"] == "coordination.k8s.io/v1" and lease["kind"] == "Lease"
    assert lease["metadata"]["name"] == NAME and lease["metadata"]["namespace"] == NS
    assert lease["spec"] == {"holderIdentity": "a", "leaseDurationSeconds": 15, "acquireTime": clock.wall(),
                             "renewTime": clock.wall(), "leaseTransitions": 0}
    assert link.calls == ["get", "create"]
    assert re.fullmatch(r"2026-01-01T00:16:40\.000000Z", lease["spec"]["renewTime"])


async def test_a_lease_already_naming_us_is_just_renewed() -> None:
    clock, api = SimClock(), FakeLeaseAPI()
    api.put(holderIdentity="a", acquireTime="2025-12-31T23:00:00.000000Z", renewTime=clock.wall(-5),
            leaseTransitions=5)
    a = make(Link(api, clock), clock, "a")
    await a.acquire()
    assert a.is_leader() and a.slept == []
    assert api.spec() == {"holderIdentity": "a", "leaseDurationSeconds": 15, "leaseTransitions": 5,
                          "acquireTime": "2025-12-31T23:00:00.000000Z", "renewTime": clock.wall()}


async def test_wait_while_another_holder_renews(tasks) -> None:
    clock, api = SimClock(), FakeLeaseAPI()
    b = make(Link(api, clock), clock, "b")
    await b.acquire()
    tasks.start(b.hold(lambda: None))
    a_link = Link(api, clock)
    a = make(a_link, clock, "a", jitter=lambda: 0.5)
    acquiring = tasks.start(a.acquire())

    await clock.run_until(1120.0, always(lambda: b.is_leader() and not a.is_leader(), "a leads", tasks))
    assert not acquiring.done() and api.spec()["holderIdentity"] == "b"
    assert a_link.count("replace") == a_link.count("create") == 0 and a_link.count("get") >= 30
    assert a.slept == [pytest.approx(2.0 * (1 + JITTER_FACTOR * 0.5))] * len(a.slept)   # client-go's JitterFactor 1.2
    assert a.holder() == "b" and a.changes == []


@pytest.mark.parametrize("remote_renew", ["fresh", "stale"])
async def test_take_over_after_lease_duration_on_our_clock(tasks, remote_renew) -> None:
    """The remote renewTime is never compared with our clock: 1 h ahead or 26 years old, we wait 15 s."""
    clock, api = SimClock(), FakeLeaseAPI()
    renew = clock.wall(3600.0) if remote_renew == "fresh" else "2000-01-01T00:00:00.000000Z"
    api.put(holderIdentity="ghost", renewTime=renew, acquireTime=renew, leaseTransitions=3)
    a = make(Link(api, clock), clock, "a")          # jitter 0: a retry every 2 s exactly
    acquiring = tasks.start(a.acquire())
    await clock.run_until(1015.0 - 1e-3, always(lambda: not a.is_leader(), "took over early", tasks))
    assert not a.is_leader() and not acquiring.done() and api.spec()["holderIdentity"] == "ghost"
    await clock.run_until(1016.0)                   # the first retry at or after 15 s since we first saw it
    assert acquiring.done() and a.is_leader() and a.changes == [(True, 1016.0)]
    assert api.spec() == {"holderIdentity": "a", "leaseDurationSeconds": 15, "leaseTransitions": 4,
                          "acquireTime": clock.wall(), "renewTime": clock.wall()}


async def test_any_change_of_the_lease_restarts_the_wait(tasks) -> None:
    clock, api = SimClock(), FakeLeaseAPI()
    api.put(holderIdentity="ghost", renewTime="2000-01-01T00:00:00.000000Z")
    a = make(Link(api, clock), clock, "a")
    acquiring = tasks.start(a.acquire())
    await clock.run_until(1009.0)
    api.touch()                                     # same holder, same renewTime, new resourceVersion
    await clock.run_until(1025.0 - 1e-3, always(lambda: not a.is_leader(), "took over early", tasks))
    assert not acquiring.done()                     # seen at 1010, so valid until 1025
    await clock.run_until(1026.0)
    assert acquiring.done() and a.changes == [(True, 1026.0)]


async def test_two_electors_racing_for_an_expired_lease_one_wins(tasks) -> None:
    clock, api = SimClock(), FakeLeaseAPI()
    api.put(holderIdentity="ghost", renewTime=clock.wall(), leaseTransitions=3)
    links = [Link(api, clock, latency=lambda: 0.25) for _ in range(2)]
    els = [make(links[i], clock, name) for i, name in enumerate("ab")]   # same timing: both read, then both PUT
    gates = [Gate(), Gate()]
    for i in range(2):
        tasks.start(replica(els[i], gates[i], [els[1 - i]], [gates[1 - i]]))

    def check() -> None:
        tasks.raise_failures()
        assert sum(e.is_leader() for e in els) <= 1 and sum(g.open for g in gates) <= 1

    await clock.run_until(1060.0, check)
    winners = [e for e in els if e.is_leader()]
    assert len(winners) == 1 and api.spec()["holderIdentity"] == winners[0].identity
    assert api.spec()["leaseTransitions"] == 4       # one take-over, once
    loser = links[els.index(winners[0]) - 1]
    assert any(isinstance(exc, k.Conflict) for exc in loser.errors)


# ---------------------------------------------------------------- never two leaders


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_two_electors_never_both_lead(tasks, seed) -> None:
    """Two replicas on one Lease with random latency and faults on the leader's link; after every step
    of the simulation at most one believes it leads, and at most one write gate is open."""
    rng = random.Random(seed)
    clock, api = SimClock(), FakeLeaseAPI()
    links = [Link(api, clock, latency=lambda: rng.uniform(0.0, 0.8)) for _ in range(2)]
    els = [make(links[i], clock, name, jitter=rng.random) for i, name in enumerate("ab")]
    gates = [Gate(), Gate()]
    for i in range(2):
        tasks.start(replica(els[i], gates[i], [els[1 - i]], [gates[1 - i]]))
    modes: list[str] = []

    async def chaos() -> None:
        while True:
            await clock.sleep(rng.uniform(5.0, 20.0))
            leading = [i for i in range(2) if els[i].is_leader()]
            victim = links[leading[0] if leading else rng.randrange(2)]
            victim.mode = rng.choice(["down", "hang", "slow", "drop"])
            victim.slow = rng.uniform(2.0, 7.0)
            modes.append(victim.mode)
            await clock.sleep(rng.uniform(5.0, 30.0))
            victim.mode = None

    tasks.start(chaos())
    leaders: list[str] = []
    steps = [0]

    def check() -> None:
        tasks.raise_failures()
        steps[0] += 1
        leading = [e.identity for e in els if e.is_leader()]
        assert len(leading) <= 1, f"two leaders at {clock.now}"
        assert sum(g.open for g in gates) <= 1, f"two open write gates at {clock.now}"
        if leading and (not leaders or leaders[-1] != leading[0]):
            leaders.append(leading[0])

    await clock.run_until(1600.0, check)
    assert len(leaders) >= 3, (leaders, modes)      # leadership did move: the check saw real hand-overs
    assert steps[0] > 1000 and len(set(modes)) >= 3
    assert api.spec()["leaseTransitions"] >= len(leaders) - 1


# ---------------------------------------------------------------- holding and losing


@pytest.mark.parametrize("mode", ["down", "forbidden", "hang", "slow"])
async def test_renew_failing_for_renew_deadline_loses_leadership(tasks, mode) -> None:
    clock, api = SimClock(), FakeLeaseAPI()
    link = Link(api, clock)
    a = make(link, clock, "a")
    await a.acquire()
    link.mode = mode
    events: list = []

    def on_lost() -> None:
        events.append(("lost", clock.now, a.is_leader(), a.changes[-1][0]))

    async def caller() -> None:
        await a.hold(on_lost)
        events.append(("returned", clock.now))

    holding = tasks.start(caller())
    await clock.run_until(1010.0 - 1e-3, always(lambda: a.is_leader() and not events, "lost early", tasks))
    assert a.is_leader() and events == []
    await clock.run_until(1010.0)
    # on_lost first (the gate closes while on_change still says leading), then on_change(False), then return
    assert events == [("lost", 1010.0, False, True), ("returned", 1010.0)] and holding.done()
    assert a.changes == [(True, 1000.0), (False, 1010.0)] and not a.is_leader()
    if mode in ("down", "forbidden"):
        assert link.count("get") == 1 + 4          # acquire, then renew attempts at +2 +4 +6 +8
    assert api.spec()["holderIdentity"] == "a"     # nobody else wrote: a standby takes over 15 s after its last look


async def test_is_leader_turns_false_at_the_deadline_without_hold() -> None:
    clock, api = SimClock(), FakeLeaseAPI()
    a = make(Link(api, clock), clock, "a")
    await a.acquire()
    clock.now += 9.999
    assert a.is_leader()
    clock.now += 0.001
    assert not a.is_leader()
    lost: list[float] = []
    await a.hold(lambda: lost.append(clock.now))    # already lost: on_lost at once, no renew tried
    assert lost == [1010.0] and a.changes[-1] == (False, 1010.0)


async def test_the_deadline_counts_from_the_start_of_the_successful_attempt(tasks) -> None:
    """With latency, a write lands after its attempt started: our deadline runs from before the GET."""
    clock, api = SimClock(), FakeLeaseAPI()
    link = Link(api, clock, latency=lambda: 0.5)
    a = make(link, clock, "a")
    acquiring = tasks.start(a.acquire())
    await clock.run_until(1002.0)                    # get 1000→1001 (NotFound), create 1001→1002
    assert acquiring.done() and a.is_leader()
    tasks.start(a.hold(lambda: None))
    await clock.run_until(1006.0)                    # renew: starts 1004, get 1004→1005, replace 1005→1006
    assert api.spec()["renewTime"] == clock.wall(-1.0)
    link.mode = "down"
    await clock.run_until(1014.0 - 1e-6)
    assert a.is_leader()
    await clock.run_until(1014.0)
    assert not a.is_leader()                         # 10 s after 1004.0, not after 1006.0


async def test_a_standby_that_saw_the_last_renew_at_once_takes_over_after_the_leader_stopped(tasks) -> None:
    """The tightest case: the standby's look coincides with the leader's last renew, and its retry falls
    exactly lease_duration later; the leader stopped at renew_deadline, 5 s before."""
    clock, api = SimClock(), FakeLeaseAPI()
    a_link = Link(api, clock)
    a = make(a_link, clock, "a")
    await a.acquire()
    a_link.mode = "down"                            # 1000.0 was a's last successful renew
    gates = [Gate(), Gate()]
    gates[0].open = True
    b = make(Link(api, clock), clock, "b", jitter=lambda: 0.5 / 2.4)   # retries every 2.5 s: 1015.0 exactly
    tasks.start(a.hold(gates[0].close))
    tasks.start(replica(b, gates[1], [a], [gates[0]]))
    one = always(lambda: not (a.is_leader() and b.is_leader()) and not all(g.open for g in gates), "two leaders", tasks)
    await clock.run_until(1030.0, one)
    assert a.changes == [(True, 1000.0), (False, 1010.0)] and b.changes == [(True, 1015.0)]


async def test_a_standby_polling_often_takes_over_within_lease_duration_plus_its_poll(tasks) -> None:
    """standby_poll (the shipped 0.5 s): the dead leader's last renew is seen at most one poll late,
    and the expiry at most one poll late: take-over ≤ last renew + lease_duration + 2 polls, never
    while the old leader could still write."""
    clock, api = SimClock(), FakeLeaseAPI()
    a_link = Link(api, clock)
    a = make(a_link, clock, "a")
    await a.acquire()
    gates = [Gate(), Gate()]
    gates[0].open = True
    b = make(Link(api, clock), clock, "b", jitter=lambda: 1.0, standby_poll=0.5)
    tasks.start(a.hold(gates[0].close))
    tasks.start(replica(b, gates[1], [a], [gates[0]]))
    await clock.run_until(1007.0)
    a_link.mode = "down"                            # the leader dies between two renews
    last_renew = a._renewed_at
    one = always(lambda: not (a.is_leader() and b.is_leader()) and not all(g.open for g in gates), "two leaders", tasks)
    await clock.run_until(1040.0, one)
    took = b.changes[0][1] - last_renew
    assert a.lease_duration <= took <= a.lease_duration + 2 * 0.5 * 1.2 + 1e-6, took
    assert all(d <= 0.6 + 1e-9 for d in b.slept[:20]), b.slept   # standing by: polls of 0.5 s (+20 % jitter)


async def test_conflict_on_renew_is_retried_within_the_deadline(tasks) -> None:
    clock, api = SimClock(), FakeLeaseAPI()
    link = Link(api, clock)
    a = make(link, clock, "a")
    await a.acquire()
    acquired_at = clock.wall()
    link.errors.clear()                            # the first GET's NotFound
    conflicts = [2]

    def another_writer() -> None:                  # between our GET and our PUT, twice
        if conflicts[0]:
            conflicts[0] -= 1
            api.touch()

    link.before_replace = another_writer
    lost: list[float] = []
    tasks.start(a.hold(lambda: lost.append(clock.now)))
    await clock.run_until(1005.0, always(a.is_leader, "lost", tasks))
    assert [type(e) for e in link.errors] == [k.Conflict, k.Conflict] and api.spec()["renewTime"] == acquired_at
    await clock.run_until(1006.0)
    assert api.spec()["renewTime"] == clock.wall() and api.spec()["leaseTransitions"] == 0
    await clock.run_until(1060.0, always(a.is_leader, "lost", tasks))
    assert lost == [] and a.changes == [(True, 1000.0)] and api.spec()["holderIdentity"] == "a"


async def test_another_holder_on_the_lease_means_lost_at_once(tasks) -> None:
    clock, api = SimClock(), FakeLeaseAPI()
    a = make(Link(api, clock), clock, "a")
    await a.acquire()
    lost: list[tuple[float, bool]] = []
    holding = tasks.start(a.hold(lambda: lost.append((clock.now, a.is_leader()))))
    await clock.run_until(1003.0)
    api.put(holderIdentity="c", renewTime=clock.wall(), leaseTransitions=1)
    await clock.run_until(1004.0)
    assert lost == [(1004.0, False)] and holding.done()
    assert api.spec()["holderIdentity"] == "c"       # never written over


# ---------------------------------------------------------------- releasing


async def test_release_lets_the_other_acquire_on_its_next_retry(tasks) -> None:
    clock, api = SimClock(), FakeLeaseAPI()
    a = make(Link(api, clock), clock, "a")
    await a.acquire()
    holding = tasks.start(a.hold(lambda: None))
    b = make(Link(api, clock), clock, "b")
    acquiring = tasks.start(b.acquire())
    await clock.run_until(1007.0, always(lambda: not b.is_leader(), "b leads", tasks))
    holding.cancel()                                 # clean shutdown: stop holding, stop writing, release
    await asyncio.gather(holding, return_exceptions=True)
    assert await a.release() is True
    assert not a.is_leader() and a.changes == [(True, 1000.0), (False, 1007.0)]
    assert api.spec() == {"holderIdentity": "", "leaseDurationSeconds": 1, "leaseTransitions": 0,
                          "acquireTime": clock.wall(), "renewTime": clock.wall()}
    await clock.run_until(1008.0)                    # b's next retry (every 2 s), not 15 s later
    assert acquiring.done() and b.is_leader() and b.changes == [(True, 1008.0)]
    assert api.spec()["holderIdentity"] == "b" and api.spec()["leaseTransitions"] == 1
    before = api.spec()
    assert await a.release() is False and api.spec() == before   # no longer ours: left alone


async def test_release_errors_are_reported_not_raised() -> None:
    clock, api = SimClock(), FakeLeaseAPI()
    link = Link(api, clock)
    a = make(link, clock, "a")
    await a.acquire()
    link.mode = "down"
    assert await a.release() is False and not a.is_leader()


# ---------------------------------------------------------------- construction, identity, the adapter


@pytest.mark.parametrize("kwargs", [{"lease_duration": 10.0, "renew_deadline": 10.0},
                                    {"renew_deadline": 2.4, "retry_period": 2.0},
                                    {"retry_period": 0.0}, {"identity": ""}])
def test_unsafe_timings_are_refused(kwargs) -> None:
    with pytest.raises(ValueError):
        LeaderElector(object(), NS, **{"identity": "a", **kwargs})  # type: ignore[arg-type]


def test_identity_and_micro_time() -> None:
    one, two = new_identity("op-7d9f-abc"), new_identity("op-7d9f-abc")
    assert one != two and one.startswith("op-7d9f-abc_") and two.startswith("op-7d9f-abc_")
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", micro_time_now())


async def test_kube_lease_calls_use_coordination_v1() -> None:
    seen: list[tuple] = []

    class HTTP:
        async def request(self, method, path, params=None, body=None, content_type="application/json"):
            seen.append((method, path, body))
            if method == "PUT":
                raise k.Conflict("the object has been modified")
            return body if method == "POST" else {"kind": "Lease", "spec": {"holderIdentity": "a"}}

    kube = k.Kube(HTTP())
    assert await kube.get_lease(NS, NAME) == {"kind": "Lease", "spec": {"holderIdentity": "a"}}
    assert await kube.create_lease(NS, {"metadata": {"name": NAME}}) == {"metadata": {"name": NAME}}
    leases = f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases"
    assert seen == [("GET", f"{leases}/{NAME}", None), ("POST", leases, {"metadata": {"name": NAME}})]
    with pytest.raises(k.Conflict, match="modified"):
        await kube.replace_lease(NS, NAME, {"metadata": {"name": NAME, "resourceVersion": "1"}})


# ---------------------------------------------------------------- hygiene: backoff on errors, one line per state


def lines(caplog, level: int | None = None) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "sunk_sandbox_operator"
            and (level is None or r.levelno == level)]


async def test_acquire_errors_back_off_with_the_one_backoff_capped_and_jittered(tasks) -> None:
    """The Lease's namespace or RBAC gone (after `helm uninstall`): attempts back off from the standby
    poll, doubling to ERROR_BACKOFF_CAP, with Backoff's jitter; a good answer resets it to the poll."""
    clock, api = SimClock(), FakeLeaseAPI()
    api.put(holderIdentity="b", renewTime=clock.wall())
    link = Link(api, clock)
    link.mode = "forbidden"
    draws = iter([0.0, 1.0] * 100)                   # Backoff's jitter: the whole delay, then half of it
    a = make(link, clock, "a", jitter=lambda: next(draws), standby_poll=0.5)
    tasks.start(a.acquire())
    await clock.run_until(1200.0)
    expected = [a.error_backoff.delay(n, lambda: r) for n, r in zip(range(len(a.slept)), [0.0, 1.0] * 100)]
    assert a.slept == pytest.approx(expected)
    assert a.slept[:4] == pytest.approx([0.5, 0.5, 2.0, 2.0]) and max(a.slept) == leader_mod.ERROR_BACKOFF_CAP
    assert min(a.slept[-4:]) == leader_mod.ERROR_BACKOFF_CAP / 2    # jittered at the cap too
    assert link.count("get") <= 2 + 1200 // 15                 # not one every 0.55 s: 360 would be
    link.mode = None                                           # the API is back: b's valid Lease is polled again
    before = len(a.slept)
    await clock.run_until(1260.0)
    assert all(d <= 0.6 + 1e-9 for d in a.slept[before + 1:]), a.slept[before:]


async def test_acquire_logs_each_state_once(tasks, caplog) -> None:
    caplog.set_level("DEBUG", logger="sunk_sandbox_operator")
    clock, api = SimClock(), FakeLeaseAPI()
    api.put(holderIdentity="b", renewTime=clock.wall())
    link = Link(api, clock)
    link.mode = "forbidden"
    a = make(link, clock, "a", standby_poll=0.5)
    acquiring = tasks.start(a.acquire())
    await clock.run_until(1033.0)                              # 33 s of 403s: one warning, not 65
    assert [m for m in lines(caplog) if "cannot acquire" in m] == [
        f"leader election: cannot acquire {NS}/{NAME}: leases.coordination.k8s.io is forbidden; retrying with "
        "backoff (up to 30s apart), logged again only when this changes"]
    link.mode = "down"                                         # another error: said once more
    await clock.run_until(1100.0)
    link.mode = None                                           # b still holds it: said once
    await clock.run_until(1131.0)                              # (the next attempt is at most 30 s away)
    api.put(holderIdentity="c", renewTime=clock.wall())        # another holder: said once
    await clock.run_until(1140.0)
    assert not acquiring.done()
    await clock.run_until(1150.0)                              # c's Lease expired: a takes it over
    assert acquiring.done()
    assert lines(caplog) == [
        f"leader election: cannot acquire {NS}/{NAME}: leases.coordination.k8s.io is forbidden; retrying with "
        "backoff (up to 30s apart), logged again only when this changes",
        f"leader election: cannot acquire {NS}/{NAME}: partitioned; retrying with backoff (up to 30s apart), logged "
        "again only when this changes",
        f"leader election: {NS}/{NAME} is held by 'b'; standing by",
        f"leader election: {NS}/{NAME} is held by 'c'; standing by",
        f"leader election: a leads ({NS}/{NAME})"]


async def test_renew_errors_are_logged_once_and_the_recovery_once(tasks, caplog) -> None:
    caplog.set_level("DEBUG", logger="sunk_sandbox_operator")
    clock, api = SimClock(), FakeLeaseAPI()
    link = Link(api, clock)
    a = make(link, clock, "a")
    await a.acquire()
    tasks.start(a.hold(lambda: None))
    link.mode = "down"
    await clock.run_until(1007.0)                              # renews at +2 +4 +6 fail
    assert link.count("get") == 4
    link.mode = None
    await clock.run_until(1030.0)
    assert a.is_leader() and lines(caplog, logging.WARNING) == [
        f"leader election: cannot renew {NS}/{NAME}, retrying until the renew deadline: partitioned"]
    assert lines(caplog, logging.INFO)[-1] == f"leader election: renewing {NS}/{NAME} works again"
    assert len(lines(caplog)) == 3                             # leads, the error, working again


async def test_on_renewed_hears_each_write_deadline(tasks) -> None:
    """The start of each successful attempt + renew_deadline: what a gate in another process opens to."""
    clock, api = SimClock(), FakeLeaseAPI()
    link = Link(api, clock, latency=lambda: 0.5)
    heard: list[float] = []
    a = make(link, clock, "a", on_renewed=heard.append)
    tasks.start(a.acquire())
    await clock.run_until(1002.0)
    tasks.start(a.hold(lambda: heard.append(-1.0)))
    await clock.run_until(1007.0)                              # renew started at 1004 (2 s after acquiring)
    assert heard == [1010.0, 1014.0]
    link.mode = "down"
    await clock.run_until(1030.0)
    assert heard[-1] == -1.0 and all(h <= 1014.0 + 4.0 for h in heard[:-1])


async def test_an_error_without_a_message_is_named_and_a_slow_take_over_is_said_as_such(tasks, caplog) -> None:
    caplog.set_level("INFO", logger="sunk_sandbox_operator")
    clock, api = SimClock(), FakeLeaseAPI()
    link = Link(api, clock)
    link.mode = "hang"                                          # a TimeoutError("no answer")... then slow answers
    a = make(link, clock, "a", standby_poll=0.5)
    acquiring = tasks.start(a.acquire())
    await clock.run_until(1003.0)
    link.mode, link.slow = "slow", 6.0                          # GET + PUT take 12 s: past the 10 s deadline
    await clock.run_until(1060.0)
    link.mode = None
    await clock.run_until(1070.0)
    assert acquiring.done()
    said = lines(caplog)
    assert said[0].endswith("cannot acquire sunk-system/sunk-sandbox-operator: no answer; retrying with backoff "
                            "(up to 30s apart), logged again only when this changes")
    assert f"leader election: taking {NS}/{NAME} took longer than the renew deadline (10s); trying again" in said
    assert all("is held by 'a'" not in m for m in said)


def test_text_names_an_error_without_a_message() -> None:
    assert leader_mod._text(TimeoutError()) == "TimeoutError" and leader_mod._text(ValueError("x")) == "x"
