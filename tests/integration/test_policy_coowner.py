"""Another declarative owner of the runner policy, over real HTTP: the emulator's co-writer applies its whole
policy like `terraform apply` every second while the operator (as its ServiceAccount, on the real API
server) reconciles the binding. The operator stops writing within a bounded number of cycles, says what
that owner must carry, writes nothing more while it keeps its policy, and resumes when it carries the
keys; with spec.policy.management Observe nothing is ever written to the policy."""

from __future__ import annotations

import copy
import time

import pytest

from sunk_sandbox_operator.adapters.runnerapi.emulator_state import CO_WRITER
from sunk_sandbox_operator.adapters.runnerapi.emulator_wire import json_names
from tests.conftest import assert_stays, wait_for
from tests.integration.conftest import binding_spec, calls, new_runner, runner_policy, writes

pytestmark = pytest.mark.integration

CORRECTIONS = 3  # SSB_POLICY_CONTENTION_CORRECTIONS' default: the operator's settings in these tests
THEIRS = {
    "base": {"metadata": {"labels": {"team": "ml"}},
             "spec": {"tolerations": [{"key": "sandbox", "operator": "Exists"}]}},
    "constraints": {"network": {"egress": {"allow": ["10.0.0.0/8"]}}},
}


def carrying(doc: dict) -> dict:
    """The other owner's policy once it carries the binding's keys (what the condition told it to add)."""
    out = copy.deepcopy(doc)
    out["base"]["spec"]["schedulerName"] = "slurm-scheduler"
    out["base"]["metadata"]["annotations"] = {"sunk.coreweave.com/partition": "sandboxes"}
    return out


def co_writer(emulator, runner: str, policy: dict | None, interval: float = 1.0) -> None:
    plan = None if policy is None else {"policy": policy, "interval_seconds": interval}
    emulator.state.set_knobs({"co_writers": {runner: plan}})


def operator_updates(emulator, runner: str) -> int:
    """UpdateManagedRunner calls the operator made, accepted or not (the co-writer's are its own)."""
    return len([c for c in calls(emulator, runner, "UpdateManagedRunner") if c.get("who") == "client"])


def events(installed, ns: str, reason: str) -> list:
    return installed.core.list_namespaced_event(ns, field_selector=f"reason={reason}").items


def delete(installed, ns: str, name: str) -> None:
    installed.custom.delete_namespaced_custom_object("sunksandbox.dev", "v1alpha1", ns, "sunksandboxbindings", name)
    wait_for(lambda: not installed.custom.list_namespaced_custom_object(
        "sunksandbox.dev", "v1alpha1", ns, "sunksandboxbindings")["items"], 20)


def test_a_terraform_like_co_writer_is_fought_n_times_then_left_alone_and_carrying_the_keys_resumes(
        installed, operator, emulator, binding_ns) -> None:
    ns = binding_ns
    runner = new_runner(emulator, THEIRS)
    co_writer(emulator, runner, THEIRS)
    try:
        started = time.monotonic()
        installed.create_binding(ns, "b", binding_spec(runner, emulator, resyncInterval="1s"))
        cond = installed.wait_condition(ns, "b", "PolicySynced", "False", "PolicyManagedElsewhere", timeout=60)
        elapsed = time.monotonic() - started
        applies = len(writes(emulator, runner, CO_WRITER))
        written = len(writes(emulator, runner, "client"))
        attempts = operator_updates(emulator, runner)
        print(f"\nco-writer every 1 s: the operator stopped after {elapsed:.1f}s, {written} writes of its own "
              f"({attempts} Update calls), {applies} co-writer writes")
        assert 1 <= written <= 1 + CORRECTIONS            # the first merge, then at most N corrections
        msg = cond["message"]
        assert "base.spec.schedulerName removed" in msg
        assert 'scheduler_name = "slurm-scheduler"' in msg and '"sunk.coreweave.com/partition" = "sandboxes"' in msg
        assert '"schedulerName":"slurm-scheduler"' in msg and "lifecycle { ignore_changes = [policy] }" in msg
        installed.wait_condition(ns, "b", "Ready", "False", "PolicyManagedElsewhere")
        assert installed.binding(ns, "b")["status"]["policy"]["contention"]["stoppedTime"]

        def left_alone():
            assert operator_updates(emulator, runner) == attempts
            assert runner_policy(emulator, runner) == json_names(THEIRS)
        assert_stays(left_alone, 6)                      # six co-writer applies, about six resyncs
        wait_for(lambda: events(installed, ns, "PolicyWritesStopped"), 10)
        assert len(events(installed, ns, "PolicyWritesStopped")) == 1

        co_writer(emulator, runner, carrying(THEIRS))    # the owner adds the fragment to its desired policy
        synced = installed.wait_condition(ns, "b", "PolicySynced", "True", "Synced", timeout=30)
        assert "other owner carries" in synced["message"]
        installed.wait_condition(ns, "b", "Ready", "True", timeout=30)
        assert operator_updates(emulator, runner) == attempts   # resumed with nothing to write
        assert "contention" not in installed.binding(ns, "b")["status"]["policy"]
        # Deleted with Restore: what the owner carries is the owner's, so the policy is not written.
        delete(installed, ns, "b")
        assert operator_updates(emulator, runner) == attempts
        assert runner_policy(emulator, runner) == json_names(carrying(THEIRS))
    finally:
        co_writer(emulator, runner, None)


def test_policy_management_observe_never_writes_the_policy_and_is_ready_once_it_holds_the_keys(
        installed, operator, emulator, binding_ns) -> None:
    ns = binding_ns
    runner = new_runner(emulator, THEIRS)
    installed.create_binding(ns, "b", binding_spec(runner, emulator, resyncInterval="1s",
                                                   policy={"management": "Observe"}))
    cond = installed.wait_condition(ns, "b", "PolicySynced", "False", "PolicyKeysMissing")
    assert 'base.spec.schedulerName (wants "slurm-scheduler")' in cond["message"]
    assert 'base.metadata.annotations["sunk.coreweave.com/partition"] (wants "sandboxes")' in cond["message"]
    assert 'scheduler_name = "slurm-scheduler"' in cond["message"]
    installed.wait_condition(ns, "b", "Ready", "False", "PolicyKeysMissing")
    installed.wait_condition(ns, "b", "ScopeSynced", "True")          # the rest of the binding works as usual
    installed.wait_condition(ns, "b", "SchedulerReady", "True")

    emulator.state.write(runner, carrying(THEIRS), who="other-admin")   # the policy's owner adds the keys
    synced = installed.wait_condition(ns, "b", "PolicySynced", "True", "Synced")
    assert "verified, never written" in synced["message"]
    installed.wait_condition(ns, "b", "Ready", "True")
    assert "owned" not in installed.binding(ns, "b")["status"]["policy"]

    delete(installed, ns, "b")                                          # Restore: still nothing written
    assert calls(emulator, runner, "UpdateManagedRunner") == []
    assert runner_policy(emulator, runner) == json_names(carrying(THEIRS))
    assert len(calls(emulator, runner, "GetManagedRunner")) >= 2
