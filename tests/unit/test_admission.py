"""The admission decision (core/admission.py) and its wiring (controller/admission.py) without a server:
deny what tenancy refuses or what does not parse, skip what must never be blocked, warn about
cross-object facts, and read those facts with the operator's client (fakes here)."""

from __future__ import annotations

import asyncio
import base64
import copy
from pathlib import Path

import pytest

from sunk_sandbox_operator.adapters.webhook import CertFiles
from sunk_sandbox_operator.api.spec import parse_spec
from sunk_sandbox_operator.controller import admission as wiring
from sunk_sandbox_operator.controller.config import Config
from sunk_sandbox_operator.core import admission as adm
from sunk_sandbox_operator.core import tenancy as t

from tests.unit.fakes import FakeKube, Harness, binding_body

POLICY = t.TenancyPolicy(reach={"tenant-slurm": ("argocd",)})
NS = "slurm"


def review(operation: str = "CREATE", obj: dict | None = None, old: dict | None = None, *, uid: str = "rev-1",
           namespace: str = NS, kind: str = "SunkSandboxBinding") -> dict:
    obj = binding_body(namespace=namespace) if obj is None and operation != "DELETE" else obj
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": uid, "operation": operation, "namespace": namespace,
        "name": ((obj or old or {}).get("metadata") or {}).get("name", "b"),
        "kind": {"group": "sunksandbox.dev", "version": "v1alpha1", "kind": kind},
        "object": obj, "oldObject": old}}


def decide(body: dict, facts: adm.Facts | None = None, policy: t.TenancyPolicy = POLICY) -> adm.Decision:
    return adm.decide(adm.parse_request(body), policy, facts)


def with_spec(body: dict, **spec) -> dict:
    body = copy.deepcopy(body)
    body["spec"].update(spec)
    return body


# ---------------------------------------------------------------- deny


def test_a_disallowed_api_url_is_denied_naming_the_field_and_the_fix() -> None:
    evil = with_spec(binding_body(), runner={"id": "r", "apiURL": "https://evil.example.com",
                                             "tokenSecretRef": {"name": "s"}})
    d = decide(review(obj=evil))
    assert not d.allowed and d.code == 403
    assert "spec.runner.apiURL: https://evil.example.com is not an API URL the operator allows" in d.message
    assert "--allowed-api-url" in d.message  # the fix
    answer = adm.response("rev-1", d)["response"]
    assert answer == {"uid": "rev-1", "allowed": False,
                      "status": {"code": 403, "reason": "Forbidden", "message": d.message}}


@pytest.mark.parametrize("spec, field", [
    ({"sandboxNamespaces": {"names": ["*"]}}, "spec.sandboxNamespaces.names[0]"),
    ({"sandboxNamespaces": {"names": ["?*"]}}, "spec.sandboxNamespaces.names[0]"),
    ({"sandboxNamespaces": {"selector": {"matchExpressions": [{"key": "x", "operator": "DoesNotExist"}]}}},
     "spec.sandboxNamespaces.selector"),
    ({"sandboxNamespaces": {"selector": {"matchExpressions": [{"key": "x", "operator": "NotIn", "values": ["y"]}]}}},
     "spec.sandboxNamespaces.selector"),
    ({"runner": {"id": "r", "apiURL": "https://gw.example.com/runner/../admin", "tokenSecretRef": {"name": "s"}}},
     "spec.runner.apiURL"),
])
def test_the_webhook_denies_match_everything_selectors_and_path_escapes(spec, field) -> None:
    policy = t.TenancyPolicy(allowed_api_urls=("https://api.coreweave.com", "https://gw.example.com/runner"))
    d = decide(review(obj=with_spec(binding_body(), **spec)), policy=policy)
    assert not d.allowed and f"{field}: " in d.message, d.message
    refused = t.violations(parse_spec(with_spec(binding_body(), **spec)["spec"]), NS, policy)  # the controller's
    assert d.message == "not allowed by the operator's settings: " + "; ".join(v.text() for v in refused)


def test_every_violation_is_in_one_message() -> None:
    body = with_spec(binding_body(), scheduler={"namespace": "kube-system"},
                     sandboxNamespaces={"selector": {}}, scope={"alwaysInclude": ["kube-system"]})
    d = decide(review(obj=body))
    assert not d.allowed
    fields = ["spec.scheduler.namespace", "spec.sandboxNamespaces.selector", "spec.scope.alwaysInclude[0]"]
    assert all(f in d.message for f in fields), d.message
    # The same question the controller asks (one function, the controller stays the authority).
    expected = t.violations(parse_spec(body["spec"]), NS, POLICY)
    assert d.message == "not allowed by the operator's settings: " + "; ".join(v.text() for v in expected)


def test_grant_role_and_cross_namespace_target_are_denied() -> None:
    argo = {"target": {"kind": "ArgoCDApplication", "application": {"name": "slurm", "namespace": "argocd"}},
            "grantClusterRole": "cluster-admin"}
    d = decide(review(obj=with_spec(binding_body(), scope=argo)))
    assert not d.allowed
    assert "spec.scope.target.application.namespace" in d.message and "spec.scope.grantClusterRole" in d.message
    # tenant-slurm may reach argocd: only the role is refused there.
    d = decide(review(obj=with_spec(binding_body(namespace="tenant-slurm"), scope=argo), namespace="tenant-slurm"))
    assert "spec.scope.target.application.namespace" not in d.message and "spec.scope.grantClusterRole" in d.message


def test_a_grant_the_admin_bounds_nowhere_is_allowed_with_a_warning_naming_the_setting() -> None:
    body = with_spec(binding_body(), scope={"grantClusterRole": "sunk-scheduler-sandbox"})
    d = decide(review(obj=body))
    assert d.allowed and any("spec.scope.grantClusterRole" in w and "--allow-grant" in w for w in d.warnings)
    bounded = t.TenancyPolicy(grants={NS: ("ds-*",)})
    assert not [w for w in decide(review(obj=body), policy=bounded).warnings if "grantClusterRole" in w]
    assert not decide(review()).warnings  # no grant asked: nothing said


def test_a_spec_that_does_not_parse_is_denied_with_the_model_message() -> None:
    body = with_spec(binding_body(), slurm={"exclusive": "always"})
    d = decide(review(obj=body))
    assert not d.allowed and d.code == 403
    assert d.message.startswith("the spec is invalid: spec.slurm.exclusive: ")
    missing = binding_body()
    del missing["spec"]["runner"]
    assert "spec.runner: Field required" in decide(review(obj=missing)).message


def test_an_update_that_changes_the_spec_into_a_violation_is_denied() -> None:
    old = binding_body()
    new = with_spec(old, scheduler={"namespace": "elsewhere"})
    d = decide(review("UPDATE", new, old))
    assert not d.allowed and "spec.scheduler.namespace" in d.message


# ---------------------------------------------------------------- skip


def test_status_finalizer_and_metadata_updates_are_never_checked() -> None:
    # Even a binding that the settings refuse (created before the webhook, or with other settings).
    old = with_spec(binding_body(), runner={"id": "r", "apiURL": "https://evil.example.com",
                                            "tokenSecretRef": {"name": "s"}})
    new = copy.deepcopy(old)
    new["metadata"]["finalizers"] = ["sunksandbox.dev/finalizer"]
    new["metadata"]["annotations"] = {"sunksandbox.dev/last-handled": "{}"}
    new["status"] = {"conditions": [{"type": "Ready", "status": "False"}]}
    d = decide(review("UPDATE", new, old), adm.Facts(bindings=[], secret=adm.SecretFact.MISSING))
    assert d.allowed and not d.checked and not d.warnings
    assert adm.response("rev-1", d)["response"] == {"uid": "rev-1", "allowed": True}


@pytest.mark.parametrize("operation", ["DELETE", "CONNECT"])
def test_delete_and_connect_are_not_checked(operation: str) -> None:
    evil = with_spec(binding_body(), sandboxNamespaces={"selector": {}})
    d = decide(review(operation, obj=None if operation == "DELETE" else evil, old=evil))
    assert d.allowed and not d.checked


def test_other_kinds_and_requests_without_an_object_are_not_checked() -> None:
    assert not decide(review(kind="ConfigMap")).checked
    body = review()
    body["request"]["object"] = None
    assert decide(body).allowed and not decide(body).checked


def test_a_malformed_review_is_a_value_error() -> None:
    for bad in ({}, {"request": {}}, {"request": "x"}, []):
        with pytest.raises(ValueError):
            adm.parse_request(bad)  # type: ignore[arg-type]


# ---------------------------------------------------------------- warnings


def test_allowed_without_facts_has_no_warnings() -> None:
    d = decide(review())
    assert d.allowed and d.checked and d.warnings == ()
    assert adm.response("u", d)["response"] == {"uid": "u", "allowed": True}


def test_an_older_binding_on_the_same_runner_is_a_warning() -> None:
    older = binding_body("old", "other", created="2025-01-01T00:00:00Z",
                         scheduler={"namespace": "other"})
    new = binding_body("b", NS)
    del new["metadata"]["creationTimestamp"]  # as a CREATE may look: younger than every stored binding
    d = decide(review(obj=new), adm.Facts(bindings=[older], secret=adm.SecretFact.PRESENT))
    assert d.allowed
    (w,) = d.warnings
    assert w.startswith("runner r is already bound by binding other/old (older)") and "RunnerConflict" in w
    # The older one itself (its own update) is not warned about the younger, nor about itself.
    younger = binding_body("b", NS, created="2026-06-01T00:00:00Z")
    again = with_spec(older, partition="p")
    assert decide(review("UPDATE", again, older, namespace="other"),
                  adm.Facts(bindings=[older, younger], secret=adm.SecretFact.PRESENT)).warnings == ()


def test_another_binding_on_the_same_scope_target_is_a_warning() -> None:
    other = binding_body("first", NS, created="2025-01-01T00:00:00Z",
                         runner={"id": "r2", "tokenSecretRef": {"name": "s"}})
    d = decide(review(obj=binding_body("b", NS)), adm.Facts(bindings=[other], secret=adm.SecretFact.PRESENT))
    (w,) = d.warnings
    assert w == f"the scope target (SchedulerConfigMap {NS} scheduler.conf scheduler.scope.namespaces) is also " \
        f"written by {NS}/first: the namespace lists are merged"  # defaults filled in: spelled out or not, the same
    # One that disagrees on what cannot be merged says so (the controller will refuse it).
    observe = with_spec(binding_body("b", NS), mode="Observe")
    (w,) = decide(review(obj=observe), adm.Facts(bindings=[other], secret=adm.SecretFact.PRESENT)).warnings
    assert w.startswith("binding slurm/first (older) shares this scope target in mode Enforce, this one is Observe")
    assert w.endswith("(until then this binding writes nothing to the scope target)")
    # A binding in another namespace with its own discovered ConfigMap is another target.
    elsewhere = binding_body("x", "other", runner={"id": "r3", "tokenSecretRef": {"name": "s"}})
    assert decide(review(), adm.Facts(bindings=[elsewhere], secret=adm.SecretFact.PRESENT)).warnings == ()


@pytest.mark.parametrize("fact, expected", [
    (adm.SecretFact.MISSING, "Secret slurm/s (spec.runner.tokenSecretRef) does not exist yet"),
    (adm.SecretFact.NO_KEY, "Secret slurm/s has no key 'token'"),
    (adm.SecretFact.FORBIDDEN, "the operator may not read Secrets in namespace slurm"),
])
def test_token_secret_facts_are_warnings(fact, expected) -> None:
    d = decide(review(), adm.Facts(bindings=[], secret=fact))
    assert d.allowed
    (w,) = d.warnings
    assert w.startswith(expected)
    assert adm.response("u", d)["response"]["warnings"] == [w]


@pytest.mark.parametrize("fact", [adm.SecretFact.PRESENT, adm.SecretFact.UNKNOWN])
def test_a_present_or_unknown_secret_says_nothing(fact) -> None:
    assert decide(review(), adm.Facts(bindings=None, secret=fact)).warnings == ()


def test_warnings_stay_short_single_lines() -> None:
    older = binding_body("old-one-with-a-long-name", "other-namespace", created="2025-01-01T00:00:00Z")
    sharing = binding_body("sharing", NS, created="2025-02-01T00:00:00Z",
                           runner={"id": "r9", "tokenSecretRef": {"name": "s"}})
    for fact in adm.SecretFact:
        for w in decide(review(), adm.Facts(bindings=[older, sharing], secret=fact)).warnings:
            assert "\n" not in w and len(w) < 300, w


# ---------------------------------------------------------------- wiring: facts read with the operator's client


async def test_review_reads_bindings_and_the_secret_without_decoding_it() -> None:
    h = Harness()
    h.kube.add("bindings", binding_body("old", "other", created="2025-01-01T00:00:00Z"))
    h.kube.add("secrets", {"metadata": {"namespace": NS, "name": "s"},
                           "data": {"token": base64.b64encode(b"tok-never-shown").decode()}})
    answer = (await wiring.review(h.ctx, review()))["response"]
    assert answer["uid"] == "rev-1" and answer["allowed"] is True
    assert len(answer["warnings"]) == 1 and "other/old" in answer["warnings"][0]
    assert h.kube.count("secret_has_key") == 1 and h.kube.count("read_secret_key") == 0
    assert "tok-never-shown" not in repr(answer)


async def test_review_denies_before_reading_anything() -> None:
    h = Harness()
    evil = with_spec(binding_body(), runner={"id": "r", "apiURL": "https://evil.example.com",
                                             "tokenSecretRef": {"name": "s"}})
    answer = (await wiring.review(h.ctx, review(obj=evil)))["response"]
    assert answer["allowed"] is False and "spec.runner.apiURL" in answer["status"]["message"]
    assert h.kube.calls == []


async def test_missing_forbidden_and_failing_reads() -> None:
    h = Harness()
    (w,) = (await wiring.review(h.ctx, review()))["response"]["warnings"]
    assert "does not exist yet" in w
    h.kube.deny("secret_has_key", NS)
    (w,) = (await wiring.review(h.ctx, review()))["response"]["warnings"]
    assert "may not read Secrets" in w
    h.kube.deny("list_bindings")  # cannot list: no runner/target warning, still answered
    h.kube.add("secrets", {"metadata": {"namespace": NS, "name": "s"}, "data": {"other": "eA=="}})
    facts = await wiring.gather(h.kube, NS, parse_spec(binding_body()["spec"]))
    assert facts.bindings is None and facts.secret is adm.SecretFact.FORBIDDEN


async def test_a_slow_read_is_unknown_within_the_timeout() -> None:
    kube = FakeKube()

    async def slow() -> list[dict]:
        await asyncio.sleep(10)
        return []

    kube.list_bindings = slow  # type: ignore[method-assign]
    facts = await asyncio.wait_for(wiring.gather(kube, NS, parse_spec(binding_body()["spec"]), timeout=0.05), 2)
    assert facts.bindings is None and facts.secret is adm.SecretFact.MISSING


async def test_webhook_off_by_default() -> None:
    assert Config().webhook_port == 0
    assert await wiring.serve(Harness().ctx) is None


# ---------------------------------------------------------------- certificates (files only)


def write_pair(d: Path, cn: str) -> None:
    import datetime as dt

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])
    now = dt.datetime.now(dt.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now)
            .not_valid_after(now + dt.timedelta(days=1)).sign(key, hashes.SHA256()))
    (d / "tls.key").write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                  serialization.NoEncryption()))
    (d / "tls.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def test_certificates_load_and_reload_when_renewed(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        CertFiles(tmp_path)
    write_pair(tmp_path, "one")
    certs = CertFiles(tmp_path)
    assert not certs.reload_if_changed()  # unchanged
    write_pair(tmp_path, "two")
    assert certs.reload_if_changed()
    (tmp_path / "tls.key").write_text("half-written")  # mid-rotation: the old pair keeps serving
    assert not certs.reload_if_changed()
