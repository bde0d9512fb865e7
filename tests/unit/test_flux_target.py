"""The FluxHelmRelease scope target over the fake Kube: the operator owns a values ConfigMap that a Flux
HelmRelease reads through spec.valuesFrom; the HelmRelease is only read. Plus the pipeline and the
dependency watches for it."""

from __future__ import annotations

import asyncio

import pytest
import yaml

from sunk_sandbox_operator.core.scope.errors import classify
from sunk_sandbox_operator.adapters import kube as k
from sunk_sandbox_operator.adapters import targets
from sunk_sandbox_operator.api.keys import BINDING_LABEL, FLUX_WATCH_LABEL, MANAGED_BY_LABEL, SCOPE_LEDGER_ANNOTATION
from sunk_sandbox_operator.api.spec import parse_spec
from sunk_sandbox_operator.controller import depends, reconcile, scope
from sunk_sandbox_operator.controller.depends import Watched
from sunk_sandbox_operator.core.scope import ledger as lg
from sunk_sandbox_operator.core.scope.doc import ListRead, read_list

from tests.unit.fakes import FakeKube, binding_body, harness_fixture, namespace  # noqa: F401 (fixture)

PATH = "scheduler.scope.namespaces"
CM = "slurm-sunk-scope"
OURS = lg.Ledger({"slurm/b": lg.Entry(("ds-a",), ())})
WIRED = [{"kind": "ConfigMap", "name": "chart-defaults"}, {"kind": "ConfigMap", "name": CM, "valuesKey": "values.yaml"}]


def helmrelease(kube: FakeKube, values_from=WIRED, values: dict | None = None, namespace: str = "slurm") -> None:
    spec: dict = {"interval": "10m", "chart": {"spec": {"chart": "slurm", "sourceRef": {"kind": "HelmRepository",
                                                                                        "name": "coreweave"}}}}
    if values_from is not None:
        spec["valuesFrom"] = values_from
    if values is not None:
        spec["values"] = values
    kube.add("helmreleases", {"apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease",
                              "metadata": {"namespace": namespace, "name": "slurm"}, "spec": spec})


def flux(kube: FakeKube, memo: targets.ParseMemo | None = None) -> targets.FluxTarget:
    return targets.FluxTarget(kube, "slurm", "slurm", CM, "values.yaml", PATH, memo)


def stored(kube: FakeKube) -> dict:
    return kube.get("configmaps", "slurm", CM)


def listed(kube: FakeKube) -> list[str] | None:
    return read_list(stored(kube)["data"]["values.yaml"], PATH).values


def snippet(message: str) -> dict:
    """The YAML the message asks the admin to add (from its `spec:` line to the line before the last)."""
    lines = message.splitlines()
    start = next(i for i, line in enumerate(lines) if line == "spec:")
    return yaml.safe_load("\n".join(lines[start:-1]))


# ---------------------------------------------------------------- the ConfigMap: created, then edited


async def test_a_missing_configmap_reads_empty_and_the_first_write_creates_it_labelled() -> None:
    kube = FakeKube()
    helmrelease(kube)
    t = flux(kube)
    read = await t.read()
    assert read.list == ListRead([], "missing") and read.ledger.entries == {}
    assert kube.count("create_configmap") == 0 and not t.can_roll and t.kind == "ConfigMap"
    assert (t.namespace, t.name) == ("slurm", CM)  # the object written: its echo is recognised
    rv = await t.write(read, ["ds-a", "slurm"], OURS)
    obj = stored(kube)
    assert rv == obj["metadata"]["resourceVersion"] and kube.count("create_configmap") == 1
    assert listed(kube) == ["ds-a", "slurm"]
    assert yaml.safe_load(obj["data"]["values.yaml"]) == {"scheduler": {"scope": {"namespaces": ["ds-a", "slurm"]}}}
    labels = obj["metadata"]["labels"]
    assert labels == {FLUX_WATCH_LABEL[0]: "Enabled", MANAGED_BY_LABEL[0]: MANAGED_BY_LABEL[1],
                      BINDING_LABEL: "slurm.b"}
    assert lg.decode(obj["metadata"]["annotations"][SCOPE_LEDGER_ANNOTATION]) == OURS
    again = await t.read()
    assert again.list.values == ["ds-a", "slurm"] and again.ledger == OURS


async def test_an_existing_configmap_is_edited_in_place_with_the_precondition_and_gets_the_watch_label() -> None:
    kube = FakeKube()
    helmrelease(kube)
    text = "# the admin's note\nscheduler:\n  scope:\n    namespaces:\n      - slurm  # ours\n"
    kube.add("configmaps", {"metadata": {"namespace": "slurm", "name": CM, "labels": {"team": "hpc"}},
                            "data": {"values.yaml": text, "other": "kept"}})
    t = flux(kube)
    read = await t.read()
    assert read.list == ListRead(["slurm"], "list")
    await t.write(read, ["ds-a", "slurm"], OURS)
    obj = stored(kube)
    assert kube.count("replace_configmap") == 1 and kube.count("create_configmap") == 0
    put = [c for c in kube.calls if c[0] == "replace_configmap"][0][3]
    assert put["metadata"]["resourceVersion"] == read.obj["metadata"]["resourceVersion"]
    assert obj["data"]["values.yaml"].startswith("# the admin's note\n") and obj["data"]["other"] == "kept"
    assert listed(kube) == ["ds-a", "slurm"]
    # Not created by us: only the watch label is added (helm-controller reacts within seconds).
    assert obj["metadata"]["labels"] == {"team": "hpc", FLUX_WATCH_LABEL[0]: FLUX_WATCH_LABEL[1]}


async def test_lost_races_are_conflicts_and_change_nothing() -> None:
    kube = FakeKube()
    helmrelease(kube)
    t = flux(kube)
    read = await t.read()                                      # absent when read ...
    kube.add("configmaps", {"metadata": {"namespace": "slurm", "name": CM}, "data": {"values.yaml": "x: 1\n"}})
    with pytest.raises(k.Conflict):                            # ... created by someone else meanwhile
        await t.write(read, ["ds-a"], OURS)
    read = await t.read()
    kube.edit("configmaps", "slurm", CM, lambda cm: cm["data"].update({"values.yaml": "x: 2\n"}))
    with pytest.raises(k.Conflict):
        await t.write(read, ["ds-a"], OURS)
    assert stored(kube)["data"] == {"values.yaml": "x: 2\n"}


async def test_the_document_is_parsed_once_per_resource_version() -> None:
    kube = FakeKube()
    helmrelease(kube)
    memo = targets.ParseMemo()
    t = flux(kube, memo)
    await t.write(await t.read(), ["ds-a"], OURS)
    primed = memo.parsed
    assert memo.version[1] == stored(kube)["metadata"]["resourceVersion"]
    assert (await t.read()).list.values == ["ds-a"] and memo.parsed is primed


async def test_the_next_write_of_our_own_text_neither_parses_nor_composes(monkeypatch) -> None:
    from sunk_sandbox_operator.core.scope import doc as scope_doc
    kube = FakeKube()
    helmrelease(kube)
    memo = targets.ParseMemo()
    t = flux(kube, memo)
    await t.write(await t.read(), ["ds-a", "slurm"], OURS)     # creates the document
    await t.write(await t.read(), ["ds-a", "slurm", "x"], OURS)  # a splice: its span is kept
    read = await t.read()                                      # the text our write produced, parse primed

    def refuse(*_a, **_k):
        raise AssertionError("parsed")
    monkeypatch.setattr(scope_doc.yaml, "compose", refuse)
    monkeypatch.setattr(scope_doc, "_load", refuse)
    monkeypatch.setattr(scope_doc.yaml_splice, "load", refuse)
    await t.write(read, ["ds-a", "ds-b", "slurm"], OURS)       # the span of the last write: no re-parse
    monkeypatch.undo()
    assert listed(kube) == ["ds-a", "ds-b", "slurm"]


async def test_malformed_yaml_in_the_key_is_never_written_over() -> None:
    kube = FakeKube()
    helmrelease(kube)
    kube.add("configmaps", {"metadata": {"namespace": "slurm", "name": CM}, "data": {"values.yaml": "a: [\n"}})
    t = flux(kube)
    read = await t.read()
    assert read.list.error and "malformed YAML" in read.list.error
    with pytest.raises(targets.TargetFailed) as info:
        await t.write(read, ["ds-a"], OURS)
    problem = classify(info.value.error)
    assert problem.reason == "InvalidConfig" and kube.count("replace_configmap") == 0


# ---------------------------------------------------------------- the HelmRelease: read only, checked


@pytest.mark.parametrize("values_from, why", [
    (None, "does not read ConfigMap slurm-sunk-scope key values.yaml"),
    ([{"kind": "ConfigMap", "name": "chart-defaults"}], "does not read"),
    ([{"kind": "Secret", "name": CM, "valuesKey": "values.yaml"}], "does not read"),
    ([{"kind": "ConfigMap", "name": CM, "valuesKey": "other.yaml"}], "does not read"),
    ([{"kind": "ConfigMap", "name": CM, "valuesKey": "values.yaml", "targetPath": PATH}], "remove targetPath"),
])
async def test_a_helmrelease_not_reading_our_key_is_values_from_missing_with_the_entry_to_add(values_from, why) -> None:
    kube = FakeKube()
    helmrelease(kube, values_from)
    with pytest.raises(targets.TargetFailed) as info:
        await flux(kube).read()
    problem = classify(info.value.error)
    assert problem.reason == "ValuesFromMissing" and why in problem.message
    assert "HelmRelease slurm/slurm" in problem.message and "nothing is written" in problem.message
    assert snippet(problem.message) == {"spec": {"valuesFrom": [
        {"kind": "ConfigMap", "name": CM, "valuesKey": "values.yaml"}]}}
    assert kube.count("get_configmap") == 0 and kube.count("create_configmap") == 0


async def test_flux_s_default_values_key_counts_and_a_second_entry_with_target_path_does_not_hurt() -> None:
    kube = FakeKube()
    helmrelease(kube, [{"kind": "ConfigMap", "name": CM, "targetPath": "x.y"}, {"kind": "ConfigMap", "name": CM}])
    assert (await flux(kube).read()).list.values == []


@pytest.mark.parametrize("values", [
    {"scheduler": {"scope": {"namespaces": ["from-git"]}}},
    {"scheduler": {"scope": {"namespaces": None}}},         # null deletes the key in Helm: ours is gone too
    {"scheduler": {"scope": "namespace"}},                   # a scalar replaces the mapping on the way
    {"scheduler": None},
])
async def test_inline_values_setting_the_path_override_ours_and_are_reported(values) -> None:
    kube = FakeKube()
    helmrelease(kube, values=values)
    with pytest.raises(targets.TargetFailed) as info:
        await flux(kube).read()
    problem = classify(info.value.error)
    assert problem.reason == "ValuesOverridden" and f"sets {PATH} in its inline spec.values" in problem.message
    assert kube.count("create_configmap") == 0


async def test_inline_values_elsewhere_are_fine_and_their_scope_type_is_seen() -> None:
    kube = FakeKube()
    helmrelease(kube, values={"scheduler": {"enabled": True, "scope": {"type": "cluster"}}, "slurmConfig": {}})
    read = await flux(kube).read()
    assert read.list == ListRead([], "missing", "cluster")     # decide_list writes nothing in cluster scope


@pytest.mark.parametrize("setup, reason, fragment", [
    (lambda kube: None, "TargetNotFound", "Flux HelmRelease slurm/slurm not found"),
    (lambda kube: (helmrelease(kube), kube.deny("get_helmrelease")), "Forbidden", "may not read HelmRelease slurm/slurm:"),
    (lambda kube: (helmrelease(kube), kube.deny("get_configmap")), "Forbidden", "may not read ConfigMap slurm/"),
])
async def test_read_problems(setup, reason, fragment) -> None:
    kube = FakeKube()
    setup(kube)
    with pytest.raises(targets.TargetFailed) as info:
        await flux(kube).read()
    problem = classify(info.value.error)
    assert problem.reason == reason and fragment in problem.message


async def test_a_create_the_operator_may_not_make_is_forbidden() -> None:
    kube = FakeKube()
    helmrelease(kube)
    t = flux(kube)
    read = await t.read()
    kube.deny("create_configmap")
    with pytest.raises(targets.TargetFailed) as info:
        await t.write(read, ["ds-a"], OURS)
    problem = classify(info.value.error)
    assert problem.reason == "Forbidden" and "may not write ConfigMap slurm/slurm-sunk-scope" in problem.message


# ---------------------------------------------------------------- the spec


def _spec(target: dict, **extra) -> object:
    return parse_spec({"runner": {"id": "r", "tokenSecretRef": {"name": "s"}}, "sandboxNamespaces": {"names": ["ds-*"]},
                       "scope": {"target": target}, **extra})


def test_for_spec_defaults_to_the_scheduler_namespace_and_derives_the_configmap_name() -> None:
    t = targets.for_spec(FakeKube(), _spec({"kind": "FluxHelmRelease", "helmRelease": {"name": "slurm"}}), "tenant", None)
    assert isinstance(t, targets.FluxTarget)
    assert (t.namespace, t.helm_release, t.name, t.key, t.path) == ("tenant", "slurm", CM, "values.yaml", PATH)
    named = targets.for_spec(FakeKube(), _spec({"kind": "FluxHelmRelease", "helmRelease": {
        "name": "slurm", "namespace": "flux-apps", "configMap": "scope", "key": "v.yaml", "path": "a.b"}}), "tenant", None)
    assert (named.namespace, named.name, named.key, named.path) == ("flux-apps", "scope", "v.yaml", "a.b")
    assert "valuesFrom of HelmRelease flux-apps/slurm" in named.describe()


def test_the_crd_requires_a_name_for_the_flux_kind() -> None:
    from sunk_sandbox_operator.api.scope_spec import ScopeTargetSpec as ScopeTarget

    rules = ScopeTarget.model_json_schema()["x-kubernetes-validations"]
    assert any("FluxHelmRelease" in r["rule"] and "helmRelease.name" in r["message"] for r in rules)


# ---------------------------------------------------------------- the pipeline and the dependency watches


def _world(h, **release):
    h.load_namespaces(*(namespace(n) for n in ("slurm", "ds-known", "other")))
    helmrelease(h.kube, **release)
    return h.binding(binding_body(scope={"target": {"kind": "FluxHelmRelease", "helmRelease": {"name": "slurm"}},
                                         "alwaysInclude": ["slurm"]}))


async def test_a_sync_creates_the_configmap_never_rolls_and_restore_keeps_it(harness) -> None:
    h = harness()
    state = _world(h)
    part = await scope.sync(h.ctx, state)
    assert (part.status, part.reason) == ("True", "Synced") and CM in part.message
    assert listed(h.kube) == ["ds-known", "slurm"]
    assert h.kube.count("merge_patch_deployment") == 0 and h.kube.count("list_deployments") == 0
    assert h.reasons() == ["ScopeUpdated"]
    state.report(part)
    await scope.sync(h.ctx, state)                              # nothing changed: no write
    assert h.kube.count("create_configmap") == 1 and h.kube.count("replace_configmap") == 0
    await scope.restore(h.ctx, state, reconcile.discover)
    assert listed(h.kube) == ["slurm"]                          # the HelmRelease still reads it: it stays
    assert SCOPE_LEDGER_ANNOTATION not in stored(h.kube)["metadata"]["annotations"]


async def test_a_sync_against_an_unwired_helmrelease_reports_and_writes_nothing(harness) -> None:
    h = harness()
    state = _world(h, values_from=[])
    part = await scope.sync(h.ctx, state)
    assert (part.status, part.reason) == ("False", "ValuesFromMissing") and "valuesKey: values.yaml" in part.message
    assert h.kube.count("create_configmap") == 0 and h.kube.count("replace_configmap") == 0


async def test_the_helmrelease_and_its_configmap_are_watched_in_their_namespace(harness) -> None:
    h = harness()
    state = h.binding(binding_body(scope={"target": {"kind": "FluxHelmRelease",
                                                     "helmRelease": {"name": "slurm", "namespace": "flux-apps"}}}))
    assert {Watched("HelmRelease", "flux-apps"), Watched("ConfigMap", "flux-apps"),
            Watched("ConfigMap", "slurm")} <= depends.wanted(state)
    r = Watched("HelmRelease", "flux-apps").resource()
    assert (r.path, r.metadata_only) == ("/apis/helm.toolkit.fluxcd.io/v2/namespaces/flux-apps/helmreleases", True)
    assert depends.concerns(state, Watched("HelmRelease", "flux-apps"), "slurm", None)
    assert not depends.concerns(state, Watched("HelmRelease", "flux-apps"), "other", None)
    assert depends.concerns(state, Watched("ConfigMap", "flux-apps"), CM, None)
    assert not depends.concerns(state, Watched("ConfigMap", "flux-apps"), "unrelated", None)
    same_ns = h.binding(binding_body("c", uid="u2", runner={"id": "r2", "tokenSecretRef": {"name": "s"}},
                                     scope={"target": {"kind": "FluxHelmRelease", "helmRelease": {"name": "slurm"}}}))
    assert {w for w in depends.wanted(same_ns) if w.kind == "ConfigMap"} == {Watched("ConfigMap", "slurm")}
    h.ctx.depends.event(Watched("HelmRelease", "flux-apps"), "MODIFIED",
                        {"metadata": {"namespace": "flux-apps", "name": "slurm", "resourceVersion": "7"}})
    await h.clock.advance(depends.KICK_SECONDS)
    assert state.wake.is_set() and not same_ns.wake.is_set()
