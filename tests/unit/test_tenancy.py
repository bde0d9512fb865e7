"""What a binding may make the operator do (core/tenancy.py), and the controller refusing the rest
before it reads a Secret or calls an API."""

from __future__ import annotations

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sunk_sandbox_operator.adapters.runnerapi import client as rc
from sunk_sandbox_operator.api.spec import parse_spec
from sunk_sandbox_operator.controller import reconcile
from sunk_sandbox_operator.core import selectors as sel
from sunk_sandbox_operator.core import tenancy as t
from sunk_sandbox_operator.core.scope import compile_matcher

from tests.unit.fakes import binding_body, harness_fixture  # noqa: F401 (fixture)

POLICY = t.TenancyPolicy(reach={"tenant-slurm": ("argocd",), "team-*": ("shared-slurm", "kube-public")})


def spec(**overrides) -> object:
    base = {"runner": {"id": "r", "tokenSecretRef": {"name": "s"}}, "sandboxNamespaces": {"names": ["ds-*"]}}
    return parse_spec({**base, **overrides})


def fields(s, ns: str = "tenant-slurm", policy: t.TenancyPolicy = POLICY) -> list[str]:
    return [v.field for v in t.violations(s, ns, policy)]


def test_only_allowed_api_urls() -> None:
    assert fields(spec()) == []  # https://api.coreweave.com
    assert t.url_allowed("https://api.coreweave.com/v1/x", POLICY)
    for url in ("http://api.coreweave.com", "https://api.coreweave.com.evil.io", "https://evil.io",
                "https://api.coreweave.com:8443", "http://127.0.0.1:9999", "https://api.coreweave.comx"):
        assert not t.url_allowed(url, POLICY), url
    loop = t.TenancyPolicy(allowed_api_urls=("http://127.0.0.1:*",))
    assert t.url_allowed("http://127.0.0.1:41234", loop) and not t.url_allowed("http://10.0.0.1:41234", loop)
    # A plain-http entry for another host is never honoured, and refused at start-up.
    assert not t.url_allowed("http://evil.io", t.TenancyPolicy(allowed_api_urls=("http://evil.io",)))
    assert t.check_allowed_urls(["http://evil.io"]) and not t.check_allowed_urls(["http://[::1]:8080", "https://x.io"])
    msg = t.violations(spec(runner={"id": "r", "apiURL": "https://evil.io", "tokenSecretRef": {"name": "s"}}),
                       "tenant-slurm", POLICY)[0].text()
    assert msg.startswith("spec.runner.apiURL: https://evil.io is not an API URL the operator allows")


def slurm_spec(url: str) -> object:
    return spec(slurm={"restAPI": {"url": url, "tokenSecretRef": {"name": "jwt"}, "user": "k8sop"}})


def test_a_slurmrestd_url_is_refused_until_the_admin_allows_it() -> None:
    """The Slurm JWT goes where restAPI.url says: its own allow-list, the same rules, empty by default."""
    [v] = t.violations(slurm_spec("https://slurm.tenant-slurm.svc:6820"), "tenant-slurm", POLICY)
    assert v.field == "spec.slurm.restAPI.url" and "(allowed: none)" in v.message
    assert "--allowed-slurm-url / SSB_ALLOWED_SLURM_URLS" in v.message
    allowed = t.TenancyPolicy(allowed_slurm_urls=("https://slurm.tenant-slurm.svc:6820", "http://127.0.0.1:*"))
    assert fields(slurm_spec("https://slurm.tenant-slurm.svc:6820"), policy=allowed) == []
    assert fields(slurm_spec("http://127.0.0.1:41000"), policy=allowed) == []
    for url in ("https://slurm.tenant-slurm.svc:6821", "https://api.coreweave.com", "http://slurm.tenant-slurm.svc:6820",
                "https://slurm.tenant-slurm.svc:6820/?next=x", "https://slurm.tenant-slurm.svc:6820@evil.io"):
        assert fields(slurm_spec(url), policy=allowed) == ["spec.slurm.restAPI.url"], url
    # The runner API's list does not allow a slurmrestd URL, nor the other way round.
    assert fields(slurm_spec("https://api.coreweave.com"), policy=t.TenancyPolicy()) == ["spec.slurm.restAPI.url"]
    # Plain http only for loopback, as for the runner API: never honoured for another host.
    lax = t.TenancyPolicy(allowed_slurm_urls=("http://slurm.tenant-slurm.svc:6820",))
    assert fields(slurm_spec("http://slurm.tenant-slurm.svc:6820"), policy=lax) == ["spec.slurm.restAPI.url"]


def test_the_slurm_url_setting_is_read_and_checked_at_start(monkeypatch) -> None:
    from sunk_sandbox_operator import __main__ as cli
    from sunk_sandbox_operator.controller import config

    monkeypatch.setenv("SSB_ALLOWED_SLURM_URLS", "https://slurm.example.com:6820, http://127.0.0.1:*")
    assert config.load().tenancy().allowed_slurm_urls == ("https://slurm.example.com:6820", "http://127.0.0.1:*")
    monkeypatch.setenv("SSB_ALLOWED_SLURM_URLS", "http://slurm.example.com:6820")
    with pytest.raises(SystemExit):
        cli.main(["run", "--allowed-slurm-url", "http://slurm.example.com:6820"])


GATEWAY = t.TenancyPolicy(allowed_api_urls=("https://gw.example.com/runner",))
ESCAPES = [
    "https://gw.example.com/runner/../admin",         # httpx sends /admin/...
    "https://gw.example.com/runner/x/../../admin",
    "https://gw.example.com/runner/..",
    "https://gw.example.com/runner/%2e%2e/admin",     # a server may decode, then resolve
    "https://gw.example.com/runner/.%2E/admin",
    "https://gw.example.com/runner%2f..%2fadmin",
    "https://gw.example.com/runner/..%5cadmin",
    "https://gw.example.com/runner\\..\\admin",
    "https://gw.example.com/runner/..;/admin",        # Tomcat's path parameter
    "https://gw.example.com/runner/%252e%252e/admin",  # decoded twice
    "https://gw.example.com@evil.example.com/runner",  # userinfo: the request goes to evil.example.com
    "https://user:pw@gw.example.com/runner",
    "https://gw.example.com/runner?next=/admin",
    "https://gw.example.com/runner#x",
]


@pytest.mark.parametrize("url", ESCAPES)
def test_an_api_url_is_compared_as_it_will_be_sent(url) -> None:
    assert not t.url_allowed(url, GATEWAY)
    [v] = t.violations(spec(runner={"id": "r", "apiURL": url, "tokenSecretRef": {"name": "s"}}), "tenant-slurm",
                       GATEWAY)
    assert v.field == "spec.runner.apiURL" and "not an API URL the operator allows" in v.message, v


def test_dot_segments_that_stay_below_the_allowed_path_pass() -> None:
    for url in ("https://gw.example.com/runner", "https://gw.example.com/runner/", "https://gw.example.com/runner/v1",
                "https://GW.example.com:443/runner/./v1", "https://gw.example.com/runner/x/../v1"):
        assert t.url_allowed(url, GATEWAY), url
    msg = t.violations(spec(runner={"id": "r", "apiURL": ESCAPES[0], "tokenSecretRef": {"name": "s"}}),
                       "tenant-slurm", GATEWAY)[0].message
    assert "it resolves to https://gw.example.com/admin" in msg, msg
    assert t.check_allowed_urls(["https://gw.example.com/runner?x=1"])  # the admin's own entries too


async def _path_sent(base: str) -> str:
    """The request path httpx really sends for the runner client built on `base` (no network)."""
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.raw_path.decode())
        return httpx.Response(200, json={"runner": {"runnerId": "r", "policy": None, "etag": "e"}})

    async with rc.RunnerClient(base, "t", transport=httpx.MockTransport(handler), limiter=rc.RateLimiter(1e6, 1e6),
                               max_retries=0) as client:
        await client.get_managed_runner("r")
    return seen[0]


SEGMENT = st.sampled_from(["runner", "admin", "x", ".", "..", "", "a.b", "...", ".x", "x.", "%2e%2e", "..;"])


@settings(max_examples=200, deadline=None)
@given(st.lists(SEGMENT, max_size=6), st.booleans())
async def test_the_check_resolves_paths_as_httpx_sends_them(segments, trailing) -> None:
    base = "https://gw.example.com/" + "/".join(segments) + ("/" if trailing else "")
    sent = await _path_sent(base)
    path = t._base(base)[3]
    assert sent == f"{path}/{rc.SERVICE}/GetManagedRunner", (base, sent, path)
    # And the verdict follows the path sent: below /runner, or not.
    assert t.url_allowed(base, GATEWAY) == (sent.startswith("/runner/") and not t.url_problem(base))


def test_a_binding_reaches_only_its_own_namespace_unless_allowed() -> None:
    assert fields(spec(scheduler={"namespace": "other"})) == ["spec.scheduler.namespace"]
    assert fields(spec(scheduler={"namespace": "tenant-slurm"})) == []
    argo = {"target": {"kind": "ArgoCDApplication", "application": {"name": "slurm"}}}  # default ns argocd
    assert fields(spec(scope=argo)) == []                                    # tenant-slurm may reach argocd
    assert fields(spec(scope=argo), "team-a") == ["spec.scope.target.application.namespace"]
    assert fields(spec(scheduler={"namespace": "shared-slurm"}), "team-a") == []  # by glob
    flux = {"target": {"kind": "FluxHelmRelease", "helmRelease": {"name": "slurm", "namespace": "flux-x"}}}
    assert fields(spec(scope=flux)) == ["spec.scope.target.helmRelease.namespace"]


def test_system_namespaces_and_empty_selectors() -> None:
    assert fields(spec(sandboxNamespaces={"selector": {}})) == ["spec.sandboxNamespaces.selector"]
    assert fields(spec(sandboxNamespaces={"names": ["kube-system"]})) == ["spec.sandboxNamespaces.names[0]"]
    assert fields(spec(sandboxNamespaces={"names": ["ds-*", "sunk-sandbox-operator-system"]})) == \
        ["spec.sandboxNamespaces.names[1]"]
    assert fields(spec(scope={"alwaysInclude": ["kube-system"]})) == ["spec.scope.alwaysInclude[0]"]
    assert fields(spec(sandboxNamespaces={"names": ["kube-public"]}), "team-a") == []  # named and allowed
    # Globs and selectors never match a system namespace; an allowed exact name does.
    m = compile_matcher(spec(sandboxNamespaces={"names": ["*"], "selector": {"matchLabels": {"a": "b"}}})
                        .sandbox_namespaces, POLICY.system)
    assert m("ds-1", {}) and not m("kube-system", {"a": "b"}) and not m("sunk-sandbox-operator-system", {})
    named = compile_matcher(spec(sandboxNamespaces={"names": ["kube-public"]}).sandbox_namespaces, POLICY.system)
    assert named("kube-public", {})


def test_parse_reach() -> None:
    assert t.parse_reach("tenant-slurm=argocd, slurm-* ; team-*=shared;bad;=x") == {
        "tenant-slurm": ("argocd", "slurm-*"), "team-*": ("shared",)}


async def test_a_refused_binding_gets_a_condition_and_nothing_is_read_or_written(harness) -> None:
    h = harness()
    state = h.binding(binding_body(runner={"id": "r", "apiURL": "https://evil.io", "tokenSecretRef": {"name": "s"}},
                                   scheduler={"namespace": "kube-system"}), active=False)
    h.kube.calls.clear()
    await reconcile.reconcile(h.ctx, state)
    conds = {c["type"]: c for c in h.kube.get("bindings", "slurm", "b")["status"]["conditions"]}
    assert conds["PolicySynced"]["reason"] == "NotAllowed" and conds["Ready"]["status"] == "False"
    assert "spec.runner.apiURL: https://evil.io" in conds["ScopeSynced"]["message"]
    assert "spec.scheduler.namespace: the scheduler in namespace kube-system" in conds["ScopeSynced"]["message"]
    # Only the status patch, the event and a list of the RoleBindings made for it (revoked while it is
    # refused): no Secret, no scheduler or target read, no list of bindings.
    assert {c[0] for c in h.kube.calls} <= {"patch_binding_status", "create_event", "list_rolebindings"}, h.kube.calls
    posted = len(h.events)
    assert posted and set(h.reasons()) == {"NotAllowed"}
    h.kube.calls.clear()
    await reconcile.reconcile(h.ctx, state)
    assert len(h.events) == posted  # said once, not at every resync
    assert h.kube.count("list_rolebindings") == 0  # revoked once, not listed at every resync


# ---------------------------------------------------------------- match-everything selectors


@pytest.mark.parametrize("names, index", [(["*"], 0), (["?*"], 0), (["[a-z]*"], 0), (["**"], 0), (["ds-*", "?"], 1),
                                          (["[0-9]?"], 0), (["[]]*"], 0)])
def test_a_glob_without_a_literal_character_is_refused_like_an_empty_selector(names, index) -> None:
    [v] = t.violations(spec(sandboxNamespaces={"names": names}), "tenant-slurm", POLICY)
    assert v.field == f"spec.sandboxNamespaces.names[{index}]"
    assert "has no literal character" in v.message and "SSB_ALLOW_MATCH_ALL" in v.message and "ds-*" in v.message


@pytest.mark.parametrize("selector", [
    {},
    {"matchExpressions": [{"key": "nobody-has-this", "operator": "DoesNotExist"}]},
    {"matchExpressions": [{"key": "team", "operator": "NotIn", "values": ["victim"]}]},
    {"matchExpressions": [{"key": "a", "operator": "DoesNotExist"}, {"key": "b", "operator": "NotIn", "values": ["x"]}]},
])
def test_a_selector_that_an_unlabelled_namespace_satisfies_is_refused(selector) -> None:
    [v] = t.violations(spec(sandboxNamespaces={"selector": selector}), "tenant-slurm", POLICY)
    assert v.field == "spec.sandboxNamespaces.selector" and "SSB_ALLOW_MATCH_ALL" in v.message, v
    # The same rule for the scheduler's pods (their ServiceAccounts are granted, their Deployments rolled).
    [p] = t.violations(spec(scheduler={"podSelector": selector}), "tenant-slurm", POLICY)
    assert p.field == "spec.scheduler.podSelector"


def test_what_names_or_requires_a_label_stays_allowed() -> None:
    for sn in ({"names": ["ds-*", "*-sandbox", "a?", "[ab]-x*", "exact"]},
               {"selector": {"matchLabels": {"a": "b"}}},
               {"selector": {"matchExpressions": [{"key": "a", "operator": "Exists"},
                                                  {"key": "b", "operator": "DoesNotExist"}]}},
               {"selector": {"matchExpressions": [{"key": "a", "operator": "In", "values": ["x"]}]}}):
        assert fields(spec(sandboxNamespaces=sn)) == [], sn


def test_the_admin_may_allow_match_everything_selectors() -> None:
    allow = t.TenancyPolicy(allow_match_all=True)
    for sn in ({"names": ["*"]}, {"selector": {}},
               {"selector": {"matchExpressions": [{"key": "x", "operator": "DoesNotExist"}]}}):
        assert fields(spec(sandboxNamespaces=sn), policy=allow) == [], sn
    # Not the scheduler's pods: that selector is never the admin's to widen.
    assert fields(spec(scheduler={"podSelector": {}}), policy=allow) == ["spec.scheduler.podSelector"]


# ---------------------------------------------------------------- the operator's namespace bound


BOUND = sel.parse_selector_string("sunk.coreweave.com/sandbox=true")


def test_no_binding_matches_a_namespace_outside_the_operators_bound() -> None:
    sn = spec(sandboxNamespaces={"names": ["ds-*", "ds-exact", "tenant-slurm"],
                                 "selector": {"matchLabels": {"team": "a"}}}).sandbox_namespaces
    m = compile_matcher(sn, POLICY.system, bound=BOUND, own="tenant-slurm")
    inside = {"sunk.coreweave.com/sandbox": "true"}
    assert m("ds-1", inside) and not m("ds-1", {})                         # a glob
    assert m("x", {**inside, "team": "a"}) and not m("x", {"team": "a"})   # a selector
    assert m("ds-exact", inside) and not m("ds-exact", {})                 # an exact name, too
    assert m("tenant-slurm", {})                                           # but the binding's own namespace
    assert not m("kube-system", inside)                                    # system ones stay out
    unbounded = compile_matcher(sn, POLICY.system, own="tenant-slurm")
    assert unbounded("ds-1", {}) and unbounded("ds-exact", {})


def test_the_bound_is_a_setting(monkeypatch) -> None:
    from sunk_sandbox_operator.controller import config

    monkeypatch.setenv("SSB_SANDBOX_NAMESPACE_SELECTOR", "sunk.coreweave.com/sandbox=true,tier notin (prod)")
    monkeypatch.setenv("SSB_ALLOW_MATCH_ALL", "true")
    policy = config.load().tenancy()
    assert policy.allow_match_all and policy.namespace_bound == sel.ParsedSelector((
        sel.Requirement("sunk.coreweave.com/sandbox", "In", ("true",)), sel.Requirement("tier", "NotIn", ("prod",))))
    monkeypatch.setenv("SSB_SANDBOX_NAMESPACE_SELECTOR", "a>1")
    with pytest.raises(ValueError, match="--sandbox-namespace-selector / SSB_SANDBOX_NAMESPACE_SELECTOR"):
        config.load().tenancy()
    monkeypatch.delenv("SSB_SANDBOX_NAMESPACE_SELECTOR")
    monkeypatch.delenv("SSB_ALLOW_MATCH_ALL")
    assert config.load().tenancy() == t.TenancyPolicy()


def test_grants_are_bounded_per_binding_namespace_by_the_admin(monkeypatch) -> None:
    """--allow-grant NS=NAMESPACES (SSB_ALLOWED_GRANTS): nowhere by default; per binding namespace (a
    glob) the namespaces (globs) its bindings may grant in; `*=*` trusts every binding author."""
    import argparse

    from sunk_sandbox_operator.controller import config

    assert t.TenancyPolicy().grant_bound("tenant-slurm") is None and config.load().tenancy().grants == {}
    monkeypatch.setenv("SSB_ALLOWED_GRANTS", "tenant-slurm=ds-*,tenant-slurm;team-*=team-sbx-*")
    policy = config.load().tenancy()
    bound = policy.grant_bound("tenant-slurm")
    assert bound is not None and bound("ds-alice") and bound("tenant-slurm") and not bound("team-sbx-1")
    team = policy.grant_bound("team-a")
    assert team is not None and team("team-sbx-1") and not team("ds-alice")
    assert policy.grant_bound("other-tenant") is None
    monkeypatch.delenv("SSB_ALLOWED_GRANTS")
    args = argparse.Namespace(allow_grant=["tenant-slurm=ds-*", "*=shared-*"])
    flagged = config.tenancy_from_flags(args, lambda msg: None)
    assert flagged.grants == {"tenant-slurm": ("ds-*",), "*": ("shared-*",)}
    both = flagged.grant_bound("tenant-slurm")
    assert both is not None and both("ds-a") and both("shared-1") and not both("victim")
    monkeypatch.delenv("SSB_ALLOWED_GRANTS")  # tenancy_from_flags set it for this process


async def test_the_controller_bounds_every_bindings_matcher(harness) -> None:
    h = harness(sandbox_namespace_selector="sunk.coreweave.com/sandbox=true")
    state = h.binding(binding_body(sandboxNamespaces={"names": ["ds-*"]}))
    assert state.matcher("ds-a", {"sunk.coreweave.com/sandbox": "true"}) and not state.matcher("ds-b", {})
    h.ctx.reset_bindings()  # a new leader term keeps the bound
    assert h.ctx.bindings.bound == BOUND
