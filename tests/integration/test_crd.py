"""The CRD against a real kube-apiserver: installs, rejects bad bindings at create, defaults, columns."""

from __future__ import annotations

import copy
import json

import pytest
from kubernetes.client.rest import ApiException

pytestmark = pytest.mark.integration

GOOD = {
    "runner": {"id": "runner-7f3a", "tokenSecretRef": {"name": "coreweave-api"}},
    "sandboxNamespaces": {"names": ["ds-*"]},
}


def with_(path: str, value):
    spec = copy.deepcopy(GOOD)
    node = spec
    keys = path.split(".")
    for k in keys[:-1]:
        node = node.setdefault(k, {})
    if value is DELETE:
        node.pop(keys[-1], None)
    else:
        node[keys[-1]] = value
    return spec


DELETE = object()

# (id, spec, fragments the API server's message must contain: the field, and the fix or rule)
BAD = [
    ("runner-id-empty", with_("runner.id", ""), ["spec.runner.id", "at least 1"]),
    ("runner-missing", with_("runner", DELETE), ["spec.runner", "Required"]),
    ("runner-id-spaces", with_("runner.id", "bad id"), ["spec.runner.id", "should match"]),
    ("token-ref-missing", with_("runner.tokenSecretRef", DELETE), ["spec.runner.tokenSecretRef", "Required"]),
    ("api-url-not-url", with_("runner.apiURL", "api.coreweave.com"), ["spec.runner.apiURL", "should match"]),
    ("exclusive-enum", with_("slurm.exclusive", "always"), ["spec.slurm.exclusive", '"none", "user", "ok"']),
    ("user-id-name", with_("slurm.userId", "alice"), ["spec.slurm.userId", "should match"]),
    ("group-id-name", with_("slurm.groupId", "staff"), ["spec.slurm.groupId", "should match"]),
    ("partition-bad", with_("partition", "bad partition!"), ["spec.partition", "should match"]),
    ("account-bad", with_("slurm.account", "a b"), ["spec.slurm.account", "should match"]),
    ("resync-not-duration", with_("resyncInterval", "5 minutes"), ["spec.resyncInterval", "should match"]),
    ("mode-enum", with_("mode", "DryRun"), ["spec.mode", '"Enforce", "Observe"']),
    ("deletion-policy-enum", with_("deletionPolicy", "Delete"), ["spec.deletionPolicy", '"Restore", "Orphan"']),
    ("sandbox-namespaces-empty", with_("sandboxNamespaces", {}),
     ["spec.sandboxNamespaces", "at least one of selector or names"]),
    ("sandbox-namespaces-missing", with_("sandboxNamespaces", DELETE), ["spec.sandboxNamespaces", "Required"]),
    ("grace-negative", with_("expectedGracePeriodSeconds", -1), ["spec.expectedGracePeriodSeconds", "greater than or equal to 0"]),
    ("kill-wait-zero", with_("scheduler.killWaitSeconds", 0), ["spec.scheduler.killWaitSeconds", "greater than or equal to 1"]),
    ("target-kind-enum", with_("scope.target.kind", "Helm"), ["spec.scope.target.kind", "SchedulerConfigMap"]),
    ("argocd-without-name", with_("scope.target", {"kind": "ArgoCDApplication"}),
     ["spec.scope.target", "application.name is required when kind is ArgoCDApplication"]),
    ("argocd-two-source-selectors", with_("scope.target", {"kind": "ArgoCDApplication", "application": {
        "name": "slurm", "sourceChart": "slurm", "sourceIndex": 1}}),
     ["spec.scope.target.application", "set sourceChart or sourceIndex, not both"]),
    ("pinned-and-client", {**with_("partition", "sandboxes"), "clientAnnotations": ["sunk.coreweave.com/partition"]},
     ["spec.partition pins sunk.coreweave.com/partition", "remove one of the two"]),
    ("user-id-pinned-and-client", {**with_("slurm.userId", "1000"), "clientAnnotations": ["sunk.coreweave.com/user-id"]},
     ["spec.slurm.userId pins sunk.coreweave.com/user-id"]),
    ("namespace-glob-upper", with_("sandboxNamespaces.names", ["DS-*"]), ["spec.sandboxNamespaces.names[0]", "should match"]),
    ("always-include-bad", with_("scope.alwaysInclude", ["Tenant_Slurm"]), ["spec.scope.alwaysInclude[0]", "should match"]),
    ("selector-operator-enum", with_("sandboxNamespaces.selector", {"matchExpressions": [{"key": "a", "operator": "Has"}]}),
     ["operator", '"In", "NotIn", "Exists", "DoesNotExist"']),
    # Bounded specs (api/bounds.py): one binding's cost stays small whatever its author writes.
    ("selector-too-many-expressions", with_("sandboxNamespaces.selector", {"matchExpressions": [
        {"key": f"k{i}", "operator": "DoesNotExist"} for i in range(17)]}),
     ["spec.sandboxNamespaces.selector.matchExpressions", "Too many", "at most 16"]),
    ("selector-the-issues-28000-expressions", with_("sandboxNamespaces.selector", {"matchExpressions": [
        {"key": f"nobody-has-{i}", "operator": "DoesNotExist"} for i in range(28000)]}),
     ["spec.sandboxNamespaces.selector.matchExpressions", "Too many", "at most 16"]),
    ("selector-too-many-values", with_("sandboxNamespaces.selector", {"matchExpressions": [
        {"key": "a", "operator": "In", "values": [f"v{i}" for i in range(65)]}]}),
     ["spec.sandboxNamespaces.selector.matchExpressions[0].values", "Too many", "at most 64"]),
    ("selector-too-many-labels", with_("scheduler.podSelector", {"matchLabels": {f"k{i}": "v" for i in range(33)}}),
     ["spec.scheduler.podSelector.matchLabels", "Too many", "at most 32"]),
    ("selector-label-key-too-long", with_("sandboxNamespaces.selector", {"matchLabels": {"k" * 318: "v"}}),
     ["spec.sandboxNamespaces.selector.matchLabels", "keys must be at most 317 characters"]),
    ("selector-label-value-too-long", with_("sandboxNamespaces.selector", {"matchLabels": {"k": "v" * 64}}),
     ["spec.sandboxNamespaces.selector.matchLabels.k", "Too long"]),
    ("api-url-too-long", with_("runner.apiURL", "https://api.coreweave.com/" + "a" * 2048),
     ["spec.runner.apiURL", "Too long"]),
    ("too-many-globs", with_("sandboxNamespaces.names", [f"ds-{i}-*" for i in range(65)]),
     ["spec.sandboxNamespaces.names", "Too many", "at most 64"]),
    ("glob-with-five-stars", with_("sandboxNamespaces.names", ["*a*a*a*a*"]),
     ["spec.sandboxNamespaces.names[0]", "should match"]),
]


def test_crd_is_established(kube):
    crd = kube.ext.read_custom_resource_definition("sunksandboxbindings.sunksandbox.dev")
    conds = {c.type: c.status for c in crd.status.conditions}
    assert conds["Established"] == "True"
    assert conds.get("NamesAccepted") == "True"
    assert crd.spec.names.short_names == ["ssb"]


@pytest.mark.parametrize("case_id,spec,fragments", BAD, ids=[b[0] for b in BAD])
def test_bad_binding_rejected_with_field_named(kube, ns, case_id, spec, fragments):
    with pytest.raises(ApiException) as info:
        kube.create_binding(ns, case_id, spec)
    assert info.value.status == 422
    message = json.loads(info.value.body)["message"]
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"


def test_bad_binding_rejected_by_kubectl_apply(kube, ns):
    manifest = json.dumps({"apiVersion": "sunksandbox.dev/v1alpha1", "kind": "SunkSandboxBinding",
                           "metadata": {"name": "bad", "namespace": ns}, "spec": with_("slurm.exclusive", "always")})
    out = kube.kubectl("apply", "-f", "-", input=manifest, check=False)
    assert out.returncode != 0
    assert "spec.slurm.exclusive" in out.stderr


def test_minimal_binding_gets_defaults(kube, ns):
    kube.create_binding(ns, "minimal", GOOD)
    spec = kube.binding(ns, "minimal")["spec"]
    assert spec["runner"]["apiURL"] == "https://api.coreweave.com"
    assert spec["runner"]["tokenSecretRef"]["key"] == "token"
    assert spec["scheduler"]["podSelector"] == {"matchLabels": {"app.kubernetes.io/name": "sunk-scheduler"}}
    assert spec["scope"]["target"]["kind"] == "SchedulerConfigMap"
    assert spec["scope"]["target"]["configMap"] == {"key": "scheduler.conf", "name": "", "path": "scheduler.scope.namespaces"}
    assert spec["scope"]["restartScheduler"] is True
    assert spec["expectedGracePeriodSeconds"] == 30
    assert spec["mode"] == "Enforce"
    assert spec["resyncInterval"] == "5m"
    assert spec["deletionPolicy"] == "Restore"


def test_defaults_agree_with_models(kube, ns):
    """What the API server stores for a minimal binding is what the models would produce."""
    from sunk_sandbox_operator.api import parse_spec

    kube.create_binding(ns, "agree", GOOD)
    stored = kube.binding(ns, "agree")["spec"]
    assert parse_spec(stored) == parse_spec(GOOD)


def _expected_row(b: dict) -> list[str]:
    st = b.get("status") or {}
    ready = next((c for c in st.get("conditions") or [] if c["type"] == "Ready"), {})
    return [b["metadata"]["name"], b["spec"]["runner"]["id"], (st.get("scheduler") or {}).get("name", ""),
            b["spec"].get("partition", ""), str((st.get("scope") or {}).get("namespaceCount", "")),
            ready.get("status", ""), ready.get("reason", "")]


def test_printer_columns(kube, ns):
    """Columns show the values stored in the object (the operator may be updating status meanwhile)."""
    kube.create_binding(ns, "cols", {**GOOD, "partition": "sandboxes"})
    status = {"scheduler": {"name": "slurm-scheduler", "killWaitSeconds": 60}, "scope": {"namespaceCount": 7},
              "conditions": [{"type": "Ready", "status": "False", "reason": "PolicyRejected", "message": "x",
                              "lastTransitionTime": "2026-11-30T00:00:00Z"}]}
    kube.custom.patch_namespaced_custom_object_status("sunksandbox.dev", "v1alpha1", ns, "sunksandboxbindings",
                                                      "cols", {"status": status})
    for _ in range(50):
        before = kube.binding(ns, "cols")
        out = kube.kubectl("get", "ssb", "-n", ns, "cols").stdout.splitlines()
        after = kube.binding(ns, "cols")
        if before["metadata"]["resourceVersion"] == after["metadata"]["resourceVersion"]:
            break
    assert out[0].split() == ["NAME", "RUNNER", "SCHEDULER", "PARTITION", "NAMESPACES", "READY", "REASON", "PAUSED", "AGE"]
    cells = [c for c in _expected_row(after) if c]
    assert out[1].split()[:len(cells)] == cells
    assert {"runner-7f3a", "sandboxes"} <= set(out[1].split())
    wide = kube.kubectl("get", "ssb", "-n", ns, "cols", "-o", "wide").stdout.splitlines()
    assert wide[0].split()[-5:] == ["MODE", "POLICY", "SCOPE", "PLACEMENT", "KILLWAIT"]
    assert "Enforce" in wide[1].split()
    # the category and short name work as well
    assert "cols" in kube.kubectl("get", "sunk", "-n", ns).stdout


def test_explain_has_descriptions(kube):
    out = " ".join(kube.kubectl("explain", "ssb.spec.scope").stdout.split())
    assert "watched-namespace" in out
    assert "alwaysInclude" in out and "Never removed by the operator" in out
