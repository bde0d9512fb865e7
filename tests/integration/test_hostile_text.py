"""Issue 31 findings 1-3 (and 10's status strings) against the real API server: a tenant who may
write ConfigMaps and Pods in its own namespace puts text into them that the old parsers read in
quadratic time or expanded without a bound, on the loop every tenant shares. Now its own binding
reports the refusal (SchedulerReady=False InputRefused naming the object and key, or the pod,
container and argument) within seconds, and another tenant's new namespace is still listed within
seconds. Each test failed on the code before the fix (the closing note of issue 31 has the run).

The module runs its own operator: on the old code these objects wedge it for minutes."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator

import pytest

from tests.conftest import SECRET_VALUES, TEST_ENV, wait_for
from tests.integration.conftest import (binding_spec, create_token_secret, grant_operator, make_scheduler, new_runner,
                                        set_pod_ready)
from tests.integration.test_scope import listed, wait_listed

pytestmark = pytest.mark.integration

LABELS = {"app.kubernetes.io/name": "sunk-scheduler"}  # the default spec.scheduler.podSelector


@pytest.fixture(scope="module")
def operator(operator_kubeconfig, installed, tmp_path_factory) -> Iterator:
    """This module's own operator process (the session's stays clear of what the old code did here)."""
    from sunk_sandbox_devtools.devcluster import OperatorProcess

    proc = OperatorProcess(operator_kubeconfig, tmp_path_factory.mktemp("hostile-logs") / "operator.log",
                           env=TEST_ENV, args=("--log-format=json",))
    try:
        yield proc
    finally:
        proc.stop()
        logs = proc.logs()
        assert not [t for t in SECRET_VALUES if t in logs], "a secret value appeared in the operator's log"
        assert "\x1b" not in logs, "an escape sequence from tenant text reached the log"


def tenant(kube, emulator, names: list[str], **scheduler) -> str:
    """A namespace with a SUNK 8 scheduler and a binding listing `names` in its scheduler.conf."""
    ns = "t-hostile-" + uuid.uuid4().hex[:6]
    kube.create_namespace(ns)
    grant_operator(kube, ns)
    create_token_secret(kube, ns)
    make_scheduler(kube, ns, scope_namespaces=[], **scheduler)
    spec = binding_spec(new_runner(emulator, {}), emulator)
    spec["sandboxNamespaces"] = {"names": names}
    kube.create_binding(ns, "b", spec)
    return ns


def listing_latency(kube, ns: str, new: str) -> float:
    started = time.monotonic()
    kube.create_namespace(new)
    wait_listed(kube, ns, {new}, timeout=5)
    return time.monotonic() - started


def hostile_pod(kube, ns: str, name: str, args: list[str], env: list[dict] | None = None) -> None:
    """A pod matching the binding's podSelector, never scheduled (no kubelet here; none would run it)."""
    kube.core.create_namespaced_pod(ns, {"metadata": {"name": name, "labels": LABELS}, "spec": {
        "containers": [{"name": "scheduler", "image": "sunk/scheduler:8", "args": args, "env": env or []}]}})


def slurm_conf_of_spaces(kube, ns: str) -> str:
    kube.core.create_namespaced_config_map(ns, {"metadata": {"name": "slurm-evil"},
                                                "data": {"slurm.conf": " " * 140_000 + "\n"}})
    return f"ConfigMap {ns}/slurm-evil key slurm.conf: refused as untrusted input: line 1 is 140,000 characters"


def args_expanding_to_200_mb(kube, ns: str) -> str:
    hostile_pod(kube, ns, "sched-expand", ["--verbose=" + "$(X)" * 10_000], [{"name": "X", "value": "A" * 20_000}])
    return f"pod {ns}/sched-expand container 'scheduler' args[0]: refused as untrusted input: it expands past"


def kill_wait_of_30000_digits(kube, ns: str) -> str:
    hostile_pod(kube, ns, "sched-digits", ["--slurm-kill-wait=" + "1" * 30_000 + "x"])
    return f"pod {ns}/sched-digits container 'scheduler' args[0]: --slurm-kill-wait refused as untrusted input"


def scheduler_name_with_escapes(kube, ns: str) -> str:
    hostile_pod(kube, ns, "sched-name", ["--scheduler-name=slurm\x1b]0;owned\x07\x1b[2J"])
    set_pod_ready(kube, ns, "sched-name", True)  # the newest Ready pod: its flags are the ones used
    return (f"pod {ns}/sched-name container 'scheduler' args[0]: --scheduler-name 'slurm\\x1b]0;owned\\x07\\x1b[2J' "
            "refused: it is not a DNS-1123 subdomain")


ATTACKS: dict[str, Callable[..., str]] = {
    "slurm-conf-spaces": slurm_conf_of_spaces,              # a slurm.conf line of 140,000 spaces
    "args-expansion": args_expanding_to_200_mb,             # $(X) 10,000 times with a 20,000-character X
    "kill-wait-digits": kill_wait_of_30000_digits,          # --slurm-kill-wait= 30,000 digits and x
    "scheduler-name-escapes": scheduler_name_with_escapes,  # a scheduler name with escape sequences
}


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_hostile_text_refuses_only_its_own_binding(installed, operator, emulator, attack: str) -> None:
    p = "ds" + uuid.uuid4().hex[:6]
    other = tenant(installed, emulator, [f"{p}-o-*"])
    installed.wait_condition(other, "b", "ScopeSynced", "True", "Synced", timeout=30)
    before = listing_latency(installed, other, f"{p}-o-1")

    mine = tenant(installed, emulator, [f"{p}-m-*"])
    installed.wait_condition(mine, "b", "SchedulerReady", "True", timeout=30)
    refusal = ATTACKS[attack](installed, mine)
    started = time.monotonic()
    cond = installed.wait_condition(mine, "b", "SchedulerReady", "False", "InputRefused", timeout=15)
    took = time.monotonic() - started
    assert refusal in cond["message"], cond["message"]
    assert "\x1b" not in cond["message"] and len(cond["message"]) < 4_000
    status = installed.binding(mine, "b")["status"]
    assert status["scheduler"]["name"] == "slurm-scheduler"  # what the other objects say is still used
    assert all("\x1b" not in c["message"] for c in status["conditions"])

    after = listing_latency(installed, other, f"{p}-o-2")
    print(f"{attack}: refusal reported in {took:.2f}s; the other tenant's namespace listed in {after:.2f}s "
          f"(before the attack {before:.2f}s)")
    assert f"{p}-o-2" in listed(installed, other)
    assert operator.proc.poll() is None
    wait_for(lambda: installed.condition(other, "b", "Ready")["status"] == "True", 10)
