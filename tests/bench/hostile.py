"""Benchmark: one hostile tenant at a time while another tenant's new namespaces are listed (figures, not assertions).

    PYTHONPATH=operator .venv/bin/python -m tests.bench.hostile [--namespaces N] [--pods M] [--dwell S] [--only 1,3]

One fresh control plane (tests/bench/scale.py `bench_cluster`: the shipped manifests, the runner
API emulator), the scale bench's population (`populate`: N namespaces, half matching, M sandbox
pods) and its binding (`scale_spec`) as the victim tenant in tenant-slurm, and two operator
replicas as shipped (a leader and a standby, JSON logs, the default settings). Then phases:

    baseline    no hostile object
    (1)         a ConfigMap in the hostile tenant's namespace with a `slurm.conf` key: 140,000 spaces
    (2)         a pod matching the hostile binding's podSelector: env X = "A" * 20,000, args
                "--verbose=" + "$(X)" * 10,000 (never scheduled)
    (3)         a pod matching it: args "--slurm-kill-wait=" + 24,000 digits + "x"
    (4)         110 ConfigMaps of 1 MB in the hostile tenant's namespace

Each hostile case gets a tenant of its own (namespace, scheduler, binding with resyncInterval 30s,
the operator's grants there, as an admin gives every Slurm namespace); the tenant creates its
objects and asks for a reconcile (the reconcile-requested-at annotation). During `dwell` seconds
the victim creates a matching namespace every `every` seconds; each is timed from its creation to
its name in the victim's scheduler ConfigMap (watched). Meanwhile /healthz of the leader is read
every second (its slowest answer), and the Lease is read at each phase's start and end. Printed
per phase: victim latency p50 / max beside the baseline and the 2x goal, Lease transitions (goal 0),
leadership ends in the replicas' logs, /healthz's slowest answer, the leader's peak RSS (the main
process's VmHWM, reset at each phase's start, and the Lease keeper's private pages: the rest it
shares with the main process),
and the hostile binding's Ready reason. Exit status 0 once the table is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
import traceback
import urllib.error
import urllib.request
from pathlib import Path

from tests.bench.scale import (BINDING, CM, LOOPBACK_API, MATCH_LABELS, SLURM_NS, ListWatch, bench_cluster, log,
                               memory_kib, percentile, populate, scale_spec)
from tests.conftest import OPERATOR_NS, OPERATOR_SA, Kube, wait_for

LEASE = "sunk-sandbox-operator"
SCHEDULER_LABELS = {"app.kubernetes.io/name": "sunk-scheduler"}
CASES = {
    "1": "slurm.conf key with 140,000 spaces",
    "2": "pod with a $(X) expansion bomb (X = 20,000 A, 10,000 references)",
    "3": "pod with --slurm-kill-wait= + 24,000 digits + x",
    "4": "110 ConfigMaps of 1 MB in the scheduler namespace",
}


# ---------------------------------------------------------------- the hostile tenant


def hostile_tenant(kube: Kube, emulator, case: str) -> str:
    """A tenant of its own for one case: namespace, grants, token, scheduler, binding. Its namespace."""
    from tests.integration.conftest import binding_spec, create_token_secret, grant_operator, make_scheduler, new_runner

    ns = f"tenant-hostile-{case}"
    kube.create_namespace(ns)
    grant_operator(kube, ns)
    create_token_secret(kube, ns)
    make_scheduler(kube, ns)
    spec = binding_spec(new_runner(emulator, {}), emulator, sandboxNamespaces={"names": [f"hostile-{case}-never-*"]},
                        resyncInterval="30s")
    kube.create_binding(ns, "h", spec)
    kube.wait_condition(ns, "h", "SchedulerReady", timeout=60)
    return ns


def scheduler_pod(name: str, args: list[str], env: list[dict] | None = None) -> dict:
    return {"metadata": {"name": name, "labels": SCHEDULER_LABELS},
            "spec": {"containers": [{"name": "scheduler", "image": "sunk/scheduler:8", "args": args,
                                     **({"env": env} if env else {})}]}}


def make_hostile(kube: Kube, ns: str, case: str) -> None:
    core = kube.core
    if case == "1":
        core.create_namespaced_config_map(ns, {"metadata": {"name": "hostile-slurm-conf"},
                                               "data": {"slurm.conf": "a" + " " * 140_000 + "b\n"}})
    elif case == "2":
        core.create_namespaced_pod(ns, scheduler_pod("hostile-expansion", ["--verbose=" + "$(X)" * 10_000],
                                                     [{"name": "X", "value": "A" * 20_000}]))
    elif case == "3":
        core.create_namespaced_pod(ns, scheduler_pod("hostile-duration", ["--slurm-kill-wait=" + "1" * 24_000 + "x"]))
    elif case == "4":
        blob = "x" * 1_000_000
        for i in range(110):
            core.create_namespaced_config_map(ns, {"metadata": {"name": f"hostile-blob-{i:03d}"}, "data": {"blob": blob}})
    request_reconcile(kube, ns)


def request_reconcile(kube: Kube, ns: str) -> None:
    from sunk_sandbox_operator.api.keys import RECONCILE_REQUEST_ANNOTATION

    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    kube.custom.patch_namespaced_custom_object("sunksandbox.dev", "v1alpha1", ns, "sunksandboxbindings", "h",
                                               {"metadata": {"annotations": {RECONCILE_REQUEST_ANNOTATION: stamp}}})


def remove_hostile(kube: Kube, ns: str) -> None:
    """The hostile objects first (a Restore would read them again), then the binding."""
    for pod in kube.core.list_namespaced_pod(ns).items:
        if pod.metadata.name.startswith("hostile-"):
            kube.core.delete_namespaced_pod(pod.metadata.name, ns, grace_period_seconds=0)
    for cm in kube.core.list_namespaced_config_map(ns).items:
        if cm.metadata.name.startswith("hostile-"):
            kube.core.delete_namespaced_config_map(cm.metadata.name, ns)
    kube.custom.delete_namespaced_custom_object("sunksandbox.dev", "v1alpha1", ns, "sunksandboxbindings", "h")
    wait_for(lambda: not kube.binding_exists(ns, "h"), 120, lambda: f"binding {ns}/h not deleted")


def ready_reason(kube: Kube, ns: str) -> str:
    try:
        cond = kube.condition(ns, "h", "Ready") or {}
        return f"{cond.get('status')} {cond.get('reason')}"
    except Exception as exc:  # noqa: BLE001
        return f"? ({type(exc).__name__})"


# ---------------------------------------------------------------- what is measured


def lease(kube: Kube) -> dict:
    out = kube.kubectl("-n", OPERATOR_NS, "get", "lease", LEASE, "-o", "json", check=False)
    return json.loads(out.stdout)["spec"] if out.returncode == 0 else {}


class HealthProbe:
    """Reads a replica's /healthz every second in a thread: the slowest answer and the failures."""

    def __init__(self, operators: list) -> None:
        self.operators = operators
        self.slowest = 0.0
        self.failures = 0
        self.stalled = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for op in self.operators:
                began = time.monotonic()
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{op.liveness_port}/healthz", timeout=5) as r:
                        body = json.loads(r.read())
                    self.stalled = max(self.stalled, float(body.get("mainLoopStalledSeconds") or 0.0))
                except (urllib.error.URLError, OSError, ValueError):
                    self.failures += 1
                self.slowest = max(self.slowest, time.monotonic() - began)
            self._stop.wait(1.0)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)


def keeper_pid(pid: int) -> int | None:
    """The Lease keeper: the operator's child process."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat[stat.rindex(")") + 2:].split()[1]) == pid:
                return int(entry.name)
    return None


def peak_mib(pid: int | None) -> float | None:
    if pid is None:
        return None
    try:
        return memory_kib(pid).get("VmHWM", 0) / 1024
    except OSError:
        return None


def reset_peak(pid: int | None) -> None:
    """VmHWM starts again from VmRSS (Linux: `5` into clear_refs), so each phase shows its own peak."""
    if pid is not None:
        try:
            Path(f"/proc/{pid}/clear_refs").write_text("5")
        except OSError:
            pass


def private_mib(pid: int | None) -> float | None:
    """The pages only this process holds (a forked keeper shares the rest with its parent)."""
    if pid is None:
        return None
    try:
        lines = Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()
    except OSError:
        return None
    return sum(int(line.split()[1]) for line in lines if line.startswith(("Private_Clean:", "Private_Dirty:"))) / 1024


def leadership_ends(operators: list, offsets: list[int]) -> int:
    """Lines saying a replica stopped writing (leadership ended) since `offsets`."""
    count = 0
    for op, offset in zip(operators, offsets):
        with open(op.log_path, "rb") as f:
            f.seek(offset)
            count += f.read().decode(errors="replace").count("leadership ended")
    return count


def phase(kube: Kube, operators: list, label: str, dwell: float, every: float, act=None) -> dict:
    """Victim namespaces created every `every` s during `dwell` s (after `act`, the hostile move)."""
    offsets = [op.log_path.stat().st_size for op in operators]
    before = lease(kube)
    probe = HealthProbe(operators)
    names = [f"ds-victim-{label}-{i:03d}" for i in range(int(dwell // every))]
    watch = ListWatch(kube, SLURM_NS, CM, names)
    created: dict[str, float] = {}
    error = None
    try:
        if act is not None:
            act()
        t0 = time.monotonic()
        for i, name in enumerate(names):
            kube.create_namespace(name, MATCH_LABELS)
            created[name] = time.monotonic()
            time.sleep(max(0.0, t0 + every * (i + 1) - time.monotonic()))
        watch.done.wait(max(60.0, dwell))
    except Exception as exc:  # noqa: BLE001 - said in the phase's row
        traceback.print_exc()
        error = f"{type(exc).__name__}: {str(exc)[:100]}"
    finally:
        watch.stop()
        probe.stop()
    after = lease(kube)
    lat = [watch.first_seen[n] - created[n] for n in created if n in watch.first_seen]
    return {"p50": percentile(lat, 0.5) if lat else None, "max": max(lat) if lat else None,
            "listed": len(lat), "created": len(created), "error": error,
            "transitions": (after.get("leaseTransitions") or 0) - (before.get("leaseTransitions") or 0),
            "holders": (before.get("holderIdentity"), after.get("holderIdentity")),
            "ends": leadership_ends(operators, offsets), "healthz": probe.slowest,
            "healthz_failures": probe.failures, "stalled": probe.stalled}


# ---------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.hostile", description=__doc__.splitlines()[0])
    parser.add_argument("--namespaces", type=int, default=400, help="namespaces before the operators start; default 400")
    parser.add_argument("--pods", type=int, default=2000, help="sandbox pods before the operators start; default 2000")
    parser.add_argument("--dwell", type=float, default=90.0, help="seconds each phase creates victim namespaces")
    parser.add_argument("--every", type=float, default=3.0, help="seconds between two victim namespaces; default 3")
    parser.add_argument("--only", default="1,2,3,4", help="the hostile cases to run, e.g. 1,3; default all")
    parser.add_argument("--workers", type=int, default=12, help="concurrent admin requests while populating")
    args = parser.parse_args(argv)

    from sunk_sandbox_devtools.devcluster import OperatorProcess

    wall0 = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="ssb-hostile-"))
    rows: list[tuple[str, dict, str, str]] = []
    operators: list = []
    with bench_cluster(args.workers) as (cluster, kube, bulk, emulator):
        try:
            runner_id, _ = populate(kube, bulk, emulator, args.namespaces, args.pods)
            kubeconfig = cluster.service_account_kubeconfig(OPERATOR_NS, OPERATOR_SA, work / "operator.kubeconfig")
            for i in range(2):  # as shipped: two replicas, the shipped settings (JSON logs, no --verbose)
                operators.append(OperatorProcess(kubeconfig, work / f"operator-{i}.log", args=("--log-format=json",),
                                                 env=dict(LOOPBACK_API), timeout=120, verbose=False))
                if i == 0:
                    wait_for(lambda: lease(kube).get("holderIdentity"), 60, lambda: "no leader")
            log(f"two operators started (logs: {work})")
            kube.create_binding(SLURM_NS, BINDING, scale_spec(runner_id, emulator, grant=False))
            kube.wait_condition(SLURM_NS, BINDING, "ScopeSynced", "True", timeout=120)
            log("victim binding synced; baseline")
            for op in operators:
                reset_peak(op.proc.pid)
            result = phase(kube, operators, "base", args.dwell / 2, args.every)
            rows.append(("baseline", result, "—", _rss(operators)))
            for case in [c.strip() for c in args.only.split(",") if c.strip()]:
                ns = hostile_tenant(kube, emulator, case)
                log(f"case ({case}): {CASES[case]}")
                for op in operators:
                    reset_peak(op.proc.pid)
                result = phase(kube, operators, f"h{case}", args.dwell, args.every,
                               act=lambda: make_hostile(kube, ns, case))
                rows.append((f"({case}) {CASES[case]}", result, ready_reason(kube, ns), _rss(operators)))
                try:
                    remove_hostile(kube, ns)
                except Exception:  # noqa: BLE001
                    traceback.print_exc()
        except Exception:  # noqa: BLE001 - the table says what was measured
            traceback.print_exc()
        finally:
            for op in operators:
                op.stop()

    base = rows[0][1]["p50"] if rows and rows[0][1]["p50"] is not None else None
    print()
    print(f"hostile bench: {args.namespaces} namespaces, {args.pods} sandbox pods, 2 replicas; victim namespaces "
          f"one every {args.every:g} s for {args.dwell:g} s per case ({args.dwell / 2:g} s baseline)")
    print()
    print("| phase | victim namespace -> listed: p50 / max (listed/created) | p50 vs baseline (goal ≤ 2×) | "
          "Lease transitions (goal 0) / leadership ends | /healthz slowest (failures); main loop stalled | "
          "leader peak RSS in the phase | hostile binding Ready |")
    print("|---|---|---|---|---|---|---|")
    for label, r, reason, rss in rows:
        lat = ("none listed" if r["p50"] is None else
               f"{r['p50'] * 1000:.0f} ms / {r['max'] * 1000:.0f} ms ({r['listed']}/{r['created']})")
        ratio = "—" if base is None or r["p50"] is None or label == "baseline" else f"{r['p50'] / base:.1f}×"
        lease_cell = f"{r['transitions']} / {r['ends']}" + ("" if r["holders"][0] == r["holders"][1] else " (holder changed)")
        health = f"{r['healthz'] * 1000:.0f} ms ({r['healthz_failures']}); {r['stalled']:.1f} s"
        print(f"| {label} | {lat}{' — ' + r['error'] if r['error'] else ''} | {ratio} | {lease_cell} | {health} | "
              f"{rss or '—'} | {reason} |")
    print()
    print(f"wall time {time.monotonic() - wall0:.0f} s; operator logs in {work}")
    print(f"this run: PYTHONPATH=operator .venv/bin/python -m tests.bench.hostile --namespaces {args.namespaces} "
          f"--pods {args.pods} --dwell {args.dwell:g} --every {args.every:g} --only {args.only}")
    return 0


def _rss(operators: list) -> str:
    """The leader's peak RSS in the phase (VmHWM, reset at its start) and its keeper's private pages."""
    leader = next((op for op in operators if op.proc.poll() is None and _leads(op)), operators[0])
    return (f"{_mib(peak_mib(leader.proc.pid))} (VmHWM) + keeper "
            f"{_mib(private_mib(keeper_pid(leader.proc.pid)))} private")


def _leads(op) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{op.liveness_port}/healthz", timeout=5) as r:
            return json.loads(r.read()).get("leader") is True
    except (urllib.error.URLError, OSError, ValueError):
        return False


def _mib(value: float | None) -> str:
    return "?" if value is None else f"{value:.0f} MiB"


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
