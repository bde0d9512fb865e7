"""Runner policy reconciliation: real control plane + operator as its ServiceAccount + emulator over HTTP."""

from __future__ import annotations

import time

import pytest

from sunk_sandbox_operator.adapters.runnerapi.emulator_wire import json_names
from tests.conftest import assert_stays, wait_for
from tests.integration.conftest import (READONLY_TOKEN, binding_spec, calls, create_token_secret, grant_secret_read,
                                        make_scheduler, new_runner, runner_policy, writes)

pytestmark = pytest.mark.integration

EXISTING = {
    "base": {
        "metadata": {"annotations": {"team": "rl", "sunk.coreweave.com/qos": "low"}, "labels": {"env": "prod"}},
        "spec": {"tolerations": [{"key": "sandbox", "operator": "Exists"}], "dnsPolicy": "ClusterFirst"},
    },
    "constraints": {"network": {"egress": {"allow": ["10.0.0.0/8"]}, "ingress": "deny"},
                    "metadata": {"denied_annotation_prefixes": ["sunk.coreweave.com/exclusive"]}},
    "limits": {"maxSandboxes": 40},
}


def annotations(policy: dict) -> dict:
    return policy["base"]["metadata"]["annotations"]


def test_binding_merges_policy_and_preserves_everything_else(installed, operator, emulator, binding_ns):
    runner = new_runner(emulator, EXISTING)
    started = time.monotonic()
    installed.create_binding(binding_ns, "b", binding_spec(runner, emulator, slurm={"account": "ml", "qos": "normal"}))
    cond = installed.wait_condition(binding_ns, "b", "PolicySynced", "True", timeout=30)
    elapsed = time.monotonic() - started
    print(f"\nbinding create -> PolicySynced=True: {elapsed:.2f}s")
    policy = runner_policy(emulator, runner)
    assert policy["base"]["spec"]["schedulerName"] == "slurm-scheduler"
    assert annotations(policy)["sunk.coreweave.com/partition"] == "sandboxes"
    assert annotations(policy)["sunk.coreweave.com/account"] == "ml"
    assert annotations(policy)["sunk.coreweave.com/qos"] == "normal"
    assert annotations(policy)["team"] == "rl"
    assert policy["constraints"] == json_names(EXISTING["constraints"])  # answered (and kept) under JSON names
    assert policy["limits"] == EXISTING["limits"]
    assert policy["base"]["spec"]["tolerations"] == EXISTING["base"]["spec"]["tolerations"]
    assert policy["base"]["metadata"]["labels"] == {"env": "prod"}
    assert "terminationGracePeriodSeconds" not in policy["base"]["spec"]
    status = installed.binding(binding_ns, "b")["status"]
    owned = {o["path"]: o for o in status["policy"]["owned"]}
    assert owned['base.metadata.annotations["sunk.coreweave.com/qos"]']["previous"] == "low"
    assert "previous" not in owned["base.spec.schedulerName"]
    assert status["policy"]["etag"] and status["policy"]["lastAppliedTime"]
    assert len(writes(emulator, runner, "client")) == 1
    assert "slurm-scheduler" in cond["message"]


def test_no_op_resync_is_one_get_and_no_status_write(installed, operator, emulator, binding_ns):
    runner = new_runner(emulator, {})
    installed.create_binding(binding_ns, "b", binding_spec(runner, emulator, resyncInterval="2s"))
    installed.wait_condition(binding_ns, "b", "PolicySynced", "True")
    time.sleep(1.0)
    rv = installed.binding(binding_ns, "b")["metadata"]["resourceVersion"]
    gets_before = len(calls(emulator, runner, "GetManagedRunner"))
    updates_before = len(calls(emulator, runner, "UpdateManagedRunner"))

    def no_op():
        gets = len(calls(emulator, runner, "GetManagedRunner")) - gets_before
        updates = len(calls(emulator, runner, "UpdateManagedRunner")) - updates_before
        assert gets <= 5
        assert updates == 0
        assert installed.binding(binding_ns, "b")["metadata"]["resourceVersion"] == rv
    assert_stays(no_op, 7, interval=0.5)  # about three resyncs
    gets = len(calls(emulator, runner, "GetManagedRunner")) - gets_before
    updates = len(calls(emulator, runner, "UpdateManagedRunner")) - updates_before
    print(f"\nno-op resyncs in 7s: {gets} Get, {updates} Update")
    assert 2 <= gets <= 5


def test_other_admin_never_loses_an_update(installed, operator, emulator, binding_ns):
    runner = new_runner(emulator, EXISTING)
    emulator.state.set_knobs({"other_admin": True})
    try:
        installed.create_binding(binding_ns, "b", binding_spec(runner, emulator, resyncInterval="1s"))
        installed.wait_condition(binding_ns, "b", "PolicySynced", "True", timeout=30)
        # Keep reconciling under the concurrent writer: drift removal forces writes each time.
        for _ in range(3):
            with emulator.state.lock:
                pol = runner_policy(emulator, runner)
                del pol["base"]["spec"]["schedulerName"]
            emulator.state.write(runner, pol, who="other-admin")
            wait_for(lambda: runner_policy(emulator, runner)["base"]["spec"].get("schedulerName") == "slurm-scheduler",
                     15)
    finally:
        emulator.state.set_knobs({"other_admin": False})
    final = runner_policy(emulator, runner)
    edits = [w for w in writes(emulator, runner, "other-admin") if "otherAdminEdits" in str(w["policy"])]
    assert edits, "the concurrent writer never struck"
    counter = final["constraints"]["network"]["egress"]["otherAdminEdits"]
    assert counter == max(w["policy"]["constraints"]["network"]["egress"]["otherAdminEdits"] for w in edits)
    # every client write was made on top of the latest other-admin write (no lost update)
    log = writes(emulator, runner)
    for prev, cur in zip(log, log[1:]):
        assert cur["etag_before"] == prev["etag_after"]
    assert final["constraints"]["network"]["egress"]["allow"] == ["10.0.0.0/8"]


def test_drift_is_corrected_within_one_resync(installed, operator, emulator, binding_ns):
    runner = new_runner(emulator, {})
    installed.create_binding(binding_ns, "b", binding_spec(runner, emulator, resyncInterval="2s"))
    installed.wait_condition(binding_ns, "b", "PolicySynced", "True")
    pol = runner_policy(emulator, runner)
    pol["base"]["spec"]["schedulerName"] = "default-scheduler"
    emulator.state.write(runner, pol, who="other-admin")
    wait_for(lambda: runner_policy(emulator, runner)["base"]["spec"]["schedulerName"] == "slurm-scheduler", 6)
    # events are posted asynchronously: wait for it
    wait_for(lambda: any("schedulerName" in e.message for e in installed.core.list_namespaced_event(
        binding_ns, field_selector="reason=DriftCorrected").items), 10)


def test_observe_mode_writes_nothing(installed, operator, emulator, binding_ns):
    runner = new_runner(emulator, EXISTING)
    installed.create_binding(binding_ns, "b", binding_spec(runner, emulator, mode="Observe"))
    cond = installed.wait_condition(binding_ns, "b", "PolicySynced", "False", "Drifted")
    assert "schedulerName" in cond["message"]

    def nothing_written():
        assert writes(emulator, runner) == []
        assert runner_policy(emulator, runner) == json_names(EXISTING)  # the state holds JSON names
    assert_stays(nothing_written, 1)


def test_delete_restore_puts_back_previous_but_keeps_later_changes(installed, operator, emulator, binding_ns):
    runner = new_runner(emulator, EXISTING)
    installed.create_binding(binding_ns, "b", binding_spec(runner, emulator, slurm={"qos": "normal"}))
    installed.wait_condition(binding_ns, "b", "PolicySynced", "True")
    # Later, another admin changes one of our paths and adds something of their own.
    pol = runner_policy(emulator, runner)
    annotations(pol)["sunk.coreweave.com/partition"] = "admins-choice"
    pol["base"]["metadata"]["annotations"]["later"] = "yes"
    emulator.state.write(runner, pol, who="other-admin")
    installed.custom.delete_namespaced_custom_object("sunksandbox.dev", "v1alpha1", binding_ns,
                                                     "sunksandboxbindings", "b")
    wait_for(lambda: not installed.custom.list_namespaced_custom_object(
        "sunksandbox.dev", "v1alpha1", binding_ns, "sunksandboxbindings")["items"], 20)
    final = runner_policy(emulator, runner)
    assert "schedulerName" not in final["base"]["spec"]
    assert annotations(final)["sunk.coreweave.com/qos"] == "low"             # previous value back
    assert annotations(final)["sunk.coreweave.com/partition"] == "admins-choice"  # their change kept
    assert annotations(final)["later"] == "yes"
    assert final["constraints"] == json_names(EXISTING["constraints"])


def test_delete_orphan_leaves_policy(installed, operator, emulator, binding_ns):
    runner = new_runner(emulator, None)
    installed.create_binding(binding_ns, "b", binding_spec(runner, emulator, deletionPolicy="Orphan"))
    installed.wait_condition(binding_ns, "b", "PolicySynced", "True")
    before = runner_policy(emulator, runner)
    installed.custom.delete_namespaced_custom_object("sunksandbox.dev", "v1alpha1", binding_ns,
                                                     "sunksandboxbindings", "b")
    wait_for(lambda: not installed.custom.list_namespaced_custom_object(
        "sunksandbox.dev", "v1alpha1", binding_ns, "sunksandboxbindings")["items"], 20)
    assert runner_policy(emulator, runner) == before
    assert before["base"]["spec"]["schedulerName"] == "slurm-scheduler"


def test_null_policy_restored_to_null(installed, operator, emulator, binding_ns):
    runner = new_runner(emulator, None)
    installed.create_binding(binding_ns, "b", binding_spec(runner, emulator))
    installed.wait_condition(binding_ns, "b", "PolicySynced", "True")
    installed.custom.delete_namespaced_custom_object("sunksandbox.dev", "v1alpha1", binding_ns,
                                                     "sunksandboxbindings", "b")
    wait_for(lambda: runner_policy(emulator, runner) is None, 20)


@pytest.mark.parametrize("token,reason", [(READONLY_TOKEN, "PermissionDenied"), ("tok-wrong", "Unauthenticated")])
def test_bad_token_reports_without_hot_loop(installed, operator, emulator, ns, token, reason):
    grant_secret_read(installed, ns)
    create_token_secret(installed, ns, token)
    make_scheduler(installed, ns)
    runner = new_runner(emulator, {})
    installed.create_binding(ns, "b", binding_spec(runner, emulator))
    cond = installed.wait_condition(ns, "b", "PolicySynced", "False", reason)
    assert token not in cond["message"]
    n0 = len(calls(emulator, runner))

    def no_hot_loop():
        n = len(calls(emulator, runner)) - n0
        assert n <= 1
    assert_stays(no_hot_loop, 10)
    n = len(calls(emulator, runner)) - n0
    print(f"\n{reason}: {n} API calls in 10 s")
    ready = installed.condition(ns, "b", "Ready")
    assert ready["status"] == "False" and ready["reason"] == reason


def test_missing_secret_is_credentials_missing(installed, operator, emulator, ns):
    grant_secret_read(installed, ns)
    make_scheduler(installed, ns)
    runner = new_runner(emulator, {})
    installed.create_binding(ns, "b", binding_spec(runner, emulator))
    cond = installed.wait_condition(ns, "b", "PolicySynced", "False", "CredentialsMissing")
    assert "coreweave-api" in cond["message"]
    assert calls(emulator, runner) == []


@pytest.mark.parametrize("value", ["", " \n"])
def test_an_empty_token_is_credentials_missing_and_nothing_is_sent(installed, operator, emulator, ns, value):
    grant_secret_read(installed, ns)
    make_scheduler(installed, ns)
    create_token_secret(installed, ns, token=value)
    runner = new_runner(emulator, {})
    installed.create_binding(ns, "b", binding_spec(runner, emulator))
    cond = installed.wait_condition(ns, "b", "PolicySynced", "False", "CredentialsMissing")
    assert cond["message"] == f"key 'token' of Secret {ns}/coreweave-api is empty: put the API token there"
    assert calls(emulator, runner) == []


def test_unknown_runner_is_runner_not_found(installed, operator, emulator, binding_ns):
    installed.create_binding(binding_ns, "b", binding_spec("runner-nobody", emulator))
    installed.wait_condition(binding_ns, "b", "PolicySynced", "False", "RunnerNotFound")


def test_emulator_down_then_recovery(installed, operator, binding_ns):
    from sunk_sandbox_devtools.devcluster import free_port
    from sunk_sandbox_operator.adapters.runnerapi.emulator import EmulatorState, EmulatorThread
    from tests.integration.conftest import ADMIN_TOKEN

    port = free_port()
    state = EmulatorState(admin_tokens={ADMIN_TOKEN})
    state.add_runner("runner-flaky", {})
    spec = {"runner": {"id": "runner-flaky", "apiURL": f"http://127.0.0.1:{port}",
                       "tokenSecretRef": {"name": "coreweave-api"}},
            "sandboxNamespaces": {"names": ["ds-never-*"]}, "resyncInterval": "1m"}
    installed.create_binding(binding_ns, "b", spec)
    installed.wait_condition(binding_ns, "b", "PolicySynced", "False", "APIUnavailable", timeout=40)
    emu = EmulatorThread(state, port=port).start()
    try:
        # recovery comes from the failure backoff, well before the 1m resync
        installed.wait_condition(binding_ns, "b", "PolicySynced", "True", timeout=40)
    finally:
        emu.stop()


def test_policy_rejected_names_the_server_message(installed, operator, emulator, binding_ns):
    runner = new_runner(emulator, {"base": {"spec": {"runtimeClassName": "gvisor"}}})
    installed.create_binding(binding_ns, "b", binding_spec(runner, emulator))
    cond = installed.wait_condition(binding_ns, "b", "PolicySynced", "False", "PolicyRejected")
    assert "runtimeClassName" in cond["message"]


def test_younger_binding_on_same_runner_conflicts_and_writes_nothing(installed, operator, emulator, binding_ns):
    runner = new_runner(emulator, {})
    installed.create_binding(binding_ns, "older", binding_spec(runner, emulator))
    installed.wait_condition(binding_ns, "older", "PolicySynced", "True")
    n = len(writes(emulator, runner))
    time.sleep(1.1)  # creationTimestamp has one-second resolution
    installed.create_binding(binding_ns, "younger", binding_spec(runner, emulator, partition="other"))
    ready = installed.wait_condition(binding_ns, "younger", "Ready", "False", "RunnerConflict")
    assert "older" in ready["message"]
    assert len(writes(emulator, runner)) == n
    assert annotations(runner_policy(emulator, runner))["sunk.coreweave.com/partition"] == "sandboxes"


def _deleted(installed, ns: str) -> bool:
    return not installed.custom.list_namespaced_custom_object(
        "sunksandbox.dev", "v1alpha1", ns, "sunksandboxbindings")["items"]


def test_delete_when_runner_is_gone_is_not_blocked(installed, operator, emulator, binding_ns):
    runner = new_runner(emulator, {})
    installed.create_binding(binding_ns, "b", binding_spec(runner, emulator))
    installed.wait_condition(binding_ns, "b", "PolicySynced", "True")
    with emulator.state.lock:
        del emulator.state.runners[runner]
    installed.custom.delete_namespaced_custom_object("sunksandbox.dev", "v1alpha1", binding_ns,
                                                     "sunksandboxbindings", "b")
    wait_for(lambda: _deleted(installed, binding_ns), 15)
    wait_for(lambda: "RunnerGone" in {e.reason for e in installed.core.list_namespaced_event(binding_ns).items}, 10)


def test_delete_with_permanent_error_is_released_after_bounded_retries(installed, operator, emulator, binding_ns):
    """The token Secret is gone: restore cannot run; the binding is released with a Warning, not stuck."""
    runner = new_runner(emulator, {})
    installed.create_binding(binding_ns, "b", binding_spec(runner, emulator))
    installed.wait_condition(binding_ns, "b", "PolicySynced", "True")
    installed.core.delete_namespaced_secret("coreweave-api", binding_ns)
    installed.custom.delete_namespaced_custom_object("sunksandbox.dev", "v1alpha1", binding_ns,
                                                     "sunksandboxbindings", "b")

    def not_deleted():
        assert not _deleted(installed, binding_ns)  # retried first (SSB_RESTORE_RETRIES=3, 1 s apart in tests)
    assert_stays(not_deleted, 0.5, interval=0.1)
    wait_for(lambda: _deleted(installed, binding_ns), 30)
    events = wait_for(lambda: [e for e in installed.core.list_namespaced_event(binding_ns).items
                               if e.reason == "RestoreAbandoned"], 10)
    assert events[0].type == "Warning" and "coreweave-api" in events[0].message
    assert runner_policy(emulator, runner)["base"]["spec"]["schedulerName"] == "slurm-scheduler"  # left, and said
