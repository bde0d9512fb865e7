"""Reacting to what a binding depends on: dependency watches mapped to bindings, the echo of our
own writes, the takeover on a conflicting binding's deletion, the level-triggered roll after a
revert, and who else writes the target."""

from __future__ import annotations

import asyncio

from sunk_sandbox_operator.api.keys import SCOPE_GENERATION_ANNOTATION, SCOPE_HASH_ANNOTATION
from sunk_sandbox_operator.api.spec import LabelSelector, parse_spec
from sunk_sandbox_operator.controller import depends, lifecycle, scope
from sunk_sandbox_operator.controller.depends import Watched
from sunk_sandbox_operator.core.scope import managers
from sunk_sandbox_operator.core.scope import template as sc
from sunk_sandbox_operator.core.scope.target_ref import locate

from tests.unit.fakes import binding_body, discovery, harness_fixture  # noqa: F401 (fixture)
from tests.unit.test_scope_controller import listed, scope_hash_of, world

OURS = "sunk-sandbox-operator"


# ---------------------------------------------------------------- what is watched, and who is woken


def cm_event(h, rv: str, name: str = "cm", labels: dict | None = None) -> None:
    """A watch event of ConfigMap slurm/<name> at resourceVersion `rv`."""
    h.ctx.depends.event(Watched("ConfigMap", "slurm"), "MODIFIED",
                        {"metadata": {"namespace": "slurm", "name": name, "resourceVersion": rv,
                                      "labels": labels or {}}})


def test_a_binding_watches_its_scheduler_namespace_and_its_application(harness) -> None:
    h = harness()
    state = h.binding(binding_body())
    assert depends.wanted(state) == {Watched("ConfigMap", "slurm"),
                                     Watched("Pod", "slurm", "app.kubernetes.io/name=sunk-scheduler")}
    argo = h.binding(binding_body("a", uid="u2", scope={"target": {"kind": "ArgoCDApplication",
                                                                   "application": {"name": "slurm"}}}))
    assert Watched("Application", "argocd") in depends.wanted(argo)
    state.deleted = True
    assert depends.wanted(state) == set()


def test_paths_are_namespaced_and_metadata_only() -> None:
    r = Watched("Application", "argocd").resource()
    assert (r.path, r.metadata_only) == ("/apis/argoproj.io/v1alpha1/namespaces/argocd/applications", True)
    assert Watched("Pod", "slurm", "a=b").resource().label_selector == "a=b"
    assert [Watched(kind, "ns").resource().path for kind in ("ConfigMap", "Pod", "HelmRelease")] == [
        "/api/v1/namespaces/ns/configmaps", "/api/v1/namespaces/ns/pods",
        "/apis/helm.toolkit.fluxcd.io/v2/namespaces/ns/helmreleases"]


def test_only_a_target_beyond_the_scheduler_configmaps_adds_watches() -> None:
    base = {"runner": {"id": "r", "tokenSecretRef": {"name": "s"}}, "sandboxNamespaces": {"names": ["ds-*"]},
            "scheduler": {"namespace": "slurm"}}

    def beyond(target: dict) -> tuple:
        return locate(parse_spec({**base, "scope": {"target": target}}), "ops", "cm").reads_beyond_scheduler_configmaps
    assert beyond({"configMap": {"name": "cm"}}) == beyond({}) == ()
    assert beyond({"kind": "ArgoCDApplication", "application": {"name": "a"}}) == (("Application", "argocd", "a"),)
    assert beyond({"kind": "FluxHelmRelease", "helmRelease": {"name": "hr", "namespace": "flux"}}) == (
        ("ConfigMap", "flux", "hr-sunk-scope"), ("HelmRelease", "flux", "hr"))


async def test_an_event_wakes_only_the_bindings_it_concerns_once_per_burst(harness) -> None:
    h = harness()
    mine = h.binding(binding_body())
    # On another runner: a new binding naming one's runner wakes it (it may have to prove it: test_runner_proof.py).
    other = h.binding(binding_body("o", "elsewhere", uid="u2", runner={"id": "r2", "tokenSecretRef": {"name": "s"}}),
                      discovered=discovery(namespace="elsewhere"))
    for i in range(5):  # a Helm upgrade touches several objects at once
        cm_event(h, str(10 + i), "cm")
    assert not mine.wake.is_set()            # coalesced over KICK_SECONDS
    await h.clock.advance(depends.KICK_SECONDS)
    assert mine.wake.is_set() and not other.wake.is_set()
    assert h.ctx.metrics.dependency_wakes._value.get() == 1
    # A pod of another app in the scheduler namespace concerns nobody.
    mine.wake.clear()
    h.ctx.depends.event(Watched("Pod", "slurm", None), "ADDED",
                        {"metadata": {"namespace": "slurm", "name": "x", "labels": {"app": "other"}}})
    await h.clock.advance(depends.KICK_SECONDS)
    assert not mine.wake.is_set()
    h.ctx.depends.event(Watched("Pod", "slurm", None), "ADDED",
                        {"metadata": {"namespace": "slurm", "name": "s", "resourceVersion": "3",
                                      "labels": {"app.kubernetes.io/name": "sunk-scheduler"}}})
    await h.clock.advance(depends.KICK_SECONDS)
    assert mine.wake.is_set()


async def test_the_echo_of_our_own_write_wakes_nobody(harness) -> None:
    h = harness()
    state = h.binding(binding_body())
    cm_event(h, "42")
    h.ctx.depends.wrote("ConfigMap", "slurm", "cm", "42")  # the write's answer arrives after its event
    await h.clock.advance(depends.KICK_SECONDS)
    assert not state.wake.is_set()
    # The next change by someone else (a new resourceVersion) does wake it.
    cm_event(h, "43")
    await h.clock.advance(depends.KICK_SECONDS)
    assert state.wake.is_set()


async def test_echoes_of_a_burst_of_our_writes_wake_nobody_but_a_foreign_write_among_them_does(harness) -> None:
    h = harness()
    state = h.binding(binding_body())
    for rv in ("41", "42", "43"):
        h.ctx.depends.wrote("ConfigMap", "slurm", "cm", rv)  # group commit: writes answered back to back
    for rv in ("41", "42", "43"):
        cm_event(h, rv)  # ... their echoes arrive after the last answer
    await h.clock.advance(depends.KICK_SECONDS)
    assert not state.wake.is_set()  # not a full reconcile per write of a burst
    h.ctx.depends.wrote("ConfigMap", "slurm", "cm", "45")
    cm_event(h, "44")  # someone else's write between two of ours, all within one kick window
    cm_event(h, "45")
    await h.clock.advance(depends.KICK_SECONDS)
    assert state.wake.is_set()


async def test_an_application_event_concerns_the_binding_targeting_it(harness) -> None:
    h = harness()
    argo = h.binding(binding_body(scope={"target": {"kind": "ArgoCDApplication", "application": {"name": "slurm"}}}))
    h.ctx.depends.event(Watched("Application", "argocd"), "MODIFIED",
                        {"metadata": {"namespace": "argocd", "name": "another", "resourceVersion": "1"}})
    await h.clock.advance(depends.KICK_SECONDS)
    assert not argo.wake.is_set()
    h.ctx.depends.event(Watched("Application", "argocd"), "MODIFIED",
                        {"metadata": {"namespace": "argocd", "name": "slurm", "resourceVersion": "2"}})
    await h.clock.advance(depends.KICK_SECONDS)
    assert argo.wake.is_set()


async def test_refresh_keeps_exactly_the_watches_bindings_need(harness) -> None:
    h = harness()
    started: list[str] = []

    def start(informer):
        started.append(informer.name)
        return asyncio.ensure_future(asyncio.sleep(3600))

    h.ctx.http = object()  # an API connection (never used: `start` stands in for the informer's run)
    h.ctx.depends = depends.Dependencies(h.ctx, start=start)
    state = h.binding(binding_body())
    h.ctx.depends.refresh()
    h.ctx.depends.refresh()  # idempotent
    assert sorted(started) == ["ConfigMap watch in slurm", "Pod watch in slurm"]
    state.discovery = discovery(namespace="moved")
    h.ctx.depends.refresh()
    assert {w.namespace for w in h.ctx.depends.watches} == {"moved"}
    h.ctx.bindings.forget(state.key)
    h.ctx.depends.refresh()
    assert h.ctx.depends.watches == []


def test_the_younger_binding_is_woken_when_the_older_one_is_gone(harness) -> None:
    h = harness()
    younger = h.binding(binding_body("young", uid="u2", created="2026-02-01T00:00:00Z"))
    younger.conflict = "slurm/old"
    unrelated = h.binding(binding_body("other", uid="u3", runner={"id": "r2", "tokenSecretRef": {"name": "s"}}))
    unrelated.conflict = "slurm/x"
    lifecycle.binding_event(h.ctx, "DELETED", binding_body("old", uid="u1"))
    assert younger.wake.is_set() and not unrelated.wake.is_set()


# ---------------------------------------------------------------- the level-triggered roll


def dep(hash_value: str | None, generation: str | None = None) -> dict:
    annotations = {k: v for k, v in ((SCOPE_HASH_ANNOTATION, hash_value), (SCOPE_GENERATION_ANNOTATION, generation))
                   if v is not None}
    return {"metadata": {"name": "d"}, "spec": {"template": {"metadata": {"labels": {"app": "s"},
                                                                          "annotations": annotations}}}}


def test_decide_roll_compares_the_generation_too() -> None:
    values, sel = ["a"], LabelSelector(match_labels={"app": "s"})
    want = sc.scope_hash(values)

    def decide(d, generation, wrote=False):
        return sc.decide_roll([d], sel, "ns", values, wrote=wrote, hash_annotation=SCOPE_HASH_ANNOTATION,
                              generation=generation, generation_annotation=SCOPE_GENERATION_ANNOTATION)

    assert decide(dep(want, "3"), 3) == sc.RollDecision()              # runs what the target holds
    again = decide(dep(want, "3"), 4)                                   # the same names, written again since
    assert (again.workload, again.hash, again.generation) == ("d", want, 4)
    assert decide(dep(want), 4) == sc.RollDecision()                    # rolled before generations existed
    assert decide(dep(None), 4) == sc.RollDecision()                    # never rolled, nothing written
    assert decide(dep(None), 4, wrote=True).generation == 4


def managed(entries: list[tuple[str, str, dict]]) -> dict:
    return {"managedFields": [{"manager": m, "operation": "Update", "time": t, "fieldsV1": f} for m, t, f in entries]}


def test_last_foreign_change_reads_managed_fields() -> None:
    conf = {"f:data": {"f:scheduler.conf": {}}}
    meta = managed([("helm", "2026-12-01T10:00:05Z", conf), (OURS, "2026-12-01T10:00:09Z", conf),
                    ("kubectl", "2026-12-01T10:00:07Z", {"f:metadata": {}})])
    assert managers.last_foreign_change(meta, ("data", "scheduler.conf"), OURS) == "2026-12-01T10:00:05Z"
    assert managers.last_foreign_change(meta, ("data", "other"), OURS) is None
    template = managed([("helm", "2026-12-01T10:00:05Z", {"f:spec": {"f:template": {"f:metadata": {}}}})])
    assert managers.changed_since(template, ("spec", "template"), "2026-12-01T10:00:05Z", OURS)
    assert not managers.changed_since(template, ("spec", "template"), "2026-12-01T10:00:06Z", OURS)
    assert managers.last_foreign_change(None, ("spec",), OURS) is None


def helm_revert(h, at: str, *, restarted_at: str | None) -> None:
    """What `helm upgrade` does (measured with helm 3.22): the chart's scheduler.conf back in the
    ConfigMap (managedFields: helm owns the key again, at the upgrade's time; our ledger annotation
    stays), and, when a value changed, a new checksum on the Deployment's pod template."""
    def cm(obj):
        obj["data"]["scheduler.conf"] = "scheduler:\n  scope:\n    type: namespace\n    namespaces: [slurm]\n"
        obj["metadata"]["managedFields"] = [{"manager": "helm", "operation": "Update", "time": at,
                                             "fieldsV1": {"f:data": {"f:scheduler.conf": {}}}}]
    h.kube.edit("configmaps", "slurm", "cm", cm)
    if restarted_at:
        def deployment(obj):
            obj["spec"]["template"]["metadata"].setdefault("annotations", {})["checksum/config"] = at
            obj["metadata"]["managedFields"] = [{"manager": "helm", "operation": "Update", "time": restarted_at,
                                                 "fieldsV1": {"f:spec": {"f:template": {"f:metadata": {}}}}}]
        h.kube.edit("deployments", "slurm", "slurm-scheduler", deployment)


async def test_a_helm_revert_with_a_restart_is_restored_and_rolled_once(harness) -> None:
    h = harness()
    state = world(h, scope={"minRollInterval": "0s"})  # every write may roll (rationing: test_roll_pacing)
    await scope.sync(h.ctx, state)
    assert listed(h) == ["ds-known", "slurm"] and h.kube.count("merge_patch_deployment") == 1
    helm_revert(h, "2026-12-01T10:00:05Z", restarted_at="2026-12-01T10:00:05Z")
    h.events.clear()
    part = await scope.sync(h.ctx, state)
    assert listed(h) == ["ds-known", "slurm"] and part.reason == "Synced"
    # The names equal what the template already says, but the scheduler restarted on the chart's list.
    assert h.kube.count("merge_patch_deployment") == 2 and scope_hash_of(h) == sc.scope_hash(["ds-known", "slurm"])
    assert h.reasons() == ["ScopeUpdated", "SchedulerRestarted"]
    assert "put back after another writer removed ds-known" in dict((r, m) for _, r, m in h.events)["ScopeUpdated"]
    assert state.counters.scope_reverts == 1
    await scope.sync(h.ctx, state)  # and only once
    assert h.kube.count("merge_patch_deployment") == 2 and h.kube.count("replace_configmap") == 2


async def test_a_revert_without_a_restart_is_restored_without_a_roll(harness) -> None:
    h = harness()
    state = world(h)
    await scope.sync(h.ctx, state)
    # A no-op `helm upgrade`: the ConfigMap is put back, the Deployment untouched (its last change older).
    helm_revert(h, "2026-12-01T10:00:05Z", restarted_at="2026-12-01T09:00:00Z")
    await scope.sync(h.ctx, state)
    assert listed(h) == ["ds-known", "slurm"] and h.kube.count("replace_configmap") == 2
    assert h.kube.count("merge_patch_deployment") == 1 and state.counters.scope_reverts == 1


async def test_helm_ownership_is_said_in_status_and_once_in_a_warning(harness) -> None:
    h = harness()
    state = world(h)

    def label(obj):
        obj["metadata"]["labels"] = {"app.kubernetes.io/managed-by": "Helm"}
        obj["metadata"]["annotations"] = {"meta.helm.sh/release-name": "slurm",
                                          "meta.helm.sh/release-namespace": "tenant-slurm"}
    h.kube.edit("configmaps", "slurm", "cm", label)
    part = await scope.sync(h.ctx, state)
    assert part.data["managedBy"] == "Helm (release tenant-slurm/slurm)"
    warnings = [m for kind, r, m in h.events if r == "TargetManagedElsewhere"]
    assert len(warnings) == 1 and warnings[0].startswith("Helm (release tenant-slurm/slurm) also writes ConfigMap")
    await scope.sync(h.ctx, state)
    assert h.reasons().count("TargetManagedElsewhere") == 1


def test_other_manager_tells_helm_argo_cd_and_flux_apart() -> None:
    helm = {"labels": {"app.kubernetes.io/managed-by": "Helm", "app.kubernetes.io/instance": "slurm"},
            "annotations": {"meta.helm.sh/release-name": "slurm", "meta.helm.sh/release-namespace": "t"}}
    assert managers.other_manager(helm, "T").describe() == "Helm (release t/slurm)"
    flux = {"labels": {**helm["labels"], "helm.toolkit.fluxcd.io/name": "slurm",
                       "helm.toolkit.fluxcd.io/namespace": "flux-system"}, "annotations": helm["annotations"]}
    assert managers.other_manager(flux, "T").describe() == "Flux (HelmRelease flux-system/slurm)"
    argo = {"labels": {"app.kubernetes.io/managed-by": "Helm"},
            "annotations": {"argocd.argoproj.io/tracking-id": "slurm:/ConfigMap:t/cm"}}
    m = managers.other_manager(argo, "T")
    assert m.describe() == "Argo CD (Application slurm)" and "kind ArgoCDApplication" in m.fix
    assert managers.other_manager({"labels": {"app": "x"}}, "T") is None
    assert managers.other_manager(None, "T") is None
