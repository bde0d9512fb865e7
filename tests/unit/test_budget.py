"""The reconcile budget (controller/budget.py, core/budget.py): measured per coroutine step, reported
on the concern's condition, backed off without a wake shortening it.

CPU time is a fake counter the test moves (the Context's `cpu`), so nothing depends on the machine.
"""

from __future__ import annotations

import asyncio
import copy

import pytest

from sunk_sandbox_operator.api.reasons import Common, ConditionType
from sunk_sandbox_operator.controller import budget, lifecycle
from sunk_sandbox_operator.core import budget as core

from tests.unit.fakes import harness_fixture, settle  # noqa: F401
from tests.unit.test_reconcile import NS, Stopped, cluster, conditions, new_binding


class CPU:
    """A CPU-seconds counter that moves only when told."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def burn(self, seconds: float) -> None:
        self.now += seconds


# ---------------------------------------------------------------- the meter


async def test_a_meter_counts_its_coroutines_own_steps_not_the_other_tasks() -> None:
    cpu = CPU()
    meter = budget.Meter(cpu)
    release = asyncio.Event()

    async def other() -> None:
        cpu.burn(100.0)                 # another task, while ours waits: not ours
        release.set()

    async def ours() -> str:
        cpu.burn(1.5)
        asyncio.ensure_future(other())
        await release.wait()
        cpu.burn(0.25)
        await asyncio.sleep(0)
        return "done"

    assert await meter.run(ours()) == "done"
    assert meter.seconds == pytest.approx(1.75)


async def test_nested_meters_and_errors_and_cancellation_pass_through(harness) -> None:
    h = harness()
    cpu = CPU()
    h.ctx.cpu = cpu
    state = h.binding()
    budget.begin(state)
    meter = budget.Meter(cpu)

    async def discovery() -> None:
        cpu.burn(2.0)
        await asyncio.sleep(0)
        raise ValueError("bad object")

    async def reconcile() -> None:
        cpu.burn(0.5)
        with pytest.raises(ValueError, match="bad object"):
            await budget.step(h.ctx, state, ConditionType.SCHEDULER_READY, discovery())
        with budget.timed(h.ctx, state, ConditionType.PLACEMENT_VERIFIED):
            cpu.burn(0.25)

    await meter.run(reconcile())
    assert meter.seconds == pytest.approx(2.75)
    assert state.cost.spent == {"SchedulerReady": 2.0, "PlacementVerified": 0.25}

    cancelled: list[bool] = []

    async def waits() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    task = asyncio.ensure_future(meter.run(waits()))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert cancelled == [True]


# ---------------------------------------------------------------- the decision


def test_within_the_budget_nothing_is_reported() -> None:
    assert core.overrun({"SchedulerReady": 1.9}, 1.99, 2.0, (), 60.0) is None
    assert core.overrun({"SchedulerReady": 50.0}, 50.0, 0.0, (), 60.0) is None   # 0: no budget


def test_an_overrun_names_the_concern_and_the_heaviest_objects_discovery_read() -> None:
    inputs = core.heaviest(
        [{"metadata": {"namespace": "t", "name": "slurm-conf"}, "data": {"slurm.conf": "a" + " " * 140_000}},
         {"metadata": {"namespace": "t", "name": "small"}, "data": {"x": "y"}}],
        [{"metadata": {"namespace": "t", "name": "sched-0"}, "spec": {"containers": [{"args": ["--x=" + "9" * 2000]}]}}])
    assert [i.name for i in inputs] == ["slurm-conf", "sched-0", "small"]
    part = core.overrun({"SchedulerReady": 35.2, "PolicySynced": 0.01}, 35.3, 2.0, inputs, 60.0)
    assert part is not None and part.condition == "SchedulerReady" and part.status == "False"
    assert part.reason == Common.OVER_BUDGET and part.section is None
    assert part.message.startswith("this binding's reconcile used 35.3 s of CPU, over the operator's budget of 2 s "
                                   "(SSB_RECONCILE_CPU_SECONDS): 35.2 s discovering the scheduler from its pods and "
                                   "ConfigMaps (the largest: ConfigMap t/slurm-conf (140.0 KB), Pod t/sched-0 (2.0 KB)")
    assert "reconciled again in 60 s and not sooner" in part.message
    scope = core.overrun({"SchedulerReady": 0.1, "ScopeSynced": 4.0}, 4.2, 2.0, inputs, 120.0)
    assert scope is not None and scope.condition == "ScopeSynced" and "syncing the scope target" in scope.message
    glue = core.overrun({"SchedulerReady": 0.1}, 9.0, 2.0, (), 60.0)
    assert glue is not None and "8.9 s in the reconcile's own steps" in glue.message


def test_weighing_is_bounded() -> None:
    wide = {"k": ["x"] * 1_000_000}
    assert core.weight(wide, limit=1000) < 1000 < core.weight(wide)


# ---------------------------------------------------------------- in the binding's loop


async def test_an_overrun_is_reported_and_backed_off_whatever_wakes_it(harness) -> None:
    """A reconcile over the budget: Ready=False OverBudget naming the scheduler's ConfigMap, a Warning
    event, the counter; an edit of the tenant's objects does not start another reconcile before the
    backoff ends; a reconcile within budget then clears it."""
    h = harness()
    cluster(h)
    cpu = CPU()
    h.ctx.cpu = cpu
    state, runner = new_binding(h)
    heavy = {"metadata": {"namespace": NS, "name": "slurm-conf"}, "data": {"slurm.conf": "KillWait=60\n" + " " * 5000}}
    h.kube.add("configmaps", heavy)
    h.kube.before("list_configmaps", lambda: cpu.burn(30.0))   # reading the scheduler's objects costs 30 s of CPU
    stopped = Stopped()
    loop = asyncio.ensure_future(lifecycle.binding_loop(h.ctx, h.kube.get("bindings", NS, "b"), stopped))
    registry = h.ctx.metrics.registry

    def reconciles() -> float:
        return registry.get_sample_value("ssb_reconciles_total", {"handler": "binding"}) or 0

    try:
        await settle()
        assert reconciles() == 1
        cond = conditions(h)
        assert cond["SchedulerReady"][:2] == ("False", "OverBudget") and cond["Ready"][:2] == ("False", "OverBudget")
        message = h.kube.get("bindings", NS, "b")["status"]["conditions"]
        assert any(f"ConfigMap {NS}/slurm-conf" in c["message"] for c in message if c["type"] == "SchedulerReady")
        assert ("Warning", "OverBudget") in [(kind, reason) for kind, reason, _ in h.events]
        assert registry.get_sample_value("ssb_reconcile_over_budget_total") == 1
        backoff = h.clock.next_deadline() - h.clock.now
        assert budget.OVERRUN_BACKOFF.delay(0, lambda: 1.0) <= backoff <= budget.OVERRUN_BACKOFF.delay(0, lambda: 0.0)
        changed = copy.deepcopy(h.kube.get("bindings", NS, "b"))
        changed["spec"]["partition"] = "other"
        changed["metadata"]["generation"] = 2
        lifecycle.binding_event(h.ctx, "MODIFIED", changed)      # the tenant edits: nothing happens yet
        await settle()
        await h.clock.advance(backoff - 1.0)
        assert reconciles() == 1
        await h.clock.advance(1.0)                               # the backoff is over: reconciled, within budget
        await settle()
        assert reconciles() == 2 and conditions(h)["SchedulerReady"][:2] == ("True", "SchedulerFound")
        assert state.cost.overruns == 0
    finally:
        stopped.set()
        await asyncio.wait_for(loop, timeout=5)


async def test_consecutive_overruns_double_the_backoff(harness) -> None:
    h = harness()
    cluster(h)
    cpu = CPU()
    h.ctx.cpu = cpu
    new_binding(h)
    h.kube.before("list_configmaps", lambda: cpu.burn(5.0), times=3)
    stopped = Stopped()
    loop = asyncio.ensure_future(lifecycle.binding_loop(h.ctx, h.kube.get("bindings", NS, "b"), stopped))
    waits = []
    try:
        for _ in range(3):
            await settle()
            waits.append(h.clock.next_deadline() - h.clock.now)
            await h.clock.advance(waits[-1])
        for n, wait in enumerate(waits):               # 1, 2, 4 min, each jittered down by at most half
            assert 60.0 * 2 ** n / 2 <= wait <= 60.0 * 2 ** n
    finally:
        stopped.set()
        await asyncio.wait_for(loop, timeout=5)
