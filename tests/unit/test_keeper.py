"""controller.keeper: the Lease keeper's protocol and the write gate it shares with the main process.

The keeper runs here on the simulated clock of tests/unit/test_leader.py against its in-memory Lease
API; the main process is simulated by tasks that read the keeper's notes late (a main loop stalled by
a tenant's reconcile) and answer "standby N" once they stopped writing. After every step of the
simulation at most one replica may write.
"""

from __future__ import annotations

import asyncio
import os
import random
import socket

import pytest

from sunk_sandbox_operator.adapters import health
from sunk_sandbox_operator.controller import keeper as kp
from sunk_sandbox_operator.controller.keeper import KeeperLink, LeaseKeeper, SharedWords

from tests.unit.test_leader import FakeLeaseAPI, Link, SimClock, Tasks, make


@pytest.fixture
async def tasks():
    t = Tasks()
    yield t
    for task in t.tasks:
        task.cancel()
    await asyncio.gather(*t.tasks, return_exceptions=True)


class Replica:
    """One replica: a keeper (elector, shared words) and the main process's view of them."""

    def __init__(self, api: FakeLeaseAPI, clock: SimClock, identity: str, tasks: Tasks, **kwargs) -> None:
        self.clock, self.link = clock, Link(api, clock, **kwargs)
        self.words = SharedWords()
        self.elector = make(self.link, clock, identity, on_renewed=self.words.open_until)
        self.commands: asyncio.Queue = asyncio.Queue()
        self.notes: asyncio.Queue = asyncio.Queue()
        self.keeper = LeaseKeeper(self.elector, self.words, self.commands,
                                  lambda line: self.notes.put_nowait(kp._parse(line.encode())))
        self.main = KeeperLink(self.words, None, clock=clock)
        self.running = tasks.start(self.keeper.run())

    def command(self, line: str) -> None:
        self.commands.put_nowait(kp._parse(line.encode()))

    def drain(self) -> list[tuple[str, int]]:
        out = []
        while not self.notes.empty():
            out.append(self.notes.get_nowait())
        return out


# ---------------------------------------------------------------- the shared words


def test_shared_words_cross_a_fork() -> None:
    """The page is shared after the fork: what the child writes, the parent reads (and back)."""
    words = SharedWords()
    assert words.until() == 0.0 and not words.ready() and words.last_beat() == 0.0
    words.beat(12.5, ready=True)
    pid = os.fork()
    if pid == 0:  # the child: the keeper's writes
        try:
            ok = words.ready() and words.last_beat() == 12.5
            words.open_until(1234.000000125 if ok else 1.0)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    assert words.until() == pytest.approx(1234.000000125, abs=1e-9)
    words.open_until(0.0)                   # a deadline of 0 still reads as a (past) deadline, not "never set"
    assert 0 < words.until() < 1e-6
    words.shut()
    assert words.until() == 0.0


def test_the_gate_needs_a_term_and_the_clock_before_the_deadline() -> None:
    clock = SimClock()
    words = SharedWords()
    main = KeeperLink(words, None, clock=clock)
    words.open_until(1010.0)
    assert not main.writable()              # no term of ours yet
    main.term = 1
    assert main.writable()
    clock.now = 1010.0 - 1e-6
    assert main.writable()
    clock.now = 1010.0                      # passed by time alone: nobody has to say so
    assert not main.writable()
    clock.now = 1005.0
    words.shut()
    assert not main.writable()


# ---------------------------------------------------------------- the protocol


async def test_the_keeper_acquires_only_when_the_main_process_stands_by(tasks) -> None:
    clock, api = SimClock(), FakeLeaseAPI()
    a = Replica(api, clock, "a", tasks)
    await clock.run_until(1005.0)
    assert a.link.calls == [] and a.drain() == []        # not a Lease call before "standby 0"
    a.command("standby 0")
    await clock.run_until(1005.0)
    assert a.drain() == [("leading", 1)] and api.spec()["holderIdentity"] == "a"
    assert a.words.until() == 1015.0                       # the attempt's start + renew_deadline
    a.main.term = 1
    await clock.run_until(1009.0)
    assert a.words.until() == 1019.0 and a.main.writable()  # renewed at 1007, 1009


async def test_a_lost_term_shuts_the_gate_and_waits_for_standby(tasks) -> None:
    clock, api = SimClock(), FakeLeaseAPI()
    a = Replica(api, clock, "a", tasks)
    a.command("standby 0")
    await clock.run_until(1000.0)
    assert a.drain() == [("leading", 1)]
    a.main.term = 1
    a.link.mode = "down"                                   # renewals fail from here
    await clock.run_until(1010.0 - 1e-3, lambda: None)
    assert a.main.writable()
    await clock.run_until(1010.0)
    assert not a.main.writable() and a.words.until() == 0.0 and a.drain() == [("lost", 1)]
    a.link.mode = None
    calls = len(a.link.calls)
    await clock.run_until(1060.0)                          # the Lease is ours for the taking: still waits
    assert len(a.link.calls) == calls and a.drain() == []
    a.command("standby 0")                                 # stale: ignored
    await clock.run_until(1061.0)
    assert a.drain() == []
    a.command("standby 1")
    await clock.run_until(1062.0)
    assert a.drain() == [("leading", 2)]


async def test_release_shuts_the_gate_first_then_frees_the_lease(tasks) -> None:
    clock, api = SimClock(), FakeLeaseAPI()
    a = Replica(api, clock, "a", tasks)
    a.command("standby 0")
    await clock.run_until(1003.0)
    a.main.term = 1
    a.command("release")
    await clock.run_until(1003.0)
    assert a.running.done() and a.words.until() == 0.0 and not a.main.writable()
    assert a.drain() == [("leading", 1), ("released", 0)]
    assert api.spec()["holderIdentity"] == "" and api.spec()["leaseDurationSeconds"] == 1


async def test_the_main_process_gone_shuts_the_gate_and_leaves_the_lease_to_expire(tasks) -> None:
    """EOF (the main process died, maybe mid-write): not released, so no standby writes at once."""
    clock, api = SimClock(), FakeLeaseAPI()
    a = Replica(api, clock, "a", tasks)
    a.command("standby 0")
    await clock.run_until(1003.0)
    a.command("eof")
    await clock.run_until(1003.0)
    assert a.running.done() and a.words.until() == 0.0 and api.spec()["holderIdentity"] == "a"


async def test_release_or_eof_while_acquiring(tasks) -> None:
    clock, api = SimClock(), FakeLeaseAPI()
    api.put(holderIdentity="b", renewTime=clock.wall())
    a = Replica(api, clock, "a", tasks)
    a.command("standby 0")
    await clock.run_until(1005.0)
    a.command("release")
    await clock.run_until(1005.0)
    assert a.running.done() and a.drain() == [("released", 0)] and api.spec()["holderIdentity"] == "b"


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_never_two_writers_whatever_the_main_loops_do(tasks, seed) -> None:
    """Two replicas; each main process reads its keeper's notes only after random stalls (a tenant's
    reconcile holding its loop for up to 40 s) and takes random time to stop writing after a lost
    term; the Lease links fail at random. After every step at most one main process may write."""
    rng = random.Random(seed)
    clock, api = SimClock(), FakeLeaseAPI()
    replicas = [Replica(api, clock, name, tasks, latency=lambda: rng.uniform(0.0, 0.5)) for name in "ab"]
    for r in replicas:
        r.elector._jitter = rng.random  # type: ignore[attr-defined]
    terms: list[str] = []

    async def main_process(r: Replica) -> None:
        r.command("standby 0")
        while True:
            kind, n = await r.notes.get()
            await clock.sleep(rng.choice([0.0, 0.0, rng.uniform(0.0, 40.0)]))   # a stalled loop reads late
            if kind == "leading":
                r.main.term = n
                terms.append(r.elector.identity)
            elif kind == "lost" and r.main.term == n:
                await clock.sleep(rng.uniform(0.0, 5.0))                       # kopf stopping
                r.main.term = None
                r.command(f"standby {n}")

    async def chaos() -> None:
        while True:
            await clock.sleep(rng.uniform(5.0, 25.0))
            victim = rng.choice(replicas).link
            victim.mode = rng.choice(["down", "hang", "slow", "drop"])
            victim.slow = rng.uniform(2.0, 7.0)
            await clock.sleep(rng.uniform(5.0, 30.0))
            victim.mode = None

    for r in replicas:
        tasks.start(main_process(r))
    tasks.start(chaos())
    steps = [0]

    def check() -> None:
        tasks.raise_failures()
        steps[0] += 1
        writers = [r.elector.identity for r in replicas if r.main.writable()]
        assert len(writers) <= 1, f"two writers at {clock.now}"

    await clock.run_until(2500.0, check)
    assert steps[0] > 1000 and len(terms) >= 3, terms      # leadership did move between the two


# ---------------------------------------------------------------- over a socket pair


async def test_the_line_protocol_over_a_socket_pair_and_eof_both_ways() -> None:
    class Instant:
        """An elector that acquires at once and holds until cancelled."""

        async def acquire(self) -> None:
            return None

        async def hold(self, on_lost) -> None:
            await asyncio.Event().wait()

        async def release(self) -> bool:
            return True

    main_end, keeper_end = socket.socketpair()
    words = SharedWords()
    commands: asyncio.Queue = asyncio.Queue()
    reader, writer = await asyncio.open_connection(sock=keeper_end)
    lines = asyncio.create_task(kp._read_lines(reader, commands, "eof"))
    keeper = asyncio.create_task(LeaseKeeper(Instant(), words, commands,  # type: ignore[arg-type]
                                             lambda line: writer.write(line.encode() + b"\n")).run())
    link = KeeperLink(words, main_end)
    await link.connect()
    link.tell("standby 0")
    assert await asyncio.wait_for(link.notes.get(), 5) == ("leading", 1)
    await link.release(timeout=5)                          # "release" -> "released", then the link closes
    await asyncio.wait_for(keeper, 5)
    writer.close()
    assert await asyncio.wait_for(lines, 5) is None and commands.get_nowait() == ("eof", 0)


# ---------------------------------------------------------------- /healthz


def test_liveness_fails_only_past_the_stall_limit() -> None:
    assert health.liveness(0.2, 300.0, True) == (200, {"ok": True, "leader": True, "mainLoopStalledSeconds": 0.2})
    status, body = health.liveness(45.04, 300.0, False)   # a tenant's 45 s reconcile: alive, and said
    assert status == 200 and body["mainLoopStalledSeconds"] == 45.0
    status, body = health.liveness(301.0, 300.0, True)
    assert status == 503 and body["ok"] is False and "has not turned for 301 s" in body["error"]
    assert health.liveness(10_000.0, 0.0, True)[0] == 200  # 0: never


async def test_healthz_and_readyz_answer_from_the_keepers_callables() -> None:
    import aiohttp

    stalled = [1.0]
    ready = [False]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    runner = await health.serve("127.0.0.1", port, ready=lambda: ready[0], leading=lambda: True,
                                stalled=lambda: stalled[0], stall_limit=60.0)
    try:
        async with aiohttp.ClientSession() as http:
            async def get(path: str) -> tuple[int, dict]:
                async with http.get(f"http://127.0.0.1:{port}{path}") as r:
                    return r.status, await r.json()
            assert await get("/healthz") == (200, {"ok": True, "leader": True, "mainLoopStalledSeconds": 1.0})
            assert (await get("/readyz"))[0] == 503
            ready[0], stalled[0] = True, 61.0
            assert (await get("/readyz"))[0] == 200 and (await get("/healthz"))[0] == 503
    finally:
        await runner.cleanup()




# ---------------------------------------------------------------- the failpoint the integration test stalls with


def test_the_stall_failpoint_holds_once_and_is_named() -> None:
    from sunk_sandbox_operator.controller.failpoints import Failpoints

    held: list[int] = []
    points = Failpoints("stall-in-reconcile=25,after-policy-write=2", exit=lambda code: None, hold=held.append)
    points.stall("stall-in-reconcile")
    points.stall("stall-in-reconcile")
    assert held == [25]
    Failpoints("", hold=held.append).stall("stall-in-reconcile")
    assert held == [25]
    with pytest.raises(ValueError, match="stall-in-reconcile"):
        Failpoints("stall-in-nothing=1")


async def test_a_command_arriving_with_the_lease_is_not_lost(tasks) -> None:
    """"release" taken from the queue in the same step as the acquire ends: handled, not dropped."""
    clock, api = SimClock(), FakeLeaseAPI()
    a = Replica(api, clock, "a", tasks)
    a.command("standby 0")
    a.command("release")                                   # both queued before the keeper runs
    await clock.run_until(1001.0)
    assert a.running.done() and a.drain() == [("leading", 1), ("released", 0)]
    assert api.spec()["holderIdentity"] == "" and a.words.until() == 0.0
