"""Benchmark: a burst of new sandbox namespaces → the scheduler's ConfigMap (not part of pytest).

    PYTHONPATH=operator python -m tests.bench.scope_burst [--namespaces 200 1000] [--window 0.2] [--workers 8]

Starts its own control plane (etcd + kube-apiserver), the runner API emulator and the operator
process as its ServiceAccount (as the integration tests do), creates one binding, then for each
burst size creates that many matching namespaces as fast as it can and reports, per burst: how
long the creation took, the scope writes (ssb_scope_writes_total), and the latency from each
namespace's creation to the ConfigMap first holding it (p50/p99/max, from a watch stream).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from sunk_sandbox_devtools.devcluster import OperatorProcess
from tests.conftest import OPERATOR_NS, OPERATOR_SA, REPO, TEST_ENV, Kube, wait_for
from tests.integration.conftest import (ADMIN_TOKEN, binding_spec, create_token_secret, grant_secret_read,
                                        make_scheduler, new_runner)
from tests.integration.test_scope import ConfigMapWatch, listed, percentile, scope_writes


def install(kube: Kube) -> None:
    kube.kubectl("apply", "--server-side", "-f", str(REPO / "crds" / "sunksandboxbindings.yaml"))

    def established():
        crd = kube.ext.read_custom_resource_definition("sunksandboxbindings.sunksandbox.dev")
        return any(c.type == "Established" and c.status == "True" for c in (crd.status.conditions or []))
    wait_for(established, 60)
    kube.kubectl("create", "namespace", "tenant-slurm", check=False)
    rendered = kube.kubectl("kustomize", str(REPO / "manifests")).stdout
    kube.kubectl("apply", "--server-side", "-f", "-", input=rendered)


def burst(kube: Kube, operator: OperatorProcess, slurm_ns: str, prefix: str, n: int, workers: int) -> dict:
    ref = f"{slurm_ns}/bench"
    writes_before = scope_writes(operator, ref)
    watch = ConfigMapWatch(kube, slurm_ns)
    created: dict[str, float] = {}
    names = [f"{prefix}-{i:05d}" for i in range(n)]

    def create(name: str) -> None:
        t = time.monotonic()
        kube.create_namespace(name)
        created[name] = t

    started = time.monotonic()
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(create, names))
    create_seconds = time.monotonic() - started
    wait_for(lambda: all(x in watch.first_seen for x in names), 120,
             lambda: f"{sum(x in watch.first_seen for x in names)}/{n} listed")
    total_seconds = time.monotonic() - started
    watch.stop()
    assert set(names) <= set(listed(kube, slurm_ns))
    time.sleep(1.0)  # let the writes counter settle (a last no-op sync may follow)
    lat = [watch.first_seen[x] - created[x] for x in names]
    return {"n": n, "create_s": create_seconds, "total_s": total_seconds,
            "writes": scope_writes(operator, ref) - writes_before,
            "p50_ms": percentile(lat, 0.5) * 1000, "p99_ms": percentile(lat, 0.99) * 1000, "max_ms": max(lat) * 1000}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.scope_burst", description=__doc__.splitlines()[0])
    parser.add_argument("--namespaces", type=int, nargs="+", default=[200, 1000], help="burst sizes (default 200 1000)")
    parser.add_argument("--window", type=float, default=None, help="SSB_SCOPE_WINDOW_SECONDS for the operator")
    parser.add_argument("--workers", type=int, default=8, help="parallel namespace creators")
    args = parser.parse_args(argv)

    from sunk_sandbox_devtools import devcluster
    from sunk_sandbox_operator.adapters.runnerapi.emulator import EmulatorState, running_emulator

    work = Path(tempfile.mkdtemp(prefix="scope-bench-"))
    cluster = devcluster.temp_cluster()
    operator = None
    try:
        kube = Kube(cluster)
        install(kube)
        env = dict(TEST_ENV)
        if args.window is not None:
            env["SSB_SCOPE_WINDOW_SECONDS"] = str(args.window)
        kubeconfig = cluster.service_account_kubeconfig(OPERATOR_NS, OPERATOR_SA, work / "operator.kubeconfig")
        operator = OperatorProcess(kubeconfig, work / "operator.log", env=env)
        print(f"operator log: {operator.log_path}", flush=True)
        with running_emulator(EmulatorState(admin_tokens={ADMIN_TOKEN})) as emulator:
            slurm_ns = "bench-slurm"
            kube.create_namespace(slurm_ns)
            grant_secret_read(kube, slurm_ns)
            create_token_secret(kube, slurm_ns)
            make_scheduler(kube, slurm_ns, scope_namespaces=[])
            results = []
            for i, n in enumerate(args.namespaces):
                prefix = f"ds{uuid.uuid4().hex[:4]}b{i}"
                spec = binding_spec(new_runner(emulator, {}), emulator, sandboxNamespaces={"names": [f"{prefix}-*"]})
                name = "bench"
                try:
                    kube.custom.delete_namespaced_custom_object("sunksandbox.dev", "v1alpha1", slurm_ns,
                                                                "sunksandboxbindings", name)
                    wait_for(lambda: _gone(kube, slurm_ns, name), 60)
                except Exception:
                    pass
                kube.create_binding(slurm_ns, name, spec)
                kube.wait_condition(slurm_ns, name, "ScopeSynced", "True", timeout=60)
                r = burst(kube, operator, slurm_ns, prefix, n, args.workers)
                results.append(r)
                print(f"burst {n:5d} namespaces: created in {r['create_s']:.2f}s, all listed after {r['total_s']:.2f}s; "
                      f"{r['writes']:.0f} writes; latency p50 {r['p50_ms']:.0f} ms, p99 {r['p99_ms']:.0f} ms, "
                      f"max {r['max_ms']:.0f} ms", flush=True)
    finally:
        if operator is not None:
            operator.stop()
        cluster.stop()
    return 0


def _gone(kube: Kube, ns: str, name: str) -> bool:
    from kubernetes.client.rest import ApiException
    try:
        kube.binding(ns, name)
        return False
    except ApiException as exc:
        return exc.status == 404


if __name__ == "__main__":
    sys.exit(main())
