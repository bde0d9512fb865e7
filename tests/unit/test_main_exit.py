"""The process's exit code (controller.main.run): a kopf failure is a crash, not a clean exit.

The shell around kopf is replaced by fakes (no API server): the caches, the webhook and the Lease
are not what is under test here, only what `run` returns when kopf ends.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import kopf
import pytest

from sunk_sandbox_operator.adapters.metrics import Metrics
from sunk_sandbox_operator.controller import main
from sunk_sandbox_operator.controller.config import load


class FakeElector:
    """Tells `on_change` as the real one does: acquired, then released."""

    released: list[bool] = []

    def __init__(self, *args, on_change=None, **kwargs) -> None:
        self.on_change = on_change or (lambda leading: None)

    async def acquire(self) -> bool:
        self.on_change(True)
        return True

    async def hold(self, close_gate) -> None:
        await asyncio.Event().wait()  # holds the Lease until cancelled

    async def release(self) -> None:
        self.released.append(True)
        self.on_change(False)


@pytest.fixture
def shell(monkeypatch):
    """`run` with fake caches, webhook and Lease; `kopf` is what the test's kopf.operator does."""
    stopped: list[bool] = []
    metrics = Metrics()

    async def start(logger, config):
        return SimpleNamespace(kube=SimpleNamespace(), informers=[], reset_bindings=lambda: None, metrics=metrics)

    async def nothing(*args, **kwargs):
        return None

    async def stop(ctx):
        stopped.append(True)

    monkeypatch.setattr(main.lifecycle, "start", start)
    monkeypatch.setattr(main.lifecycle, "stop", stop)
    monkeypatch.setattr(main.admission, "serve", nothing)
    monkeypatch.setattr(main.reconcile, "shutdown", nothing)
    monkeypatch.setattr(main, "LeaderElector", FakeElector)
    monkeypatch.setattr(FakeElector, "released", [])

    def with_kopf(operator) -> int:
        monkeypatch.setattr(kopf, "operator", operator)
        return asyncio.run(main.run(None, load()))
    with_kopf.stopped = stopped  # type: ignore[attr-defined]
    with_kopf.released = lambda: FakeElector.released  # type: ignore[attr-defined]
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
