"""The reconcile pipeline and the binding's lifecycle over the fake Kube and a fake runner: discover → conflict
check → policy → scope → placement → one status write; deletion with Restore; the per-binding loop."""

from __future__ import annotations

import asyncio
import copy
import json
from pathlib import Path

import pytest

from sunk_sandbox_operator.adapters.runnerapi import errors as rerr
from sunk_sandbox_operator.controller import lifecycle, reconcile
from sunk_sandbox_operator.controller.retry import FAILURE_BACKOFF
from sunk_sandbox_operator.core.scope.doc import read_list

from tests.unit.fakes import FakeRunner, binding_body, harness_fixture, install_runner, namespace, settle  # noqa: F401

FIXTURES = Path(__file__).parent / "fixtures" / "scheduler"
NS = "tenant-slurm"
CM = "slurm-scheduler-config"


def cluster(h) -> None:
    """A SUNK 8 scheduler in tenant-slurm (pod, scheduler.conf ConfigMap, Deployment) and a few namespaces."""
    for n in (NS, "ds-alice", "ds-bob", "other"):
        h.kube.add("namespaces", namespace(n))
    h.ctx.namespaces.load(h.kube.store["namespaces"].values())
    for kind, name in (("pods", "sunk8_pod"), ("configmaps", "sunk8_configmap"), ("deployments", "sunk7_deployment")):
        h.kube.add(kind, json.loads((FIXTURES / f"{name}.json").read_text()))


def new_binding(h, name: str = "b", *, uid: str = "u1", created: str = "2026-01-01T00:00:00Z", policy: dict | None = None,
                **spec):
    spec = {"partition": "sandboxes", "scheduler": {"killWaitSeconds": 60}, **spec}
    state = h.binding(binding_body(name, NS, uid=uid, created=created, **spec), active=False)
    runner = FakeRunner(policy if policy is not None else {})
    install_runner(state, runner)
    return state, runner


def conditions(h, name: str = "b") -> dict[str, tuple[str, str]]:
    status = h.kube.get("bindings", NS, name)["status"]
    return {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}


def listed(h) -> list[str]:
    return read_list(h.kube.get("configmaps", NS, CM)["data"]["scheduler.conf"], "scheduler.scope.namespaces").values


async def test_a_reconcile_writes_policy_and_scope_and_reports_once(harness) -> None:
    h = harness()
    cluster(h)
    state, runner = new_binding(h)
    await reconcile.reconcile(h.ctx, state)
    assert conditions(h) == {
        "Ready": ("True", "Ready"), "SchedulerReady": ("True", "SchedulerFound"), "PolicySynced": ("True", "Synced"),
        "ScopeSynced": ("True", "Synced"), "GracePeriodSafe": ("True", "GracePeriodWithinKillWait"),
        "SlurmReady": ("True", "NotConfigured"), "PlacementVerified": ("Unknown", "NoSandboxPods")}
    assert runner.policy["base"]["spec"]["schedulerName"] == "slurm-scheduler"
    assert listed(h) == ["ds-alice", "ds-bob", NS]
    assert h.kube.count("patch_binding_status") == 1 and state.reconciled_generation == 1 and state.active
    assert {"PolicyUpdated", "ScopeUpdated", "SchedulerRestarted"} <= set(h.reasons())
    status = h.kube.get("bindings", NS, "b")["status"]
    assert status["scheduler"]["name"] == "slurm-scheduler" and status["observedGeneration"] == 1

    # A resync with nothing changed writes nothing anywhere (check times are not worth a status patch).
    h.events.clear()
    await h.clock.advance(300.0)
    await reconcile.reconcile(h.ctx, state)
    assert runner.updates == 1 and h.kube.count("replace_configmap") == 1 and h.kube.count("merge_patch_deployment") == 1
    assert h.kube.count("patch_binding_status") == 1 and h.events == []


async def test_no_placement_verdict_is_given_on_part_of_the_pods_while_they_are_listed(harness) -> None:
    """Pod events arrive during the pods' initial LIST (each asks for a status flush): no flush judges
    placement before the LIST is in, and the first reconcile waits for it."""
    from sunk_sandbox_operator.controller import placement, watch
    from tests.unit.test_scope_controller import _pod

    class Listing:  # an informer whose initial LIST has not ended
        ready = asyncio.Event()

    h = harness()
    cluster(h)
    state, runner = new_binding(h)
    h.ctx.pod_informer = Listing()  # type: ignore[assignment]
    h.ctx.informers = [h.ctx.pod_informer]  # type: ignore[list-item]
    task = asyncio.ensure_future(reconcile.reconcile(h.ctx, state))
    await settle()
    assert not task.done() and runner.updates == 0                              # the first reconcile waits
    watch.on_pod(h.ctx, "ADDED", _pod("ds-alice"))                              # the LIST goes on
    placement.report(h.ctx, state)
    assert state.parts["PlacementVerified"].reason == "NotReconciled"           # no verdict on part of the pods
    Listing.ready.set()
    await task
    assert conditions(h)["PlacementVerified"][1] != "NotReconciled" and h.ctx.pods_listed() and runner.updates == 1


async def test_a_scheduler_namespace_without_the_targets_rolebinding_says_which_one_to_add(harness) -> None:
    """RBAC on ConfigMaps and Deployments is per namespace (manifests/rbac-targets.yaml): where it is missing,
    SchedulerReady and ScopeSynced are Forbidden, name the RoleBinding to add, and nothing is written."""
    h = harness()
    cluster(h)
    h.kube.deny("list_configmaps", NS)
    state, runner = new_binding(h)
    await reconcile.reconcile(h.ctx, state)
    assert conditions(h)["SchedulerReady"] == ("False", "Forbidden")
    assert conditions(h)["ScopeSynced"] == ("False", "Forbidden")
    status = h.kube.get("bindings", NS, "b")["status"]
    fix = f"a RoleBinding in {NS} to the ClusterRole sunk-sandbox-operator-targets for the operator's ServiceAccount"
    for c in status["conditions"]:
        if c["type"] in ("SchedulerReady", "ScopeSynced"):
            assert f"may not list ConfigMaps in {NS}" in c["message"] and fix in c["message"], c
    assert runner.updates == 0 and h.kube.count("replace_configmap") == 0 and h.kube.count("merge_patch_deployment") == 0


async def test_the_younger_of_two_bindings_on_one_runner_writes_nothing(harness) -> None:
    h = harness()
    cluster(h)
    older, _ = new_binding(h, "a", uid="u0", created="2025-01-01T00:00:00Z")
    younger, runner = new_binding(h, "b", uid="u1", created="2026-01-01T00:00:00Z")
    await reconcile.reconcile(h.ctx, younger)
    got = conditions(h, "b")
    assert got["PolicySynced"] == ("False", "RunnerConflict") and got["ScopeSynced"] == ("False", "RunnerConflict")
    assert runner.gets == 0 and h.kube.count("replace_configmap") == 0 and not younger.active
    assert older.name == "a"


async def test_an_invalid_spec_is_reported_on_every_condition(harness) -> None:
    h = harness()
    body = binding_body("b", NS)
    body["spec"]["runner"] = {"id": ""}                   # the CRD would refuse it; an older CRD might not
    state = h.binding(body, active=False)
    assert state.spec is None and state.spec_error
    await reconcile.reconcile(h.ctx, state)
    got = conditions(h)
    assert {v for k, v in got.items() if k != "Ready"} == {("False", "InvalidSpec")}
    assert got["Ready"] == ("False", "InvalidSpec")


async def test_transient_policy_failures_resync_sooner_with_backoff(harness) -> None:
    h = harness()
    cluster(h)
    state, runner = new_binding(h, resyncInterval="10m")
    assert reconcile.resync_seconds(state, 30.0) == 600.0
    runner.error = rerr.Unavailable("down")
    await reconcile.reconcile(h.ctx, state)
    assert state.failures == 1 and conditions(h)["PolicySynced"] == ("False", "APIUnavailable")
    first = reconcile.resync_seconds(state, 30.0)
    assert FAILURE_BACKOFF.base * (1 - FAILURE_BACKOFF.jitter) + 1 <= first <= FAILURE_BACKOFF.base + 1
    for _ in range(20):
        await reconcile.reconcile(h.ctx, state)
    assert reconcile.resync_seconds(state, 30.0) <= 600.0 and state.failures == 21
    runner.error = None
    await reconcile.reconcile(h.ctx, state)
    assert state.failures == 0 and reconcile.resync_seconds(state, 30.0) == 600.0


async def test_permanent_policy_failures_wait_for_the_resync(harness) -> None:
    h = harness()
    cluster(h)
    state, runner = new_binding(h)
    runner.error = rerr.PermissionDenied("no role")
    await reconcile.reconcile(h.ctx, state)
    assert state.failures == 0 and reconcile.resync_seconds(state, 30.0) == 300.0


# ---------------------------------------------------------------- deletion


async def test_finalize_with_restore_puts_back_policy_and_scope(harness) -> None:
    h = harness()
    cluster(h)
    state, runner = new_binding(h, policy={"base": {"metadata": {"labels": {"team": "x"}}}})
    await reconcile.reconcile(h.ctx, state)
    await reconcile.finalize(h.ctx, state)
    assert runner.policy == {"base": {"metadata": {"labels": {"team": "x"}}}}
    assert listed(h) == ["ds-alice", NS]                  # ds-alice was there before us; ds-bob was ours
    assert {"PolicyRestored", "ScopeRestored"} <= set(h.reasons()) and runner.closed


@pytest.mark.parametrize("spec", [{"deletionPolicy": "Orphan"}, {"mode": "Observe"}])
async def test_finalize_leaves_everything_for_orphan_and_observe(harness, spec) -> None:
    h = harness()
    cluster(h)
    state, runner = new_binding(h, **spec)
    await reconcile.reconcile(h.ctx, state)
    writes_before = (runner.updates, h.kube.count("replace_configmap"))
    await reconcile.finalize(h.ctx, state)
    assert (runner.updates, h.kube.count("replace_configmap")) == writes_before and runner.closed


async def test_binding_deleted_retries_a_failed_restore_then_gives_up_with_an_event(harness) -> None:
    h = harness(restore_retries=3, restore_retry_delay_seconds=7.0)
    cluster(h)
    state, runner = new_binding(h)
    await reconcile.reconcile(h.ctx, state)
    body = h.kube.get("bindings", NS, "b")
    runner.error = rerr.Unavailable("down")
    assert await lifecycle.binding_deleted(h.ctx, body, 0) == 7.0
    assert await lifecycle.binding_deleted(h.ctx, body, 1) == 7.0
    assert h.ctx.bindings.get((NS, "b")) is state          # still known while retrying
    assert await lifecycle.binding_deleted(h.ctx, body, 2) is None
    assert h.reasons()[-1] == "RestoreAbandoned" and "after 3 attempts" in h.events[-1][2]
    assert h.ctx.bindings.get((NS, "b")) is None and state.deleted
    registry = h.ctx.metrics.registry
    assert registry.get_sample_value("ssb_reconcile_errors_total", {"handler": "delete"}) == 3


async def test_binding_deleted_after_a_clean_restore_forgets_the_binding(harness) -> None:
    h = harness()
    cluster(h)
    state, runner = new_binding(h)
    await reconcile.reconcile(h.ctx, state)
    assert await lifecycle.binding_deleted(h.ctx, h.kube.get("bindings", NS, "b"), 0) is None
    assert h.ctx.bindings.get((NS, "b")) is None and all(loop.runs.cancelled for loop in state.scope.loops)


# ---------------------------------------------------------------- the per-binding loop


class Stopped:
    """What kopf hands a daemon: falsy until stopped, and awaitable."""

    def __init__(self) -> None:
        self._event = asyncio.Event()

    def __bool__(self) -> bool:
        return self._event.is_set()

    def set(self) -> None:
        self._event.set()

    async def wait(self) -> None:
        await self._event.wait()


async def test_the_loop_reconciles_at_once_then_on_a_spec_change_not_on_its_own_status_writes(harness) -> None:
    h = harness()
    cluster(h)
    state, runner = new_binding(h)
    body = h.kube.get("bindings", NS, "b")
    stopped = Stopped()
    loop = asyncio.ensure_future(lifecycle.binding_loop(h.ctx, body, stopped))
    registry = h.ctx.metrics.registry

    def reconciles() -> float:
        return registry.get_sample_value("ssb_reconciles_total", {"handler": "binding"}) or 0

    try:
        await settle()
        assert reconciles() == 1 and runner.updates == 1
        lifecycle.binding_event(h.ctx, "MODIFIED", h.kube.get("bindings", NS, "b"))  # our own status patch
        await settle()
        assert reconciles() == 1
        changed = copy.deepcopy(h.kube.get("bindings", NS, "b"))
        changed["spec"]["partition"] = "other"
        changed["metadata"]["generation"] = 2
        lifecycle.binding_event(h.ctx, "MODIFIED", changed)
        await settle()
        assert reconciles() == 2 and runner.policy["base"]["metadata"]["annotations"]["sunk.coreweave.com/partition"] \
            == "other"
        deleting = copy.deepcopy(changed)
        deleting["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        lifecycle.binding_event(h.ctx, "MODIFIED", deleting)   # a deletion wakes it too
        await settle()
        assert reconciles() == 3
        lifecycle.binding_event(h.ctx, "DELETED", deleting)
        await settle()
        assert reconciles() == 3
    finally:
        stopped.set()
        await asyncio.wait_for(loop, timeout=5)
    assert loop.done() and loop.exception() is None


async def test_a_reconcile_that_raises_is_counted_and_the_loop_goes_on(harness) -> None:
    h = harness()
    cluster(h)
    state, runner = new_binding(h)
    h.kube.before("list_pods", lambda: (_ for _ in ()).throw(RuntimeError("apiserver hiccup")))
    stopped = Stopped()
    loop = asyncio.ensure_future(lifecycle.binding_loop(h.ctx, h.kube.get("bindings", NS, "b"), stopped))
    try:
        await settle()
        registry = h.ctx.metrics.registry
        assert registry.get_sample_value("ssb_reconcile_errors_total", {"handler": "binding"}) == 1
        state.wake.set()
        await settle()
        assert registry.get_sample_value("ssb_reconciles_total", {"handler": "binding"}) == 2 and runner.updates == 1
    finally:
        stopped.set()
        await asyncio.wait_for(loop, timeout=5)


async def test_a_reconcile_request_wakes_the_loop_reads_everything_and_is_recorded(harness) -> None:
    """sunksandbox.dev/reconcile-requested-at (External Secrets' force-sync): a new value wakes the
    binding, its reconcile reads the runner again like a resync, and status says which it handled."""
    h = harness()
    cluster(h)
    state, runner = new_binding(h)
    await reconcile.reconcile(h.ctx, state)
    reads = runner.gets
    body = copy.deepcopy(h.kube.get("bindings", NS, "b"))
    body["metadata"].setdefault("annotations", {})["sunksandbox.dev/reconcile-requested-at"] = "2026-12-01T10:00:00Z"
    state.wake.clear()
    lifecycle.binding_event(h.ctx, "MODIFIED", body)
    assert state.wake.is_set()                                 # no spec change, yet woken
    await reconcile.reconcile(h.ctx, state, resync=False)      # woken: would skip the runner read...
    assert h.kube.get("bindings", NS, "b")["status"]["lastHandledReconcileAt"] == "2026-12-01T10:00:00Z"
    state.wake.clear()
    lifecycle.binding_event(h.ctx, "MODIFIED", h.kube.get("bindings", NS, "b") | {"metadata": body["metadata"]})
    assert not state.wake.is_set()                             # handled: the same value wakes nothing
    assert runner.gets >= reads


async def test_a_first_discovery_that_fails_leaves_the_scope_unknown_not_an_error(harness) -> None:
    """The type checker found it: the scope sync read state.discovery.forbidden with no discovery yet."""
    h = harness()
    cluster(h)
    state, _ = new_binding(h)
    h.kube.before("list_pods", lambda: (_ for _ in ()).throw(OSError("connection reset")))
    await reconcile.reconcile(h.ctx, state)
    assert state.discovery is None
    got = conditions(h)
    assert got["SchedulerReady"] == ("Unknown", "APIError") and got["ScopeSynced"] == ("Unknown", "APIError")
