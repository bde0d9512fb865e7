"""Pause in the shell (fake Kubernetes, fake runner): a paused binding writes only its pause, even when
the scope loops are signalled; the annotation's change wakes it; the resume reconciles everything;
one event each way; a new process finds the pause recorded and posts nothing again."""

from __future__ import annotations

import copy

from sunk_sandbox_operator.controller import lifecycle, reconcile, scope
from sunk_sandbox_operator.controller.state import Registry
from tests.unit.fakes import harness_fixture, namespace, settle  # noqa: F401
from tests.unit.test_reconcile import NS, cluster, conditions, listed, new_binding

PAUSED = "sunksandbox.dev/paused"


def annotated(h, value: str | None) -> dict:
    body = copy.deepcopy(h.kube.get("bindings", NS, "b"))
    annotations = body["metadata"].setdefault("annotations", {})
    if value is None:
        annotations.pop(PAUSED, None)
    else:
        annotations[PAUSED] = value
    h.kube.edit("bindings", NS, "b", lambda obj: obj["metadata"].update(annotations=dict(annotations)))
    return body


def writes(h, runner) -> tuple[int, ...]:
    return (runner.updates, h.kube.count("replace_configmap"), h.kube.count("merge_patch_deployment"),
            h.kube.count("create_rolebinding"), h.kube.count("delete_rolebinding"), h.kube.count("patch_binding_status"))


async def test_paused_writes_only_the_pause_and_resumes_at_once(harness) -> None:
    h = harness()
    cluster(h)
    state, runner = new_binding(h)
    await reconcile.reconcile(h.ctx, state)
    assert conditions(h)["Ready"] == ("True", "Ready") and state.active
    h.events.clear()

    state.wake.clear()
    lifecycle.binding_event(h.ctx, "MODIFIED", annotated(h, "true"))
    assert state.wake.is_set()                                  # the annotation wakes it (no spec change)
    await reconcile.reconcile(h.ctx, state, resync=False)
    got = conditions(h)
    assert got["Ready"] == ("False", "Paused") and got["PolicySynced"] == got["ScopeSynced"] == ("Unknown", "Paused")
    assert got["SchedulerReady"] == ("True", "SchedulerFound")
    assert h.kube.get("bindings", NS, "b")["status"]["paused"] is True
    assert h.reasons() == ["BindingPaused"] and not state.active
    before = writes(h, runner)

    # A new sandbox namespace signals the list loop; the policy drifts; a resync comes: nothing is written.
    h.kube.add("namespaces", namespace("ds-carol"))
    h.ctx.namespaces.load(h.kube.store["namespaces"].values())
    scope.on_namespace(h.ctx, "ds-carol", None, h.ctx.namespaces.get("ds-carol"), h.clock())
    runner.admin_write(lambda p: p["base"]["spec"].update(schedulerName="default-scheduler"))
    await settle()
    await h.clock.advance(600.0)
    await reconcile.reconcile(h.ctx, state)
    await settle()
    assert writes(h, runner) == (before[0], *before[1:])
    assert "ds-carol" not in listed(h) and h.reasons() == ["BindingPaused"]
    lifecycle.binding_event(h.ctx, "MODIFIED", h.kube.get("bindings", NS, "b"))
    state.wake.clear()
    lifecycle.binding_event(h.ctx, "MODIFIED", h.kube.get("bindings", NS, "b"))
    assert not state.wake.is_set()                              # still paused, already handled: no wake

    lifecycle.binding_event(h.ctx, "MODIFIED", annotated(h, None))
    assert state.wake.is_set()
    await reconcile.reconcile(h.ctx, state, resync=False)
    assert conditions(h)["Ready"] == ("True", "Ready") and "paused" not in h.kube.get("bindings", NS, "b")["status"]
    assert "ds-carol" in listed(h) and runner.policy["base"]["spec"]["schedulerName"] == "slurm-scheduler"
    assert h.reasons()[:2] == ["BindingPaused", "BindingResumed"] and h.reasons().count("BindingResumed") == 1
    assert "Paused" not in h.reasons()                          # no condition event into or out of the pause


async def test_a_restarted_operator_keeps_the_pause_without_a_second_event(harness) -> None:
    h = harness()
    cluster(h)
    state, runner = new_binding(h)
    await reconcile.reconcile(h.ctx, state)
    lifecycle.binding_event(h.ctx, "MODIFIED", annotated(h, "true"))
    await reconcile.reconcile(h.ctx, state)
    h.events.clear()
    # A new process (a new leader): its registry starts empty; the stored status records the pause.
    h.ctx.bindings = Registry()
    fresh = h.ctx.bindings.ensure(h.kube.get("bindings", NS, "b"))
    before = writes(h, runner)
    await reconcile.reconcile(h.ctx, fresh)
    assert writes(h, runner) == before and h.events == []
    assert conditions(h)["Ready"] == ("False", "Paused")


async def test_deletion_restores_while_paused(harness) -> None:
    h = harness()
    cluster(h)
    state, runner = new_binding(h, policy={"base": {"metadata": {"labels": {"team": "x"}}}})
    await reconcile.reconcile(h.ctx, state)
    lifecycle.binding_event(h.ctx, "MODIFIED", annotated(h, "true"))
    await reconcile.reconcile(h.ctx, state)
    await reconcile.finalize(h.ctx, state)
    assert runner.policy == {"base": {"metadata": {"labels": {"team": "x"}}}}
    assert listed(h) == ["ds-alice", NS]
