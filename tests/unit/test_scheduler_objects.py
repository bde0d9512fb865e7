"""Bounded reads of the scheduler namespace (issue 31, finding 4): every ConfigMap and Pod reduced as it
arrives to what discovery reads, each within a size cap (one over it is skipped and named), a namespace
within a budget, paginated; and a reconcile reads the watches' digests instead of listing at all."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from sunk_sandbox_operator.adapters import kube as k
from sunk_sandbox_operator.adapters import scheduler as sched
from sunk_sandbox_operator.api.spec import LabelSelector
from sunk_sandbox_operator.controller import depends, reconcile
from sunk_sandbox_operator.controller.depends import Watched
from sunk_sandbox_operator.core.scheduler import objects as so

from tests.unit.fakes import harness_fixture, settle  # noqa: F401
from tests.unit.test_kube import Recorder
from tests.unit.test_reconcile import NS, cluster, conditions, new_binding

FIXTURES = Path(__file__).parent / "fixtures" / "scheduler"
CAP = 4096


def cm(name: str, data: dict, labels: dict | None = None) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"namespace": NS, "name": name, "labels": labels or {}, "resourceVersion": "1",
                         "managedFields": [{"manager": "x", "fieldsV1": {"f:data": {}}}]}, "data": data}


def test_a_configmap_keeps_only_the_keys_discovery_reads() -> None:
    labelled = {"app.kubernetes.io/component": "scheduler"}
    got = so.reduce_configmap(cm("a", {"scheduler.conf": "s", "blob": "x" * 100_000, "x.slurm.conf": "KillWait=60"},
                                   labelled), CAP)
    assert got == {"metadata": {"name": "a", "namespace": NS, "labels": labelled, "resourceVersion": "1"},
                   "data": {"scheduler.conf": "s", "x.slurm.conf": "KillWait=60"}}
    # Unlabelled: its scheduler.conf is not the scheduler's (unless the spec names it, with its key).
    assert so.reduce_configmap(cm("b", {"scheduler.conf": "s", "other": "o"}), CAP)["data"] == {}
    assert so.reduce_configmap(cm("b", {"scheduler.conf": "s", "other": "o"}), CAP, ("b", "other"))["data"] == {
        "other": "o"}


def test_an_object_over_the_cap_is_skipped_and_named() -> None:
    big = so.reduce_configmap(cm("huge", {"slurm.conf": "#" * (CAP + 1)}), CAP)
    assert big == so.Skipped("ConfigMap", "huge", CAP + 1 + len("slurm.conf"))
    assert "ConfigMap tenant-slurm/huge not read" in big.note(NS, CAP) and f"{CAP}-byte cap" in big.note(NS, CAP)
    pod = json.loads((FIXTURES / "sunk8_pod.json").read_text())
    pod["spec"]["containers"][0]["args"] = ["--x=" + "y" * CAP]
    assert isinstance(so.reduce_pod(pod, CAP), so.Skipped)
    # Irrelevant bulk costs nothing against the cap: it is not kept.
    assert not isinstance(so.reduce_configmap(cm("blob", {"blob": "x" * 1_000_000}), CAP), so.Skipped)


def test_a_pod_keeps_what_discovery_reads_and_discovers_the_same() -> None:
    from sunk_sandbox_operator.core.scheduler.conf import parse_scheduler_args

    for fixture in ("sunk8_pod.json", "sunk7_pod.json"):
        path = FIXTURES / fixture
        if not path.exists():
            continue
        pod = json.loads(path.read_text())
        pod["spec"]["containers"].append({"name": "sidecar", "image": "x", "args": ["y" * 10_000]})
        reduced = so.reduce_pod(pod, CAP)
        assert not isinstance(reduced, so.Skipped)
        assert [c["name"] for c in reduced["spec"]["containers"]] == ["scheduler"]
        assert parse_scheduler_args(reduced) == parse_scheduler_args(pod)
    no_scheduler = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": f"c{i}"} for i in range(100)]}}
    reduced = so.reduce_pod(no_scheduler, CAP)
    assert not isinstance(reduced, so.Skipped) and len(reduced["spec"]["containers"]) == so.OTHER_CONTAINERS_KEPT


def test_a_namespace_keeps_at_most_its_budget_in_name_order() -> None:
    records = [so.reduce_configmap(cm(f"c{i:03}", {"slurm.conf": "#" * (CAP - 20)}), CAP) for i in range(40)]
    kept, skipped = so.split(records, CAP)
    assert len(kept) == so.NAMESPACE_BUDGET_OBJECTS and [c["metadata"]["name"] for c in kept][:2] == ["c000", "c001"]
    assert len(skipped) == 40 - so.NAMESPACE_BUDGET_OBJECTS and all(s.budget for s in skipped)
    assert "already hold" in skipped[0].note(NS, CAP)


async def test_configmaps_are_listed_a_few_at_a_time_and_reduced_as_each_page_arrives() -> None:
    pages = [{"items": [cm(f"c{i}", {"blob": "x" * 1000, "slurm.conf": f"KillWait={i}"}) for i in range(p * 8, p * 8 + 8)],
              "metadata": {"continue": f"t{p + 1}"} if p < 2 else {}} for p in range(3)]
    http = Recorder()
    served = iter(pages)

    async def paged(method, path, params=None, body=None, content_type="application/json"):
        http.calls.append((method, path, dict(params or {})))
        return next(served) if "configmaps" in path else {"items": []}
    http.request = paged  # type: ignore[method-assign]
    objs = await sched.read(k.Kube(http), NS, LabelSelector.model_validate({"matchLabels": {"a": "b"}}), CAP)
    limits = [q.get("limit") for _, p, q in http.calls if "configmaps" in p]
    assert limits == [str(sched.CONFIGMAP_PAGE_SIZE)] * 3
    assert len(objs.configmaps) == 24 and all(set(c["data"]) == {"slurm.conf"} for c in objs.configmaps)


async def test_a_huge_slurm_conf_is_named_in_scheduler_ready_and_the_rest_is_discovered(harness) -> None:
    h = harness(max_object_bytes=CAP)
    cluster(h)
    for i in range(30):  # a tenant's bulk: nothing discovery reads
        h.kube.add("configmaps", cm(f"bulk-{i}", {"blob": "x" * 50_000}))
    h.kube.add("configmaps", cm("evil", {"evil.slurm.conf": "#" * 100_000}))
    state, runner = new_binding(h)
    await reconcile.reconcile(h.ctx, state)
    assert conditions(h)["SchedulerReady"] == ("True", "SchedulerFound") and runner.updates == 1
    message = next(c for c in h.kube.get("bindings", NS, "b")["status"]["conditions"]
                   if c["type"] == "SchedulerReady")["message"]
    assert f"ConfigMap {NS}/evil not read" in message and "bulk-" not in message


def _watching(h) -> None:
    """The binding's dependency watches running (an idle task stands in for each informer), fed from the
    fake API server's objects as their initial LIST would be, then listed."""
    h.ctx.http = object()
    h.ctx.depends = depends.Dependencies(h.ctx, start=lambda informer: asyncio.ensure_future(asyncio.sleep(3600)))
    h.ctx.depends.refresh()
    for w in h.ctx.depends.watches:
        kind = {"ConfigMap": "configmaps", "Pod": "pods"}.get(w.kind)
        for obj in (h.kube.store[kind].values() if kind else ()):
            if obj["metadata"].get("namespace") == w.namespace:
                h.ctx.depends.event(w, "ADDED", obj)
        h.ctx.depends._running[w][0].ready.set()


async def test_a_reconcile_reads_the_watches_not_a_list_whatever_the_number_of_configmaps(harness) -> None:
    """10,000 small ConfigMaps of a tenant in the scheduler's namespace: with its watches listed, a
    reconcile lists nothing; an edit that matters arrives by its event and is seen."""
    h = harness()
    cluster(h)
    state, runner = new_binding(h)
    await reconcile.reconcile(h.ctx, state)                   # the first: before any watch, one bounded read
    for i in range(10_000):
        h.kube.add("configmaps", cm(f"noise-{i}", {"n": str(i)}))
    _watching(h)
    kept = h.ctx.depends._running[Watched("ConfigMap", NS)][3].records
    assert set(kept) == {"slurm-scheduler-config"}             # the 10,000 hold nothing discovery reads: not kept
    h.kube.calls.clear()
    for _ in range(3):
        await reconcile.reconcile(h.ctx, state)
    listed = [c[0] for c in h.kube.calls if c[0] in ("list_configmaps", "list_pods")]
    assert listed == [] and conditions(h)["SchedulerReady"][0] == "True"
    assert state.discovery is not None and state.discovery.kill_wait_seconds == 60
    slurm = cm("slurm-conf", {"slurm.conf": "KillWait=90\n"})
    h.kube.add("configmaps", slurm)
    h.ctx.depends.event(Watched("ConfigMap", NS), "ADDED", h.kube.get("configmaps", NS, "slurm-conf"))
    await reconcile.reconcile(h.ctx, state)
    assert state.discovery.slurm_configmaps == ("slurm-conf",)
    assert [c[0] for c in h.kube.calls if c[0] in ("list_configmaps", "list_pods")] == []


async def test_a_first_reconcile_waits_for_the_watches_it_starts_and_lists_nothing_itself(harness) -> None:
    """The first reconcile starts the scheduler namespace's watches and reads what their first LIST
    brings (one LIST of the namespace, not two); a watch that has not listed long after its start
    (refused, failing) is not waited for: one bounded read says why."""
    h = harness()
    cluster(h)
    state, runner = new_binding(h)
    h.ctx.http = object()
    h.ctx.depends = depends.Dependencies(h.ctx, start=lambda informer: asyncio.ensure_future(asyncio.sleep(3600)))
    task = asyncio.ensure_future(reconcile.reconcile(h.ctx, state))
    await settle()
    assert not task.done() and {w.kind for w in h.ctx.depends.watches} == {"ConfigMap", "Pod"}
    for w in h.ctx.depends.watches:                     # their first LIST arrives
        kind = {"ConfigMap": "configmaps", "Pod": "pods"}[w.kind]
        for obj in list(h.kube.store[kind].values()):
            h.ctx.depends.event(w, "ADDED", obj)
        h.ctx.depends._running[w][0].ready.set()
    await task
    assert [c for c in h.kube.calls if c[0] in ("list_configmaps", "list_pods")] == []
    assert conditions(h)["SchedulerReady"] == ("True", "SchedulerFound") and runner.updates == 1
    # A watch that never listed (here: the Pod one, as if refused), past the wait: read, not waited for.
    pods = next(w for w in h.ctx.depends.watches if w.kind == "Pod")
    h.ctx.depends._running[pods][0].ready.clear()
    await h.clock.advance(depends.FIRST_LIST_WAIT_SECONDS + 1)
    await reconcile.reconcile(h.ctx, state)
    assert [c[0] for c in h.kube.calls if c[0] in ("list_configmaps", "list_pods")] == ["list_pods", "list_configmaps"]


async def test_a_first_reconcile_does_not_wait_for_a_watch_that_failed(harness) -> None:
    """RBAC refuses the ConfigMaps of the namespace: the watch fails, the reconcile stops waiting at once
    and its own read says which RoleBinding to add."""
    h = harness()
    cluster(h)
    h.kube.deny("list_configmaps", NS)
    state, runner = new_binding(h)
    h.ctx.http = object()
    h.ctx.depends = depends.Dependencies(h.ctx, start=lambda informer: asyncio.ensure_future(asyncio.sleep(3600)))
    task = asyncio.ensure_future(reconcile.reconcile(h.ctx, state))
    await settle()
    assert not task.done()
    cms = next(w for w in h.ctx.depends.watches if w.kind == "ConfigMap")
    h.ctx.depends._running[cms][0].failed.set()       # its LIST was refused
    await task
    assert conditions(h)["SchedulerReady"] == ("False", "Forbidden") and h.clock.now < 1000 + 1
