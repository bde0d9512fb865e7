"""Pause (`sunksandbox.dev/paused: "true"`) against the real control plane and the runner emulator over
HTTP: a paused binding writes nothing (checked with the API server's audit of the operator's requests,
the emulator's write log, the target list and the RoleBindings), whatever changes; removing the
annotation reconciles at once; a paused binding deleted still restores."""

from __future__ import annotations

import time
import uuid

import pytest
from kubernetes.client.rest import ApiException

from tests.conftest import OPERATOR_USER, assert_stays, wait_for
from tests.integration.conftest import binding_spec, new_runner, runner_policy, writes
from tests.integration.test_scope import GRANT_ROLE, listed

pytestmark = pytest.mark.integration

PAUSED = "sunksandbox.dev/paused"
WRITE_VERBS = {"create", "update", "patch", "delete", "deletecollection"}
RESUME_BOUND = 5.0  # seconds: "reconciled at once" (one reconcile and the scope loops' writes)


def annotate(kube, ns: str, value: str | None, key: str = PAUSED) -> None:
    kube.custom.patch_namespaced_custom_object("sunksandbox.dev", "v1alpha1", ns, "sunksandboxbindings", "b",
                                               {"metadata": {"annotations": {key: value}}})


def edit_spec(kube, ns: str, spec: dict) -> None:
    kube.custom.patch_namespaced_custom_object("sunksandbox.dev", "v1alpha1", ns, "sunksandboxbindings", "b",
                                               {"spec": spec})


def kopf_bookkeeping(e: dict) -> bool:
    """kopf's own patch of the binding's metadata (its `last-handled` annotation follows a spec edit;
    documented): not the operator's writes, which all name its user agent."""
    ref = e.get("objectRef") or {}
    return (str(e.get("userAgent", "")).startswith("kopf/") and ref.get("resource") == "sunksandboxbindings"
            and not ref.get("subresource"))


def operator_writes(cluster, since: int, namespaces: set[str]) -> list[str]:
    """The operator's write requests (as the API server audited them) on objects in `namespaces`."""
    out = []
    for e in cluster.audit_events(OPERATOR_USER)[since:]:
        ref = e.get("objectRef") or {}
        if e.get("verb") in WRITE_VERBS and ref.get("namespace") in namespaces and not kopf_bookkeeping(e):
            out.append(f"{e['verb']} {ref.get('resource')}/{ref.get('subresource') or ''} "
                       f"{ref.get('namespace')}/{ref.get('name') or ''}")
    return out


def events(kube, ns: str, reason: str) -> list:
    return [e for e in kube.core.list_namespaced_event(ns).items if e.reason == reason]


def rolebindings(kube, ns: str) -> list:
    return kube.rbac.list_namespaced_role_binding(ns, label_selector="sunksandbox.dev/binding").items


def test_a_paused_binding_writes_nothing_and_resumes_at_once(installed, operator, emulator, binding_ns):
    ns, prefix = binding_ns, "pz" + uuid.uuid4().hex[:6]
    installed.create_namespace(f"{prefix}-0")
    runner = new_runner(emulator, {})
    installed.create_binding(ns, "b", binding_spec(runner, emulator, sandboxNamespaces={"names": [f"{prefix}-*"]},
                                                   scope={"grantClusterRole": GRANT_ROLE, "minRollInterval": "0s"}))
    installed.wait_condition(ns, "b", "Ready", "True", timeout=30)
    assert f"{prefix}-0" in listed(installed, ns) and rolebindings(installed, f"{prefix}-0")

    annotate(installed, ns, "true")
    installed.wait_condition(ns, "b", "Ready", "False", "Paused", timeout=10)
    wait_for(lambda: events(installed, ns, "BindingPaused"), 10)
    status = installed.binding(ns, "b")["status"]
    assert status["paused"] is True
    conds = {c["type"]: c for c in status["conditions"]}
    assert conds["PolicySynced"]["reason"] == conds["ScopeSynced"]["reason"] == "Paused"
    assert conds["SchedulerReady"]["reason"] == "SchedulerFound"  # facts stay as observed

    before_audit = len(installed.cluster.audit_events(OPERATOR_USER))
    before_policy, before_list = len(writes(emulator, runner)), listed(installed, ns)
    # Everything that would make it write: a spec edit the runner policy follows, a new sandbox
    # namespace (list, RoleBinding, roll), and a reconcile request.
    edit_spec(installed, ns, {"slurm": {"account": "ml"}})
    installed.create_namespace(f"{prefix}-1")
    annotate(installed, ns, str(time.time()), key="sunksandbox.dev/reconcile-requested-at")
    watched = {ns, f"{prefix}-0", f"{prefix}-1"}

    def nothing_written() -> None:
        assert operator_writes(installed.cluster, before_audit, watched) == []
        assert len(writes(emulator, runner)) == before_policy
        assert listed(installed, ns) == before_list
        assert rolebindings(installed, f"{prefix}-1") == []
    assert_stays(nothing_written, 4)
    assert len(installed.cluster.audit_events(OPERATOR_USER)) > before_audit  # the audit is recording (the Lease)

    annotate(installed, ns, None)
    resumed = time.monotonic()
    wait_for(lambda: f"{prefix}-1" in listed(installed, ns) and rolebindings(installed, f"{prefix}-1")
             and len(writes(emulator, runner)) > before_policy, RESUME_BOUND * 2,
             lambda: f"list {listed(installed, ns)}; policy writes {len(writes(emulator, runner)) - before_policy}",
             interval=0.05)
    took = time.monotonic() - resumed
    print(f"\npause removed -> policy written, namespace listed and granted: {took:.2f}s")
    assert took < RESUME_BOUND
    installed.wait_condition(ns, "b", "Ready", "True", timeout=10)
    assert "paused" not in installed.binding(ns, "b")["status"]
    assert runner_policy(emulator, runner)["base"]["metadata"]["annotations"]["sunk.coreweave.com/account"] == "ml"
    wait_for(lambda: events(installed, ns, "BindingResumed"), 10)
    assert len(events(installed, ns, "BindingPaused")) == 1 and events(installed, ns, "BindingPaused")[0].count == 1
    # No condition event for the pause itself (it has its own): no Paused transition was posted.
    assert not events(installed, ns, "Paused")


def test_a_paused_binding_deleted_still_restores(installed, operator, emulator, binding_ns):
    ns, prefix = binding_ns, "pd" + uuid.uuid4().hex[:6]
    installed.create_namespace(f"{prefix}-0")
    installed.create_binding(ns, "b", binding_spec(new_runner(emulator, {}), emulator,
                                                   sandboxNamespaces={"names": [f"{prefix}-*"]},
                                                   scope={"grantClusterRole": GRANT_ROLE}))
    installed.wait_condition(ns, "b", "Ready", "True", timeout=30)
    assert f"{prefix}-0" in listed(installed, ns)
    annotate(installed, ns, "true")
    installed.wait_condition(ns, "b", "Ready", "False", "Paused", timeout=10)
    installed.custom.delete_namespaced_custom_object("sunksandbox.dev", "v1alpha1", ns, "sunksandboxbindings", "b")
    wait_for(lambda: not installed.binding_exists(ns, "b"), 30)
    assert f"{prefix}-0" not in listed(installed, ns)
    assert rolebindings(installed, f"{prefix}-0") == []
    with pytest.raises(ApiException):
        installed.binding(ns, "b")
