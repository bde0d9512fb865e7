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

from tests.unit.fakes import FakeKube, binding_body, harness_fixture, namespace  # noqa: F401 (fixture)
from tests.unit.test_react import cm_event
from tests.unit.test_scope_controller import SignalLog, listed, world

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
    assert scope.memory(h.ctx, state).added == ["ds-1", "ds-known"]  # the admin's name is not ours


async def test_without_a_watch_of_the_target_every_sync_reads(harness) -> None:
    h = harness()  # no API connection: no dependency watches
    state = world(h, CONF)
    await scope.sync(h.ctx, state)
    await burst_of(h, "ds-1")
    await burst_of(h, "ds-2")
    assert (h.kube.count("get_configmap"), h.kube.count("replace_configmap")) == (3, 3)


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
    assert "ds-known" in (state.scope.known_list or ())
    log = state.scope.syncer = SignalLog()                 # what the pod signals ask for
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


async def test_a_burst_creates_its_rolebindings_after_its_last_write(harness) -> None:
    """A namespace arriving during a write makes a burst: the write in flight grants nothing, the
    next (the last) lists it and grants both, so no RoleBinding create holds up a list write."""
    h = harness()
    state = world(h, CONF, scope={"grantClusterRole": "sunk-scheduler"})
    watching(h)
    await scope.sync(h.ctx, state)
    echo(h)
    h.kube.before("replace_configmap", lambda: watch.on_namespace(h.ctx, "ADDED", namespace("ds-2")))
    await burst_of(h, "ds-1")
    assert "ds-1" in listed(h) and "ds-2" in listed(h)
    names = [c[0] for c in h.kube.calls]
    writes = [i for i, n in enumerate(names) if n == "replace_configmap"]
    creates = [h.kube.calls[i][1] for i, n in enumerate(names) if n == "create_rolebinding"]
    assert creates == ["ds-known", "ds-1", "ds-2"] and len(writes) == 3     # the first sync's, then two
    first_create_of_burst = min(i for i, n in enumerate(names) if n == "create_rolebinding" and
                                h.kube.calls[i][1] in ("ds-1", "ds-2"))
    assert first_create_of_burst > writes[-1]                               # after the burst's last write


async def test_a_grant_round_stops_for_a_new_namespace_whose_list_write_goes_first(harness) -> None:
    """A namespace arriving while RoleBindings are created: no create starts after it, the next sync
    writes the list first and then makes the rest; the roll the cut round owed is made once, after
    every grant (a restarted scheduler finds its RBAC)."""
    h = harness()
    state = world(h, CONF, namespaces=("slurm", "other"), scope={"grantClusterRole": "sunk-scheduler"})
    watching(h)
    await scope.sync(h.ctx, state)
    echo(h)
    h.kube.calls.clear()
    h.kube.before("create_rolebinding", lambda: watch.on_namespace(h.ctx, "ADDED", namespace("ds-4")))
    await burst_of(h, "ds-1", "ds-2", "ds-3")
    acts = [c[:2] for c in h.kube.calls if c[0] in ("replace_configmap", "create_rolebinding", "merge_patch_deployment")]
    assert acts == [("replace_configmap", "slurm"), ("create_rolebinding", "ds-1"),    # cut: ds-4 arrived
                    ("replace_configmap", "slurm"),                                    # its list first
                    ("create_rolebinding", "ds-2"), ("create_rolebinding", "ds-3"), ("create_rolebinding", "ds-4"),
                    ("merge_patch_deployment", "slurm")]                               # one roll, after them
    assert {"ds-1", "ds-2", "ds-3", "ds-4"} <= set(listed(h))
    assert {ns for ns, _ in h.kube.store["rolebindings"]} >= {"ds-1", "ds-2", "ds-3", "ds-4"}
