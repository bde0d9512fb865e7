"""Crash consistency: the operator dies hard at a named failpoint, a normal one takes over.

Each test runs the operator (as its ServiceAccount, under the shipped RBAC) with
`SSB_FAILPOINTS=<name>` (controller/failpoints.py: the process exits with 137 at that point,
no cleanup, like SIGKILL), waits for that exit, makes an admin's changes while nothing runs,
starts a normal operator and checks the invariants:

(a) the scheduler's list is exactly: the matching, non-terminating namespaces + alwaysInclude +
    the admin's entries; the ledger's `added` is exactly our part of it;
(b) ScopeSynced and PolicySynced become True (for the current generation);
(c) the runner policy holds our schedulerName and partition;
(d) what an admin changed while the operator was down survives (another key of the policy,
    another key of scheduler.conf, an entry of the list);
(e) deleting the binding (Restore) leaves the runner policy exactly as it was before the binding
    (plus the admin's change), the list with the admin's entries only (+ alwaysInclude, which
    Restore never removes: README "always listed, never removed"), no RoleBinding labelled for
    the binding, no `ssb-policy-…` ownership record and no ledger entry.

This module has its OWN control plane: the session-wide `operator` fixture of tests/conftest.py
would otherwise reconcile the same bindings and fight the processes started here.
"""

from __future__ import annotations

import copy
import fnmatch
import json
import re
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml
from kubernetes.client.rest import ApiException

from tests.conftest import (OPERATOR_NS, OPERATOR_SA, REPO, TEST_ENV, Kube, assert_stays, install_manifests,
                            wait_for)
from tests.integration.conftest import (ADMIN_TOKEN, READONLY_TOKEN, binding_spec, create_token_secret,
                                        grant_secret_read, make_scheduler, new_runner, runner_policy)

from tests.integration.test_scope import edit_conf  # the admin's scheduler.conf edit

pytestmark = pytest.mark.integration

PACKAGE = REPO / "operator" / "sunk_sandbox_operator"
CM = "slurm-scheduler-config"
KEY = "scheduler.conf"
BINDING = "b"
SCHEDULER_NAME = "slurm-scheduler"
PARTITION = "sandboxes"
PARTITION_KEY = "sunk.coreweave.com/partition"
GRANT_ROLE = "sunk-scheduler-sandbox"  # the only ClusterRole manifests/rbac.yaml lets the operator bind
ADMIN_PRE = "admin-pre"      # in the list before the binding exists
ADMIN_LATE = "admin-late"    # added to the list by an admin while the operator is down
CRASH_EXIT = 137
CONVERGE = 90.0              # seconds: a restart may wait for the dead leader's Lease to expire

PRE_POLICY = {
    "base": {"metadata": {"annotations": {"team": "rl"}, "labels": {"env": "prod"}},
             "spec": {"dnsPolicy": "ClusterFirst", "tolerations": [{"key": "sandbox", "operator": "Exists"}]}},
    "constraints": {"network": {"egress": {"allow": ["10.0.0.0/8"]}, "ingress": "deny"}},
    "limits": {"maxSandboxes": 40},
}

FAILPOINTS = ["after-policy-intent", "after-policy-write", "after-scope-write", "after-rolebinding-create",
              "after-scheduler-roll", "before-status-flush"]


def wired(name: str) -> bool:
    """Does any operator code (outside failpoints.py) call `hit("<name>")`?"""
    pattern = re.compile(r"""\.hit\(\s*["']""" + re.escape(name) + r"""["']""")
    return any(pattern.search(p.read_text()) for p in PACKAGE.rglob("*.py") if p.name != "failpoints.py")


# ---------------------------------------------------------------- the module's own control plane


@dataclass
class Plane:
    kube: Kube
    kubeconfig: Path           # the operator's ServiceAccount (TokenRequest token)
    emulator: object
    logs: Path
    runs: list = field(default_factory=list)  # every OperatorProcess started, in order

    def start(self, label: str, failpoints: str | None = None):
        from sunk_sandbox_devtools.devcluster import OperatorProcess

        env = dict(TEST_ENV)
        if failpoints:
            env["SSB_FAILPOINTS"] = failpoints
        log = self.logs / f"{len(self.runs):02d}-{label}.log"
        print(f"operator {label}: log {log}")
        proc = OperatorProcess(self.kubeconfig, log, env=env, args=("--log-format=json",))
        self.runs.append(proc)
        return proc


@pytest.fixture(scope="module")
def plane(tmp_path_factory):
    from sunk_sandbox_devtools import devcluster
    from sunk_sandbox_operator.adapters.runnerapi.emulator import EmulatorState, running_emulator

    cluster = devcluster.temp_cluster()
    try:
        # CRD, tenant-slurm first, then the shipped manifests (the grant ClusterRole among them)
        kube = install_manifests(Kube(cluster))
        work = tmp_path_factory.mktemp("crash")
        kubeconfig = cluster.service_account_kubeconfig(OPERATOR_NS, OPERATOR_SA, work / "operator.kubeconfig")
        state = EmulatorState(admin_tokens={ADMIN_TOKEN}, readonly_tokens={READONLY_TOKEN})
        with running_emulator(state) as emu:
            p = Plane(kube, kubeconfig, emu, work)
            try:
                yield p
            finally:
                for proc in p.runs:
                    proc.stop()
                for proc in p.runs:  # secrets never reach the logs
                    assert ADMIN_TOKEN not in proc.logs(), f"the token appeared in {proc.log_path}"
    finally:
        cluster.stop()


# ---------------------------------------------------------------- reading what the operator wrote


def conf_text(kube: Kube, ns: str) -> str:
    return kube.core.read_namespaced_config_map(CM, ns).data[KEY]


def listed(kube: Kube, ns: str) -> list[str]:
    value = (yaml.safe_load(conf_text(kube, ns))["scheduler"]["scope"].get("namespaces") or [])
    return [v.strip() for v in value.split(",") if v.strip()] if isinstance(value, str) else list(value)


def ledger_entry(kube: Kube, ns: str):
    from sunk_sandbox_operator.api.keys import SCOPE_LEDGER_ANNOTATION
    from sunk_sandbox_operator.core.scope import ledger

    annotations = kube.core.read_namespaced_config_map(CM, ns).metadata.annotations or {}
    return ledger.decode(annotations.get(SCOPE_LEDGER_ANNOTATION)).get(f"{ns}/{BINDING}")


def record(kube: Kube, ns: str):
    """The policy ownership record (None when absent)."""
    from sunk_sandbox_operator.adapters.ownership import KEY as RECORD_KEY, name_for
    from sunk_sandbox_operator.core.policy.ownership import from_json

    try:
        cm = kube.core.read_namespaced_config_map(name_for(f"{ns}/{BINDING}"), OPERATOR_NS)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
    return from_json((cm.data or {}).get(RECORD_KEY))


def record_configmaps(kube: Kube, ns: str) -> list[str]:
    """`ssb-policy-…` ConfigMaps for this binding: by label, and by name."""
    from sunk_sandbox_operator.adapters.ownership import name_for
    from sunk_sandbox_operator.core.scope.grants import selector

    names = {cm.metadata.name for cm in kube.core.list_namespaced_config_map(OPERATOR_NS, label_selector=selector(
        ns, BINDING)).items}
    if record(kube, ns) is not None or any(cm.metadata.name == name_for(f"{ns}/{BINDING}")
                                           for cm in kube.core.list_namespaced_config_map(OPERATOR_NS).items):
        names.add(name_for(f"{ns}/{BINDING}"))
    return sorted(names)


def rolebindings(kube: Kube, ns: str) -> set[str]:
    """Namespaces holding a RoleBinding labelled for the binding."""
    from sunk_sandbox_operator.core.scope.grants import selector

    return {rb.metadata.namespace for rb in kube.rbac.list_role_binding_for_all_namespaces(
        label_selector=selector(ns, BINDING)).items}


def conditions(kube: Kube, ns: str) -> dict[str, dict]:
    body = kube.binding(ns, BINDING)
    gen = body["metadata"].get("generation")
    return {c["type"]: c for c in (body.get("status") or {}).get("conditions") or []
            if c.get("observedGeneration") in (None, gen)}


def namespaces(kube: Kube) -> dict[str, bool]:
    """Every namespace -> terminating."""
    return {n.metadata.name: n.metadata.deletion_timestamp is not None for n in kube.core.list_namespace().items}


def add_list_entry(text: str, entry: str) -> str:
    doc = yaml.safe_load(text)
    scope = doc["scheduler"]["scope"]
    value = scope.get("namespaces") or []
    values = [v.strip() for v in value.split(",") if v.strip()] if isinstance(value, str) else list(value)
    scope["namespaces"] = values + [entry]
    return yaml.safe_dump(doc, sort_keys=False)


def binding_gone(kube: Kube, ns: str, name: str = BINDING) -> bool:
    return not kube.binding_exists(ns, name)


# ---------------------------------------------------------------- one scenario


class Churn(threading.Thread):
    """Namespaces come and go while the binding is created: matching ones, near misses, others,
    and matching ones deleted (they stay terminating: no controller-manager finishes them)."""

    def __init__(self, kube: Kube, prefix: str, steps: int, interval: float = 0.15) -> None:
        super().__init__(daemon=True)
        self.kube, self.prefix, self.steps, self.interval = kube, prefix, steps, interval
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.created: list[str] = []

    def run(self) -> None:
        try:
            for i in range(self.steps):
                if self.stop.is_set():
                    return
                self.kube.create_namespace(f"{self.prefix}-{i:03d}")
                self.created.append(f"{self.prefix}-{i:03d}")
                if i % 3 == 0:
                    self.kube.create_namespace(f"{self.prefix}x-{i:03d}")  # a near miss: not `<prefix>-*`
                if i % 4 == 2:  # a matching one we may already have listed starts terminating
                    self.kube.core.delete_namespace(f"{self.prefix}-{i - 1:03d}")
                time.sleep(self.interval)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc


@dataclass
class Scenario:
    plane: Plane
    label: str
    ns: str = ""
    prefix: str = ""
    runner: str = ""
    admin_policy: dict = field(default_factory=dict)  # the policy as the admin left it (PRE + their edit)

    def __post_init__(self) -> None:
        tag = uuid.uuid4().hex[:5]
        self.ns = f"crash-{self.label[:24]}-{tag}".strip("-")
        self.prefix = f"c{tag}"

    @property
    def kube(self) -> Kube:
        return self.plane.kube

    def setup(self) -> dict:
        kube, emu = self.kube, self.plane.emulator
        kube.create_namespace(self.ns)
        grant_secret_read(kube, self.ns)
        create_token_secret(kube, self.ns)
        make_scheduler(kube, self.ns, scope_namespaces=[ADMIN_PRE], extra_conf="logLevel: info\n")
        self.runner = new_runner(emu, copy.deepcopy(PRE_POLICY))
        self.admin_policy = copy.deepcopy(PRE_POLICY)
        return binding_spec(self.runner, emu, mode="Enforce", deletionPolicy="Restore", partition=PARTITION,
                            sandboxNamespaces={"names": [f"{self.prefix}-*"]},
                            scope={"alwaysInclude": [self.ns], "grantClusterRole": GRANT_ROLE})

    def belonging(self) -> set[str]:
        return {n for n, terminating in namespaces(self.kube).items()
                if not terminating and fnmatch.fnmatchcase(n, f"{self.prefix}-*")}

    def crash(self, failpoints: str, spec: dict, churn_steps: int = 16, until_exit: bool = False):
        """Start an operator armed with `failpoints`, create the binding while namespaces churn,
        and wait for the hard exit."""
        proc = self.plane.start(f"{self.label}-failpoint", failpoints)
        churn = Churn(self.kube, self.prefix, 200 if until_exit else churn_steps, interval=0.3 if until_exit else 0.15)
        churn.start()
        self.kube.create_binding(self.ns, BINDING, spec)
        try:
            wait_for(lambda: proc.proc.poll() is not None, CONVERGE,
                     lambda: f"the operator armed with {failpoints} never exited; log tail:\n{proc.logs()[-3000:]}")
        finally:
            if until_exit:
                churn.stop.set()
            churn.join(60)
        assert churn.error is None, f"namespace churn failed: {churn.error!r}"
        assert proc.proc.returncode == CRASH_EXIT, (f"exit {proc.proc.returncode}, not {CRASH_EXIT}:\n"
                                                   f"{proc.logs()[-3000:]}")
        assert f"failpoint {failpoints.split('=')[0]}" in proc.logs()
        proc.stop()  # closes the log
        return proc

    def admin_changes_while_down(self) -> None:
        """An admin (not the operator) edits another key of the policy and of scheduler.conf, adds
        a list entry, and namespaces change."""
        emu, kube = self.plane.emulator, self.kube
        with emu.state.lock:
            pol = runner_policy(emu, self.runner)
            pol["limits"]["maxSandboxes"] = 41
            pol["base"]["metadata"]["labels"]["edited-while-down"] = "yes"
            emu.state.write(self.runner, pol, who="other-admin")
        self.admin_policy["limits"]["maxSandboxes"] = 41
        self.admin_policy["base"]["metadata"]["labels"]["edited-while-down"] = "yes"
        edit_conf(kube, self.ns, lambda t: re.sub(r"logLevel: \S+", "logLevel: debug-while-down", t))
        edit_conf(kube, self.ns, lambda t: add_list_entry(t, ADMIN_LATE))
        kube.create_namespace(f"{self.prefix}-down-a")
        kube.create_namespace(f"{self.prefix}-down-b")
        kube.create_namespace(f"{self.prefix}x-down")
        kube.core.delete_namespace(f"{self.prefix}-000")  # listed before the crash (most likely): must leave

    def expected_list(self) -> set[str]:
        return self.belonging() | {self.ns, ADMIN_PRE, ADMIN_LATE}

    def check_converged(self) -> None:
        kube, emu = self.kube, self.plane.emulator

        def list_right():
            return set(listed(kube, self.ns)) == self.expected_list()
        wait_for(list_right, CONVERGE, lambda: f"list {sorted(listed(kube, self.ns))}; "
                 f"want {sorted(self.expected_list())}")                                                       # (a)

        def synced():
            c = conditions(kube, self.ns)
            return all((c.get(t) or {}).get("status") == "True" for t in ("ScopeSynced", "PolicySynced"))
        wait_for(synced, CONVERGE, lambda: json.dumps(conditions(kube, self.ns), indent=1))                    # (b)

        def policy_ours():
            pol = runner_policy(emu, self.runner)
            return (pol["base"]["spec"].get("schedulerName") == SCHEDULER_NAME
                    and pol["base"]["metadata"]["annotations"].get(PARTITION_KEY) == PARTITION)
        wait_for(policy_ours, CONVERGE, lambda: json.dumps(runner_policy(emu, self.runner)))                  # (c)
        wait_for(lambda: getattr(record(kube, self.ns), "state", None) == "applied", 30,
                 lambda: f"ownership record: {record(kube, self.ns)}")
        wait_for(lambda: rolebindings(kube, self.ns) == self.belonging() | {self.ns}, 30,
                 lambda: f"RoleBindings in {sorted(rolebindings(kube, self.ns))}; "
                 f"want {sorted(self.belonging() | {self.ns})}")

        def steady():
            assert set(listed(kube, self.ns)) == self.expected_list()
            entry = ledger_entry(kube, self.ns)
            assert entry is not None
            assert set(entry.added) == self.belonging() | {self.ns}  # ours, and only ours
            assert not set(entry.preexisting or ()) - {ADMIN_PRE, ADMIN_LATE}
            pol = runner_policy(emu, self.runner)                                                             # (d)
            assert pol["limits"] == self.admin_policy["limits"]
            assert pol["base"]["metadata"]["labels"] == self.admin_policy["base"]["metadata"]["labels"]
            assert pol["constraints"] == self.admin_policy["constraints"]
            assert "logLevel: debug-while-down" in conf_text(kube, self.ns)
        assert_stays(steady, 2.0)

    def delete_and_check_restore(self, wait: bool = True) -> None:
        self.kube.custom.delete_namespaced_custom_object("sunksandbox.dev", "v1alpha1", self.ns,
                                                         "sunksandboxbindings", BINDING)
        if wait:
            self.wait_restored()

    def wait_restored(self) -> None:
        kube, emu = self.kube, self.plane.emulator
        wait_for(lambda: binding_gone(kube, self.ns), CONVERGE, lambda: json.dumps(kube.binding(self.ns, BINDING)))
        assert runner_policy(emu, self.runner) == self.admin_policy                                           # (e)
        # alwaysInclude stays on Restore (README: "always listed, never removed").
        assert set(listed(kube, self.ns)) == {ADMIN_PRE, ADMIN_LATE, self.ns}
        assert rolebindings(kube, self.ns) == set()
        assert record_configmaps(kube, self.ns) == []
        assert ledger_entry(kube, self.ns) is None
        assert "logLevel: debug-while-down" in conf_text(kube, self.ns)

    def cleanup(self) -> None:
        """Whatever happened, leave no binding behind: a later test's failpoint would fire on it."""
        kube = self.kube
        if binding_gone(kube, self.ns):
            return
        try:
            kube.custom.delete_namespaced_custom_object("sunksandbox.dev", "v1alpha1", self.ns,
                                                        "sunksandboxbindings", BINDING)
        except ApiException:
            pass
        kube.custom.patch_namespaced_custom_object("sunksandbox.dev", "v1alpha1", self.ns, "sunksandboxbindings",
                                                   BINDING, {"metadata": {"finalizers": None}})
        wait_for(lambda: binding_gone(kube, self.ns), 30)


def crash_state_facts(s: Scenario, name: str) -> None:
    """What the failpoint promises about the moment of the crash."""
    rec = record(s.kube, s.ns)
    pol = runner_policy(s.plane.emulator, s.runner)
    if name == "after-policy-intent":
        assert rec is not None and rec.state == "pending", rec
        assert pol == PRE_POLICY, "UpdateManagedRunner must not have been sent"
    elif name == "after-policy-write":
        assert rec is not None and rec.state == "pending", rec
        assert pol["base"]["spec"].get("schedulerName") == SCHEDULER_NAME
    elif name == "after-scope-write":
        entry = ledger_entry(s.kube, s.ns)
        assert entry is not None and set(entry.added) <= set(listed(s.kube, s.ns))
    elif name == "after-scheduler-roll":  # the roll loop patched the template: its hash and when, nothing after
        from sunk_sandbox_operator.api.keys import SCOPE_HASH_ANNOTATION, SCOPE_ROLLED_AT_ANNOTATION

        template = s.kube.apps.read_namespaced_deployment("slurm-scheduler", s.ns).spec.template.metadata
        assert {SCOPE_HASH_ANNOTATION, SCOPE_ROLLED_AT_ANNOTATION} <= set(template.annotations or {})
        assert ledger_entry(s.kube, s.ns) is not None  # rolled onto a list the operator wrote


# ---------------------------------------------------------------- tests


@pytest.mark.parametrize("failpoint", FAILPOINTS)
def test_crash_at_failpoint_then_restart_converges_and_restores(plane, failpoint):
    assert wired(failpoint), (f"failpoint {failpoint} is declared in controller/failpoints.py but no operator "
                              f"code calls hit({failpoint!r}): SSB_FAILPOINTS={failpoint} never fires")
    s = Scenario(plane, failpoint)
    spec = s.setup()
    try:
        s.crash(failpoint, spec)
        crash_state_facts(s, failpoint)
        s.admin_changes_while_down()
        operator = plane.start(f"{failpoint}-after")
        try:
            s.check_converged()
            s.delete_and_check_restore()
        finally:
            operator.stop()
    finally:
        _cleanup(plane, s)


def _cleanup(plane: Plane, s: Scenario) -> None:
    if binding_gone(s.kube, s.ns):
        return
    operator = plane.start(f"{s.label}-cleanup")  # let a normal operator finalize it, else drop the finalizer
    try:
        s.kube.custom.delete_namespaced_custom_object("sunksandbox.dev", "v1alpha1", s.ns, "sunksandboxbindings",
                                                      BINDING)
        try:
            wait_for(lambda: binding_gone(s.kube, s.ns), 30)
        except AssertionError:
            s.cleanup()
    finally:
        operator.stop()


def wipe_status(kube: Kube, ns: str) -> None:
    kube.kubectl("patch", "sunksandboxbindings.sunksandbox.dev", BINDING, "-n", ns, "--subresource=status",
                 "--type=json", "-p", json.dumps([{"op": "add", "path": "/status", "value": {}}]))
    assert not kube.binding(ns, BINDING).get("status")


def test_status_wiped_between_restarts_records_still_restore(plane):
    """Status is not where ownership lives: wipe it while no operator runs (twice), the ledger
    and the ownership record still drive convergence and an exact Restore."""
    s = Scenario(plane, "status-wipe")
    spec = s.setup()
    try:
        # The second status flush: the first one wrote a full status (owned paths and all).
        s.crash("before-status-flush=2", spec, until_exit=True)
        status = s.kube.binding(s.ns, BINDING).get("status") or {}
        assert (status.get("policy") or {}).get("owned"), f"no status.policy.owned to lose: {status}"
        wipe_status(s.kube, s.ns)
        s.admin_changes_while_down()
        operator = plane.start("status-wipe-after")
        try:
            s.check_converged()
        finally:
            operator.stop()  # SIGTERM: a clean stop
        wipe_status(s.kube, s.ns)
        s.delete_and_check_restore(wait=False)  # deleted while no operator runs: the finalizer holds it
        assert not binding_gone(s.kube, s.ns)
        operator = plane.start("status-wipe-restore")
        try:
            s.wait_restored()
        finally:
            operator.stop()
    finally:
        _cleanup(plane, s)


def patch_spec(kube: Kube, ns: str, spec: dict) -> None:
    kube.custom.patch_namespaced_custom_object("sunksandbox.dev", "v1alpha1", ns, "sunksandboxbindings", BINDING,
                                               {"spec": spec})


def test_crash_before_a_spec_change_is_written_then_spec_reverted(plane):
    """after-policy-intent on the SECOND policy write (a partition change): the record says
    `pending` with the new value, the policy still holds the old one. The spec goes back while no
    operator runs, so the restarted one has nothing to write; the record must still end up
    describing what the policy holds, or Restore leaves our partition annotation behind."""
    if not wired("after-policy-intent"):
        pytest.fail("after-policy-intent is never hit")
    s = Scenario(plane, "spec-revert")
    spec = s.setup()
    churn = Churn(s.kube, s.prefix, 4)
    churn.run()
    try:
        proc = plane.start("spec-revert-failpoint", "after-policy-intent=2")
        s.kube.create_binding(s.ns, BINDING, spec)
        wait_for(lambda: (conditions(s.kube, s.ns).get("PolicySynced") or {}).get("status") == "True", CONVERGE,
                 lambda: f"{conditions(s.kube, s.ns)}\n{proc.logs()[-3000:]}")
        patch_spec(s.kube, s.ns, {"partition": "sandboxes-b"})
        wait_for(lambda: proc.proc.poll() is not None, CONVERGE, lambda: proc.logs()[-3000:])
        assert proc.proc.returncode == CRASH_EXIT, proc.logs()[-3000:]
        proc.stop()
        rec = record(s.kube, s.ns)
        assert rec is not None and rec.state == "pending"
        assert {o.path: o.value for o in rec.owned}[f'base.metadata.annotations["{PARTITION_KEY}"]'] == "sandboxes-b"
        assert runner_policy(plane.emulator, s.runner)["base"]["metadata"]["annotations"][PARTITION_KEY] == PARTITION
        patch_spec(s.kube, s.ns, {"partition": PARTITION})  # back, while no operator runs
        s.admin_changes_while_down()
        operator = plane.start("spec-revert-after")
        try:
            s.check_converged()
            recorded = {o.path: o.value for o in record(s.kube, s.ns).owned}[
                f'base.metadata.annotations["{PARTITION_KEY}"]']
            restore_error = None
            try:
                s.delete_and_check_restore()
            except AssertionError as exc:
                restore_error = exc
            assert recorded == PARTITION and restore_error is None, (
                f"the `applied` ownership record says our partition value is {recorded!r} while the policy holds "
                f"{PARTITION!r}; Restore: {restore_error or 'exact'}; policy after Restore: "
                f"{json.dumps(runner_policy(plane.emulator, s.runner))}")
        finally:
            operator.stop()
    finally:
        _cleanup(plane, s)
