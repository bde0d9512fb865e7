"""A burst of namespace events: each write starts from the object the previous write returned while
the target's watch has seen nobody else write it (no GET per write), a resync always reads, and
another writer's change is never lost: seen by the watch, the next sync reads; not seen yet, the
stale copy costs one Conflict and the retry reads."""

from __future__ import annotations

import asyncio

from sunk_sandbox_operator.adapters import kube as k
from sunk_sandbox_operator.adapters import targets
from sunk_sandbox_operator.controller import depends, scope, watch
from sunk_sandbox_operator.controller.depends import Watched
from sunk_sandbox_operator.core.scope.ledger import Ledger
from sunk_sandbox_operator.core.scope.template import scope_hash

from tests.unit.fakes import FakeKube, binding_body, harness_fixture, namespace  # noqa: F401 (fixture)
from tests.unit.test_react import cm_event
from tests.unit.test_scope_controller import SignalLog, listed, scope_hash_of, world

CONF = "scheduler:\n  scope:\n    type: namespace\n    namespaces:\n    - slurm\n"


def watching(h) -> None:
    """The binding's dependency watches running (an idle task stands in for each informer), listed."""
    h.ctx.http = object()  # an API connection (never used: `start` replaces the informers' run)
    h.ctx.depends = depends.Dependencies(h.ctx, start=lambda informer: asyncio.ensure_future(asyncio.sleep(3600)))
    h.ctx.depends.refresh()
    for w in h.ctx.depends.watches:
        h.ctx.depends._running[w][0].ready.set()


def rv(h) -> str:
    return h.kube.get("configmaps", "slurm", "cm")["metadata"]["resourceVersion"]


def echo(h) -> None:
    """The watch delivers the ConfigMap as it now is."""
    cm_event(h, rv(h))


async def synced(h):
    """One binding over CONF, its watches running, its first sync done and that write's echo seen."""
    state = world(h, CONF)
    watching(h)
    await scope.sync(h.ctx, state)                         # the first reconcile's sync reads
    echo(h)
    return state


async def burst_of(h, *names: str) -> None:
    for name in names:
        watch.on_namespace(h.ctx, "ADDED", namespace(name))
    await h.run_until_idle()


async def test_a_burst_writes_from_what_each_write_returned_and_a_resync_reads(harness) -> None:
    h = harness()
    state = await synced(h)
    assert (h.kube.count("get_configmap"), h.kube.count("replace_configmap")) == (1, 1)
    await burst_of(h, "ds-1")
    await burst_of(h, "ds-2")                              # the echo of the write for ds-1 is still on the way
    echo(h)
    await burst_of(h, "ds-3")
    assert (h.kube.count("get_configmap"), h.kube.count("replace_configmap")) == (1, 4)
    assert listed(h) == ["ds-1", "ds-2", "ds-3", "ds-known", "slurm"]
    await scope.sync(h.ctx, state)                         # a resync is level-triggered: it reads
    assert (h.kube.count("get_configmap"), h.kube.count("replace_configmap")) == (2, 4)


async def test_another_writer_the_watch_saw_makes_the_next_sync_read(harness) -> None:
    h = harness()
    await synced(h)
    h.kube.edit("configmaps", "slurm", "cm", lambda cm: cm["data"].update(
        {"scheduler.conf": cm["data"]["scheduler.conf"] + "  logLevel: debug\n"}))
    echo(h)                                                # an admin's edit, seen by the watch
    await burst_of(h, "ds-1")
    assert (h.kube.count("get_configmap"), h.kube.count("replace_configmap")) == (2, 2)
    assert "logLevel: debug" in h.kube.get("configmaps", "slurm", "cm")["data"]["scheduler.conf"]
    assert "ds-1" in listed(h)


async def test_another_writer_not_seen_yet_costs_one_conflict_and_is_kept(harness) -> None:
    h = harness()
    state = await synced(h)

    def admin(cm):  # an admin adds a namespace of theirs; its watch event has not arrived
        cm["data"]["scheduler.conf"] = cm["data"]["scheduler.conf"].replace("- slurm", "- admin-ns\n    - slurm")
    h.kube.edit("configmaps", "slurm", "cm", admin)
    await burst_of(h, "ds-1")
    # From the stale copy: 409, then the retry reads and merges.
    assert (h.kube.count("get_configmap"), h.kube.count("replace_configmap")) == (2, 3)
    assert listed(h) == ["admin-ns", "ds-1", "ds-known", "slurm"]
    assert scope.memory(h.ctx, state).list_loop.latest.added == ("ds-1", "ds-known")  # the admin's name is not ours


async def test_without_a_watch_of_the_target_every_wake_reads(harness) -> None:
    h = harness()  # no API connection: no dependency watches
    state = world(h, CONF)
    await scope.sync(h.ctx, state)                         # one read: the resync's grants and roll take its list's
    assert h.kube.count("get_configmap") == 1
    await burst_of(h, "ds-1")
    await burst_of(h, "ds-2")
    # Each namespace: the list loop reads and writes, then the grants and roll loops read what it wrote.
    assert (h.kube.count("get_configmap"), h.kube.count("replace_configmap")) == (7, 3)


async def test_unchanged_since_trusts_only_our_own_writes_up_to_the_one_asked_about(harness) -> None:
    h = harness()
    h.binding(binding_body())
    obj = ("ConfigMap", "slurm", "cm")
    assert not h.ctx.depends.unchanged_since(obj, "10")    # no watch at all
    watching(h)
    for v in ("10", "11"):
        h.ctx.depends.wrote(*obj, v)
    cm_event(h, "10")
    assert h.ctx.depends.unchanged_since(obj, "11")        # the echo of 11 is on the way
    assert h.ctx.depends.unchanged_since(obj, "10")
    cm_event(h, "11")
    assert not h.ctx.depends.unchanged_since(obj, "10")    # 11 came after 10 (another binding, say)
    assert not h.ctx.depends.unchanged_since(obj, "12")    # not a write of ours
    cm_event(h, "13")                                      # someone else
    assert not h.ctx.depends.unchanged_since(obj, "11")
    assert not h.ctx.depends.unchanged_since(obj, None)
    cm_event(h, "11", name="other")                        # another object's events say nothing of this one
    assert not h.ctx.depends.unchanged_since(obj, "11")
    h.ctx.depends._running[Watched("ConfigMap", "slurm")][0].ready.clear()
    assert not h.ctx.depends.unchanged_since(obj, "13")


async def test_a_failed_write_leaves_nothing_to_reuse() -> None:
    kube = FakeKube()
    kube.add("configmaps", {"metadata": {"namespace": "slurm", "name": "cm"}, "data": {"scheduler.conf": CONF}})
    memo = targets.ParseMemo()
    target = targets.ConfigMapTarget(kube, "slurm", "cm", "scheduler.conf", "scheduler.scope.namespaces", memo)
    read = await target.read()
    written = await target.write(read, ["a", "slurm"], Ledger())
    assert target.last_write() == written
    again = await target.read(reuse=True)
    assert kube.count("get_configmap") == 1 and again.list.values == ["a", "slurm"]
    assert again.obj["metadata"]["resourceVersion"] == written and memo.span is not None
    kube.edit("configmaps", "slurm", "cm", lambda cm: None)
    try:
        await target.write(again, ["a", "b", "slurm"], Ledger())
        raise AssertionError("a stale precondition must conflict")
    except k.Conflict:
        pass
    assert target.last_write() is None
    fresh = await target.read(reuse=True)                  # nothing to reuse: it reads
    assert kube.count("get_configmap") == 2 and fresh.obj["metadata"]["resourceVersion"] == rv_of(kube)


def rv_of(kube: FakeKube) -> str:
    return kube.get("configmaps", "slurm", "cm")["metadata"]["resourceVersion"]


def test_a_reparsed_equal_spec_keeps_its_matcher(harness) -> None:
    h = harness()
    state = h.binding(binding_body())
    first = state.matcher
    h.ctx.bindings.ensure({**h.kube.get("bindings", "slurm", "b")}).admit()  # a reconcile admits it again
    assert state.matcher is first                          # the next sync need not rescan every namespace
    changed = h.kube.get("bindings", "slurm", "b")
    changed["spec"]["sandboxNamespaces"] = {"names": ["other-*"]}
    changed["metadata"]["generation"] = 2
    h.ctx.bindings.ensure(changed)
    assert state.matcher is first                          # not admitted yet: signals use the admitted spec
    state.admit()
    assert state.matcher is not first and state.matcher("other-1", {})


async def test_a_stuck_pod_in_a_listed_namespace_rereads_only_if_the_watch_saw_another_writer(harness) -> None:
    """Pods churning in listed namespaces cost no sync while the target's watch has delivered nothing
    but our write: another writer's change there wakes the binding by itself. Once the watch saw one
    (or when there is no watch), the pod re-check syncs, as before."""
    h = harness()
    state = await synced(h)
    assert "ds-known" in (state.scope.list_loop.latest.known or ())
    log = SignalLog()                                      # what the pod signals ask for
    state.scope.list_loop.runs = log  # type: ignore[assignment]
    pod = {"metadata": {"name": "p", "namespace": "ds-known"}, "spec": {"schedulerName": "slurm-scheduler"},
           "status": {"phase": "Pending"}}
    for _ in range(3):
        scope.on_sandbox_pod(h.ctx, state, pod)
        await h.clock.advance(scope.POD_RECHECK_SECONDS)
    assert log.take() == [] and state.scope.recheck_handle is None
    h.kube.edit("configmaps", "slurm", "cm", lambda cm: cm["metadata"].setdefault("labels", {}).update(x="y"))
    echo(h)                                                # another writer, seen
    scope.on_sandbox_pod(h.ctx, state, pod)
    assert log.take() == [False]                           # a re-read, windowed


async def test_rolebinding_creates_never_hold_up_the_list_and_the_roll_waits_for_them(harness) -> None:
    """The list loop and the grants loop each write alone, under their own locks: while the RoleBinding
    of the first new namespace is being created (slow here), the next namespaces are listed at once.
    The roll waits for the grants (listed namespaces without our RoleBinding hold it: the restarted
    scheduler finds its RBAC) and comes once, after every create; the grants loop's writes wake it."""
    h = harness()
    state = world(h, CONF, namespaces=("slurm", "other"), scope={"grantClusterRole": "sunk-scheduler",
                                                                 "minRollInterval": "0s"})
    watching(h)
    await scope.sync(h.ctx, state)
    echo(h)
    gate = asyncio.Event()
    create = h.kube.create_rolebinding

    async def slow(namespace: str, body: dict) -> dict:  # an API server busy with other creates
        await gate.wait()
        return await create(namespace, body)
    h.kube.create_rolebinding = slow  # type: ignore[method-assign]
    h.kube.calls.clear()
    for name in ("ds-1", "ds-2", "ds-3"):
        watch.on_namespace(h.ctx, "ADDED", namespace(name))
        for _ in range(3):  # past the list loop's pacing (scope_max_writes_per_second)
            await h.clock.advance(0.05)
    assert {"ds-1", "ds-2", "ds-3"} <= set(listed(h))                      # listed while the first grant waits
    assert h.kube.count("create_rolebinding") == 0 and h.kube.count("merge_patch_deployment") == 0  # the roll holds
    gate.set()
    await h.run_until_idle()
    acts = [c[:2] for c in h.kube.calls if c[0] in ("create_rolebinding", "merge_patch_deployment")]
    assert sorted(acts[:-1]) == [("create_rolebinding", ns) for ns in ("ds-1", "ds-2", "ds-3")]
    assert acts[-1] == ("merge_patch_deployment", "slurm")                 # one roll, after them
    assert scope_hash_of(h) == scope_hash(listed(h))
