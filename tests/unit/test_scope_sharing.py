"""Shared scope targets, bindings that disagree on one, the scheduler's RBAC check and a StatefulSet
scheduler, over the fake Kube and as pure decisions."""

from __future__ import annotations

from sunk_sandbox_operator.api.keys import SCOPE_HASH_ANNOTATION
from sunk_sandbox_operator.api.spec import LabelSelector
from sunk_sandbox_operator.controller import scope, watch
from sunk_sandbox_operator.core.scope.rbac import DENIED_RECHECK_SECONDS
from sunk_sandbox_operator.core import conflicts
from sunk_sandbox_operator.core.scope import template as sc

from tests.unit.fakes import binding_body, harness_fixture, namespace  # noqa: F401 (fixture)
from tests.unit.test_scope_controller import DEPLOYMENT, listed, world


def body(name: str, created: str, **spec) -> dict:
    return binding_body(name, created=created, **spec)


def test_a_younger_binding_disagreeing_on_mode_or_roll_is_told_so() -> None:
    old = body("old", "2026-01-01T00:00:00Z")
    observer = body("obs", "2026-01-02T00:00:00Z", mode="Observe")
    msg = conflicts.shared_target_conflict(observer, [old, observer])
    assert msg.startswith("binding slurm/old (older) shares this scope target in mode Enforce, this one is Observe")
    assert conflicts.shared_target_conflict(old, [old, observer]) is None          # the older decides
    no_roll = body("nr", "2026-01-02T00:00:00Z", scope={"restartScheduler": False})
    assert "restartScheduler=true, this one false" in conflicts.shared_target_conflict(no_roll, [old, no_roll])
    agree = body("ok", "2026-01-02T00:00:00Z", sandboxNamespaces={"names": ["team-*"]})
    assert conflicts.shared_target_conflict(agree, [old, agree]) is None            # other namespaces: merged
    elsewhere = body("e", "2026-01-02T00:00:00Z", mode="Observe", scheduler={"namespace": "other"})
    assert conflicts.shared_target_conflict(elsewhere, [old, elsewhere]) is None    # another target


def test_target_keys_tell_targets_apart() -> None:
    a = body("a", "t", scope={"target": {"kind": "ArgoCDApplication", "application": {"name": "slurm"}}})
    b = body("b", "t", scope={"target": {"kind": "ArgoCDApplication", "application": {"name": "other"}}})
    assert conflicts.target_key(a) != conflicts.target_key(b)
    assert conflicts.target_key(body("c", "t")) == conflicts.target_key(body("d", "t"))


def test_flux_target_keys_fill_in_the_defaults() -> None:
    def flux(name: str, **hr) -> dict:
        return body(name, "t", scope={"target": {"kind": "FluxHelmRelease", "helmRelease": {"name": "slurm", **hr}}})
    spelled = flux("b", namespace="slurm", configMap="slurm-sunk-scope", key="values.yaml",
                   path="scheduler.scope.namespaces")
    assert conflicts.target_key(flux("a")) == conflicts.target_key(spelled)   # the same ConfigMap key
    assert conflicts.target_key(flux("a")) != conflicts.target_key(flux("c", key="other.yaml"))
    assert conflicts.target_key(flux("a")) != conflicts.target_key(flux("d", namespace="flux-system"))


async def test_a_conflicting_binding_writes_nothing_to_the_target(harness) -> None:
    h = harness()
    state = world(h)
    state.target_conflict = "binding slurm/old (older) shares this scope target in mode Observe, this one is Enforce"
    part = await scope.sync(h.ctx, state)
    assert (part.status, part.reason) == ("False", "SharedTargetConflict") and h.kube.count("replace_configmap") == 0


async def test_the_scheduler_s_rbac_is_checked_once_per_namespace(harness) -> None:
    h = harness()
    state = world(h, namespaces=("slurm", "ds-known", "ds-two"))
    allowed = {"slurm"}
    h.kube.access = lambda sa, verb, resource, ns: sa == "slurm/sa" and ns in allowed
    part = await scope.sync(h.ctx, state)
    assert (part.status, part.reason) == ("False", "SchedulerNotPermitted")
    assert "slurm/sa may not watch pods or create pods/binding in 2 of the binding's listed namespace(s): ds-known, ds-two" \
        in part.message
    allowed |= {"ds-known", "ds-two"}  # the grant arrives (an admin, the chart, grantClusterRole)
    calls = h.kube.count("service_account_may")
    part = await scope.sync(h.ctx, state)
    assert part.reason == "Synced"
    # Cluster-wide (denied at its first review), then the two namespaces not yet confirmed (2 reviews
    # each); slurm was confirmed before and is not asked again.
    assert h.kube.count("service_account_may") - calls == 1 + 4
    calls = h.kube.count("service_account_may")
    await scope.sync(h.ctx, state)
    assert h.kube.count("service_account_may") - calls == 1  # only the cluster-wide one (denied at once)


async def test_a_burst_asks_only_about_new_namespaces_and_the_denied_again_after_a_while(harness) -> None:
    h = harness()
    state = world(h, namespaces=("slurm", "ds-known", "ds-two"))
    allowed = {"slurm", "ds-three"}
    h.kube.access = lambda sa, verb, resource, ns: sa == "slurm/sa" and ns in allowed
    assert (await scope.sync(h.ctx, state)).reason == "SchedulerNotPermitted"

    def condition() -> dict:
        conds = h.kube.get("bindings", "slurm", "b")["status"]["conditions"]
        return next(c for c in conds if c["type"] == "ScopeSynced")

    def asked(since: int) -> list[str]:  # the namespace of each SubjectAccessReview since call `since`
        return [c[1] for c in h.kube.calls[since:] if c[0] == "service_account_may"]

    mark = len(h.kube.calls)
    watch.on_namespace(h.ctx, "ADDED", namespace("ds-three"))  # a signalled sync, as in a burst
    await h.run_until_idle()
    assert "ds-three" in listed(h)
    assert asked(mark) == ["ds-three", "ds-three"]  # its 2 reviews; the denied ones are not asked again
    assert condition()["reason"] == "SchedulerNotPermitted" and "2 of the binding's listed namespace(s): ds-known, ds-two" \
        in condition()["message"]
    allowed |= {"ds-known", "ds-two"}  # the grant arrives; asked again once the pacing allows
    mark = len(h.kube.calls)
    await h.clock.advance(DENIED_RECHECK_SECONDS)
    watch.on_namespace(h.ctx, "ADDED", namespace("ds-four"))
    await h.run_until_idle()
    assert {"ds-known", "ds-two", "ds-four"} <= set(asked(mark))
    assert "1 of the binding's listed namespace(s): ds-four" in condition()["message"]


async def test_a_cluster_wide_grant_takes_one_review(harness) -> None:
    h = harness()
    state = world(h, namespaces=("slurm", "ds-known", "ds-two"))
    part = await scope.sync(h.ctx, state)
    assert part.reason == "Synced" and h.kube.count("service_account_may") == 2  # watch pods, create pods/binding


def test_decide_roll_picks_a_statefulset_when_no_deployment_runs_the_scheduler() -> None:
    sel = LabelSelector(match_labels={"app": "s"})
    sts = {"kind": "StatefulSet", "metadata": {"name": "sched"},
           "spec": {"template": {"metadata": {"labels": {"app": "s"}}}}}
    other = {"kind": "Deployment", "metadata": {"name": "web"}, "spec": {"template": {"metadata": {"labels": {}}}}}
    d = sc.decide_roll([other, sts], sel, "ns", ["a"], wrote=True, hash_annotation=SCOPE_HASH_ANNOTATION)
    assert (d.kind, d.workload) == ("StatefulSet", "sched")


async def test_a_statefulset_scheduler_is_patched(harness) -> None:
    h = harness()
    state = world(h, deployment=False)
    h.kube.add("statefulsets", {**DEPLOYMENT, "kind": "StatefulSet"})
    await scope.sync(h.ctx, state)
    assert h.kube.count("merge_patch_statefulset") == 1 and h.kube.count("merge_patch_deployment") == 0
    assert "StatefulSet slurm/slurm-scheduler: pod-template" in dict((r, m) for _, r, m in h.events)["SchedulerRestarted"]
