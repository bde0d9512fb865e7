"""Events on a live binding: a healthy binding's first reconcile says what the operator wrote and no
more (a condition's first state is not a change); a later change of state still posts its event.
The operator's JSON log lines about it carry the binding, its namespace and the reason as fields."""

from __future__ import annotations

import json
import time
import uuid

import pytest

from tests.conftest import wait_for
from tests.integration.conftest import binding_spec, new_runner, set_pod_ready

pytestmark = pytest.mark.integration

FIRST_RECONCILE_MAX_EVENTS = 2  # e.g. PolicyUpdated, ScopeUpdated (issue 34)


def binding_events(kube, ns: str, uid: str) -> list[tuple[str, str, str]]:
    return [(e.type, e.reason, e.message) for e in kube.core.list_namespaced_event(
        ns, field_selector=f"involvedObject.uid={uid}").items]


def request_reconcile(kube, ns: str, name: str) -> None:
    kube.custom.patch_namespaced_custom_object("sunksandbox.dev", "v1alpha1", ns, "sunksandboxbindings", name, {
        "metadata": {"annotations": {"sunksandbox.dev/reconcile-requested-at": uuid.uuid4().hex}}})


def settled(read, quiet: float = 4.0, timeout: float = 30.0) -> list:
    """`read()` once it has not changed for `quiet` seconds."""
    deadline = time.monotonic() + timeout
    last, since = read(), time.monotonic()
    while time.monotonic() - since < quiet:
        assert time.monotonic() < deadline, f"still changing after {timeout}s: {last}"
        time.sleep(0.25)
        now = read()
        if now != last:
            last, since = now, time.monotonic()
    return last


def test_a_healthy_first_reconcile_posts_at_most_two_events(installed, operator, emulator, binding_ns):
    sandbox = f"ds-ev-{uuid.uuid4().hex[:6]}"
    installed.create_namespace(sandbox)
    created = installed.create_binding(binding_ns, "b", binding_spec(new_runner(emulator, {}), emulator,
                                                                     sandboxNamespaces={"names": [sandbox]}))
    uid = created["metadata"]["uid"]
    installed.wait_condition(binding_ns, "b", "Ready", "True", timeout=30)
    installed.wait_condition(binding_ns, "b", "ScopeSynced", "True", timeout=30)

    # Events are posted in the background: wait until no more come for a few seconds.
    events = settled(lambda: binding_events(installed, binding_ns, uid))
    print(f"\na healthy binding's first reconcile posted {len(events)} event(s):")
    for kind, reason, message in events:
        print(f"  {kind:8} {reason}: {message}")
    assert len(events) <= FIRST_RECONCILE_MAX_EVENTS, events
    assert {reason for _, reason, _ in events} <= {"PolicyUpdated", "ScopeUpdated", "SchedulerRestarted"}, events
    assert all(kind == "Normal" for kind, _, _ in events), events

    # The operator's JSON log says the same with the binding, its namespace and the reason as fields.
    logged = [json.loads(line) for line in operator.logs().splitlines() if line.startswith("{")]
    mine = [line for line in logged if line.get("binding") == f"{binding_ns}/b"]
    assert {line.get("reason") for line in mine} >= {"PolicyUpdated", "ScopeUpdated"}, mine
    assert all(line["namespace"] == binding_ns for line in mine), mine

    # A change of state still posts its event, once: the scheduler stops being Ready, then recovers
    # (each time a reconcile is asked for: what wakes a binding is not the point here).
    set_pod_ready(installed, binding_ns, "slurm-scheduler-0", False)
    request_reconcile(installed, binding_ns, "b")
    wait_for(lambda: [e for e in binding_events(installed, binding_ns, uid) if e[0] == "Warning"
                      and e[2].startswith("SchedulerReady:")], 30, lambda: str(binding_events(installed, binding_ns, uid)))
    set_pod_ready(installed, binding_ns, "slurm-scheduler-0", True)
    request_reconcile(installed, binding_ns, "b")
    wait_for(lambda: [e for e in binding_events(installed, binding_ns, uid) if e[0] == "Normal"
                      and e[2].startswith("SchedulerReady:")], 30,
             lambda: f"{binding_events(installed, binding_ns, uid)}; now "
                     f"{installed.condition(binding_ns, 'b', 'SchedulerReady')}, "
                     f"{installed.binding(binding_ns, 'b')['status'].get('lastHandledReconcileAt')}")
    changes = [e for e in binding_events(installed, binding_ns, uid) if e[2].startswith("SchedulerReady:")]
    assert sorted(kind for kind, _, _ in changes) == ["Normal", "Warning"], changes  # once each
