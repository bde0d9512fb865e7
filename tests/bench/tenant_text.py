"""Benchmark: what discovery's parsers of tenant text cost, on a normal scheduler namespace and on hostile text.

    PYTHONPATH=operator .venv/bin/python -m tests.bench.tenant_text [--names 5000] [--repeat 200]

Compare two trees by running it with each on PYTHONPATH (e.g. the code before issue 31, from
`git archive 29d76ed operator | tar -x -C /tmp/old`, then `PYTHONPATH=/tmp/old/operator`): it uses
only what both have. Normal: one `discover` over three scheduler pods (SUNK 7 flags, an env
reference, an `sh -c` wrapper), a scheduler.conf listing `--names` namespaces and a 120-line
slurm.conf, first with the memos cleared (a changed object) and then again (a resync); plus each
parser alone. Hostile: the shapes of issue 31 at sizes the old code finishes (it is quadratic).
Prints the median µs (ms) of each.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any, Callable

from sunk_sandbox_operator.api import parse_spec
from sunk_sandbox_operator.core.scheduler import discovery as scheduler
from sunk_sandbox_operator.core.scheduler import conf as scheduler_conf
from sunk_sandbox_operator.core.scheduler import slurm_conf

SPEC = parse_spec({"runner": {"id": "r", "tokenSecretRef": {"name": "s"}}, "sandboxNamespaces": {"names": ["ds-*"]}})


def _pod(i: int, args: list[str], env: list[dict[str, str]]) -> dict[str, Any]:
    return {"metadata": {"name": f"slurm-scheduler-{i}", "creationTimestamp": f"2024-01-0{i + 1}T00:00:00Z",
                         "labels": {"app.kubernetes.io/name": "sunk-scheduler"}},
            "spec": {"serviceAccountName": "slurm-scheduler", "containers": [
                {"name": "scheduler", "image": "sunk/scheduler:7", "args": args, "env": env}]},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}}


def normal_objects(names: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    env = [{"name": "KW", "value": "60s"}, {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]
    pods = [_pod(0, ["--scheduler-name=slurm-scheduler", "--slurm-kill-wait=$(KW)", "--v=2", "--leader-elect"], env),
            _pod(1, ["--scheduler-name", "slurm-scheduler", "--slurm-kill-wait", "1m", "--v=2"], env),
            _pod(2, ["sh", "-c", "exec /usr/bin/scheduler --scheduler-name='slurm-scheduler' --slurm-kill-wait=60s"], [])]
    conf = ("scheduler:\n  name: slurm-scheduler\n  killWait: 60s\n  scope:\n    type: namespace\n    namespaces:\n"
            + "".join(f"    - ds-user-{i:05d}\n" for i in range(names)))
    slurm = "\n".join(["ClusterName=sunk", "SlurmctldHost=slurm-controller-0", "KillWait = 60", "# comment"]
                      + [f"NodeName=node-{i:03d} CPUs=64 RealMemory=512000 State=UNKNOWN" for i in range(100)]
                      + [f"PartitionName=p{i} Nodes=node-[000-099] Default=NO MaxTime=INFINITE" for i in range(16)])
    cms = [{"metadata": {"name": "slurm-scheduler-config", "labels": {"app.kubernetes.io/component": "scheduler"}},
            "data": {"scheduler.conf": conf}},
           {"metadata": {"name": "slurm-conf"}, "data": {"slurm.conf": slurm}}]
    return pods, cms


def _clear() -> None:
    for module, memo in ((scheduler_conf, "_parse_text"), (slurm_conf, "_parse_slurm_conf")):
        fn = getattr(module, memo, None)
        if fn is not None:
            fn.cache_clear()


def median_us(fn: Callable[[], object], repeat: int, clear: bool = False) -> float:
    times = []
    for _ in range(repeat):
        if clear:
            _clear()
        start = time.perf_counter()
        try:
            fn()
        except ValueError:
            pass
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--names", type=int, default=5000, help="namespaces listed in scheduler.conf")
    ap.add_argument("--repeat", type=int, default=200)
    args = ap.parse_args()
    pods, cms = normal_objects(args.names)
    slurm_text = cms[1]["data"]["slurm.conf"]
    rows = [
        (f"discover: 3 pods, scheduler.conf of {args.names} names, slurm.conf (changed objects)",
         lambda: scheduler.discover(SPEC, "tenant-slurm", pods, cms), True),
        ("discover again (a resync: memos hit)", lambda: scheduler.discover(SPEC, "tenant-slurm", pods, cms), False),
        ("parse_scheduler_args, one pod", lambda: scheduler_conf.parse_scheduler_args(pods[0]), False),
        ("parse_scheduler_args, the sh -c pod", lambda: scheduler_conf.parse_scheduler_args(pods[2]), False),
        ("slurm.conf KillWait, 121 lines (unmemoized)", lambda: slurm_conf.slurm_kill_wait(slurm_text), True),
        ("Go duration 1h2m3.5s", lambda: scheduler_conf.parse_go_duration("1h2m3.5s"), False),
        ("hostile: slurm.conf line of 8,000 spaces", lambda: slurm_conf.slurm_kill_wait(" " * 8_000), True),
        ("hostile: --slurm-kill-wait= 4,000 digits x",
         lambda: scheduler_conf.parse_scheduler_args(_pod(0, ["--slurm-kill-wait=" + "1" * 4_000 + "x"], [])), False),
        ("hostile: $(X) 1,000 times, X of 2,000",
         lambda: scheduler_conf.parse_scheduler_args(_pod(0, ["--v=" + "$(X)" * 1_000], [{"name": "X", "value": "A" * 2_000}])),
         False),
    ]
    print(f"{'median':>12}  what")
    for label, fn, clear in rows:
        reps = args.repeat if not label.startswith("hostile") else max(3, args.repeat // 20)
        us = median_us(fn, reps, clear)
        print(f"{us / 1000:9.3f} ms  {label}" if us >= 1000 else f"{us:9.1f} µs  {label}")


if __name__ == "__main__":
    main()
