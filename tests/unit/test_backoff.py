"""The one backoff (core/backoff.py): its formula, and every retry of the operator sleeps what it says.

Each caller is driven with an injected draw and its sleeps compared with the `Backoff.delay` of the
backoff it names: lost races (retry.optimistic), the runner API client (a Retry-After wins), the
informers' relist and rewatch, the Slurm poller, the reconcile after a transient failure. The last
test fails when a private exponential formula appears anywhere else in the package.
"""

from __future__ import annotations

import ast
import asyncio
import random
from pathlib import Path

import pytest

from sunk_sandbox_operator.adapters import informer as informer_mod
from sunk_sandbox_operator.adapters.kubehttp import ApiStatus
from sunk_sandbox_operator.adapters.runnerapi import client as client_mod
from sunk_sandbox_operator.adapters.runnerapi.emulator import EmulatorState, running_emulator
from sunk_sandbox_operator.controller import reconcile, retry
from sunk_sandbox_operator.controller.slurm import PollerKey
from sunk_sandbox_operator.controller.slurm_poll import Poller, Pollers
from sunk_sandbox_operator.core.backoff import Backoff, hinted

from tests.unit.fakes import Harness

PACKAGE = Path(__file__).resolve().parents[2] / "operator" / "sunk_sandbox_operator"


def test_the_delay_doubles_to_the_cap_and_the_draw_takes_up_to_the_jitter_off() -> None:
    b = Backoff(base=1.0, cap=8.0, jitter=0.5)
    assert [b.delay(n, lambda: 0.0) for n in range(6)] == [1.0, 2.0, 4.0, 8.0, 8.0, 8.0]
    assert [b.delay(n, lambda: 0.5) for n in range(5)] == [0.75, 1.5, 3.0, 6.0, 6.0]
    assert b.delay(10**9, lambda: 0.0) == 8.0 and b.delay(-3, lambda: 0.0) == 1.0  # no overflow, no fraction
    full = Backoff(base=1.0, cap=8.0, jitter=1.0)
    assert full.delay(3, lambda: 0.0) == 8.0 and full.delay(3, lambda: 0.75) == 2.0  # anywhere up to the ceiling


def test_a_hint_wins_within_its_bound_and_without_one_the_backoff_decides() -> None:
    b = Backoff(base=0.2, cap=5.0, jitter=1.0)
    assert hinted(b, 0, lambda: 0.0, 3.0, 60.0) == 3.0       # longer than the ceiling
    assert hinted(b, 5, lambda: 0.0, 0.1, 60.0) == 0.1       # shorter too
    assert hinted(b, 0, lambda: 0.0, 1e9, 60.0) == 60.0 and hinted(b, 0, lambda: 0.0, -1.0, 60.0) == 0.0
    assert hinted(b, 2, lambda: 0.5, None, 60.0) == b.delay(2, lambda: 0.5) == 0.4


def test_the_shell_backoff_is_the_core_one_with_the_process_draw() -> None:
    assert issubclass(retry.Backoff, Backoff)
    b = retry.Backoff(base=1.0, cap=8.0, jitter=0.5)
    assert b.delay(2, rand=lambda: 0.5) == Backoff(1.0, 8.0, 0.5).delay(2, lambda: 0.5) == 3.0
    assert all(2.0 <= b.delay(2) <= 4.0 for _ in range(50))  # random.random by default


async def test_lost_races_sleep_the_backoff_given() -> None:
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    async def attempt(n: int) -> int:
        if n < 3:
            raise RuntimeError("lost")
        return n

    b = Backoff(base=1.0, cap=3.0, jitter=0.5)
    assert await retry.optimistic(attempt, lost_race=lambda e: True, retries=5, backoff=b, sleep=sleep,
                                  rand=lambda: 0.5) == 3
    assert slept == [b.delay(n, lambda: 0.5) for n in range(3)] == [0.75, 1.5, 2.25]


async def test_the_runner_client_sleeps_the_backoff_with_full_jitter_and_a_retry_after_wins() -> None:
    state = EmulatorState(admin_tokens={"t"}, seed=7)
    state.add_runner("r", {})
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    fast = client_mod.RateLimiter(rate=10_000, burst=10_000)
    with running_emulator(state) as emu:
        emu.state.set_knobs({"fail_next": ["unavailable", "resource_exhausted", "unavailable"]})
        async with client_mod.RunnerClient(emu.url, "t", sleep=sleep, limiter=fast, backoff_base=0.1,
                                           backoff_max=0.3, rng=random.Random(3)) as c:
            await c.get_managed_runner("r")
        twin = random.Random(3)
        assert slept == [Backoff(0.1, 0.3, jitter=1.0).delay(n, twin.random) for n in range(3)]
        slept.clear()
        emu.state.set_knobs({"fail_next": ["unavailable"], "retry_after_seconds": 0.05})
        async with client_mod.RunnerClient(emu.url, "t", sleep=sleep, limiter=fast, backoff_base=10.0,
                                           backoff_max=10.0, rng=random.Random(3)) as c:
            await c.get_managed_runner("r")
        assert slept == [0.05]  # the server's Retry-After, not our ceiling of 10 s


async def test_an_informer_sleeps_its_backoff_after_failures_in_a_row() -> None:
    class Failing:
        """An API server that answers every LIST with a 500; the informer stops after its 4th sleep."""

        def __init__(self) -> None:
            self.slept: list[float] = []

        async def get(self, *args, **kwargs) -> dict:
            raise ApiStatus(500, "etcd")

        async def sleep(self, seconds: float) -> None:
            self.slept.append(seconds)
            if len(self.slept) == 4:
                raise asyncio.CancelledError  # the informer's task stopped: run() ends here

    http = Failing()
    b = Backoff(base=1.0, cap=4.0, jitter=0.5)
    inf = informer_mod.Informer(http, informer_mod.Resource("/api/v1/pods"), lambda kind, obj: None, list,  # type: ignore[arg-type]
                                sleep=http.sleep, backoff=b, rand=lambda: 0.5)
    with pytest.raises(asyncio.CancelledError):
        await inf.run()
    assert http.slept == [b.delay(n, lambda: 0.5) for n in range(4)] == [0.75, 1.5, 3.0, 3.0]
    assert isinstance(informer_mod.RETRY_BACKOFF, Backoff)
    assert informer_mod.Informer(http, informer_mod.Resource("/x"), lambda kind, obj: None,  # type: ignore[arg-type]
                                 list).backoff is informer_mod.RETRY_BACKOFF


def test_the_slurm_poller_backs_off_from_its_poll_interval() -> None:
    h = Harness()
    poller = Poller(Pollers(h.ctx, rand=lambda: 0.5), PollerKey("https://slurm.example", "k8sop", None),
                    client=None)  # type: ignore[arg-type]  # not called here
    assert isinstance(poller.backoff, Backoff) and poller.backoff.base == h.ctx.config.slurm_poll_seconds
    assert poller.backoff.delay(1, poller.owner.rand) == poller.backoff.ceiling(1) * 0.75


def test_a_reconcile_after_a_transient_failure_comes_back_on_the_failure_backoff() -> None:
    h = Harness()
    state = h.binding()
    assert isinstance(retry.FAILURE_BACKOFF, Backoff)
    for failures in (1, 2, 5):
        state.failures = failures
        ceiling = retry.FAILURE_BACKOFF.ceiling(failures - 1)
        assert ceiling * 0.5 + 1.0 <= reconcile.resync_seconds(state, 30.0) <= ceiling + 1.0


# A power with a constant base grows a delay exponentially: that is core/backoff.py's job alone.
# Elsewhere only these, each for a reason that is not a delay.
POWERS_ALLOWED = {
    "core/backoff.py": "the one backoff",
    "core/pods.py": "every subset of the hazards (2 ** len(HAZARDS) bit masks), once at import",
    "core/units.py": "a binary suffix's multiplier (Ki: 1 << 10)",
}


def _exponential_powers(path: Path) -> list[int]:
    lines = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Pow, ast.LShift)):
            base, exponent = (node.left, node.right)
            if isinstance(base, ast.Constant) and not isinstance(exponent, ast.Constant):
                lines.append(node.lineno)
        if isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None)) in ("pow", "ldexp"):
            lines.append(node.lineno)
    return lines


def test_no_retry_computes_its_own_exponential_delay() -> None:
    found = {str(p.relative_to(PACKAGE)): lines for p in sorted(PACKAGE.rglob("*.py"))
             if (lines := _exponential_powers(p))}
    private = {path: lines for path, lines in found.items() if path not in POWERS_ALLOWED}
    assert not private, f"a private backoff formula: use core/backoff.py's Backoff instead: {private}"
    assert set(POWERS_ALLOWED) <= set(found), "an allowed power is gone: drop it from POWERS_ALLOWED"
