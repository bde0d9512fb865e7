"""Scope targets against the fake Kube: read the list, write it with the read's precondition (and the
ledger in the same request), and every failure as the facts (`TargetFailed`) that classify to its
ScopeSynced reason and fix (`core.scope.errors.classify`; the table itself: test_scope_errors.py)."""

from __future__ import annotations

import pytest

from sunk_sandbox_operator.core.scope.errors import classify
from sunk_sandbox_operator.adapters import kube as k
from sunk_sandbox_operator.adapters import targets
from sunk_sandbox_operator.api.keys import SCOPE_LEDGER_ANNOTATION
from sunk_sandbox_operator.api.spec import parse_spec
from sunk_sandbox_operator.core.scope import ledger as lg
from sunk_sandbox_operator.core.scope.doc import ListRead

from tests.unit.fakes import FakeKube

CONF = """# rendered by the chart
scheduler:
  name: slurm-scheduler
  scope:
    type: namespace
    namespaces:
      - slurm   # the Slurm namespace
  logLevel: info
"""
PATH = "scheduler.scope.namespaces"
OURS = lg.Ledger({"slurm/b": lg.Entry(("ds-a",), ("slurm",))})


def configmap(kube: FakeKube, conf: str = CONF, **extra) -> targets.ConfigMapTarget:
    kube.add("configmaps", {"metadata": {"namespace": "slurm", "name": "cm"}, "data": {"scheduler.conf": conf}, **extra})
    return targets.ConfigMapTarget(kube, "slurm", "cm", "scheduler.conf", PATH)


def application(kube: FakeKube, spec: dict | None = None) -> targets.ApplicationTarget:
    spec = spec if spec is not None else {
        "source": {"repoURL": "r", "chart": "slurm", "helm": {"valuesObject": {
            "scheduler": {"scope": {"type": "namespace", "namespaces": ["slurm"]}}, "other": {"keep": True}}}}}
    kube.add("applications", {"metadata": {"namespace": "argocd", "name": "slurm"}, "spec": spec})
    return targets.ApplicationTarget(kube, "argocd", "slurm", PATH)


def stored_ledger(obj: dict) -> lg.Ledger:
    return lg.decode((obj["metadata"].get("annotations") or {}).get(SCOPE_LEDGER_ANNOTATION))


# ---------------------------------------------------------------- ConfigMap


async def test_configmap_read() -> None:
    kube = FakeKube()
    t = configmap(kube)
    read = await t.read()
    assert read.list == ListRead(["slurm"], "list", "namespace")
    assert read.obj["metadata"]["resourceVersion"] == kube.get("configmaps", "slurm", "cm")["metadata"]["resourceVersion"]
    assert read.ledger.entries == {}
    assert t.describe() == f"ConfigMap slurm/cm key scheduler.conf at {PATH}" and t.can_roll and t.kind == "ConfigMap"


async def test_configmap_write_changes_only_the_list_and_carries_the_ledger() -> None:
    kube = FakeKube()
    t = configmap(kube)
    read = await t.read()
    await t.write(read, ["ds-a", "slurm"], OURS)
    obj = kube.get("configmaps", "slurm", "cm")
    text = obj["data"]["scheduler.conf"]
    assert "# rendered by the chart" in text and "logLevel: info" in text and "- ds-a" in text
    assert (await t.read()).list.values == ["ds-a", "slurm"]
    assert stored_ledger(obj).get("slurm/b") == lg.Entry(("ds-a",), ("slurm",))
    assert (await t.read()).ledger == stored_ledger(obj)


async def test_configmap_write_of_the_ledger_alone_keeps_the_text_byte_for_byte() -> None:
    kube = FakeKube()
    t = configmap(kube)
    await t.write(await t.read(), None, OURS)
    obj = kube.get("configmaps", "slurm", "cm")
    assert obj["data"]["scheduler.conf"] == CONF and stored_ledger(obj).get("slurm/b") is not None
    await t.write(await t.read(), None, lg.Ledger())
    assert SCOPE_LEDGER_ANNOTATION not in (kube.get("configmaps", "slurm", "cm")["metadata"].get("annotations") or {})


async def test_configmap_write_after_someone_else_wrote_is_a_conflict_and_changes_nothing() -> None:
    kube = FakeKube()
    t = configmap(kube)
    read = await t.read()
    kube.edit("configmaps", "slurm", "cm", lambda cm: cm["data"].update({"scheduler.conf": CONF + "# edited\n"}))
    with pytest.raises(k.Conflict):
        await t.write(read, ["ds-a", "slurm"], OURS)
    assert kube.get("configmaps", "slurm", "cm")["data"]["scheduler.conf"] == CONF + "# edited\n"


async def test_configmap_parses_once_per_resource_version_and_our_write_primes_the_next_read() -> None:
    kube = FakeKube()
    memo = targets.ParseMemo()
    configmap(kube)
    t = targets.ConfigMapTarget(kube, "slurm", "cm", "scheduler.conf", PATH, memo)
    read = await t.read()
    parsed = memo.parsed
    assert (await t.read()).list == read.list and memo.parsed is parsed        # the same version: no parse
    kube.edit("configmaps", "slurm", "cm", lambda cm: None)                        # a new resourceVersion
    read = await t.read()
    assert memo.parsed is not parsed and read.list.values == ["slurm"]
    await t.write(read, ["ds-a", "slurm"], OURS)
    primed = memo.parsed
    assert memo.version[1] == kube.get("configmaps", "slurm", "cm")["metadata"]["resourceVersion"]
    assert (await t.read()).list.values == ["ds-a", "slurm"] and memo.parsed is primed
    other_path = targets.ConfigMapTarget(kube, "slurm", "cm", "scheduler.conf", "scheduler.other", memo)
    assert (await other_path.read()).list.values == []                               # another path: its own entry


def test_the_parse_memo_holds_one_version_and_only_with_a_resource_version() -> None:
    memo, parses = targets.ParseMemo(), []

    def parse(text: str) -> targets.Parsed:
        parses.append(text)
        return ({"text": text}, None)
    assert memo.parse(("u", "1", "k", "p"), lambda: parse("a")) is memo.parse(("u", "1", "k", "p"), lambda: parse("b"))
    memo.parse(("u", "2", "k", "p"), lambda: parse("c"))                  # the next version replaces it
    assert memo.get(("u", "1", "k", "p")) is None and memo.get(("u", "2", "k", "p")) == ({"text": "c"}, None)
    memo.parse(("u", None, "k", "p"), lambda: parse("d"))                  # not stored yet: never a hit
    memo.parse(("u", None, "k", "p"), lambda: parse("e"))
    assert parses == ["a", "c", "d", "e"]
    memo.remember(("u", "3", "k", "p"), ({}, None))
    memo.hold({"metadata": {"resourceVersion": "3"}}, OURS, replaced="2")  # our write's answer, and what it replaced
    assert (memo.held, memo.written_version) == (("3", "2"), "3")
    memo.hold({"metadata": {"resourceVersion": "3"}}, OURS)                # ... or the object as read
    assert (memo.held, memo.written_version) == (("3",), None)
    memo.parse(("u", "4", "k", "p"), lambda: parse("f"))                  # what was held goes with its version
    assert (memo.obj, memo.ledger, memo.span, memo.held) == (None, None, None, ())
    memo.clear()
    assert (memo.version, memo.parsed) == (None, None)


@pytest.mark.parametrize("setup, reason, fragment", [
    (lambda kube: None, "TargetNotFound", "ConfigMap slurm/cm not found"),
    (lambda kube: (kube.add("configmaps", {"metadata": {"namespace": "slurm", "name": "cm"}, "data": {"x": "y"}})),
     "TargetNotFound", "has no key scheduler.conf"),
    (lambda kube: (configmap(kube), kube.deny("get_configmap")), "Forbidden", "may not read ConfigMap slurm/cm"),
    (lambda kube: (configmap(kube), kube.deny("get_configmap")), "Forbidden",
     "RoleBinding in slurm to the ClusterRole sunk-sandbox-operator-targets"),
])
async def test_configmap_read_problems(setup, reason, fragment) -> None:
    kube = FakeKube()
    setup(kube)
    with pytest.raises(targets.TargetFailed) as info:
        await targets.ConfigMapTarget(kube, "slurm", "cm", "scheduler.conf", PATH).read()
    problem = classify(info.value.error)
    assert problem.reason == reason and fragment in problem.message


@pytest.mark.parametrize("immutable, after_read, reason, fragment", [
    (False, lambda kube: kube.deny("replace_configmap"), "Forbidden", "may not write"),
    (False, lambda kube: kube.deny("replace_configmap"), "Forbidden",  # the fix: RBAC on targets is per namespace
     "grant it: a RoleBinding in slurm to the ClusterRole sunk-sandbox-operator-targets"),
    (False, lambda kube: kube.store["configmaps"].clear(), "TargetNotFound", "disappeared while being written"),
    (True, lambda kube: None, "InvalidConfig", "the API server refused the write"),
])
async def test_configmap_write_problems(immutable, after_read, reason, fragment) -> None:
    kube = FakeKube()
    t = configmap(kube, **({"immutable": True} if immutable else {}))
    read = await t.read()
    after_read(kube)
    with pytest.raises(targets.TargetFailed) as info:
        await t.write(read, ["ds-a", "slurm"], OURS)
    problem = classify(info.value.error)
    assert problem.reason == reason and fragment in problem.message


@pytest.mark.parametrize("memo", [None, targets.ParseMemo()])
async def test_malformed_yaml_is_never_written_over(memo) -> None:
    """Even by a caller that writes despite the read's error (the controller does not): InvalidConfig."""
    kube = FakeKube()
    broken = "scheduler:\n  scope: [\n"
    configmap(kube, broken)
    t = targets.ConfigMapTarget(kube, "slurm", "cm", "scheduler.conf", PATH, memo)
    read = await t.read()
    assert read.list.error and "malformed YAML" in read.list.error
    with pytest.raises(targets.TargetFailed) as info:
        await t.write(read, ["ds-a"], OURS)
    problem = classify(info.value.error)
    assert problem.reason == "InvalidConfig" and t.describe() in problem.message
    assert kube.count("replace_configmap") == 0 and kube.get("configmaps", "slurm", "cm")["data"]["scheduler.conf"] == broken


# ---------------------------------------------------------------- Argo CD Application


async def test_application_read_and_write_patch_only_the_path_with_the_precondition() -> None:
    kube = FakeKube()
    t = application(kube)
    read = await t.read()
    assert read.list == ListRead(["slurm"], "list", "namespace") and not t.can_roll
    await t.write(read, ["ds-a", "slurm"], OURS)
    patch = [c for c in kube.calls if c[0] == "merge_patch_application"][0][3]
    assert patch["metadata"]["resourceVersion"] == read.obj["metadata"]["resourceVersion"]
    assert patch["spec"] == {"source": {"helm": {"valuesObject": {"scheduler": {"scope": {"namespaces": ["ds-a", "slurm"]}}}}}}
    obj = kube.get("applications", "argocd", "slurm")
    values = obj["spec"]["source"]["helm"]["valuesObject"]
    assert values["scheduler"]["scope"] == {"type": "namespace", "namespaces": ["ds-a", "slurm"]}
    assert values["other"] == {"keep": True} and obj["spec"]["source"]["chart"] == "slurm"
    assert stored_ledger(obj).get("slurm/b") == lg.Entry(("ds-a",), ("slurm",))


async def test_application_comma_string_stays_a_string() -> None:
    kube = FakeKube()
    t = application(kube, {"source": {"helm": {"valuesObject": {"scheduler": {"scope": {"namespaces": "slurm"}}}}}})
    read = await t.read()
    assert read.list.style == "string"
    await t.write(read, ["ds-a", "slurm"], OURS)
    values = kube.get("applications", "argocd", "slurm")["spec"]["source"]["helm"]["valuesObject"]
    assert values["scheduler"]["scope"]["namespaces"] == "ds-a,slurm"


async def test_application_ledger_only_write_and_removal() -> None:
    kube = FakeKube()
    t = application(kube)
    await t.write(await t.read(), None, OURS)
    patch = [c for c in kube.calls if c[0] == "merge_patch_application"][-1][3]
    assert "spec" not in patch
    await t.write(await t.read(), None, lg.Ledger())                  # null in a merge patch: removed
    assert SCOPE_LEDGER_ANNOTATION not in (kube.get("applications", "argocd", "slurm")["metadata"].get("annotations")
                                           or {})


async def test_application_write_after_someone_else_wrote_is_a_conflict() -> None:
    kube = FakeKube()
    t = application(kube)
    read = await t.read()
    kube.edit("applications", "argocd", "slurm", lambda app: app["spec"]["source"].update(targetRevision="2"))
    with pytest.raises(k.Conflict):
        await t.write(read, ["ds-a", "slurm"], OURS)
    values = kube.get("applications", "argocd", "slurm")["spec"]["source"]["helm"]["valuesObject"]
    assert values["scheduler"]["scope"]["namespaces"] == ["slurm"]


async def test_application_without_helm_values_reads_an_empty_list() -> None:
    kube = FakeKube()
    read = await application(kube, {"source": {"repoURL": "r"}}).read()
    assert read.list.values == [] and read.list.error is None


@pytest.mark.parametrize("setup, reason, fragment", [
    (lambda kube: None, "TargetNotFound", "Argo CD Application argocd/slurm not found"),
    (lambda kube: (application(kube), kube.deny("get_application")), "Forbidden", "may not read Application"),
    (lambda kube: application(kube, {"sources": [{"repoURL": "a"}, {"repoURL": "b"}]}), "InvalidConfig",
     "set spec.scope.target.application.sourceChart"),
    (lambda kube: application(kube, {"project": "default"}), "InvalidConfig", "has neither spec.source nor spec.sources"),
])
async def test_application_read_problems(setup, reason, fragment) -> None:
    kube = FakeKube()
    setup(kube)
    with pytest.raises(targets.TargetFailed) as info:
        await targets.ApplicationTarget(kube, "argocd", "slurm", PATH).read()
    problem = classify(info.value.error)
    assert problem.reason == reason and fragment in problem.message


@pytest.mark.parametrize("setup, reason", [
    (lambda kube: kube.deny("merge_patch_application"), "Forbidden"),
    (lambda kube: kube.store["applications"].clear(), "TargetNotFound"),
    (lambda kube: kube.before("merge_patch_application", lambda: (_ for _ in ()).throw(k.Invalid("webhook said no"))),
     "InvalidConfig"),
])
async def test_application_write_problems(setup, reason) -> None:
    kube = FakeKube()
    t = application(kube)
    read = await t.read()
    setup(kube)
    with pytest.raises(targets.TargetFailed) as info:
        await t.write(read, ["ds-a", "slurm"], OURS)
    problem = classify(info.value.error)
    assert problem.reason == reason


VALUES = """# the admin's values
slurmConfig:
  KillWait: 60
scheduler:
  scope:
    namespaces:
      - slurm   # the Slurm namespace
"""


async def test_application_list_in_the_values_string_is_edited_in_place() -> None:
    kube, memo = FakeKube(), targets.ParseMemo()
    application(kube, {"source": {"repoURL": "r", "chart": "slurm", "helm": {"values": VALUES}}})
    t = targets.ApplicationTarget(kube, "argocd", "slurm", PATH, memo)
    read = await t.read()
    assert read.list == ListRead(["slurm"], "list") and t.describe() == f"Application argocd/slurm at {PATH} in " \
        "spec.source.helm.values"
    await t.write(read, ["ds-a", "slurm"], OURS)
    patch = [c for c in kube.calls if c[0] == "merge_patch_application"][-1][3]
    assert patch["spec"] == {"source": {"helm": {"values": VALUES.replace("- slurm", "- ds-a\n      - slurm")}}}
    helm = kube.get("applications", "argocd", "slurm")["spec"]["source"]["helm"]
    assert "valuesObject" not in helm and "# the admin's values" in helm["values"] and "KillWait: 60" in helm["values"]
    primed = memo.parsed                                   # our write primed the parse of the next read
    assert (await t.read()).list.values == ["ds-a", "slurm"] and memo.parsed is primed


async def test_application_values_string_without_the_path_gets_it_there_not_in_a_values_object() -> None:
    kube = FakeKube()
    t = application(kube, {"source": {"helm": {"values": "slurmConfig:\n  KillWait: 60\n"}}})
    await t.write(await t.read(), ["ds-a"], OURS)
    helm = kube.get("applications", "argocd", "slurm")["spec"]["source"]["helm"]
    assert list(helm) == ["values"] and helm["values"].startswith("slurmConfig:\n  KillWait: 60\n")
    assert (await t.read()).list.values == ["ds-a"]


async def test_application_list_possibly_in_value_files_is_reported_and_never_written() -> None:
    kube = FakeKube()
    t = application(kube, {"source": {"helm": {"valueFiles": ["values-prod.yaml"], "valuesObject": {"x": 1}}}})
    with pytest.raises(targets.TargetFailed) as info:
        await t.read()
    problem = classify(info.value.error)
    assert problem.reason == "ListNotEditable" and "values-prod.yaml" in problem.message
    assert problem.message.startswith("Application argocd/slurm: ") and kube.count("merge_patch_application") == 0


async def test_application_malformed_values_string_reads_as_an_error_and_is_never_written_over() -> None:
    kube = FakeKube()
    t = application(kube, {"source": {"helm": {"values": "scheduler: [\n"}}})
    read = await t.read()
    assert "malformed YAML" in read.list.error
    with pytest.raises(targets.TargetFailed) as info:
        await t.write(read, ["ds-a"], OURS)
    problem = classify(info.value.error)
    assert problem.reason == "InvalidConfig" and kube.count("merge_patch_application") == 0


def multi_source(kube: FakeKube, **selector) -> targets.ApplicationTarget:
    kube.add("applications", {"metadata": {"namespace": "argocd", "name": "slurm"}, "spec": {"sources": [
        {"repoURL": "c", "chart": "monitoring", "helm": {"valuesObject": {"scheduler": {"scope": {"namespaces": ["m"]}}}}},
        {"repoURL": "c", "chart": "slurm", "helm": {"valuesObject": {"scheduler": {"scope": {"namespaces": ["slurm"]}},
                                                                     "keep": True}}},
        {"repoURL": "g", "ref": "values"}]}})
    return targets.ApplicationTarget(kube, "argocd", "slurm", PATH, None, **selector)


async def test_multi_source_application_by_chart_changes_only_that_source() -> None:
    kube = FakeKube()
    t = multi_source(kube, source_chart="slurm")
    before = kube.get("applications", "argocd", "slurm")["spec"]["sources"]
    read = await t.read()
    assert read.list.values == ["slurm"] and t.describe().endswith(f"spec.sources[1].helm.valuesObject.{PATH}")
    await t.write(read, ["ds-a", "slurm"], OURS)
    patch = [c for c in kube.calls if c[0] == "merge_patch_application"][-1][3]
    assert patch["metadata"]["resourceVersion"] == read.obj["metadata"]["resourceVersion"]
    after = kube.get("applications", "argocd", "slurm")["spec"]["sources"]
    assert after[0] == before[0] and after[2] == before[2]
    assert after[1]["helm"]["valuesObject"] == {"scheduler": {"scope": {"namespaces": ["ds-a", "slurm"]}}, "keep": True}
    assert (await targets.ApplicationTarget(kube, "argocd", "slurm", PATH, None, None, 0).read()).list.values == ["m"]


async def test_multi_source_write_after_another_source_changed_is_a_conflict() -> None:
    kube = FakeKube()
    t = multi_source(kube, source_chart="slurm")
    read = await t.read()
    kube.edit("applications", "argocd", "slurm", lambda app: app["spec"]["sources"][2].update(targetRevision="v2"))
    with pytest.raises(k.Conflict):
        await t.write(read, ["ds-a", "slurm"], OURS)
    assert kube.get("applications", "argocd", "slurm")["spec"]["sources"][2]["targetRevision"] == "v2"


async def test_multi_source_without_a_selector_names_the_field() -> None:
    with pytest.raises(targets.TargetFailed) as info:
        await multi_source(FakeKube()).read()
    problem = classify(info.value.error)
    assert problem.reason == "InvalidConfig" and "spec.scope.target.application.sourceChart" in problem.message


# ---------------------------------------------------------------- choosing the target


def _spec(target: dict) -> object:
    return parse_spec({"runner": {"id": "r", "tokenSecretRef": {"name": "s"}}, "sandboxNamespaces": {"names": ["ds-*"]},
                       "scope": {"target": target}})


def test_for_spec_picks_the_target_kind() -> None:
    kube = FakeKube()
    cm = targets.for_spec(kube, _spec({}), "slurm", "discovered")
    assert isinstance(cm, targets.ConfigMapTarget) and cm.name == "discovered" and cm.namespace == "slurm"
    named = targets.for_spec(kube, _spec({"configMap": {"name": "mine", "key": "k", "path": "a.b"}}), "slurm", "disc")
    assert (named.name, named.key, named.path) == ("mine", "k", "a.b")
    app = targets.for_spec(kube, _spec({"kind": "ArgoCDApplication", "application": {"name": "slurm"}}), "slurm", None)
    assert isinstance(app, targets.ApplicationTarget) and (app.namespace, app.name) == ("argocd", "slurm")
    app = targets.for_spec(kube, _spec({"kind": "ArgoCDApplication", "application": {"name": "s", "sourceChart": "slurm"}}),
                           "slurm", None)
    assert (app.source_chart, app.source_index) == ("slurm", None)
    app = targets.for_spec(kube, _spec({"kind": "ArgoCDApplication", "application": {"name": "s", "sourceIndex": 2}}),
                           "slurm", None)
    assert (app.source_chart, app.source_index) == (None, 2)


def test_application_source_selectors_are_exclusive() -> None:
    with pytest.raises(ValueError, match="set sourceChart or sourceIndex, not both"):
        _spec({"kind": "ArgoCDApplication", "application": {"name": "s", "sourceChart": "slurm", "sourceIndex": 1}})


def test_for_spec_without_a_configmap_name_says_how_to_fix_it() -> None:
    with pytest.raises(targets.TargetFailed) as info:
        targets.for_spec(FakeKube(), _spec({}), "slurm", None)
    problem = classify(info.value.error)
    assert problem.reason == "TargetNotFound"
    assert "app.kubernetes.io/component=scheduler" in problem.message and "ArgoCDApplication" in problem.message
