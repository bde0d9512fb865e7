"""Two replicas, one writer; an API-server outage does not end the process; a stalled main loop keeps the Lease.

Runs on the crash module's own control plane (its `plane` fixture): two operator processes as
the same ServiceAccount, like the Deployment's two replicas. The Lease elects one; the other
keeps its caches warm, reports Ready and writes nothing. SIGKILL the leader in the middle of a
namespace burst: the standby takes over once the Lease expires and lists the new namespaces
within lease duration + 2 s.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
import urllib.error
import urllib.request
import uuid

import pytest

from tests.conftest import assert_stays, wait_for
from tests.integration.conftest import (binding_spec, create_token_secret, grant_secret_read, make_scheduler,
                                        new_runner)
from tests.integration.test_crash import listed, plane  # noqa: F401  (the module's control plane)

pytestmark = pytest.mark.integration

LEASE_SECONDS = 15.0  # the shipped default (client-go's)


def health(proc, path: str = "/healthz", timeout: float = 2.0) -> dict:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{proc.liveness_port}{path}", timeout=timeout) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as exc:  # 503: the body still says why
        return {"status": exc.code, **json.loads(exc.read() or b"{}")}
    except Exception as exc:  # noqa: BLE001 - not answering (yet)
        return {"error": str(exc)}


def leading(proc) -> bool:
    return health(proc).get("leader") is True


def metric(proc, name: str) -> float:
    total = 0.0
    for line in proc.metrics().splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            total += float(line.rsplit(" ", 1)[1])
    return total


def no_operator_left(plane) -> None:  # noqa: F811
    """Stop what an earlier test may have left running (one holding the Lease would block this one)."""
    for proc in plane.runs:
        proc.stop()


def setup_binding(plane, p: str) -> str:  # noqa: F811
    kube = plane.kube
    ns = f"ha-{p}"
    kube.create_namespace(ns)
    grant_secret_read(kube, ns)
    create_token_secret(kube, ns)
    make_scheduler(kube, ns, scope_namespaces=["admin-entry"])
    # Every list write rolls at once (no folded roll left pending across a restart: these tests are
    # about leadership; rationing across restarts is tests/unit/test_scope_stateful.py's).
    spec = binding_spec(new_runner(plane.emulator, {}), plane.emulator, sandboxNamespaces={"names": [f"{p}-*"]},
                        scope={"alwaysInclude": [ns], "minRollInterval": "0s"})
    kube.create_binding(ns, "b", spec)
    return ns


def test_the_standby_writes_nothing_and_takes_over_from_a_killed_leader(plane):  # noqa: F811
    no_operator_left(plane)
    kube, p = plane.kube, uuid.uuid4().hex[:6]
    a = plane.start("ha-a")
    wait_for(lambda: leading(a), 30, lambda: str(health(a)))
    b = plane.start("ha-b")
    wait_for(lambda: health(b, "/readyz").get("ready") is True, 30, lambda: str(health(b, "/readyz")))
    assert health(b).get("leader") is False
    ns = setup_binding(plane, p)
    kube.wait_condition(ns, "b", "ScopeSynced", "True", timeout=30)
    kube.create_namespace(f"{p}-before")
    wait_for(lambda: f"{p}-before" in listed(kube, ns), 10)

    def standby_quiet():  # all writes are the leader's
        assert not leading(b)
        assert metric(b, "ssb_scope_writes_total") == 0 and metric(b, "ssb_status_patches_total") == 0
    assert_stays(standby_quiet, 2.0)

    created: dict[str, float] = {}
    stop = threading.Event()

    def burst():
        i = 0
        while not stop.is_set() and i < 400:
            name = f"{p}-n{i:03d}"
            kube.create_namespace(name)
            created[name] = time.monotonic()
            i += 1
            time.sleep(0.1)
    worker = threading.Thread(target=burst, daemon=True)
    worker.start()
    try:
        wait_for(lambda: len(created) >= 10, 10)
        killed_at = time.monotonic()
        os.kill(a.proc.pid, signal.SIGKILL)  # mid-burst, no chance to release the Lease
        a.proc.wait(10)
        after = wait_for(lambda: next((n for n, t in sorted(created.items(), key=lambda x: x[1]) if t > killed_at + 0.5),
                                      None), 10)
        wait_for(lambda: after in listed(kube, ns), LEASE_SECONDS + 2 + 5, lambda: f"{after} not listed")
        took = time.monotonic() - created[after]
        print(f"\nfailover: {after} created {created[after] - killed_at:.1f}s after the kill, listed {took:.1f}s "
              f"after its creation (lease {LEASE_SECONDS:.0f}s)")
        assert took <= LEASE_SECONDS + 2.0
        assert leading(b)
    finally:
        stop.set()
        worker.join(10)
    # Nothing lost: every namespace of the burst is listed, with the admin's entry and alwaysInclude.
    wait_for(lambda: set(created) <= set(listed(kube, ns)), 20)
    assert {"admin-entry", ns, f"{p}-before"} <= set(listed(kube, ns))
    b.stop()


def leader_with_binding(plane, label: str):  # noqa: F811
    """One operator that leads, and a synced binding: (process, prefix, binding namespace)."""
    no_operator_left(plane)
    p = uuid.uuid4().hex[:6]
    op = plane.start(label)
    wait_for(lambda: leading(op), 40, lambda: str(health(op)))
    ns = setup_binding(plane, p)
    plane.kube.wait_condition(ns, "b", "ScopeSynced", "True", timeout=30)
    return op, p, ns


def test_an_api_server_outage_does_not_end_the_operator(plane):  # noqa: F811
    kube = plane.kube
    op, p, ns = leader_with_binding(plane, "outage")
    try:
        apiserver = kube.cluster.pids["kube-apiserver"]
        os.kill(apiserver, signal.SIGSTOP)  # every request hangs: worse than refused connections
        try:
            def alive():
                assert op.proc.poll() is None, "the operator process ended during the outage"
            assert_stays(alive, 90.0, interval=1.0)
        finally:
            os.kill(apiserver, signal.SIGCONT)

        def api_answers() -> bool:  # the test's own pooled connections died with the outage too
            try:
                kube.core.list_namespace(limit=1)
                return True
            except Exception:  # noqa: BLE001
                return False
        wait_for(api_answers, 60)
        kube.create_namespace(f"{p}-after")
        wait_for(lambda: f"{p}-after" in listed(kube, ns), 60, lambda: str(health(op)))
        assert op.proc.poll() is None and leading(op)
    finally:
        op.stop()  # releases the Lease for the next test


def test_a_restart_with_nothing_changed_writes_no_status_and_flips_no_condition(plane):  # noqa: F811
    """Argo CD must not see Healthy -> Progressing -> Healthy on every rollout."""
    kube = plane.kube
    first, p, ns = leader_with_binding(plane, "restart-1")
    second = None
    try:
        def status():
            return kube.binding(ns, "b").get("status")
        added = status()["scope"]["addedCount"]
        kube.create_namespace(f"{p}-x")
        wait_for(lambda: f"{p}-x" in listed(kube, ns), 10)
        # The status records a scope write after it: wait for that record, not only the list.
        wait_for(lambda: status()["scope"]["addedCount"] == added + 1, 10, lambda: str(status()["scope"]))
        settled = status()

        def unchanged():
            assert status() == settled
        assert_stays(unchanged, 3.0)  # the first operator has nothing left to write
        first.stop()  # a rollout: SIGTERM, the Lease is released
        second = plane.start("restart-2")
        wait_for(lambda: leading(second), 20, lambda: str(health(second)))
        wait_for(lambda: metric(second, "ssb_reconciles_total") >= 1, 20)  # it has reconciled the binding
        assert_stays(unchanged, 5.0)  # no status write, no condition flipped, not even for a moment
        assert metric(second, "ssb_status_patches_total") == 0
    finally:
        first.stop()
        if second is not None:
            second.stop()


def lease(kube) -> dict:
    out = kube.kubectl("-n", "sunk-sandbox-operator-system", "get", "lease", "sunk-sandbox-operator", "-o", "json")
    return json.loads(out.stdout)["spec"]


def test_a_main_loop_blocked_longer_than_the_lease_keeps_the_lease_and_the_probes(plane):  # noqa: F811
    """The leader's first reconcile holds its main thread, and the GIL, for 25 s (a failpoint, as a
    C-level parse of a tenant's text would): longer than the 15 s Lease. The keeper process renews
    all along, /healthz answers within 1 s throughout and says the loop is stalled, the standby
    never takes over, the Lease changes hands 0 times; after the stall the binding is reconciled."""
    no_operator_left(plane)
    kube, p = plane.kube, uuid.uuid4().hex[:6]
    stall = 25
    a = plane.start("stall-a", failpoints=f"stall-in-reconcile={stall}")
    wait_for(lambda: leading(a), 30, lambda: str(health(a)))
    b = plane.start("stall-b")
    try:
        wait_for(lambda: health(b, "/readyz").get("ready") is True, 30, lambda: str(health(b, "/readyz")))
        before = lease(kube)
        ns = setup_binding(plane, p)  # its first reconcile stalls the leader's main loop
        worst, stalled, polls = 0.0, [], 0
        end = time.monotonic() + stall + 10
        while time.monotonic() < end:
            began = time.monotonic()
            got = health(a, timeout=1.0)
            took = time.monotonic() - began
            worst = max(worst, took)
            assert got.get("ok") is True and got.get("leader") is True and took < 1.0, (got, took)
            assert not leading(b), "the standby took over"
            stalled.append(got["mainLoopStalledSeconds"])
            polls += 1
            time.sleep(0.2)
        after = lease(kube)
        print(f"\nstalled main loop: /healthz answered {polls} times, slowest {worst * 1000:.0f} ms; the loop "
              f"stalled {max(stalled):.1f} s; Lease transitions {before['leaseTransitions']} -> "
              f"{after['leaseTransitions']}")
        assert max(stalled) > LEASE_SECONDS, "the failpoint did not stall the main loop past the lease duration"
        assert after["holderIdentity"] == before["holderIdentity"]
        assert after["leaseTransitions"] == before["leaseTransitions"]
        kube.wait_condition(ns, "b", "ScopeSynced", "True", timeout=30)  # the leader reconciled after the stall
        assert leading(a) and not leading(b)
    finally:
        a.stop()
        b.stop()
