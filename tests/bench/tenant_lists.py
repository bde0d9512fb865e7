"""What a tenant's ConfigMaps in the scheduler's namespace cost the operator (issue 31, finding 4): figures.

    PYTHONPATH=operator .venv/bin/python -m tests.bench.tenant_lists [--big 110] [--size-mib 1] [--small 0]
        [--reconciles 10] [--tree PATH ...]

One fresh control plane, the shipped manifests, a SUNK 8 scheduler in tenant-slurm and one binding.
For each source tree (default: this one; e.g. `--tree /work/main --tree .` for before/after), the
operator is started at normal size (the scheduler's own objects only), made to reconcile
`--reconciles` times (reconcile requests, each waited for), and stopped; then `--big` ConfigMaps of
`--size-mib` MiB (and `--small` ConfigMaps of a few bytes) are created in tenant-slurm, and each
tree's operator is started and made to reconcile again. Printed per tree and phase: VmRSS / VmHWM
once the requested reconciles are done, the API server's LIST requests for ConfigMaps and Pods per
reconcile (its `apiserver_request_total`), and the operator's CPU per reconcile.
"""

from __future__ import annotations

import argparse
import os
import re
import tempfile
import time
from pathlib import Path

from tests.bench.scale import Bulk, install, log, memory_kib, metric, mib, prepare_slurm_ns
from tests.conftest import LOOPBACK_API, OPERATOR_NS, OPERATOR_SA, Kube, wait_for

SLURM_NS = "tenant-slurm"
ROOT = Path(__file__).resolve().parents[2]


def lists(kube: Kube) -> dict[str, float]:
    """The API server's LIST requests so far, by resource (configmaps, pods)."""
    text = kube.kubectl("get", "--raw", "/metrics").stdout
    out = {"configmaps": 0.0, "pods": 0.0}
    for m in re.finditer(r"^apiserver_request_total\{([^}]*)\} (\S+)$", text, re.M):
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
        if labels.get("verb") == "LIST" and labels.get("resource") in out and labels.get("scope") == "namespace":
            out[labels["resource"]] += float(m.group(2))
    return out


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run(kube: Kube, tree: Path, work: Path, label: str, reconciles: int) -> dict:
    from sunk_sandbox_devtools.devcluster import OperatorProcess

    kubeconfig = kube.cluster.service_account_kubeconfig(OPERATOR_NS, OPERATOR_SA, work / "operator.kubeconfig")
    env = {**LOOPBACK_API, "PYTHONPATH": str(tree / "operator"), "SSB_RECONCILE_REQUEST_INTERVAL_SECONDS": "0"}
    started = lists(kube)
    operator = OperatorProcess(kubeconfig, work / f"operator-{label}.log", args=("--log-format=json",), env=env,
                               timeout=180, verbose=False)

    def status() -> dict:
        return kube.binding(SLURM_NS, "b").get("status") or {}

    def watched() -> float:
        return metric(operator.metrics(), "ssb_dependency_watch_objects")

    try:
        wait_for(lambda: {c["type"]: c["status"] for c in status().get("conditions") or []}.get("ScopeSynced") == "True",
                 180, lambda: str(status()), interval=0.2)
        counts = [-1.0, watched()]  # the dependency watches' first LISTs are in once their count holds still
        while (counts[-1] != counts[-2] or counts[-1] <= 0) and len(counts) < 180:
            time.sleep(1.0)
            counts.append(watched())
        before, cpu = lists(kube), cpu_seconds(operator.proc.pid)
        start_lists = before["configmaps"] - started["configmaps"]
        for i in range(reconciles):
            value = f"{label}-{i}-{time.time()}"
            kube.custom.patch_namespaced_custom_object(
                "sunksandbox.dev", "v1alpha1", SLURM_NS, "sunksandboxbindings", "b",
                {"metadata": {"annotations": {"sunksandbox.dev/reconcile-requested-at": value}}})
            wait_for(lambda: status().get("lastHandledReconcileAt") == value, 60, interval=0.05)
        after, used = lists(kube), cpu_seconds(operator.proc.pid) - cpu
        mem = memory_kib(operator.proc.pid)
        return {"rss": mem.get("VmRSS"), "hwm": mem.get("VmHWM"), "start_lists": start_lists, "start_cpu": cpu,
                "cm_lists": (after["configmaps"] - before["configmaps"]) / reconciles,
                "pod_lists": (after["pods"] - before["pods"]) / reconciles, "cpu": used / reconciles,
                "ready": {c["type"]: c["reason"] for c in status().get("conditions") or []}.get("SchedulerReady")}
    finally:
        operator.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.tenant_lists", description=__doc__.splitlines()[0])
    parser.add_argument("--big", type=int, default=110)
    parser.add_argument("--size-mib", type=float, default=1.0)
    parser.add_argument("--small", type=int, default=0)
    parser.add_argument("--reconciles", type=int, default=10)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--tree", action="append", type=Path, default=None)
    args = parser.parse_args(argv)
    trees = [t.resolve() for t in (args.tree or [ROOT])]

    from sunk_sandbox_devtools import devcluster
    from sunk_sandbox_operator.adapters.runnerapi.emulator import EmulatorState, running_emulator
    from tests.integration.conftest import ADMIN_TOKEN, binding_spec, make_scheduler, new_runner

    work = Path(tempfile.mkdtemp(prefix="ssb-tenant-lists-"))
    cluster = devcluster.temp_cluster()
    results: dict[tuple[Path, str], dict] = {}
    bulk = None
    try:
        kube = Kube(cluster)
        install(kube)
        bulk = Bulk(kube, args.workers)
        with running_emulator(EmulatorState(admin_tokens={ADMIN_TOKEN})) as emulator:
            prepare_slurm_ns(kube)
            make_scheduler(kube, SLURM_NS, scope_namespaces=[SLURM_NS])
            kube.create_binding(SLURM_NS, "b", binding_spec(new_runner(emulator, {}), emulator,
                                                            sandboxNamespaces={"names": ["ds-*"]}))
            for tree in trees:
                results[(tree, "normal")] = out = run(kube, tree, work, f"normal-{len(results)}", args.reconciles)
                log(f"{tree} normal: {out}")
            payload = "x" * int(args.size_mib * 1024 * 1024 - 4096)
            t = time.monotonic()
            bulk.run(lambda i: bulk.core.create_namespaced_config_map(
                SLURM_NS, {"metadata": {"name": f"big-{i:04d}"}, "data": {"blob": payload}}, _preload_content=False),
                list(range(args.big)))
            bulk.run(lambda i: bulk.core.create_namespaced_config_map(
                SLURM_NS, {"metadata": {"name": f"small-{i:05d}"}, "data": {"n": str(i)}}, _preload_content=False),
                list(range(args.small)))
            log(f"{args.big} x {args.size_mib} MiB and {args.small} small ConfigMaps in {time.monotonic() - t:.1f}s")
            for tree in trees:
                results[(tree, "hostile")] = out = run(kube, tree, work, f"hostile-{len(results)}", args.reconciles)
                log(f"{tree} hostile: {out}")
    finally:
        if bulk is not None:
            bulk.close()
        cluster.stop()

    hostile = f"+ {args.big} x {args.size_mib:g} MiB" + (f" + {args.small} small" if args.small else "")
    print("\n| tree | ConfigMaps in tenant-slurm | VmRSS (VmHWM) after the reconciles | start to synced: ConfigMap "
          "LIST requests (pages), operator CPU | per reconcile: LISTs (ConfigMaps / Pods), operator CPU | "
          "SchedulerReady |")
    print("|---|---|---|---|---|---|")
    for (tree, phase), r in results.items():
        print(f"| {tree} | {'the scheduler own' if phase == 'normal' else hostile} | {mib(r['rss'])} "
              f"({mib(r['hwm'])}) | {r['start_lists']:.0f}, {r['start_cpu']:.2f} s | {r['cm_lists']:.1f} / "
              f"{r['pod_lists']:.1f}, {r['cpu'] * 1000:.0f} ms | {r['ready']} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
