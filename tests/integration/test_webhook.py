"""The admission webhook, called by the real kube-apiserver.

A second operator process runs on the session cluster with `--webhook-port`: the session
`operator` holds the Lease, so this one is a standby, and it still serves the webhook (the
reason it is our own server, not kopf's: kopf runs on the leader only). A url-form
ValidatingWebhookConfiguration (https://127.0.0.1:PORT/validate, a generated CA, IP SAN) is scoped
by namespaceSelector to this module's namespace, so no other test in the session meets it. It
uses failurePolicy Fail (the shipped one says Ignore) so that a webhook that errors or is not
called would fail the "never blocked" test instead of passing it silently, and it also matches the
status subresource, so the operator's own status patches go through the webhook too.

Shown with `kubectl`: every attack of the shared table is denied at apply with a message naming the
field (nothing is created, so nothing can be sent); a binding whose token Secret is missing, or
whose runner another binding already keeps, is created with `Warning: ...`; status, label and
finalizer updates of a binding the settings refuse are never blocked. Also: `kubectl kustomize`
of an overlay with the shipped component, and a server-side dry run of what it renders.
"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import json
import os
import urllib.request
import uuid
from pathlib import Path
from typing import Iterator

import pytest
import yaml

from tests.conftest import TEST_ENV, SECRET_VALUES, wait_for
from tests.integration.attacks import ATTACKS, attack_spec
from tests.integration.conftest import binding_spec, create_token_secret, grant_operator, make_scheduler, new_runner
from tests.integration.test_manifests_kustomize import kustomize_build
from tests.unit.test_manifests import MANIFESTS

pytestmark = pytest.mark.integration

LABEL = "sunksandbox.dev/webhook-test"
ATTACKER = "http://127.0.0.2:9"  # never listened on: a denied binding never exists, so nothing is sent


def write_certs(d: Path) -> bytes:
    """A CA and a server certificate for 127.0.0.1 (IP SAN); tls.crt / tls.key as cert-manager writes them."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = dt.datetime.now(dt.timezone.utc)

    def name(cn: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    def builder(subject: x509.Name, issuer: x509.Name, key) -> x509.CertificateBuilder:
        return (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(key.public_key())
                .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(minutes=5))
                .not_valid_after(now + dt.timedelta(days=1)))

    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = (builder(name("ssb-webhook-test-ca"), name("ssb-webhook-test-ca"), ca_key)
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .add_extension(x509.KeyUsage(True, False, False, False, False, True, True, False, False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    server = (builder(name("127.0.0.1"), ca.subject, key)
              .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
              .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
              .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                             critical=False)
              .sign(ca_key, hashes.SHA256()))
    pem = serialization.Encoding.PEM
    ca_pem = ca.public_bytes(pem)
    (d / "tls.crt").write_bytes(server.public_bytes(pem) + ca_pem)
    (d / "tls.key").write_bytes(key.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                                                  serialization.NoEncryption()))
    os.chmod(d / "tls.key", 0o600)
    return ca_pem


def health(proc) -> dict:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{proc.liveness_port}/healthz", timeout=2) as r:
            return json.loads(r.read())
    except Exception as exc:  # noqa: BLE001 - not answering (yet)
        return {"error": str(exc)}


@pytest.fixture(scope="module")
def webhook_operator(operator, operator_kubeconfig, tmp_path_factory) -> Iterator:
    """A second replica with the webhook on, a standby: the session operator leads."""
    from sunk_sandbox_devtools.devcluster import OperatorProcess, free_port

    wait_for(lambda: health(operator).get("leader") is True, 30, lambda: f"session operator: {health(operator)}")
    certs = tmp_path_factory.mktemp("webhook-certs")
    ca = write_certs(certs)
    port = free_port()
    proc = OperatorProcess(operator_kubeconfig, tmp_path_factory.mktemp("webhook-logs") / "operator.log",
                           env=TEST_ENV, args=("--log-format=json", f"--webhook-port={port}",
                                               "--webhook-address=127.0.0.1", f"--webhook-cert-dir={certs}"))
    proc.webhook_port, proc.ca = port, ca
    try:
        yield proc
    finally:
        proc.stop()
        logs = proc.logs()
        assert not [t for t in SECRET_VALUES if t in logs], "a secret value appeared in the webhook replica's log"


@pytest.fixture(scope="module")
def webhook_ns(installed) -> str:
    """The namespace the test webhook configuration selects (by a label no other test sets)."""
    ns = "t-webhook-" + uuid.uuid4().hex[:6]
    installed.create_namespace(ns, labels={LABEL: ns})
    grant_operator(installed, ns)  # Secret get: the webhook tells a missing Secret from an unreadable one
    create_token_secret(installed, ns)
    make_scheduler(installed, ns)
    return ns


def binding(ns: str, name: str, spec: dict) -> dict:
    return {"apiVersion": "sunksandbox.dev/v1alpha1", "kind": "SunkSandboxBinding",
            "metadata": {"name": name, "namespace": ns}, "spec": spec}


def evil_spec(emulator) -> dict:
    return binding_spec("runner-evil", emulator, runner={
        "id": "runner-evil", "apiURL": "https://evil.example.com", "tokenSecretRef": {"name": "coreweave-api"}})


@pytest.fixture(scope="module")
def refused_before(installed, webhook_ns, emulator) -> str:
    """A binding the settings refuse, created before the webhook was registered (the controller
    refuses it with NotAllowed: its status patches and finalizer must still pass the webhook)."""
    installed.create_binding(webhook_ns, "refused-before", evil_spec(emulator))
    return "refused-before"


@pytest.fixture(scope="module")
def webhook(installed, webhook_operator, webhook_ns, refused_before, emulator) -> Iterator[str]:
    """The url-form ValidatingWebhookConfiguration, active (a server-side dry run is denied)."""
    name = f"ssb-test-{webhook_ns}"
    vwc = {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [{
            "name": "sunksandboxbindings.validate.sunksandbox.dev",
            "admissionReviewVersions": ["v1"], "sideEffects": "None", "timeoutSeconds": 5,
            "failurePolicy": "Fail", "matchPolicy": "Equivalent",
            "namespaceSelector": {"matchLabels": {LABEL: webhook_ns}},
            "clientConfig": {"url": f"https://127.0.0.1:{webhook_operator.webhook_port}/validate",
                             "caBundle": base64.b64encode(webhook_operator.ca).decode()},
            "rules": [{"apiGroups": ["sunksandbox.dev"], "apiVersions": ["v1alpha1"],
                       "operations": ["CREATE", "UPDATE"], "scope": "Namespaced",
                       "resources": ["sunksandboxbindings", "sunksandboxbindings/status"]}],
        }],
    }
    installed.apply(vwc)
    probe = json.dumps(binding(webhook_ns, "probe", evil_spec(emulator)))
    try:
        wait_for(lambda: "denied the request" in installed.kubectl(
            "apply", "--dry-run=server", "-f", "-", input=probe, check=False).stderr, 30,
            lambda: "the API server does not call the webhook yet")
        yield name
    finally:
        installed.kubectl("delete", "validatingwebhookconfiguration", name, "--ignore-not-found")


def test_the_webhook_replica_is_a_standby(webhook, webhook_operator):
    assert health(webhook_operator).get("leader") is False  # and yet it answered the probe above


@pytest.mark.parametrize("what,change,field", ATTACKS, ids=[a[0] for a in ATTACKS])
def test_every_attack_is_denied_at_apply(installed, webhook, webhook_ns, emulator, what, change, field):
    name = "attack-" + uuid.uuid4().hex[:6]
    spec = attack_spec(binding_spec(new_runner(emulator, {}), emulator, sandboxNamespaces={"names": ["ds-at-*"]}),
                       change, attacker=ATTACKER, victim="victim-ns", ns=webhook_ns)
    out = installed.apply(binding(webhook_ns, name, spec), check=False)
    assert out.returncode != 0, out.stdout
    assert 'admission webhook "sunksandboxbindings.validate.sunksandbox.dev" denied the request' in out.stderr
    assert f"{field}:" in out.stderr, out.stderr
    assert not installed.binding_exists(webhook_ns, name)


def test_a_disallowed_api_url_is_denied_naming_the_field(installed, webhook, webhook_ns, emulator):
    out = installed.apply(binding(webhook_ns, "evil", evil_spec(emulator)), check=False)
    assert out.returncode != 0
    assert ("spec.runner.apiURL: https://evil.example.com is not an API URL the operator allows" in out.stderr), \
        out.stderr
    assert not installed.binding_exists(webhook_ns, "evil")


def test_a_missing_token_secret_is_a_warning_not_a_denial(installed, webhook, webhook_ns, emulator):
    spec = binding_spec(new_runner(emulator, {}), emulator)
    spec["runner"]["tokenSecretRef"] = {"name": "not-yet"}
    out = installed.apply(binding(webhook_ns, "no-secret", spec))
    assert out.returncode == 0
    assert (f"Warning: Secret {webhook_ns}/not-yet (spec.runner.tokenSecretRef) does not exist yet"
            in out.stderr), out.stderr
    assert installed.binding_exists(webhook_ns, "no-secret")
    # The controller finds the same, and says so in the binding's status.
    installed.wait_condition(webhook_ns, "no-secret", "PolicySynced", "False", "CredentialsMissing", timeout=30)


def test_an_older_binding_on_the_runner_is_a_warning(installed, webhook, webhook_ns, emulator):
    runner = new_runner(emulator, {})
    first = installed.apply(binding(webhook_ns, "first", binding_spec(runner, emulator)))
    assert "already bound" not in first.stderr and "does not exist" not in first.stderr, first.stderr
    second = installed.apply(binding(webhook_ns, "second", binding_spec(runner, emulator,
                                                                        sandboxNamespaces={"names": ["ds-2-*"]})))
    assert second.returncode == 0
    # "first" has proved its token may manage the runner by now, or is older and has not tried yet: either
    # way it keeps the runner, and the warning says which.
    assert f"Warning: runner {runner} is already bound by binding {webhook_ns}/first" in second.stderr, second.stderr
    assert "RunnerConflict" in second.stderr
    assert "also written by" in second.stderr  # and both write the namespace's discovered ConfigMap


def test_status_metadata_and_finalizer_updates_are_never_blocked(installed, webhook, webhook_ns, refused_before):
    name = refused_before
    # The leader's own work on it (finalizer, NotAllowed status) went through the webhook.
    installed.wait_condition(webhook_ns, name, "PolicySynced", "False", "NotAllowed", timeout=30)
    patch = json.dumps({"status": {"observedGeneration": 1}})
    out = installed.kubectl("patch", "ssb", name, "-n", webhook_ns, "--subresource=status", "--type=merge",
                            "-p", patch, check=False)
    assert out.returncode == 0, out.stderr
    out = installed.kubectl("label", "ssb", name, "-n", webhook_ns, "team=a", "--overwrite", check=False)
    assert out.returncode == 0, out.stderr
    out = installed.kubectl("patch", "ssb", name, "-n", webhook_ns, "--type=json", "-p", json.dumps(
        [{"op": "add", "path": "/metadata/finalizers/-", "value": "example.com/hold"}]), check=False)
    assert out.returncode == 0, out.stderr
    out = installed.kubectl("patch", "ssb", name, "-n", webhook_ns, "--type=json", "-p", json.dumps(
        [{"op": "remove", "path": "/metadata/finalizers/1"}]), check=False)
    assert out.returncode == 0, out.stderr
    # A spec change is checked: the spec is still refused.
    out = installed.kubectl("patch", "ssb", name, "-n", webhook_ns, "--type=merge",
                            "-p", json.dumps({"spec": {"partition": "other"}}), check=False)
    assert out.returncode != 0 and "spec.runner.apiURL" in out.stderr, out.stderr


# ---------------------------------------------------------------- the shipped component


def test_the_component_renders_and_the_api_server_accepts_it(installed, tmp_path):
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump({
        "resources": [os.path.relpath(MANIFESTS, overlay)],
        "components": [os.path.relpath(MANIFESTS / "webhook", overlay)],
    }))
    docs = kustomize_build(overlay)
    by = {(d["kind"], d["metadata"]["name"]): d for d in docs}
    (container,) = by[("Deployment", "sunk-sandbox-operator")]["spec"]["template"]["spec"]["containers"]
    assert "--webhook-port=9443" in container["args"] and "--metrics-port=8080" in container["args"]
    assert {"name": "webhook", "containerPort": 9443, "protocol": "TCP"} in container["ports"]
    for key in (("Service", "sunk-sandbox-operator-webhook"), ("Certificate", "sunk-sandbox-operator-webhook"),
                ("Issuer", "sunk-sandbox-operator-selfsigned"),
                ("ValidatingWebhookConfiguration", "sunk-sandbox-operator")):
        assert key in by, key
    # cert-manager's CRDs are not installed here: dry-run the rest against the real API server.
    checked = [by[k] for k in (("Deployment", "sunk-sandbox-operator"), ("Service", "sunk-sandbox-operator-webhook"),
                               ("ValidatingWebhookConfiguration", "sunk-sandbox-operator"))]
    out = installed.kubectl("apply", "--server-side", "--force-conflicts", "--dry-run=server", "-f", "-",
                            input="\n---\n".join(yaml.safe_dump(d) for d in checked), check=False)
    assert out.returncode == 0, out.stderr
