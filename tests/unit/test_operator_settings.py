"""The operator publishes its tenancy settings (core/operator_settings.py, adapters/settings.py) and `doctor`
judges with them when it is given none of its own, saying which settings it used (issue 34: with the
operator allowing http://127.0.0.1:*, the doctor refused the operator's Ready binding with its defaults)."""

from __future__ import annotations

import json
import logging

import pytest

from sunk_sandbox_operator import __version__, doctor
from sunk_sandbox_operator.adapters import settings
from sunk_sandbox_operator.api.spec import parse_spec
from sunk_sandbox_operator.controller import config, lifecycle
from sunk_sandbox_operator.controller.config import TENANCY_VARIABLES, Config, from_published
from sunk_sandbox_operator.core import operator_settings as ops
from sunk_sandbox_operator.core import tenancy

from tests.unit.fakes import FakeKube, harness_fixture  # noqa: F401 (fixture)

OPERATOR_NS = "sunk-sandbox-operator-system"
SETTINGS = dict(allowed_api_urls=("http://127.0.0.1:*",), allowed_slurm_urls=("http://127.0.0.1:*",),
                allowed_reach={"tenant-*": ("argocd",)}, allowed_grants={"tenant-slurm": ("ds-*",)},
                allowed_grant_roles=("sunk-scheduler-sandbox", "mine"), allow_match_all=True,
                sandbox_namespace_selector="sunk.coreweave.com/sandbox=true", min_resync_seconds=1.0)
LOOPBACK = Config(**SETTINGS)  # type: ignore[arg-type]
SPEC = parse_spec({"runner": {"id": "r", "apiURL": "http://127.0.0.1:8080", "tokenSecretRef": {"name": "t"}},
                   "sandboxNamespaces": {"names": ["ds-*"]}})


@pytest.fixture(autouse=True)
def no_settings_in_the_environment(monkeypatch):
    for name in TENANCY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("SSB_OPERATOR_NAMESPACE", raising=False)


def test_what_is_published_is_read_back_as_the_same_settings() -> None:
    published = LOOPBACK.published("2026-01-01T00:00:00Z", "pod-a", "1.2.3")
    data = ops.encode(published)
    back = ops.decode(data)
    assert back == published
    assert from_published(back) == LOOPBACK
    assert from_published(back).tenancy() == LOOPBACK.tenancy()
    doc = json.loads(data[ops.KEY])
    assert doc["allowedAPIURLs"] == ["http://127.0.0.1:*"] and doc["publishedBy"] == "pod-a"
    assert set(doc) == {"allowedAPIURLs", "allowedSlurmURLs", "allowedReach", "allowedGrants", "allowedGrantRoles",
                        "allowMatchAll", "sandboxNamespaceSelector", "minResyncSeconds", "operatorNamespace",
                        "publishedAt", "publishedBy", "version"}  # settings, never a secret


def test_an_older_or_newer_operators_document_is_understood() -> None:
    older = ops.decode({ops.KEY: json.dumps({"allowedAPIURLs": ["http://127.0.0.1:*"], "someNewSetting": 3})})
    assert older.unknown == ("someNewSetting",)
    assert from_published(older) == Config(allowed_api_urls=("http://127.0.0.1:*",))  # the rest: defaults


@pytest.mark.parametrize("data, says", [
    ({}, "no key settings.json"),
    ({ops.KEY: "{"}, "not JSON"),
    ({ops.KEY: "[]"}, "not a JSON object"),
    ({ops.KEY: json.dumps({"allowedAPIURLs": "http://x"})}, "allowedAPIURLs: expected a list of strings"),
    ({ops.KEY: json.dumps({"allowedReach": {"a": [1]}})}, "allowedReach.a: expected a list of strings"),
    ({ops.KEY: json.dumps({"allowMatchAll": "yes"})}, "allowMatchAll: expected true or false"),
    ({ops.KEY: json.dumps({"minResyncSeconds": -1})}, "minResyncSeconds: expected a number"),
    ({ops.KEY: " " * (ops.MAX_BYTES + 1)}, "larger than"),
])
def test_a_bad_document_names_what_is_wrong(data, says) -> None:
    with pytest.raises(ValueError, match=says):
        ops.decode(data)


async def test_the_leader_publishes_at_each_term_and_a_failure_stops_nothing(harness, caplog) -> None:
    h = harness(**SETTINGS)
    await lifecycle.publish_settings(h.ctx)
    cm = h.kube.store["configmaps"][(OPERATOR_NS, settings.NAME)]
    assert cm["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "sunk-sandbox-operator"
    got = ops.decode(cm["data"])
    assert (got.version, got.published_at) == (__version__, h.clock.iso()) and from_published(got) == LOOPBACK
    h.clock.now += 60
    await lifecycle.publish_settings(h.ctx)  # the next term replaces it
    assert ops.decode(h.kube.store["configmaps"][(OPERATOR_NS, settings.NAME)]["data"]).published_at == h.clock.iso()
    h.kube.deny("replace_configmap")
    with caplog.at_level(logging.WARNING):
        await lifecycle.publish_settings(h.ctx)
    assert "settings not published in ConfigMap sunk-sandbox-operator-system/sunk-sandbox-operator-settings" \
        in caplog.text


# ---------------------------------------------------------------- the doctor: which settings


def parse(*argv: str):
    parser = doctor._parser()
    return parser, parser.parse_args(["ns/b", *argv])


async def published_kube(data: dict | None = None) -> FakeKube:
    kube = FakeKube()
    kube.add("configmaps", {"metadata": {"name": settings.NAME, "namespace": OPERATOR_NS},
                            "data": data if data is not None else ops.encode(LOOPBACK.published("T0", "pod-a", "9.9"))})
    return kube


def allows_loopback(policy: tenancy.TenancyPolicy) -> bool:
    return not tenancy.violations(SPEC, "tenant-slurm", policy)


async def test_with_nothing_given_the_doctor_uses_the_operators_settings_and_says_so() -> None:
    policy, said = await doctor._settings(await published_kube(), *reversed(parse()))
    assert allows_loopback(policy)
    assert said["source"] == "operator" and said["publishedAt"] == "T0" and said["publishedBy"] == "pod-a"
    assert said["detail"] == (f"the operator's, published T0 by pod-a (ConfigMap {OPERATOR_NS}/{settings.NAME}, "
                              "operator 9.9)")


async def test_its_own_flags_or_variables_win(monkeypatch) -> None:
    kube = await published_kube()
    policy, said = await doctor._settings(kube, *reversed(parse("--allowed-api-url", "https://api.coreweave.com")))
    assert said["source"] == "flags" and not allows_loopback(policy)
    assert kube.count("get_configmap") == 0  # not even read
    monkeypatch.setenv("SSB_ALLOWED_GRANTS", "tenant-slurm=ds-*")
    policy, said = await doctor._settings(kube, *reversed(parse()))
    assert said["source"] == "flags" and not allows_loopback(policy)


@pytest.mark.parametrize("case", ["none", "elsewhere", "forbidden", "garbled"])
async def test_with_neither_it_assumes_the_defaults_and_says_why(case) -> None:
    kube = FakeKube() if case == "none" else await published_kube({ops.KEY: "{"} if case == "garbled" else None)
    argv = ("--operator-namespace", "ssb") if case == "elsewhere" else ()
    if case == "forbidden":
        kube.deny("get_configmap")
    policy, said = await doctor._settings(kube, *reversed(parse(*argv)))
    assert said["source"] == "defaults" and not allows_loopback(policy)
    assert said["detail"].startswith(doctor.DEFAULTS + ": ")
    where = f"ConfigMap {'ssb' if case == 'elsewhere' else OPERATOR_NS}/{settings.NAME}"
    assert {"none": f"the operator published none in {where}", "elsewhere": f"the operator published none in {where}",
            "forbidden": f"these credentials may not read {where}",
            "garbled": f"the operator's settings in {where} do not parse"}[case] in said["detail"]


async def test_the_operator_namespace_comes_from_the_flag_or_the_variable(monkeypatch) -> None:
    kube = FakeKube()
    kube.add("configmaps", {"metadata": {"name": settings.NAME, "namespace": "ssb"},
                            "data": ops.encode(LOOPBACK.published("T1", "pod-b", "9.9"))})
    monkeypatch.setenv("SSB_OPERATOR_NAMESPACE", "ssb")
    policy, said = await doctor._settings(kube, *reversed(parse()))
    assert said["source"] == "operator" and allows_loopback(policy)
    assert config.Config().operator_namespace == OPERATOR_NS
