"""The optional webhook component (manifests/webhook/): parsed and patched here, without kubectl.

`kubectl kustomize` of an overlay using it runs in tests/integration/test_webhook.py. What is
pinned: the VWC's fail-open settings, that the Service, the Certificate, the CA injection, the
mounted Secret and the operator flags all name the same things, and that the component patches
the shipped Deployment (appending to its lists) instead of replacing it.
"""

from __future__ import annotations

import copy
import os

import pytest
import yaml

from sunk_sandbox_operator import api as model

from tests.unit.test_manifests import MANIFESTS, OPERATOR_NS, load_docs

WEBHOOK = MANIFESTS / "webhook"
SERVICE = "sunk-sandbox-operator-webhook"


@pytest.fixture(scope="module")
def component() -> dict:
    return yaml.safe_load((WEBHOOK / "kustomization.yaml").read_text())


@pytest.fixture(scope="module")
def docs(component) -> dict[tuple[str, str], dict]:
    out = {}
    for name in component["resources"]:
        for doc in load_docs(WEBHOOK / name):
            out[(doc["kind"], doc["metadata"]["name"])] = doc
    return out


def apply_json_patch(doc: dict, ops: list[dict]) -> dict:
    """The subset of RFC 6902 the component uses: `add`, appending with `/-`."""
    doc = copy.deepcopy(doc)
    for op in ops:
        assert op["op"] == "add", op
        *parents, last = op["path"].lstrip("/").split("/")
        node = doc
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        if last == "-":
            node.append(op["value"])
        else:
            node[last] = op["value"]
    return doc


@pytest.fixture(scope="module")
def patched(component) -> dict:
    (patch,) = component["patches"]
    assert patch["target"] == {"group": "apps", "version": "v1", "kind": "Deployment",
                               "name": "sunk-sandbox-operator", "namespace": OPERATOR_NS}
    (deployment,) = load_docs(MANIFESTS / "deployment.yaml")
    return apply_json_patch(deployment, yaml.safe_load(patch["patch"]))


def test_it_is_an_optional_component(component):
    assert component["kind"] == "Component" and component["apiVersion"] == "kustomize.config.k8s.io/v1alpha1"
    main = yaml.safe_load((MANIFESTS / "kustomization.yaml").read_text())
    listed = main.get("resources", []) + main.get("components", [])
    assert "webhook" not in listed, "optional: not in the default install"
    assert set(component["resources"]) == {"service.yaml", "certificate.yaml", "validatingwebhookconfiguration.yaml"}


def test_the_webhook_fails_open_and_checks_only_bindings(docs):
    vwc = docs[("ValidatingWebhookConfiguration", "sunk-sandbox-operator")]
    assert vwc["apiVersion"] == "admissionregistration.k8s.io/v1"
    (hook,) = vwc["webhooks"]
    assert hook["failurePolicy"] == "Ignore"
    assert hook["timeoutSeconds"] == 5
    assert hook["sideEffects"] == "None"
    assert hook["admissionReviewVersions"] == ["v1"]
    assert hook["matchPolicy"] == "Equivalent"
    (rule,) = hook["rules"]
    assert rule["apiGroups"] == [model.GROUP] and rule["apiVersions"] == [model.VERSION]
    assert rule["resources"] == [model.PLURAL], "not the status subresource: status patches never reach it"
    assert sorted(rule["operations"]) == ["CREATE", "UPDATE"]
    assert hook["clientConfig"]["service"] == {"name": SERVICE, "namespace": OPERATOR_NS, "path": "/validate",
                                               "port": 443}
    assert "caBundle" not in hook["clientConfig"], "cert-manager injects it"


def test_certificate_service_and_ca_injection_agree(docs):
    vwc = docs[("ValidatingWebhookConfiguration", "sunk-sandbox-operator")]
    cert = docs[("Certificate", SERVICE)]
    issuer = docs[("Issuer", cert["spec"]["issuerRef"]["name"])]
    assert vwc["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == f"{OPERATOR_NS}/{SERVICE}"
    assert cert["metadata"]["namespace"] == issuer["metadata"]["namespace"] == OPERATOR_NS
    assert cert["spec"]["issuerRef"]["kind"] == "Issuer" and issuer["spec"] == {"selfSigned": {}}
    assert f"{SERVICE}.{OPERATOR_NS}.svc" in cert["spec"]["dnsNames"]
    service = docs[("Service", SERVICE)]
    assert service["metadata"]["namespace"] == OPERATOR_NS
    assert service["spec"]["ports"] == [{"name": "webhook", "port": 443, "targetPort": "webhook", "protocol": "TCP"}]
    for doc in docs.values():
        assert doc["metadata"]["labels"]["app.kubernetes.io/name"] == "sunk-sandbox-operator"


def test_the_patch_adds_port_flags_and_the_certificate_volume(docs, patched):
    (deployment,) = load_docs(MANIFESTS / "deployment.yaml")
    (before,) = deployment["spec"]["template"]["spec"]["containers"]
    (container,) = patched["spec"]["template"]["spec"]["containers"]
    assert container["args"][:len(before["args"])] == before["args"], "appended, the shipped flags kept"
    flags = dict(a.split("=", 1) for a in container["args"][len(before["args"]):])
    assert set(flags) == {"--webhook-port", "--webhook-cert-dir"}
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports["webhook"] == int(flags["--webhook-port"]) == 9443
    assert {"metrics", "health"} <= set(ports)
    service = docs[("Service", SERVICE)]
    assert service["spec"]["selector"].items() <= patched["spec"]["template"]["metadata"]["labels"].items()
    mount = next(m for m in container["volumeMounts"] if m["mountPath"] == flags["--webhook-cert-dir"])
    assert mount["readOnly"] is True
    volume = next(v for v in patched["spec"]["template"]["spec"]["volumes"] if v["name"] == mount["name"])
    assert volume["secret"]["secretName"] == docs[("Certificate", SERVICE)]["spec"]["secretName"]
    assert any(m["mountPath"] == "/tmp" for m in container["volumeMounts"])


def test_network_policy_lets_the_api_server_reach_the_webhook_port():
    policies = [d for d in load_docs(MANIFESTS / "networkpolicy.yaml") if d["kind"] == "NetworkPolicy"]
    ports = {p["port"] for pol in policies for rule in pol["spec"].get("ingress", []) for p in rule.get("ports", [])}
    assert 9443 in ports


def test_webhook_port_without_a_certificate_directory_is_refused(monkeypatch, capsys):
    from sunk_sandbox_operator.__main__ import main

    monkeypatch.setattr(os, "environ", {k: v for k, v in os.environ.items() if not k.startswith("SSB_WEBHOOK_")})
    with pytest.raises(SystemExit) as exc:
        main(["run", "--webhook-port=9443"])
    assert exc.value.code == 2
    assert "--webhook-port needs --webhook-cert-dir" in capsys.readouterr().err
