"""The process's exit code (controller.main.run): a kopf failure is a crash, not a clean exit.

The shell around kopf is replaced by fakes (no API server): the caches, the webhook and the Lease
keeper are not what is under test here, only what `run` returns when kopf (or the keeper) ends.
"""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

import kopf
import pytest

from sunk_sandbox_operator.adapters.metrics import Metrics
from sunk_sandbox_operator.controller import main
from sunk_sandbox_operator.controller.config import load


class FakeKeeper:
    """The main process's side of the Lease keeper (controller/keeper.KeeperLink), without the
    process: "standby 0" is answered with "leading 1"; `release` is recorded."""

    def __init__(self) -> None:
        self.notes: asyncio.Queue = asyncio.Queue()
        self.term: int | None = None
        self.told: list[str] = []
        self.released: list[bool] = []

    async def connect(self) -> None:
        pass

    def tell(self, line: str) -> None:
        self.told.append(line)
        if line == "standby 0":
            self.notes.put_nowait(("leading", 1))

    def writable(self) -> bool:
        return self.term is not None

    def beat(self, ready: bool) -> None:
        pass

    async def release(self) -> None:
        self.term = None
        self.released.append(True)


@pytest.fixture
def shell(monkeypatch):
    """`run` with fake caches, webhook and Lease keeper; `kopf` is what the test's kopf.operator does."""
    stopped: list[bool] = []
    metrics = Metrics()
    keepers: list[FakeKeeper] = []

    async def start(logger, config):
        return SimpleNamespace(kube=SimpleNamespace(), informers=[], reset_bindings=lambda: None, metrics=metrics,
                               monotonic=time.monotonic, sleep=asyncio.sleep)

    async def nothing(*args, **kwargs):
        return None

    async def stop(ctx):
        stopped.append(True)

    monkeypatch.setattr(main.lifecycle, "start", start)
    monkeypatch.setattr(main.lifecycle, "stop", stop)
    monkeypatch.setattr(main.admission, "serve", nothing)
    monkeypatch.setattr(main.reconcile, "shutdown", nothing)

    def with_kopf(operator) -> int:
        monkeypatch.setattr(kopf, "operator", operator)
        keepers.append(FakeKeeper())
        return asyncio.run(main.run(None, load(), keeper=keepers[-1]))  # type: ignore[arg-type]
    with_kopf.stopped = stopped  # type: ignore[attr-defined]
    with_kopf.released = lambda: keepers[-1].released  # type: ignore[attr-defined]
    with_kopf.keeper = lambda: keepers[-1]  # type: ignore[attr-defined]
    with_kopf.leader = lambda: metrics.registry.get_sample_value("ssb_leader")  # type: ignore[attr-defined]
    return with_kopf


def test_kopf_failing_at_start_up_exits_1_after_the_clean_up(shell) -> None:
    async def failing(**kwargs):
        raise kopf.ActivityError("startup handler failed", outcomes={})
    assert shell(failing) == 1
    assert shell.stopped == [True] and shell.released() == [True]  # the caches stopped, the Lease released


def test_kopf_stopping_on_a_signal_exits_0(shell) -> None:
    async def stops(**kwargs):
        return None  # kopf took SIGTERM and returned
    assert shell(stops) == 0


def test_ssb_leader_is_1_while_this_replica_leads_and_0_once_it_released_the_lease(shell) -> None:
    seen = []

    async def leads(**kwargs):
        seen.append(shell.leader())
    assert shell.leader() == 0  # a standby, or not started
    assert shell(leads) == 0
    assert seen == [1] and shell.leader() == 0


def test_the_keeper_process_ending_stops_the_operator_with_1(shell) -> None:
    """The keeper gone (its process died): writing stops, kopf stops, exit 1 so the pod restarts."""
    seen = []

    async def runs_until_stopped(stop_flag, **kwargs):
        keeper = shell.keeper()
        seen.append(keeper.writable())
        keeper.notes.put_nowait(("gone", 0))
        await stop_flag.wait()
        seen.append(keeper.writable())
    assert shell(runs_until_stopped) == 1
    assert seen == [True, False] and shell.stopped == [True] and shell.released() == [True]


def test_a_lost_term_stops_kopf_and_stands_by_again(shell) -> None:
    terms = []

    async def leads_then_loses(stop_flag, **kwargs):
        keeper = shell.keeper()
        terms.append(keeper.term)
        if len(terms) == 1:
            keeper.notes.put_nowait(("lost", 0))       # a stale note: ignored
            keeper.notes.put_nowait(("lost", 1))
            await stop_flag.wait()
            assert keeper.told == ["standby 0"]
            keeper.notes.put_nowait(("leading", 2))    # the keeper takes the next term once told "standby 1"
            return
        return None                                    # kopf took SIGTERM in the second term
    assert shell(leads_then_loses) == 0
    assert terms == [1, 2] and shell.keeper().told == ["standby 0", "standby 1"]
