"""The holes an attacker found in tenancy (issue 19), each tried again against the real API server:
someone who may edit bindings, ConfigMaps and Pods in their own namespace only, the shipped RBAC,
no webhook. Each test failed on the code before the fix (the closing note has the evidence)."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
import yaml

from sunk_sandbox_operator.api.keys import BINDING_UID_LABEL, SCOPE_LEDGER_ANNOTATION
from sunk_sandbox_operator.core.scope import ledger
from tests.conftest import OPERATOR_NS, SECRET_VALUES, assert_stays, wait_for
from tests.integration.conftest import (binding_spec, calls, create_token_secret, grant_operator, make_scheduler,
                                        new_runner)
from tests.integration.test_tenancy import Recorder, attacker  # noqa: F401  (the attacker's loopback server)

pytestmark = pytest.mark.integration

GRANT_ROLE = "sunk-scheduler-sandbox"
CM = "slurm-scheduler-config"
OTHER_TOKEN = "tok-other-secret-" + uuid.uuid4().hex
SECRET_VALUES.append(OTHER_TOKEN)


def prefix() -> str:
    return "h" + uuid.uuid4().hex[:6]


def patch_spec(kube, ns: str, name: str, spec: dict) -> None:
    kube.custom.patch_namespaced_custom_object("sunksandbox.dev", "v1alpha1", ns, "sunksandboxbindings", name,
                                               {"spec": spec})


def delete_binding(kube, ns: str, name: str) -> None:
    kube.custom.delete_namespaced_custom_object("sunksandbox.dev", "v1alpha1", ns, "sunksandboxbindings", name)
    wait_for(lambda: not kube.binding_exists(ns, name), 30)


def listed(kube, ns: str, cm: str = CM) -> list[str]:
    doc = yaml.safe_load(kube.core.read_namespaced_config_map(cm, ns).data["scheduler.conf"])
    return list(doc["scheduler"]["scope"].get("namespaces") or [])


def ledger_of(kube, ns: str, cm: str = CM) -> ledger.Ledger:
    meta = kube.core.read_namespaced_config_map(cm, ns).metadata
    return ledger.decode((meta.annotations or {}).get(SCOPE_LEDGER_ANNOTATION))


def granted(kube, uid: str) -> dict[str, object]:
    """The RoleBindings the operator made for the binding with this UID, by namespace."""
    rbs = kube.rbac.list_role_binding_for_all_namespaces(label_selector=f"{BINDING_UID_LABEL}={uid}").items
    return {rb.metadata.namespace: rb for rb in rbs}


def can_i(kube, sa_ns: str, sa: str, verb: str, resource: str, ns: str) -> str:
    out = kube.kubectl("auth", "can-i", verb, resource, "-n", ns, f"--as=system:serviceaccount:{sa_ns}:{sa}",
                       check=False)
    return out.stdout.strip()


def ready_binding(kube, emulator, ns: str, name: str = "b", **spec) -> dict:
    body = kube.create_binding(ns, name, binding_spec(new_runner(emulator, {}), emulator, **spec))
    kube.wait_condition(ns, name, "PolicySynced", "True", timeout=30)
    return body


# ---------------------------------------------------------------- 1. check-then-use


def test_a_spec_edited_during_a_reconcile_never_reaches_a_refused_server(installed, operator, emulator, attacker,
                                                                         binding_ns):
    """An allowed edit, then (while that reconcile still runs) `apiURL` to a server the allow-list
    does not name and `tokenSecretRef` to another Secret: the reconcile finishes on the spec it
    checked, the next one refuses the new spec, and the attacker's server receives nothing."""
    ns = binding_ns
    # Slow reconciles, as the attacker made them: discovery lists every ConfigMap of the namespace.
    for i in range(12):
        installed.core.create_namespaced_config_map(ns, {"metadata": {"name": f"big-{i}"},
                                                         "data": {"blob": "x" * 900_000}})
    installed.core.create_namespaced_secret(ns, {"metadata": {"name": "other"}, "stringData": {"token": OTHER_TOKEN}})
    body = ready_binding(installed, emulator, ns, sandboxNamespaces={"names": [f"{prefix()}-*"]})
    good = body["spec"]["runner"]
    Recorder.seen.clear()
    for i, delay in enumerate((0.05, 0.15, 0.3, 0.5)):
        patch_spec(installed, ns, "b", {"partition": f"p{i}"})                     # allowed: a reconcile starts
        time.sleep(delay)
        patch_spec(installed, ns, "b", {"runner": {"apiURL": attacker, "tokenSecretRef": {"name": "other"}}})
        gen = installed.binding(ns, "b")["metadata"]["generation"]
        wait_for(lambda: (c := installed.condition(ns, "b", "PolicySynced")) and c["reason"] == "NotAllowed"
                 and c.get("observedGeneration") == gen, 30)
        patch_spec(installed, ns, "b", {"runner": good})
        installed.wait_condition(ns, "b", "PolicySynced", "True", timeout=30)
    assert Recorder.seen == [], f"the attacker's server received {len(Recorder.seen)} request(s)"


# ---------------------------------------------------------------- 2. grants only where the binding matches


@pytest.fixture
def tenant_ns(installed, ns) -> str:
    """A namespace ready for bindings whose scheduler has no RBAC beyond its own namespace."""
    grant_operator(installed, ns)
    create_token_secret(installed, ns)
    return ns


def test_grants_go_only_where_the_binding_matches_and_go_when_it_is_refused(installed, operator, emulator, attacker,
                                                                            tenant_ns):
    """The tenant writes kube-system, the operator's namespace and another tenant's namespace into
    its own scheduler's list: its scheduler gets the grant in its sandbox namespace only."""
    ns, p = tenant_ns, prefix()
    victim = f"{p}-victim"
    installed.create_namespace(victim)
    installed.create_namespace(f"{p}-a")
    make_scheduler(installed, ns, permitted=False, scope_namespaces=[ns, "kube-system", OPERATOR_NS, victim])
    body = ready_binding(installed, emulator, ns, sandboxNamespaces={"names": [f"{p}-a"]},
                         scope={"grantClusterRole": GRANT_ROLE})
    uid = body["metadata"]["uid"]
    wait_for(lambda: set(granted(installed, uid)) == {f"{p}-a"}, 20, lambda: str(set(granted(installed, uid))))
    assert_stays(lambda: _only(installed, uid, {f"{p}-a"}), 2)
    for where in ("kube-system", OPERATOR_NS, victim):
        assert can_i(installed, ns, "slurm-scheduler", "watch", "pods", where) == "no", where
    assert can_i(installed, ns, "slurm-scheduler", "watch", "pods", f"{p}-a") == "yes"

    # Refused (a URL the operator does not allow): what was granted for it goes.
    patch_spec(installed, ns, "b", {"runner": {"apiURL": attacker}})
    installed.wait_condition(ns, "b", "PolicySynced", "False", "NotAllowed")
    wait_for(lambda: granted(installed, uid) == {}, 20, lambda: str(set(granted(installed, uid))))
    delete_binding(installed, ns, "b")
    assert granted(installed, uid) == {}


def _only(kube, uid: str, want: set[str]) -> None:
    assert set(granted(kube, uid)) == want


def make_scheduler_conf(kube, ns: str, names: list[str], cm: str) -> None:
    """Another scheduler.conf (the scheduler's name and a list), unlabelled: used only when named."""
    conf = "scheduler:\n  name: slurm-scheduler\n  scope:\n    type: namespace\n    namespaces:\n" + "".join(
        f"    - {n}\n" for n in names)
    kube.core.create_namespaced_config_map(ns, {"metadata": {"name": cm}, "data": {"scheduler.conf": conf}})


# ---------------------------------------------------------------- 4. RoleBinding names


def test_two_bindings_whose_names_once_collided_get_their_own_rolebindings(installed, operator, emulator):
    """`team`/`x-prod` and `team-x`/`prod` both made sunk-scheduler-team-x-prod: the second counted
    the first's 409 as granted, and deleting one removed the other's grant."""
    p = prefix()
    team, team_x, shared = f"{p}-team", f"{p}-team-x", f"{p}-shared"
    installed.create_namespace(shared)
    uids = {}
    for ns, name in ((team, "x-prod"), (team_x, "prod")):
        installed.create_namespace(ns)
        grant_operator(installed, ns)
        create_token_secret(installed, ns)
        make_scheduler(installed, ns, permitted=False)
        uids[ns] = ready_binding(installed, emulator, ns, name, sandboxNamespaces={"names": [shared]},
                                 scope={"grantClusterRole": GRANT_ROLE})["metadata"]["uid"]
    for ns in (team, team_x):
        wait_for(lambda ns=ns: shared in granted(installed, uids[ns]), 20)
        rb = granted(installed, uids[ns])[shared]
        assert [(s.name, s.namespace) for s in rb.subjects] == [("slurm-scheduler", ns)]
    assert granted(installed, uids[team])[shared].metadata.name != granted(installed, uids[team_x])[shared].metadata.name
    delete_binding(installed, team_x, "prod")
    assert shared not in granted(installed, uids[team_x])
    assert_stays(lambda: _only(installed, uids[team], {shared}), 2)
    assert can_i(installed, team, "slurm-scheduler", "watch", "pods", shared) == "yes"


# ---------------------------------------------------------------- 5. target switch


def test_a_target_switch_restores_the_old_target_and_keeps_an_admins_names_in_the_new(installed, operator,
                                                                                     emulator, binding_ns):
    ns, p = binding_ns, prefix()
    mine = f"{p}-a"
    installed.create_namespace(mine)
    make_scheduler_conf(installed, ns, [ns, "admin-x", mine], cm="other-conf")  # the admin's
    ready_binding(installed, emulator, ns, sandboxNamespaces={"names": [f"{p}-*"]})
    wait_for(lambda: mine in listed(installed, ns), 15)
    patch_spec(installed, ns, "b", {"scope": {"target": {"configMap": {"name": "other-conf"}}}})
    wait_for(lambda: mine not in listed(installed, ns) and ledger_of(installed, ns).get(f"{ns}/b") is None, 15,
             lambda: f"old target still lists {listed(installed, ns)}")
    wait_for(lambda: (installed.binding(ns, "b").get("status", {}).get("scope", {}).get("target") or {})
             .get("name") == "other-conf", 15)
    assert set(listed(installed, ns, "other-conf")) >= {ns, "admin-x", mine}
    entry = ledger_of(installed, ns, "other-conf").get(f"{ns}/b")  # nothing to add there: maybe no entry at all
    assert entry is None or mine not in entry.added
    delete_binding(installed, ns, "b")
    assert set(listed(installed, ns, "other-conf")) >= {ns, "admin-x", mine}  # the admin's names stay


# ---------------------------------------------------------------- 6. squatting


def test_a_refused_binding_does_not_squat_another_tenants_runner(installed, operator, emulator, attacker, binding_ns):
    ns, p = binding_ns, prefix()
    squatter = f"{p}-squat"
    installed.create_namespace(squatter)
    runner = new_runner(emulator, {})
    installed.create_binding(squatter, "b", {**binding_spec(runner, emulator), "runner": {
        "id": runner, "apiURL": attacker, "tokenSecretRef": {"name": "coreweave-api"}}})
    installed.wait_condition(squatter, "b", "PolicySynced", "False", "NotAllowed")
    time.sleep(1.1)  # the victim's binding is younger (creation time has one-second resolution)
    installed.create_binding(ns, "b", binding_spec(runner, emulator))
    installed.wait_condition(ns, "b", "PolicySynced", "True", timeout=30)
    assert installed.condition(ns, "b", "ScopeSynced")["reason"] != "RunnerConflict"


def test_an_allowed_binding_with_no_token_does_not_squat_another_tenants_runner(installed, operator, emulator,
                                                                                 binding_ns):
    """Issue 31, finding 7: an allowed URL, the victim's runner id and a token Secret that does not exist,
    created first (it is the older). It never proves it may manage the runner, so it blocks nobody: the
    victim's later binding keeps the runner; the squatter is RunnerConflict and sends nothing."""
    ns, p = binding_ns, prefix()
    squatter = f"{p}-squat"
    installed.create_namespace(squatter)
    grant_operator(installed, squatter)                     # its own namespace, as the victim's: no Secret in it
    runner = new_runner(emulator, {})
    spec = binding_spec(runner, emulator)
    spec["runner"]["tokenSecretRef"] = {"name": "does-not-exist"}
    installed.create_binding(squatter, "b", spec)
    installed.wait_condition(squatter, "b", "Ready", "False", timeout=30)
    time.sleep(1.1)  # the victim's binding is younger (creation time has one-second resolution)
    installed.create_binding(ns, "b", binding_spec(runner, emulator))
    installed.wait_condition(ns, "b", "PolicySynced", "True", timeout=30)
    assert installed.condition(ns, "b", "ScopeSynced")["reason"] != "RunnerConflict"
    assert installed.binding(ns, "b")["status"]["runner"]["provenTime"]
    wait_for(lambda: f"{ns}/b already manages runner {runner}" in (
        (installed.condition(squatter, "b", "PolicySynced") or {}).get("message") or ""), 30,
        lambda: str(installed.condition(squatter, "b", "PolicySynced")))
    assert installed.condition(squatter, "b", "PolicySynced")["reason"] == "RunnerConflict"
    assert installed.binding(squatter, "b")["status"]["runner"]["failure"] == "CredentialsMissing"
    victim_calls = calls(emulator, runner)
    assert victim_calls and all(c["code"] == "ok" for c in victim_calls)  # the owner's; the squatter sent none
    assert_stays(lambda: installed.condition(ns, "b", "PolicySynced")["status"] == "True", 3)


def _configmap_lists(kube) -> float:
    """The API server's namespaced LIST requests for ConfigMaps so far (`apiserver_request_total`)."""
    text = kube.kubectl("get", "--raw", "/metrics").stdout
    total = 0.0
    for line in text.splitlines():
        if line.startswith("apiserver_request_total{") and 'resource="configmaps"' in line and 'verb="LIST"' in line \
                and 'scope="namespace"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_a_tenants_big_configmaps_are_not_listed_at_each_reconcile(installed, operator, emulator, binding_ns):
    """Issue 31, finding 4: 20 ConfigMaps of 900 KB and one whose slurm.conf key is over the object cap, in
    the scheduler's namespace. Each resync (every second here) listed every ConfigMap of the namespace
    in full; now they are read from the namespace's watch, reduced as each arrives: resyncs list nothing,
    the oversized one is named in SchedulerReady, and the binding is Ready."""
    ns = binding_ns
    for i in range(20):
        installed.core.create_namespaced_config_map(ns, {"metadata": {"name": f"bulk-{i}"},
                                                         "data": {"blob": "x" * 900_000}})
    installed.core.create_namespaced_config_map(ns, {"metadata": {"name": "evil"},
                                                     "data": {"evil.slurm.conf": "#" * 300_000}})
    body = ready_binding(installed, emulator, ns, resyncInterval="1s", sandboxNamespaces={"names": [f"{prefix()}-*"]})
    runner = body["spec"]["runner"]["id"]
    wait_for(lambda: f"ConfigMap {ns}/evil not read" in (installed.condition(ns, "b", "SchedulerReady") or {}).get(
        "message", ""), 30, lambda: str(installed.condition(ns, "b", "SchedulerReady")))
    assert installed.condition(ns, "b", "SchedulerReady")["status"] == "True"
    time.sleep(3)  # the namespace's watches have listed
    before, reads = _configmap_lists(installed), len(calls(emulator, runner))
    time.sleep(6)  # six resyncs or more
    after = _configmap_lists(installed)
    print(f"\nConfigMap LISTs during 6 s of 1 s resyncs: {after - before:.0f}; operator "
          f"{Path(f'/proc/{operator.proc.pid}/status').read_text().split('VmHWM:')[1].split(chr(10))[0].strip()} peak")
    assert len(calls(emulator, runner)) - reads >= 3  # it resynced (each resync reads the runner)
    assert after - before <= 2, f"{after - before:.0f} ConfigMap LISTs in 6 s of resyncs"


# ---------------------------------------------------------------- 8. wake amplification


def test_configmap_edits_in_the_namespace_spend_no_runner_calls(installed, operator, emulator, binding_ns):
    ns = binding_ns
    body = ready_binding(installed, emulator, ns, sandboxNamespaces={"names": [f"{prefix()}-*"]})
    runner = body["spec"]["runner"]["id"]
    installed.core.create_namespaced_config_map(ns, {"metadata": {"name": "noise"}, "data": {"n": "0"}})
    time.sleep(2)
    before = len(calls(emulator, runner))
    for i in range(60):  # any ConfigMap of the namespace, as fast as the attacker can
        installed.core.patch_namespaced_config_map("noise", ns, {"data": {"n": str(i)}})
        if i % 10 == 0:  # and the scheduler's own ConfigMap, changing nothing the binding reads
            installed.core.patch_namespaced_config_map(CM, ns, {"metadata": {"annotations": {"touch": str(i)}}})
        time.sleep(0.1)
    time.sleep(2)
    assert len(calls(emulator, runner)) == before, calls(emulator, runner)[before:]
