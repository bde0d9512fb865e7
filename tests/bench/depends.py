"""What the dependency watches cost with many ConfigMaps in the cluster (figures, not assertions).

    PYTHONPATH=operator .venv/bin/python -m tests.bench.depends [--configmaps 10000] [--namespaces 100]

One fresh control plane, the shipped manifests, a SUNK 8 scheduler in tenant-slurm and one binding.
The operator (its own ServiceAccount, JSON logs) is started twice: first with only the scheduler's
ConfigMaps in the cluster, then after K ConfigMaps (a few KiB each, as Helm releases leave them)
were created over N other namespaces. Each time: the operator's VmRSS once ScopeSynced=True,
the objects its dependency watches hold (`ssb_dependency_watch_objects`), and how fast an edit of
scheduler.conf (kill-wait) reaches status. The watches are per scheduler namespace, so the other
ConfigMaps should cost nothing.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from tests.bench.scale import Bulk, install, log, memory_kib, metric, mib, prepare_slurm_ns
from tests.conftest import LOOPBACK_API, OPERATOR_NS, OPERATOR_SA, Kube, wait_for

SLURM_NS = "tenant-slurm"
CM = "slurm-scheduler-config"
PAYLOAD = "x" * 2048


def run_operator(kube: Kube, work: Path, label: str, kill_wait: int) -> dict:
    from sunk_sandbox_devtools.devcluster import OperatorProcess

    kubeconfig = kube.cluster.service_account_kubeconfig(OPERATOR_NS, OPERATOR_SA, work / "operator.kubeconfig")
    operator = OperatorProcess(kubeconfig, work / f"operator-{label}.log", args=("--log-format=json",),
                               env=LOOPBACK_API, timeout=120, verbose=False)
    try:
        def status() -> dict:
            return kube.binding(SLURM_NS, "b").get("status") or {}

        def synced() -> bool:
            conds = {c["type"]: c for c in status().get("conditions") or []}
            return conds.get("ScopeSynced", {}).get("status") == "True" and \
                (status().get("scheduler") or {}).get("killWaitSeconds") == kill_wait
        wait_for(synced, 120, lambda: str(status()), interval=0.2)
        time.sleep(2.0)  # the dependency watches' first LISTs
        mem = memory_kib(operator.proc.pid)
        text = operator.metrics()
        objects = metric(text, "ssb_dependency_watch_objects")
        watches = metric(text, "ssb_dependency_watches")
        cm = kube.core.read_namespaced_config_map(CM, SLURM_NS)
        cm.data["scheduler.conf"] = cm.data["scheduler.conf"].replace(f"killWait: {kill_wait}s",
                                                                      f"killWait: {kill_wait + 1}s")
        kube.core.replace_namespaced_config_map(CM, SLURM_NS, cm)
        t = time.monotonic()
        wait_for(lambda: (status().get("scheduler") or {}).get("killWaitSeconds") == kill_wait + 1, 30, interval=0.02)
        return {"rss": mem.get("VmRSS"), "hwm": mem.get("VmHWM"), "objects": objects, "watches": watches,
                "react": time.monotonic() - t}
    finally:
        operator.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.depends", description=__doc__.splitlines()[0])
    parser.add_argument("--configmaps", type=int, default=10000)
    parser.add_argument("--namespaces", type=int, default=100)
    parser.add_argument("--workers", type=int, default=12)
    args = parser.parse_args(argv)

    from sunk_sandbox_devtools import devcluster
    from sunk_sandbox_operator.adapters.runnerapi.emulator import EmulatorState, running_emulator
    from tests.integration.conftest import ADMIN_TOKEN, binding_spec, make_scheduler, new_runner

    work = Path(tempfile.mkdtemp(prefix="ssb-depends-"))
    cluster = devcluster.temp_cluster()
    bulk = None
    try:
        kube = Kube(cluster)
        install(kube)
        bulk = Bulk(kube, args.workers)
        with running_emulator(EmulatorState(admin_tokens={ADMIN_TOKEN})) as emulator:
            prepare_slurm_ns(kube)
            make_scheduler(kube, SLURM_NS, kill_wait=None, extra_conf="  killWait: 30s\n",
                           scope_namespaces=[SLURM_NS])
            kube.create_binding(SLURM_NS, "b", binding_spec(new_runner(emulator, {}), emulator,
                                                            sandboxNamespaces={"names": ["ds-*"]}))
            before = run_operator(kube, work, "before", 30)
            log(f"without: {before}")
            others = [f"cm-ns-{i:04d}" for i in range(args.namespaces)]
            bulk.namespaces(others, None)
            t = time.monotonic()
            items = [(others[i % len(others)], f"release-cm-{i:06d}") for i in range(args.configmaps)]
            bulk.run(lambda it: bulk.core.create_namespaced_config_map(
                it[0], {"metadata": {"name": it[1]}, "data": {"values.yaml": PAYLOAD}}, _preload_content=False),
                items)
            log(f"{args.configmaps} ConfigMaps created over {args.namespaces} namespaces in {time.monotonic() - t:.1f}s")
            after = run_operator(kube, work, "after", 31)
            log(f"with: {after}")
    finally:
        if bulk is not None:
            bulk.close()
        cluster.stop()

    print(f"\n| figure | {0} other ConfigMaps | {args.configmaps:,} other ConfigMaps over {args.namespaces} namespaces |")
    print("|---|---|---|")
    print(f"| operator VmRSS (VmHWM) once synced | {mib(before['rss'])} ({mib(before['hwm'])}) | "
          f"{mib(after['rss'])} ({mib(after['hwm'])}) |")
    print(f"| dependency watches / objects they hold | {before['watches']:.0f} / {before['objects']:.0f} | "
          f"{after['watches']:.0f} / {after['objects']:.0f} |")
    print(f"| scheduler.conf edit -> status | {before['react']:.2f} s | {after['react']:.2f} s |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
