"""Same-cluster starts: the first reconcile at scale, repeated, for one or more source trees (A/B).

    PYTHONPATH=operator .venv/bin/python -m tests.bench.starts [--namespaces N] [--pods M] [--grant]
        [--rounds R] [--tree PATH ...]

Start figures move by a second or more from one control plane (and one hour) to the next on this
kind of machine, more than most changes: compare code on one cluster. One fresh control plane, the
same objects as tests.bench.scale (N namespaces, half matching, M sandbox pods, the shipped
manifests, one runner), then R rounds; each round starts the operator once from each tree (the
order alternates between rounds), creates the binding, waits for ScopeSynced and every pod
observed (tests.bench.scale's start phase: wall time from the process start, the operator's CPU
and VmHWM then), deletes the binding (its finalizer restores the list and, with --grant, deletes
the RoleBindings) and stops the operator. The first start of a round 1 is the cluster's first
after the pods were made (tests.bench.scale measures only that one); it is marked.

Figures, not assertions: the exit status is 0 once the table is printed.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path

from tests.bench.scale import (BINDING, SLURM_NS, bench_cluster, cpu_seconds, log, memory_kib, phase_start, populate,
                               scale_spec)
from sunk_sandbox_operator.api.keys import BINDING_LABEL
from tests.conftest import ALL_GRANTS, FAST_RESYNC, LOOPBACK_API, OPERATOR_NS, OPERATOR_SA, Kube, wait_for

ROOT = Path(__file__).resolve().parents[2]


def one_start(kube: Kube, tree: Path, kubeconfig: Path, log_path: Path, spec: dict, pods: int) -> dict:
    from sunk_sandbox_devtools.devcluster import OperatorProcess

    started = time.monotonic()
    operator = OperatorProcess(kubeconfig, log_path, args=("--log-format=json",), timeout=120, verbose=False,
                               env={"PYTHONPATH": str(tree / "operator"), "SSB_STATUS_MIN_INTERVAL_SECONDS": "2",
                                    **LOOPBACK_API, **FAST_RESYNC, **ALL_GRANTS})
    try:
        kube.create_binding(SLURM_NS, BINDING, spec)
        _, text, seconds = phase_start(kube, operator, started, pods, 60 + pods / 250)
        out = {"start": text, "wall": seconds, "cpu": cpu_seconds(operator.proc.pid),
               "hwm": memory_kib(operator.proc.pid).get("VmHWM", 0) / 1024}
        kube.custom.delete_namespaced_custom_object("sunksandbox.dev", "v1alpha1", SLURM_NS, "sunksandboxbindings",
                                                    BINDING)
        wait_for(lambda: not kube.binding_exists(SLURM_NS, BINDING), 180,
                 lambda: "the binding was not finalized in 180 s", interval=0.5)
        return out
    finally:
        operator.stop()


def _ours(kube: Kube) -> int:
    return len(kube.rbac.list_role_binding_for_all_namespaces(label_selector=BINDING_LABEL).items)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.starts", description=__doc__.split("\n")[0])
    parser.add_argument("--namespaces", type=int, default=10000)
    parser.add_argument("--pods", type=int, default=50000)
    parser.add_argument("--workers", type=int, default=32, help="concurrent admin calls while setting up")
    parser.add_argument("--grant", action="store_true", help="scope.grantClusterRole: sunk-scheduler-sandbox")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tree", action="append", type=Path, default=None,
                        help="a source tree (a checkout's root) to start the operator from (repeatable; default: "
                        "this one); e.g. `git worktree add /tmp/base <commit>` for the other side of an A/B")
    args = parser.parse_args(argv)
    trees = [t.resolve() for t in (args.tree or [ROOT])]
    for tree in trees:
        if not (tree / "operator" / "sunk_sandbox_operator" / "__main__.py").is_file():
            parser.error(f"--tree {tree}: no operator/sunk_sandbox_operator there")

    work = Path(tempfile.mkdtemp(prefix="ssb-starts-"))
    results: dict[Path, list[dict]] = {t: [] for t in trees}
    with bench_cluster(args.workers) as (cluster, kube, bulk, emulator):
        runner_id, _ = populate(kube, bulk, emulator, args.namespaces, args.pods)
        kubeconfig = cluster.service_account_kubeconfig(OPERATOR_NS, OPERATOR_SA, work / "operator.kubeconfig")
        spec = scale_spec(runner_id, emulator, args.grant)
        n = 0
        for r in range(args.rounds):
            for tree in trees if r % 2 == 0 else trees[::-1]:
                n += 1
                path = work / f"operator-{n}.log"
                try:
                    out = one_start(kube, tree, kubeconfig, path, spec, args.pods)
                except Exception as exc:
                    traceback.print_exc()
                    out = {"start": f"failed: {type(exc).__name__}: {str(exc)[:120]}", "wall": None}
                out["first"] = n == 1
                results[tree].append(out)
                log(f"round {r + 1}, {tree}: {out['start']}; VmHWM {out.get('hwm', 0):.1f} MiB")
                if args.grant:
                    wait_for(lambda: _ours(kube) == 0, 180, lambda: "RoleBindings left after the finalizer",
                             interval=1.0)

    print()
    print(f"same-cluster starts: {args.namespaces} namespaces ({args.namespaces // 2} matching), {args.pods} "
          f"sandbox pods{', grants' if args.grant else ''}; {args.rounds} round(s)")
    print()
    print("| tree | start → ScopeSynced and every pod observed, each start (* the cluster's first) | "
          "median | operator CPU-s, median | VmHWM, max |")
    print("|---|---|---|---|---|")
    for tree, runs in results.items():
        walls = [r["wall"] for r in runs if r.get("wall") is not None]
        each = ", ".join((f"{r['wall']:.1f} s" if r.get("wall") is not None else r["start"]) + ("*" if r["first"] else "")
                         for r in runs)
        med = f"{statistics.median(walls):.1f} s" if walls else "—"
        cpu = f"{statistics.median(r['cpu'] for r in runs if 'cpu' in r):.1f}" if any("cpu" in r for r in runs) else "—"
        hwm = f"{max(r['hwm'] for r in runs if 'hwm' in r):.1f} MiB" if any("hwm" in r for r in runs) else "—"
        print(f"| {tree} | {each} | {med} | {cpu} | {hwm} |")
    print()
    print(f"operator logs in {work}; goal (tests.bench.scale): ≤ 10 s, ≤ 150 MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
