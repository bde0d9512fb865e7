"""The scope pipeline over the fake Kube: which signals schedule a sync, and full syncs (write the ConfigMap,
roll the scheduler, keep grants, lose races and merge, report problems, restore)."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from sunk_sandbox_operator.api.keys import SCOPE_HASH_ANNOTATION, SCOPE_LEDGER_ANNOTATION
from sunk_sandbox_operator.controller import reconcile, retry, scope, watch
from sunk_sandbox_operator.core import ledger as lg
from sunk_sandbox_operator.core.grants import rolebinding_name
from sunk_sandbox_operator.core.scope import scope_hash
from sunk_sandbox_operator.core.scope_doc import read_list

from tests.unit.fakes import binding_body, discovery, harness_fixture, namespace, settle  # noqa: F401 (fixture)

CONF = "scheduler:\n  scope:\n    type: namespace\n    namespaces: [slurm]\n"
PATH = "scheduler.scope.namespaces"
SPEC = {"sandboxNamespaces": {"names": ["ds-*"], "selector": {"matchLabels": {"sbx": "yes"}}}}
DEPLOYMENT = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"namespace": "slurm", "name": "slurm-scheduler"},
              "spec": {"template": {"metadata": {"labels": {"app.kubernetes.io/name": "sunk-scheduler"}}}}}


class SignalLog:
    """Stands in for a binding's scope Coalescer (ScopeMemory.syncer): records the signals only."""

    name = "signal log"
    task = None

    def __init__(self) -> None:
        self.signals: list[tuple[bool, float | None]] = []

    def signal(self, urgent: bool = False, at: float | None = None) -> None:
        self.signals.append((urgent, at))

    def take(self) -> list[bool]:
        """The signals since the last take, as their urgent flags."""
        out = [urgent for urgent, _ in self.signals]
        self.signals.clear()
        return out

    def take_first_signal(self) -> float | None:
        return None

    def cancel(self) -> None:
        pass

    async def wait_idle(self) -> None:
        pass


def logged(h, state, known: tuple[str, ...] | None = ("ds-known",)) -> SignalLog:
    mem = scope.memory(h.ctx, state)
    mem.syncer = SignalLog()
    mem.known_list = frozenset(known) if known is not None else None
    return mem.syncer


def world(h, conf: str = CONF, *, namespaces=("slurm", "ds-known", "other"), deployment: bool = True, **spec):
    """Namespaces, the scheduler ConfigMap `cm` and Deployment in `slurm`, and one reconciled binding."""
    h.load_namespaces(*(namespace(n) for n in namespaces))
    h.kube.add("configmaps", {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"namespace": "slurm", "name": "cm"},
                              "data": {"scheduler.conf": conf}})
    if deployment:
        h.kube.add("deployments", DEPLOYMENT)
    return h.binding(binding_body(**{**SPEC, **spec}))


def listed(h) -> list[str]:
    return read_list(h.kube.get("configmaps", "slurm", "cm")["data"]["scheduler.conf"], PATH).values


def ledger_of(h, binding: str = "slurm/b") -> lg.Entry | None:
    """This binding's entry in the ledger the ConfigMap carries (None: no entry)."""
    annotations = h.kube.get("configmaps", "slurm", "cm")["metadata"].get("annotations") or {}
    return lg.decode(annotations.get(SCOPE_LEDGER_ANNOTATION)).get(binding)


def scope_hash_of(h) -> str | None:
    dep = h.kube.get("deployments", "slurm", "slurm-scheduler")
    return (dep["spec"]["template"]["metadata"].get("annotations") or {}).get(SCOPE_HASH_ANNOTATION)


def _pod(ns: str, scheduler: str = "slurm-scheduler", phase: str = "Pending", node: str | None = None) -> dict:
    spec = {"schedulerName": scheduler} | ({"nodeName": node} if node else {})
    return {"metadata": {"namespace": ns, "name": "p"}, "spec": spec, "status": {"phase": phase}}


# ---------------------------------------------------------------- which signals count


async def test_namespace_events_signal_only_the_bindings_whose_list_they_change(harness) -> None:
    h = harness(scope_window_seconds=10.0)
    h.load_namespaces(namespace("ds-known"), namespace("other"))
    state = h.binding(binding_body(**SPEC))
    elsewhere = h.binding(binding_body("b2", uid="u2", sandboxNamespaces={"names": ["team-*"]}))
    log, other_log = logged(h, state), logged(h, elsewhere, known=())

    def event(kind: str, body: dict) -> list[bool]:
        watch.on_namespace(h.ctx, kind, body)
        return log.take()

    assert event("ADDED", namespace("unrelated")) == []
    assert event("ADDED", namespace("ds-new")) == [False]                       # windowed, not urgent
    assert event("MODIFIED", namespace("ds-known", {"team": "x"})) == []        # still listed, still belongs
    assert event("MODIFIED", namespace("other", {"sbx": "yes"})) == [False]     # relabelled into the set
    assert event("MODIFIED", namespace("other")) == [False]                     # and out again
    assert event("MODIFIED", namespace("ds-known", terminating=True)) == [False]  # terminating: it leaves
    assert h.ctx.namespaces.get("ds-known").terminating
    assert event("DELETED", namespace("ds-new")) == [False]                     # it belonged: it leaves
    annotated = namespace("ds-known", terminating=True)
    annotated["metadata"]["annotations"] = {"a": "b"}
    assert event("MODIFIED", annotated) == []                                   # nothing the cache keeps changed
    # Still terminating, but on our ledger: the list may still hold it (a failed write): sync.
    scope.memory(h.ctx, state).added = ["ds-known"]
    assert event("MODIFIED", namespace("ds-known", {"x": "y"}, terminating=True)) == [False]
    assert other_log.take() == []                                               # never concerned team-*


async def test_namespace_events_signal_when_the_list_is_not_known_yet(harness) -> None:
    h = harness()
    h.load_namespaces(namespace("ds-known"))
    state = h.binding(binding_body(**SPEC))
    log = logged(h, state, known=None)
    watch.on_namespace(h.ctx, "MODIFIED", namespace("ds-known", {"team": "x"}))
    assert log.take() == [False]


async def test_namespace_events_carry_the_time_the_event_arrived(harness) -> None:
    h = harness()
    state = h.binding(binding_body(**SPEC))
    log = logged(h, state)
    await h.clock.advance(5.0)
    watch.on_namespace(h.ctx, "ADDED", namespace("ds-new"))
    assert log.signals == [(False, h.clock())]


@pytest.mark.parametrize("pod, urgent", [
    (_pod("ds-fresh"), True),                       # matching, not listed, our scheduler: at once
    (_pod("team", phase="Pending"), True),          # matching by label (the cache knows it)
    (_pod("ds-fresh", scheduler="default-scheduler"), False),
    (_pod("ds-fresh", phase="Running"), False),
    (_pod("ds-fresh", node="n1"), False),           # already bound to a node
    (_pod("elsewhere"), False),                     # not a sandbox namespace
    (_pod("ds-leaving"), False),                    # terminating: it will never be listed
])
async def test_stuck_pod_signal(harness, pod: dict, urgent: bool) -> None:
    h = harness(scope_window_seconds=10.0)
    h.load_namespaces(namespace("ds-known"), namespace("team", {"sbx": "yes"}), namespace("ds-leaving", terminating=True))
    state = h.binding(binding_body(**SPEC))
    log = logged(h, state)
    scope.on_sandbox_pod(h.ctx, state, pod)
    assert log.take() == ([True] if urgent else [])


async def test_no_stuck_pod_signal_before_the_scheduler_is_known_or_after_deletion(harness) -> None:
    h = harness()
    state = h.binding(binding_body(**SPEC), active=False)          # not reconciled: no discovery yet
    log = logged(h, state)
    scope.on_sandbox_pod(h.ctx, state, _pod("ds-fresh"))
    assert log.take() == []
    state.discovery = discovery()
    state.deleted = True
    scope.on_sandbox_pod(h.ctx, state, _pod("ds-fresh"))
    assert log.take() == []


async def test_stuck_pod_in_a_listed_namespace_rechecks_at_most_every_few_seconds(harness) -> None:
    h = harness(scope_window_seconds=10.0)
    h.load_namespaces(namespace("ds-known"))
    state = h.binding(binding_body(**SPEC))
    log = logged(h, state)
    mem = state.scope
    scope.on_sandbox_pod(h.ctx, state, _pod("ds-known"))
    assert log.take() == [False]                                   # re-read the target, windowed
    await h.clock.advance(scope.POD_RECHECK_SECONDS - 0.001)
    scope.on_sandbox_pod(h.ctx, state, _pod("ds-known"))
    assert log.take() == []                                        # too soon: deferred ...
    handle = mem.recheck_handle
    assert handle is not None and handle.due - h.clock() <= 0.001 + 1e-6   # on the injected clock
    scope.on_sandbox_pod(h.ctx, state, _pod("ds-known"))
    assert log.take() == [] and mem.recheck_handle is handle       # one deferred re-check, however many pods
    await h.clock.advance(0.001)
    await settle()
    assert log.take() == [False] and mem.recheck_handle is None    # ... not dropped
    assert mem.next_recheck == pytest.approx(h.clock() + scope.POD_RECHECK_SECONDS)


async def test_cluster_scope_pod_signals_are_paced(harness) -> None:
    """Scope type cluster: stuck pods cannot be a scope problem, so they only re-check, paced."""
    h = harness(scope_window_seconds=10.0)
    state = world(h, "scheduler:\n  scope:\n    type: cluster\n")
    part = await scope.sync(h.ctx, state)
    assert part.reason == "ClusterScope" and part.status == "True" and h.kube.count("replace_configmap") == 0
    assert state.scope.cluster and state.scope.known_list is None
    log = logged(h, state, known=None)
    scope.on_sandbox_pod(h.ctx, state, _pod("ds-fresh"))
    assert log.take() == [False]                                   # a windowed re-read, not an urgent one per pod
    scope.on_sandbox_pod(h.ctx, state, _pod("ds-fresh"))
    assert log.take() == [] and state.scope.recheck_handle is not None  # and the next one deferred


# ---------------------------------------------------------------- full syncs


async def test_known_list_is_a_set_after_a_sync(harness) -> None:
    """Pod and namespace events look names up in it: a list would cost O(listed namespaces) per event."""
    h = harness()
    state = world(h)
    part = await scope.sync(h.ctx, state)
    assert part.reason == "Synced" and h.kube.count("replace_configmap") == 1
    known = state.scope.known_list
    assert isinstance(known, frozenset) and known == {"slurm", "ds-known"}


async def test_a_sync_writes_the_configmap_rolls_the_scheduler_and_reports(harness) -> None:
    h = harness()
    state = world(h)
    part = await scope.sync(h.ctx, state)
    assert (part.condition, part.status, part.reason) == ("ScopeSynced", "True", "Synced")
    assert listed(h) == ["ds-known", "slurm"]
    assert scope_hash_of(h) == scope_hash(["ds-known", "slurm"])
    assert h.reasons() == ["ScopeUpdated", "SchedulerRestarted"]
    assert "added ds-known" in h.events[0][2]
    assert part.section == "scope" and part.data == {
        "target": {"kind": "SchedulerConfigMap", "namespace": "slurm", "name": "cm", "key": "scheduler.conf",
                   "path": "scheduler.scope.namespaces"},
        "type": "namespace", "namespaceCount": 2, "missing": [], "missingCount": 0, "addedCount": 1,
        "lastSyncTime": h.clock.iso(), "lastRollTime": h.clock.iso()}
    assert ledger_of(h) == lg.Entry(added=("ds-known",), preexisting=("slurm",))  # written with the list
    assert state.counters.scope_writes == 1 and state.counters.scope_namespaces == 2
    state.report(part)

    # A resync with nothing changed: no write, no roll, no event, the same status.
    h.events.clear()
    await h.clock.advance(300.0)
    again = await scope.sync(h.ctx, state)
    assert again.data == part.data and again.reason == "Synced"
    assert h.kube.count("replace_configmap") == 1 and h.kube.count("merge_patch_deployment") == 1 and h.events == []

    # Someone reverts the roll: the periodic sync corrects it, without writing the list.
    h.kube.edit("deployments", "slurm", "slurm-scheduler",
                lambda d: d["spec"]["template"]["metadata"]["annotations"].update({SCOPE_HASH_ANNOTATION: "stale"}))
    await scope.sync(h.ctx, state)
    assert scope_hash_of(h) == scope_hash(["ds-known", "slurm"]) and h.reasons() == ["SchedulerRestarted"]
    assert h.kube.count("replace_configmap") == 1


async def test_a_scheduler_never_rolled_is_left_alone_when_nothing_was_written(harness) -> None:
    h = harness()
    state = world(h, "scheduler:\n  scope:\n    type: namespace\n    namespaces: [slurm, ds-known]\n")
    part = await scope.sync(h.ctx, state)
    assert part.reason == "Synced" and h.kube.count("replace_configmap") == 0
    assert h.kube.count("merge_patch_deployment") == 0 and scope_hash_of(h) is None
    assert part.data["addedCount"] == 0 and ledger_of(h) is None


async def test_no_scheduler_deployment_is_a_note_not_a_failure(harness) -> None:
    h = harness()
    state = world(h, deployment=False)
    part = await scope.sync(h.ctx, state)
    assert part.status == "True" and part.reason == "Synced"
    assert "No Deployment or StatefulSet in slurm has pod template labels matching" in part.message
    assert listed(h) == ["ds-known", "slurm"]


async def test_no_roll_when_restart_scheduler_is_off(harness) -> None:
    h = harness()
    state = world(h, scope={"restartScheduler": False})
    await scope.sync(h.ctx, state)
    assert listed(h) == ["ds-known", "slurm"] and h.kube.count("list_deployments") == 0


async def test_observe_mode_reports_what_is_missing_and_writes_nothing(harness) -> None:
    h = harness()
    state = world(h, mode="Observe", scope={"grantClusterRole": "sunk-scheduler"})
    part = await scope.sync(h.ctx, state)
    assert (part.status, part.reason) == ("False", "Pending")
    assert "Observe mode: nothing is written" in part.message and "ds-known" in part.message
    assert part.data["missing"] == ["ds-known"]
    writes = {"replace_configmap", "merge_patch_deployment", "create_rolebinding", "delete_rolebinding",
              "list_deployments", "list_rolebindings"}
    assert not [c for c in h.kube.calls if c[0] in writes] and h.events == []


async def test_a_namespace_event_becomes_a_write_after_the_window_and_its_latency_is_observed(harness) -> None:
    h = harness(scope_window_seconds=0.25)
    state = world(h)
    await scope.sync(h.ctx, state)                          # the first reconcile's sync (no signal: no latency)
    watch.on_namespace(h.ctx, "ADDED", namespace("ds-new"))
    await h.clock.advance(0.125)
    assert h.kube.count("replace_configmap") == 1           # still inside the window
    await h.clock.advance(0.125)
    assert h.kube.count("replace_configmap") == 2 and listed(h) == ["ds-known", "ds-new", "slurm"]
    await h.run_until_idle()
    registry = h.ctx.metrics.registry
    assert registry.get_sample_value("ssb_scope_sync_latency_seconds_count") == 1
    assert registry.get_sample_value("ssb_scope_sync_latency_seconds_sum") == pytest.approx(0.25)
    status = h.kube.get("bindings", "slurm", "b")["status"]   # the signalled sync flushed its report
    synced = [c for c in status["conditions"] if c["type"] == "ScopeSynced"][0]
    assert synced["status"] == "True" and status["scope"]["addedCount"] == 2
    assert ledger_of(h).added == ("ds-known", "ds-new")


async def test_writes_are_paced_by_max_writes_per_second(harness) -> None:
    h = harness(scope_window_seconds=0.0, scope_max_writes_per_second=2.0)
    state = world(h)
    await scope.sync(h.ctx, state)
    watch.on_namespace(h.ctx, "ADDED", namespace("ds-1"))
    await settle()
    assert h.kube.count("replace_configmap") == 2           # at once: no window
    watch.on_namespace(h.ctx, "ADDED", namespace("ds-2"))
    watch.on_namespace(h.ctx, "ADDED", namespace("ds-3"))
    await h.clock.advance(0.25)
    assert h.kube.count("replace_configmap") == 2           # 0.5 s between two writes
    await h.clock.advance(0.25)
    assert h.kube.count("replace_configmap") == 3 and {"ds-2", "ds-3"} <= set(listed(h))  # one write for both
    await h.run_until_idle()


async def test_pod_before_the_namespace_watch_counts_its_namespace(harness) -> None:
    h = harness()
    state = world(h)
    await scope.sync(h.ctx, state)
    watch.on_pod(h.ctx, "ADDED", _pod("ds-unseen") | {"metadata": {"namespace": "ds-unseen", "name": "p",
                                                                    "labels": {"sandbox.coreweave.com/sandbox-id": "x"}}})
    await h.run_until_idle()
    assert listed(h) == ["ds-known", "ds-unseen", "slurm"]   # the stuck pod's namespace, before the watch saw it
    watch.on_namespace(h.ctx, "ADDED", namespace("ds-unseen", terminating=True))
    await h.run_until_idle()
    assert listed(h) == ["ds-known", "slurm"]                # the watch decides once it knows the namespace


async def test_a_signalled_sync_waits_for_the_first_reconcile_and_skips_a_younger_binding(harness) -> None:
    h = harness()
    h.load_namespaces(namespace("slurm"))
    h.kube.add("configmaps", {"metadata": {"namespace": "slurm", "name": "cm"}, "data": {"scheduler.conf": CONF}})
    state = h.binding(binding_body(**SPEC), active=False)
    state.discovery = discovery()                            # discovered, but the reconcile did not finish
    scope.on_sandbox_pod(h.ctx, state, _pod("ds-fresh"))
    await h.run_until_idle()
    assert h.kube.count("get_configmap") == 0
    state.conflict_checked, state.conflict = True, "slurm/older"
    scope.on_sandbox_pod(h.ctx, state, _pod("ds-fresh"))
    await h.run_until_idle()
    assert h.kube.count("get_configmap") == 0


# ---------------------------------------------------------------- races and problems


async def test_a_lost_race_rereads_and_merges_the_other_writers_change(harness) -> None:
    h = harness()
    state = world(h)

    def admin() -> None:
        h.kube.edit("configmaps", "slurm", "cm", lambda cm: cm["data"].update(
            {"scheduler.conf": CONF.replace("[slurm]", "[slurm, admin-ns]")}))

    h.kube.before("replace_configmap", admin)                # they write between our read and our write
    part = await h.drive(scope.sync(h.ctx, state))
    assert part.reason == "Synced"
    assert listed(h) == ["admin-ns", "ds-known", "slurm"]    # theirs kept, ours added
    assert h.kube.count("get_configmap") == 2 and h.kube.count("replace_configmap") == 2
    b = retry.CONFLICT_BACKOFF
    assert len(h.clock.slept) == 1 and b.base * (1 - b.jitter) <= h.clock.slept[0] <= b.base
    assert ledger_of(h) == lg.Entry(added=("ds-known",), preexisting=("admin-ns", "slurm"))


async def test_a_target_that_keeps_changing_is_a_conflict_and_nothing_is_overwritten(harness) -> None:
    h = harness(scope_conflict_retries=2)
    state = world(h)
    edits = iter(range(100))

    def admin() -> None:
        n = next(edits)
        h.kube.edit("configmaps", "slurm", "cm", lambda cm: cm["data"].update(
            {"scheduler.conf": CONF.replace("[slurm]", f"[slurm, admin-{n}]")}))

    h.kube.before("replace_configmap", admin, times=3)
    part = await h.drive(scope.sync(h.ctx, state))
    assert (part.status, part.reason) == ("False", "Conflict") and "3 times in a row" in part.message
    assert listed(h) == ["slurm", "admin-2"]                 # their last edit, untouched by us
    assert h.kube.count("replace_configmap") == 3
    assert len(h.clock.slept) == 3                            # two lost races, then the retry timer's backoff
    mem = state.scope
    assert mem.failures == 1 and mem.retry_handle is not None  # retried soon, with backoff
    delay = mem.retry_handle.due - h.clock()
    assert 0 < delay <= retry.FAILURE_BACKOFF.delay(0, rand=lambda: 0.0)
    state.close()
    assert mem.retry_handle is None and mem.syncer.cancelled


async def test_a_failure_after_a_success_keeps_what_status_said_about_the_list(harness) -> None:
    h = harness()
    state = world(h)
    state.report(await scope.sync(h.ctx, state))
    h.kube.deny("get_configmap")
    part = await scope.sync(h.ctx, state)
    assert (part.status, part.reason) == ("False", "Forbidden") and "may not read" in part.message
    assert part.data["namespaceCount"] == 2 and part.data["addedCount"] == 1
    assert part.data["lastSyncTime"] == state.section("scope")["lastSyncTime"]


IMMUTABLE = {"immutable": True}


@pytest.mark.parametrize("setup, status, reason, fragment", [
    (lambda h: h.kube.store["configmaps"].clear(), "False", "TargetNotFound", "ConfigMap slurm/cm not found"),
    (lambda h: h.kube.edit("configmaps", "slurm", "cm", lambda cm: cm.update(data={"other": "x"})),
     "False", "TargetNotFound", "has no key scheduler.conf"),
    (lambda h: h.kube.deny("get_configmap", "slurm"), "False", "Forbidden", "may not read"),
    (lambda h: h.kube.deny("replace_configmap"), "False", "Forbidden", "may not write"),
    (lambda h: h.kube.edit("configmaps", "slurm", "cm", lambda cm: cm.update(IMMUTABLE)),
     "False", "InvalidConfig", "the API server refused the write"),
    (lambda h: h.kube.edit("configmaps", "slurm", "cm", lambda cm: cm["data"].update({"scheduler.conf": "scheduler: ["})),
     "False", "InvalidConfig", "left untouched"),
    (lambda h: setattr(h.ctx.namespaces, "ready", False), "Unknown", "NamespacesNotLoaded", "not listed yet"),
    (lambda h: h.kube.before("get_configmap", lambda: (_ for _ in ()).throw(RuntimeError("connection reset"))),
     "Unknown", "Error", "connection reset"),
    (lambda h: h.kube.deny("list_deployments"), "False", "Forbidden", "may not list Deployments"),
    (lambda h: h.kube.deny("merge_patch_deployment"), "False", "Forbidden", "may not patch Deployment"),
])
async def test_problems_are_reported_with_their_reason(harness, setup, status, reason, fragment) -> None:
    h = harness()
    state = world(h)
    setup(h)
    part = await scope.sync(h.ctx, state)
    assert (part.condition, part.status, part.reason) == ("ScopeSynced", status, reason)
    assert fragment in part.message
    assert part.section == "scope" and part.data is not None
    transient = reason in ("Error", "Conflict")
    assert (state.scope.retry_handle is not None, state.scope.failures) == ((True, 1) if transient else (False, 0))
    if fragment == "left untouched":
        assert h.kube.count("replace_configmap") == 0


async def test_no_configmap_name_and_none_discovered(harness) -> None:
    h = harness()
    state = world(h)
    state.discovery = discovery(configmap=None)
    part = await scope.sync(h.ctx, state)
    assert (part.status, part.reason) == ("False", "TargetNotFound")
    assert "no ConfigMap labelled app.kubernetes.io/component=scheduler" in part.message


# ---------------------------------------------------------------- grants


def _rolebindings(h) -> dict[str, dict]:
    return {ns: rb for (ns, _), rb in h.kube.store["rolebindings"].items()}


async def test_grants_follow_the_list(harness) -> None:
    h = harness(scope_window_seconds=0.0)
    state = world(h, namespaces=("slurm", "ds-a", "ds-b"), scope={"grantClusterRole": "sunk-scheduler"})
    part = await scope.sync(h.ctx, state)
    assert part.reason == "Synced"
    rbs = _rolebindings(h)
    assert sorted(rbs) == ["ds-a", "ds-b"]                   # what the binding matches, not what else is listed
    rb = rbs["ds-a"]
    assert rb["metadata"]["name"] == rolebinding_name("u1") and rb["roleRef"]["name"] == "sunk-scheduler"
    assert rb["subjects"] == [{"kind": "ServiceAccount", "name": "sa", "namespace": "slurm"}]
    assert "ScopeGrantsUpdated" in h.reasons()
    watch.on_namespace(h.ctx, "MODIFIED", namespace("ds-b", terminating=True))
    await h.run_until_idle()
    assert listed(h) == ["ds-a", "slurm"] and sorted(_rolebindings(h)) == ["ds-a"]
    assert h.kube.count("list_rolebindings") == 1            # the signalled sync trusted what it knew


async def test_grants_go_only_where_the_admin_allows_and_nowhere_by_default(harness) -> None:
    """Finding 5 over the fakes: a tenant names another tenant's namespace (`victim`) among its sandbox
    namespaces and asks for grants. Under the shipped default (no --allow-grant) no RoleBinding is made
    anywhere and ScopeSynced says why; with the admin's bound, only namespaces inside it get one, and a
    grant made before the bound was narrowed is removed."""
    h = harness(scope_window_seconds=0.0, allowed_grants={})
    spec = {"sandboxNamespaces": {"names": ["ds-*", "victim"]}, "scope": {"grantClusterRole": "sunk-scheduler"}}
    state = world(h, namespaces=("slurm", "ds-a", "victim"), **spec)
    part = await scope.sync(h.ctx, state)
    assert (part.status, part.reason) == ("False", "GrantsNotAllowed") and "--allow-grant" in part.message
    assert _rolebindings(h) == {} and h.kube.count("create_rolebinding") == 0
    assert listed(h) == ["ds-a", "slurm", "victim"]          # the list itself is the tenant's own target
    bounded = harness(scope_window_seconds=0.0, allowed_grants={"slurm": ("ds-*",)})
    state = world(bounded, namespaces=("slurm", "ds-a", "victim"), **spec)
    part = await scope.sync(bounded.ctx, state)
    assert sorted(_rolebindings(bounded)) == ["ds-a"] and part.reason == "Synced"
    bounded.ctx.tenancy = replace(bounded.ctx.tenancy, grants={})  # the admin takes it back: ours go
    part = await scope.sync(bounded.ctx, state)
    assert _rolebindings(bounded) == {} and part.reason == "GrantsNotAllowed"


@pytest.mark.parametrize("rules, reviewed", [
    ([{"apiGroups": [""], "resources": ["pods"], "verbs": ["watch"]},
      {"apiGroups": [""], "resources": ["pods/binding"], "verbs": ["create"]}], []),
    ([{"apiGroups": [""], "resources": ["pods"], "verbs": ["watch"]}], ["ds-a", "ds-b"]),  # no pods/binding
    (None, ["ds-a", "ds-b"]),                                                               # no such ClusterRole
])
async def test_where_our_grant_of_a_covering_role_stands_no_review_is_asked(harness, rules, reviewed) -> None:
    """The scheduler is denied cluster-wide. When the granted ClusterRole covers watch pods and create
    pods/binding, one role read replaces the per-namespace reviews and ScopeSynced is True; a role
    that does not cover them, or cannot be read, leaves the reviews to decide, as before."""
    h = harness(scope_window_seconds=0.0)
    h.kube.access = lambda sa, verb, resource, ns: False
    if rules is not None:
        h.kube.add("clusterroles", {"metadata": {"name": "sunk-scheduler"}, "rules": rules})
    state = world(h, namespaces=("slurm", "ds-a", "ds-b"), scope={"grantClusterRole": "sunk-scheduler"})
    part = await scope.sync(h.ctx, state)
    assert sorted(_rolebindings(h)) == ["ds-a", "ds-b"] and h.kube.count("get_clusterrole") == 1
    asked = [c[1] for c in h.kube.calls if c[0] == "service_account_may"]
    assert asked == [""] + reviewed  # the cluster-wide review first (its first question answers no)
    assert part.reason == ("SchedulerNotPermitted" if reviewed else "Synced")


async def test_a_periodic_sync_replaces_a_stale_grant_and_removes_strays(harness) -> None:
    h = harness()
    state = world(h, namespaces=("slurm", "ds-a"), scope={"grantClusterRole": "sunk-scheduler"})
    await scope.sync(h.ctx, state)
    h.kube.edit("rolebindings", "ds-a", rolebinding_name("u1"), lambda rb: rb["roleRef"].update(name="edited"))
    stray = dict(h.kube.get("rolebindings", "ds-a", rolebinding_name("u1")))
    stray["metadata"] = {**stray["metadata"], "namespace": "gone-ns"}
    h.kube.add("rolebindings", stray)
    await scope.sync(h.ctx, state)
    rbs = _rolebindings(h)
    assert sorted(rbs) == ["ds-a"] and rbs["ds-a"]["roleRef"]["name"] == "sunk-scheduler"


async def test_a_grant_the_operator_may_not_create_says_the_fix(harness) -> None:
    h = harness()
    state = world(h, scope={"grantClusterRole": "sunk-scheduler"})
    h.kube.deny("create_rolebinding")
    part = await scope.sync(h.ctx, state)
    assert (part.status, part.reason) == ("False", "Forbidden")
    assert "needs `bind` on ClusterRole sunk-scheduler" in part.message and listed(h) == ["ds-known", "slurm"]


async def test_no_grant_role_lists_rolebindings_once_then_never_again(harness) -> None:
    h = harness()
    state = world(h)
    await scope.sync(h.ctx, state)
    await scope.sync(h.ctx, state)
    assert h.kube.count("list_rolebindings") == 1 and h.kube.count("create_rolebinding") == 0


# ---------------------------------------------------------------- deletion


async def test_restore_removes_what_we_added_and_our_grants(harness) -> None:
    h = harness()
    state = world(h, namespaces=("slurm", "ds-known", "ds-kept"), scope={"grantClusterRole": "sunk-scheduler",
                                                                        "alwaysInclude": ["ds-kept"]})
    state.report(await scope.sync(h.ctx, state))
    assert listed(h) == ["ds-kept", "ds-known", "slurm"] and sorted(_rolebindings(h)) == ["ds-kept", "ds-known"]
    h.events.clear()
    await scope.restore(h.ctx, state, reconcile.discover)
    assert listed(h) == ["ds-kept", "slurm"]                 # alwaysInclude entries stay, preexisting ones too
    assert _rolebindings(h) == {}
    assert h.reasons() == ["ScopeRestored", "SchedulerRestarted"] and "removed ds-known" in h.events[0][2]
    assert scope_hash_of(h) == scope_hash(["ds-kept", "slurm"])
    assert ledger_of(h) is None                              # our ledger entry went with our entries
    assert SCOPE_LEDGER_ANNOTATION not in h.kube.get("configmaps", "slurm", "cm")["metadata"]["annotations"]
    assert state.scope.syncer.cancelled                      # no more signalled syncs


async def test_restore_of_a_target_that_went_bad_leaves_it_as_is(harness) -> None:
    h = harness()
    state = world(h)
    state.report(await scope.sync(h.ctx, state))
    h.kube.deny("get_configmap")
    h.events.clear()
    await scope.restore(h.ctx, state, reconcile.discover)
    assert h.reasons() == ["ScopeNotRestored"] and listed(h) == ["ds-known", "slurm"]


# ---------------------------------------------------------------- the ledger in the target


async def test_two_bindings_on_one_target_keep_their_own_ledger_entries(harness) -> None:
    h = harness()
    b = world(h, namespaces=("slurm", "ds-known", "team-a"))
    c = h.binding(binding_body("c", uid="u2", runner={"id": "r2", "tokenSecretRef": {"name": "s"}},
                               sandboxNamespaces={"names": ["team-*"]}))
    await scope.sync(h.ctx, b)
    await scope.sync(h.ctx, c)
    assert listed(h) == ["ds-known", "slurm", "team-a"]
    assert ledger_of(h, "slurm/b").added == ("ds-known",) and ledger_of(h, "slurm/c").added == ("team-a",)
    # What was there before c's first write, minus what another binding added (not an admin's entry).
    assert ledger_of(h, "slurm/c").preexisting == ("slurm",)
    await scope.restore(h.ctx, b, reconcile.discover)
    assert listed(h) == ["slurm", "team-a"]                            # b's entry left, c's stayed
    assert ledger_of(h, "slurm/b") is None and ledger_of(h, "slurm/c").added == ("team-a",)


async def test_an_entry_two_bindings_want_leaves_only_with_the_last_of_them(harness) -> None:
    h = harness()
    b = world(h, namespaces=("slurm", "ds-a", "ds-team-x"))                 # b: ds-*
    c = h.binding(binding_body("c", uid="u2", runner={"id": "r2", "tokenSecretRef": {"name": "s"}},
                               sandboxNamespaces={"names": ["ds-team-*"]}))  # c: a subset of b's
    await scope.sync(h.ctx, b)
    await scope.sync(h.ctx, c)
    assert listed(h) == ["ds-a", "ds-team-x", "slurm"]
    assert ledger_of(h, "slurm/c").added == ("ds-team-x",)                  # c claims what b added and c wants
    await scope.restore(h.ctx, b, reconcile.discover)
    assert listed(h) == ["ds-team-x", "slurm"]                              # c still wants it: it stays
    h.ctx.bindings.forget(b.key)
    await scope.restore(h.ctx, c, reconcile.discover)
    assert listed(h) == ["slurm"]                                           # the last one wanting it removes it


async def test_a_name_one_binding_stops_wanting_stays_while_another_claims_it(harness) -> None:
    h = harness()
    b = world(h, namespaces=("slurm", "ds-team-x"))
    c = h.binding(binding_body("c", uid="u2", runner={"id": "r2", "tokenSecretRef": {"name": "s"}},
                               sandboxNamespaces={"names": ["ds-team-*"]}))
    await scope.sync(h.ctx, b)
    await scope.sync(h.ctx, c)
    b.update_body(binding_body(sandboxNamespaces={"names": ["other-*"]}))  # b no longer wants ds-team-x
    b.admit()                                                              # (its next reconcile admits it)
    await scope.sync(h.ctx, b)
    assert listed(h) == ["ds-team-x", "slurm"] and ledger_of(h, "slurm/b").added == ()  # b dropped its claim
    c.update_body(binding_body("c", uid="u2", runner={"id": "r2", "tokenSecretRef": {"name": "s"}},
                               sandboxNamespaces={"names": ["none-*"]}))
    c.admit()
    await scope.sync(h.ctx, c)
    assert listed(h) == ["slurm"]                                           # nobody wants it now: gone


async def test_a_dead_bindings_ledger_entry_protects_nothing(harness) -> None:
    h = harness()
    b = world(h, namespaces=("slurm", "ds-x"))
    await scope.sync(h.ctx, b)
    # An entry of a binding the API no longer has (deleted with Orphan while we were away).
    def ghost(obj):
        led = lg.decode(obj["metadata"]["annotations"][SCOPE_LEDGER_ANNOTATION])
        obj["metadata"]["annotations"][SCOPE_LEDGER_ANNOTATION] = lg.encode(
            led.with_entry("gone/ghost", lg.Entry(("ds-x",), ())))
    h.kube.edit("configmaps", "slurm", "cm", ghost)
    h.ctx.listed_bindings = frozenset({"slurm/b"})
    await scope.restore(h.ctx, b, reconcile.discover)
    assert listed(h) == ["slurm"]


async def test_a_blank_list_keeps_the_scheduler_s_own_namespace(harness) -> None:
    for conf in ("scheduler:\n  scope:\n    type: namespace\n",
                 "scheduler:\n  scope:\n    type: namespace\n    namespaces: []\n"):
        h = harness()
        state = world(h, conf, namespaces=("slurm", "ds-known"))
        part = await scope.sync(h.ctx, state)
        # Blank means "the scheduler's own namespace" (slurm): writing only ds-known would drop it.
        assert listed(h) == ["ds-known", "slurm"] and part.reason == "Synced"
        assert ledger_of(h).preexisting == ("slurm",)
        await scope.restore(h.ctx, state, reconcile.discover)
        assert listed(h) == ["slurm"]


async def test_a_ledger_kept_in_status_by_an_older_version_is_honoured_and_moved_to_the_target(harness) -> None:
    h = harness()
    body = binding_body(**SPEC)
    body["status"] = {"scope": {"added": ["ds-old"], "preexisting": ["slurm"]}}
    h.load_namespaces(namespace("slurm"), namespace("ds-known"))
    h.kube.add("configmaps", {"metadata": {"namespace": "slurm", "name": "cm"},
                              "data": {"scheduler.conf": CONF.replace("[slurm]", "[slurm, ds-old]")}})
    state = h.binding(body)
    await scope.sync(h.ctx, state)
    assert listed(h) == ["ds-known", "slurm"]                         # ds-old was ours (status said so) and is gone
    assert ledger_of(h) == lg.Entry(added=("ds-known",), preexisting=("slurm",))


async def test_an_unreadable_ledger_is_rebuilt_on_the_next_write(harness) -> None:
    h = harness()
    state = world(h)
    h.kube.edit("configmaps", "slurm", "cm", lambda cm: cm["metadata"].update(annotations={SCOPE_LEDGER_ANNOTATION: "{oops"}))
    part = await scope.sync(h.ctx, state)
    assert part.reason == "Synced" and ledger_of(h) == lg.Entry(added=("ds-known",), preexisting=("slurm",))


async def test_an_unchanged_target_is_parsed_once_per_resource_version(harness) -> None:
    h = harness()
    state = world(h, "scheduler:\n  scope:\n    type: namespace\n    namespaces: [slurm, ds-known]\n")
    await scope.sync(h.ctx, state)
    first = state.scope.parsed.parsed
    await scope.sync(h.ctx, state)
    assert state.scope.parsed.parsed is first                        # the same object: not parsed again
    h.kube.edit("configmaps", "slurm", "cm", lambda cm: cm["data"].update(
        {"scheduler.conf": "scheduler:\n  scope:\n    type: namespace\n    namespaces: [slurm]\n"}))
    await scope.sync(h.ctx, state)
    assert listed(h) == ["ds-known", "slurm"] and state.scope.parsed.parsed is not first


async def test_during_a_burst_the_scheduler_rolls_once_after_the_last_write(harness) -> None:
    h = harness(scope_window_seconds=0.0, scope_max_writes_per_second=10.0)
    state = world(h, scope={"minRollInterval": "0s"})  # every write may roll (rationing: test_roll_pacing)
    await scope.sync(h.ctx, state)
    assert h.kube.count("merge_patch_deployment") == 1
    # While the write for ds-1 is in flight, ds-2 arrives: the roll waits for the write that follows.
    h.kube.before("replace_configmap", lambda: watch.on_namespace(h.ctx, "ADDED", namespace("ds-2")))
    watch.on_namespace(h.ctx, "ADDED", namespace("ds-1"))
    await settle()
    assert h.kube.count("replace_configmap") == 2 and h.kube.count("merge_patch_deployment") == 1
    await h.run_until_idle()
    assert h.kube.count("replace_configmap") == 3 and h.kube.count("merge_patch_deployment") == 2
    assert scope_hash_of(h) == scope_hash(["ds-1", "ds-2", "ds-known", "slurm"]) == scope_hash(listed(h))


async def test_signalled_syncs_use_the_set_namespace_events_keep_and_resyncs_recompute_it(harness) -> None:
    h = harness()
    state = world(h)
    await scope.sync(h.ctx, state)                           # a resync: the belonging set from the whole cache
    watch.on_namespace(h.ctx, "ADDED", namespace("ds-new"))  # an event: the set follows it
    await h.run_until_idle()
    assert listed(h) == ["ds-known", "ds-new", "slurm"]
    h.ctx.namespaces.apply("ADDED", namespace("ds-missed"))  # reached the cache without an event to the scope sync
    scope.on_sandbox_pod(h.ctx, state, _pod("ds-known"))     # a signalled re-read
    await h.run_until_idle()
    assert "ds-missed" not in listed(h)
    await scope.sync(h.ctx, state)                           # the next resync is level-triggered: it catches up
    assert "ds-missed" in listed(h)
    changed = h.kube.get("bindings", "slurm", "b")
    changed["spec"]["sandboxNamespaces"] = {"names": ["ds-new"]}
    changed["metadata"]["generation"] = 2
    h.ctx.bindings.ensure(changed).admit()                   # a new matcher: the set is recomputed for it
    watch.on_namespace(h.ctx, "ADDED", namespace("ds-other"))  # does not match the new spec: no signal
    assert h.busy() == []
    await h.clock.advance(scope.POD_RECHECK_SECONDS)         # past the pacing of pod-triggered re-reads
    scope.on_sandbox_pod(h.ctx, state, _pod("ds-new"))
    await h.run_until_idle()
    assert listed(h) == ["ds-new", "slurm"]                  # ours that no longer match left; slurm preexisting


async def test_a_resync_plans_grants_from_the_rolebinding_informer_not_a_list(harness) -> None:
    """Issue 20: at 10,000 granted namespaces every no-op resync listed them all again (0.50 CPU-s)."""
    from sunk_sandbox_operator.controller.caches import GrantCache

    h = harness()
    state = world(h, namespaces=("slurm", "ds-a", "ds-b"), scope={"grantClusterRole": "sunk-scheduler"})
    cache = h.ctx.grants = GrantCache()
    cache.listed = lambda: True
    await scope.sync(h.ctx, state)
    for rb in _rolebindings(h).values():   # what the informer delivers
        cache.apply("ADDED", rb)
    assert len(cache) == 2 and h.kube.count("list_rolebindings") == 0
    calls = len(h.kube.calls)
    await scope.sync(h.ctx, state)          # a resync: plans from the cache, nothing to write
    assert h.kube.count("list_rolebindings") == 0 and h.kube.count("create_rolebinding") == 2
    assert not [c for c in h.kube.calls[calls:] if "rolebinding" in c[0]]
    # Someone deletes one: the cache says so and the next resync creates it again.
    (ns, name), rb = next(iter(h.kube.store["rolebindings"].items()))
    del h.kube.store["rolebindings"][(ns, name)]
    cache.apply("DELETED", rb)
    await scope.sync(h.ctx, state)
    assert sorted(_rolebindings(h)) == ["ds-a", "ds-b"] and h.kube.count("create_rolebinding") == 3
