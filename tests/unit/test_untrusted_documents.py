"""Each tenant-written document kind refuses the alias bomb through core/untrusted, hurting only its binding.

The scheduler ConfigMap target (through the whole scope sync: ScopeSynced=False DocumentRefused naming
the object, key and path, nothing written, no retry storm, the refusal parsed once per resourceVersion,
another binding unaffected), an Argo CD Application's `helm.values` string, the Flux values ConfigMap,
and scheduler discovery (the error names the ConfigMap; it never raises). Also: a write that would
take the document past a bound is refused, and the span shortcut of a burst skips the check.
"""

from __future__ import annotations

import copy

import pytest

from sunk_sandbox_operator.core.scope_errors import classify
from sunk_sandbox_operator.adapters import targets
from sunk_sandbox_operator.api.reasons import ScopeSynced
from sunk_sandbox_operator.api.spec import parse_spec
from sunk_sandbox_operator.controller import scope
from sunk_sandbox_operator.core import app_values as av
from sunk_sandbox_operator.core import ledger as lg
from sunk_sandbox_operator.core import scope_doc, untrusted
from sunk_sandbox_operator.core.scheduler import discover, scheduler_condition
from sunk_sandbox_operator.core.scheduler_conf import parse_scheduler_conf

from tests.unit.fakes import FakeKube, binding_body, discovery, harness_fixture, namespace  # noqa: F401 (fixture)
from tests.unit.test_untrusted import BOMB, scans  # noqa: F401 (fixture)

PATH = "scheduler.scope.namespaces"
REFUSED = "refused as untrusted input: it holds a YAML alias (`*l0` at line 7, column 10)"
OURS = lg.Ledger({"slurm/b": lg.Entry(("ds-a",), ())})
CONF = "scheduler:\n  scope:\n    type: namespace\n    namespaces: [team]\n"



# ---------------------------------------------------------------- the scheduler ConfigMap, through the sync


def _configmap(h, ns: str, conf: str) -> None:
    h.kube.add("configmaps", {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"namespace": ns, "name": "cm"},
                              "data": {"scheduler.conf": conf}})


async def test_a_bomb_in_scheduler_conf_refuses_its_binding_only(harness, scans: list[int]) -> None:
    h = harness()
    h.load_namespaces(*(namespace(n) for n in ("slurm", "team", "ds-a", "ds-b")))
    _configmap(h, "slurm", BOMB)
    _configmap(h, "team", CONF)
    victim = h.binding(binding_body())
    other = h.binding(binding_body("b2", "team", uid="u2", runner={"id": "r2", "tokenSecretRef": {"name": "s"}}),
                      discovered=discovery(namespace="team"))

    part = await scope.sync(h.ctx, victim)
    assert (part.condition, part.status, part.reason) == ("ScopeSynced", "False", ScopeSynced.DOCUMENT_REFUSED)
    assert part.message.startswith(f"ConfigMap slurm/cm key scheduler.conf at {PATH}: {REFUSED}")
    assert "write it without anchors and aliases" in part.message and "left untouched" in part.message
    assert (victim.scope.retry_handle, victim.scope.failures) == (None, 0)  # not transient: no retry storm
    assert h.kube.count("replace_configmap") == 0 and h.kube.get("configmaps", "slurm", "cm")["data"]["scheduler.conf"] == BOMB
    assert len(scans) == 1
    again = await scope.sync(h.ctx, victim)                                   # the same resourceVersion:
    assert (again.reason, again.message, len(scans)) == (part.reason, part.message, 1)  # the refusal is remembered

    ok = await scope.sync(h.ctx, other)
    assert (ok.status, ok.reason) == ("True", ScopeSynced.SYNCED)
    cm = h.kube.get("configmaps", "team", "cm")["data"]["scheduler.conf"]
    assert scope_doc.read_list(cm, PATH).values == ["ds-a", "ds-b", "team"]


async def test_a_write_that_would_pass_a_bound_is_refused_and_nothing_is_written() -> None:
    kube = FakeKube()
    filler = "".join(f"k{i}: v\n" for i in range((untrusted.MAX_NODES - 10) // 2))  # CONF is 10 nodes: at the bound
    kube.add("configmaps", {"metadata": {"namespace": "slurm", "name": "cm"}, "data": {"scheduler.conf": CONF + filler}})
    t = targets.ConfigMapTarget(kube, "slurm", "cm", "scheduler.conf", PATH)
    read = await t.read()
    assert read.list.values == ["team"]
    with pytest.raises(targets.TargetFailed) as info:
        await t.write(read, ["team"] + [f"ds-{i}" for i in range(20)], OURS)
    problem = classify(info.value.error)
    assert problem.reason == ScopeSynced.DOCUMENT_REFUSED and f"more than {untrusted.MAX_NODES:,} YAML nodes" in problem.message
    assert kube.count("replace_configmap") == 0


@pytest.mark.parametrize("memo", [None, targets.ParseMemo()])
async def test_configmap_target_reads_the_refusal_and_never_writes_over_it(memo) -> None:
    kube = FakeKube()
    kube.add("configmaps", {"metadata": {"namespace": "slurm", "name": "cm"}, "data": {"scheduler.conf": BOMB}})
    t = targets.ConfigMapTarget(kube, "slurm", "cm", "scheduler.conf", PATH, memo)
    read = await t.read()
    assert read.list.values is None and read.list.reason == ScopeSynced.DOCUMENT_REFUSED and REFUSED in read.list.error
    with pytest.raises(targets.TargetFailed) as info:   # even a caller that writes despite the error
        await t.write(read, ["ds-a"], OURS)
    problem = classify(info.value.error)
    assert problem.reason == ScopeSynced.DOCUMENT_REFUSED and t.describe() in problem.message
    assert kube.count("replace_configmap") == 0


async def test_a_burst_write_through_the_span_skips_the_check(monkeypatch: pytest.MonkeyPatch) -> None:
    kube = FakeKube()
    kube.add("configmaps", {"metadata": {"namespace": "slurm", "name": "cm"},
                            "data": {"scheduler.conf": "scheduler:\n  scope:\n    namespaces:\n    - team\n"}})
    t = targets.ConfigMapTarget(kube, "slurm", "cm", "scheduler.conf", PATH, targets.ParseMemo())
    await t.write(await t.read(), ["ds-a", "team"], OURS)
    monkeypatch.setattr(untrusted, "check", lambda text: (_ for _ in ()).throw(AssertionError("checked")))
    await t.write(await t.read(reuse=True), ["ds-a", "ds-b", "team"], OURS)   # our own text, re-rendered at the span
    monkeypatch.undo()
    assert scope_doc.read_list(kube.get("configmaps", "slurm", "cm")["data"]["scheduler.conf"], PATH).values == [
        "ds-a", "ds-b", "team"]


# ---------------------------------------------------------------- an Argo CD Application's helm.values


async def test_application_values_string_bomb_is_refused_and_never_patched() -> None:
    kube = FakeKube()
    kube.add("applications", {"metadata": {"namespace": "argocd", "name": "slurm"},
                              "spec": {"source": {"repoURL": "r", "chart": "slurm", "helm": {"values": BOMB}}}})
    t = targets.ApplicationTarget(kube, "argocd", "slurm", PATH)
    read = await t.read()
    assert read.list.reason == ScopeSynced.DOCUMENT_REFUSED and REFUSED in read.list.error
    assert t.describe() == f"Application argocd/slurm at {PATH} in spec.source.helm.values"
    with pytest.raises(targets.TargetFailed) as info:
        await t.write(read, ["ds-a"], OURS)
    problem = classify(info.value.error)
    assert problem.reason == ScopeSynced.DOCUMENT_REFUSED and kube.count("merge_patch_application") == 0


def test_app_values_locate_and_patch_name_the_refusal() -> None:
    source = av.Source(1, {"chart": "slurm", "helm": {"values": BOMB}})
    loc = av.locate(source, PATH)
    assert (loc.field, loc.list.reason) == ("values", ScopeSynced.DOCUMENT_REFUSED)
    with pytest.raises(av.Problem) as info:
        av.spec_patch(loc, PATH, ["ds-a"], {"sources": [{}, copy.deepcopy(dict(source.body))]})
    assert info.value.reason == ScopeSynced.DOCUMENT_REFUSED and REFUSED in info.value.message


# ---------------------------------------------------------------- the Flux values ConfigMap


async def test_flux_values_configmap_bomb_is_refused_and_never_replaced() -> None:
    kube = FakeKube()
    kube.add("helmreleases", {"apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease",
                              "metadata": {"namespace": "slurm", "name": "slurm"},
                              "spec": {"valuesFrom": [{"kind": "ConfigMap", "name": "vals", "valuesKey": "values.yaml"}]}})
    kube.add("configmaps", {"metadata": {"namespace": "slurm", "name": "vals"}, "data": {"values.yaml": BOMB}})
    t = targets.FluxTarget(kube, "slurm", "slurm", "vals", "values.yaml", PATH, targets.ParseMemo())
    read = await t.read()
    assert read.list.reason == ScopeSynced.DOCUMENT_REFUSED and REFUSED in read.list.error
    with pytest.raises(targets.TargetFailed) as info:
        await t.write(read, ["ds-a"], OURS)
    problem = classify(info.value.error)
    assert problem.reason == ScopeSynced.DOCUMENT_REFUSED and "ConfigMap slurm/vals key values.yaml" in problem.message
    assert kube.count("replace_configmap") == 0 and kube.count("create_configmap") == 0


# ---------------------------------------------------------------- scheduler discovery


def _scheduler_objects(conf: str) -> tuple[list[dict], list[dict]]:
    pod = {"metadata": {"name": "s-0", "namespace": "slurm", "labels": {"app.kubernetes.io/name": "sunk-scheduler"}},
           "spec": {"containers": [{"name": "scheduler", "args": ["--scheduler-name=from-args"]}]},
           "status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    cm = {"metadata": {"name": "slurm-scheduler-config", "namespace": "slurm",
                       "labels": {"app.kubernetes.io/component": "scheduler"}}, "data": {"scheduler.conf": conf}}
    return [pod], [cm]


def test_discovery_refuses_the_bomb_naming_the_configmap(scans: list[int]) -> None:
    spec = parse_spec({"runner": {"id": "r", "tokenSecretRef": {"name": "s"}}, "sandboxNamespaces": {"names": ["ds-*"]}})
    d = discover(spec, "slurm", *_scheduler_objects(BOMB))
    assert d.refused == [f"ConfigMap slurm/slurm-scheduler-config key scheduler.conf: scheduler.conf {REFUSED}, and "
                        "the operator never expands aliases in a tenant-written document: write it without anchors "
                        "and aliases (repeat the values where they are used)"]
    assert (d.name, d.name_source, d.scope_type) == ("from-args", "args", None)   # the other sources still count
    status, reason, message = scheduler_condition(d)
    assert (status, reason) == ("False", "InputRefused")
    assert "ConfigMap slurm/slurm-scheduler-config key scheduler.conf" in message and "`*l0`" in message
    assert scans == [len(BOMB)]


@pytest.mark.parametrize("conf, fragment", [
    ("scheduler:\n  name: s\n  when: 2024-13-45\n", "not valid YAML: ValueError: month must be in 1..12"),  # said by core.redact
    ("scheduler:\n  name: s\n  x: 1" + ":59" * 200 + ".5\n", "not valid YAML"),                # OverflowError
    ("scheduler:\n  name: s\n  x: 1" + ":59" * untrusted.MAX_INT_CHARS + "\n", "an integer of"),
    ("scheduler:\n  name: s\n  x: " + "[" * 200 + "]" * 200 + "\n", "nests more than"),
])
def test_discovery_reports_what_it_cannot_read_and_never_raises(conf: str, fragment: str) -> None:
    parsed = parse_scheduler_conf(conf)
    assert fragment in (parsed.error or "") + "".join(parsed.refused)
