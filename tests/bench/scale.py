"""Benchmark at scale: many namespaces and sandbox pods, one binding (figures, not assertions).

    PYTHONPATH=operator .venv/bin/python -m tests.bench.scale [--namespaces N] [--pods M] [--burst B] [--churn C]

Full size: --namespaces 10000 --pods 50000 --burst 1000 --churn 5000 (about 10 minutes on 2 cores).

One run, one fresh control plane (etcd + kube-apiserver), the shipped manifests, a SUNK 8 style
scheduler in tenant-slurm, the runner API emulator (in-process) with one runner, N namespaces
(half `ds-*` labelled sandbox=yes, half not) and M sandbox pods spread over the matching ones, all
created before the operator starts (as its own ServiceAccount, JSON logs). Then:

1. start -> the binding has ScopeSynced=True and status.placement.podsObserved == M; the
   operator's VmRSS/VmHWM and CPU seconds at that moment (/proc/PID).
2. a burst of B new matching namespaces: per-namespace latency from creation to the name first
   appearing in the scheduler ConfigMap (watched, not polled), beside a bare drain loop (its own
   process: watch namespaces -> GET + PUT of another ConfigMap, draining every event that arrived
   during the previous write into the next one) measured the same way in the same run.
3. no-op resyncs (resyncInterval 10s): writes and operator CPU over 3 resyncs; the resync
   boundaries are read from the emulator's call log (GetManagedRunner), so the operator's
   /metrics is scraped only at the two boundaries.
4. pod churn: C pods created, then patched (a label), then deleted: operator CPU per 1,000 pod
   events and log lines per event.

Placement SLO (docs/operations.md: Placement SLO): for the burst and the trickle, the operator's own
ssb_placement_ready_seconds (creation -> listed -> granted -> the scheduler rolled onto a list holding
the namespace and Ready) as p50 / p99 over its buckets (histogram_quantile's interpolation) and the
count per dominant stage. The control plane has no controller-manager: a harness thread plays the
Deployment controller, marking each new scheduler template rolled out and Ready `--rollout-seconds`
after it appears (a scheduler pod's restart; 5 s by default).

Every phase has a timeout; a phase that fails or times out says so in its cell. Goals are printed
beside the figures, never asserted: the exit status is 0 once the table is printed.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import multiprocessing
import os
import queue
import re
import resource
import sys
import tempfile
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from tests.conftest import ALL_GRANTS, FAST_RESYNC, LOOPBACK_API, OPERATOR_NS, OPERATOR_SA, Kube, install_manifests, wait_for

SLURM_NS = "tenant-slurm"
SCHEDULER_DEPLOYMENT = "slurm-scheduler"  # tests.integration.conftest.make_scheduler's
CM = "slurm-scheduler-config"
KEY = "scheduler.conf"
BINDING = "scale"
BINDING_REF = f"{SLURM_NS}/{BINDING}"
SCHEDULER_NAME = "slurm-scheduler"
SANDBOX_LABEL = "sandbox.coreweave.com/sandbox-id"
MATCH_LABELS = {"sandbox": "yes"}
BARE_NS = "bare-slurm"
BARE_CM = "bare-scheduler-config"
CLK_TCK = os.sysconf("SC_CLK_TCK")
TOKEN_RE = re.compile(r"[a-z0-9][-a-z0-9.]*")
FULL = "--namespaces 10000 --pods 50000 --burst 1000 --churn 5000"


# ---------------------------------------------------------------- /proc and /metrics


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (all its threads), in seconds."""
    text = Path(f"/proc/{pid}/stat").read_text()
    fields = text[text.rindex(")") + 2:].split()  # fields[0] is field 3 (state)
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def memory_kib(pid: int) -> dict[str, int]:
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0])
    return out


def metric(text: str, name: str, **labels: str) -> float:
    """Sum of the samples of `name` whose labels include `labels`."""
    total = 0.0
    for m in re.finditer(r"^" + re.escape(name) + r"(?:\{([^}]*)\})? (\S+)$", text, re.M):
        have = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(1) or ""))
        if all(have.get(k) == v for k, v in labels.items()):
            total += float(m.group(2))
    return total


class Snapshot:
    """The operator's counters and CPU at one moment."""

    def __init__(self, operator) -> None:
        text = operator.metrics()
        self.cpu = cpu_seconds(operator.proc.pid)
        self.at = time.monotonic()
        self.status = metric(text, "ssb_status_patches_total", binding=BINDING_REF)
        self.policy = metric(text, "ssb_policy_writes_total", binding=BINDING_REF)
        self.scope = metric(text, "ssb_scope_writes_total", binding=BINDING_REF)
        self.reconciles = metric(text, "ssb_reconciles_total", handler="binding")
        self.pod_events = metric(text, "ssb_sandbox_pod_events_total")


PLACEMENT = "ssb_placement_ready_seconds"


def placement(text: str) -> tuple[dict[float, float], dict[str, float]]:
    """The placement histogram's cumulative buckets (le -> count) and its count per stage."""
    buckets: dict[float, float] = {}
    stages: dict[str, float] = {}
    for m in re.finditer(r"^" + PLACEMENT + r"_(bucket|count)\{([^}]*)\} (\S+)$", text, re.M):
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2)))
        if m.group(1) == "bucket":
            le = float(labels["le"])
            buckets[le] = buckets.get(le, 0.0) + float(m.group(3))
        else:
            stages[labels["stage"]] = stages.get(labels["stage"], 0.0) + float(m.group(3))
    return buckets, stages


def bucket_quantile(q: float, buckets: dict[float, float]) -> float | None:
    """Prometheus' histogram_quantile over cumulative buckets (linear within a bucket)."""
    bounds = sorted(buckets)
    if not bounds or buckets[bounds[-1]] <= 0:
        return None
    rank, prev_le, prev_n = q * buckets[bounds[-1]], 0.0, 0.0
    for le in bounds:
        n = buckets[le]
        if n >= rank:
            if le == float("inf"):
                return prev_le
            return prev_le + (le - prev_le) * ((rank - prev_n) / (n - prev_n) if n > prev_n else 1.0)
        prev_le, prev_n = le, n
    return prev_le


class PlacementSLO:
    """The operator's placement observations between two scrapes."""

    def __init__(self, operator) -> None:
        self.operator = operator
        self.before = placement(operator.metrics())

    def count(self) -> float:
        return sum(placement(self.operator.metrics())[1].values()) - sum(self.before[1].values())

    def wait(self, n: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while self.count() < n and time.monotonic() < deadline:
            time.sleep(0.5)

    def cell(self, n: int) -> str:
        buckets, stages = placement(self.operator.metrics())
        delta = {le: c - self.before[0].get(le, 0.0) for le, c in buckets.items()}
        by_stage = {k: v - self.before[1].get(k, 0.0) for k, v in stages.items()}
        total = sum(by_stage.values())
        if total <= 0:
            return f"none of {n} observed"
        p50, p99 = bucket_quantile(0.5, delta), bucket_quantile(0.99, delta)
        stages_text = ", ".join(f"{k} {v:.0f}" for k, v in sorted(by_stage.items()) if v)
        return f"p50 {p50:.1f} s / p99 {p99:.1f} s; {total:.0f}/{n} observed (dominant: {stages_text})"


class Rollouts:
    """Plays the Deployment controller for the scheduler: a new template is rolled out and Ready
    `seconds` after it appears."""

    def __init__(self, kube: Kube, seconds: float) -> None:
        from tests.integration.conftest import roll_out

        self.kube, self.seconds, self.roll_out = kube, seconds, roll_out
        self.rolled = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="rollouts")
        self._thread.start()

    def _run(self) -> None:
        seen: dict[int, float] = {}
        while not self._stop.wait(0.2):
            try:
                dep = self.kube.apps.read_namespaced_deployment(SCHEDULER_DEPLOYMENT, SLURM_NS)
                gen = dep.metadata.generation
                if ((dep.status and dep.status.observed_generation) or 0) >= gen:
                    continue
                if gen not in seen:
                    log(f"scheduler template generation {gen} (a roll)")
                first = seen.setdefault(gen, time.monotonic())
                if time.monotonic() - first >= self.seconds:
                    self.roll_out(self.kube, SLURM_NS, SCHEDULER_DEPLOYMENT)
                    self.rolled += 1
                    log(f"scheduler generation {gen} rolled out and Ready")
            except Exception:  # the API server busy under the burst: the next look
                continue

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


# ---------------------------------------------------------------- the admin client for bulk work


class Bulk:
    """Concurrent creates/patches/deletes with the admin client; responses are not deserialised."""

    def __init__(self, kube: Kube, workers: int) -> None:
        import kubernetes

        cfg = kubernetes.client.Configuration()
        kubernetes.config.load_kube_config(config_file=str(kube.cluster.kubeconfig), client_configuration=cfg)
        cfg.connection_pool_maxsize = workers + 4
        self.api = kubernetes.client.ApiClient(cfg)
        self.core = kubernetes.client.CoreV1Api(self.api)
        self.pool = ThreadPoolExecutor(workers, thread_name_prefix="bulk")

    def run(self, fn: Callable, items: Iterable) -> None:
        def call(item) -> None:
            for attempt in range(5):
                try:
                    resp = fn(item)
                    resp.read()
                    resp.release_conn()
                    return
                except Exception as exc:  # 429/5xx or a dropped connection under load: retry
                    status = getattr(exc, "status", None)
                    if status is not None and status < 500 and status != 429 or attempt == 4:
                        raise
                    time.sleep(0.2 * (attempt + 1))
        for _ in self.pool.map(call, items):
            pass

    def namespaces(self, names: list[str], labels: dict | None, stamps: dict | None = None) -> None:
        def create(name: str):
            if stamps is not None:
                stamps[name] = time.monotonic()
            return self.core.create_namespace({"metadata": {"name": name, "labels": labels or {}}},
                                              _preload_content=False)
        self.run(create, names)

    def pods(self, placed: list[tuple[str, str]]) -> None:
        self.run(lambda p: self.core.create_namespaced_pod(p[0], sandbox_pod(p[1]), _preload_content=False), placed)

    def patch_pods(self, placed: list[tuple[str, str]]) -> None:
        body = {"metadata": {"labels": {"bench.sunksandbox.dev/churn": "updated"}}}
        self.run(lambda p: self.core.patch_namespaced_pod(p[1], p[0], body, _preload_content=False), placed)

    def delete_pods(self, placed: list[tuple[str, str]]) -> None:
        self.run(lambda p: self.core.delete_namespaced_pod(p[1], p[0], _preload_content=False), placed)

    def close(self) -> None:
        self.pool.shutdown()
        self.api.close()


def sandbox_pod(name: str) -> dict:
    return {"metadata": {"name": name, "labels": {SANDBOX_LABEL: name}},
            "spec": {"schedulerName": SCHEDULER_NAME,
                     "containers": [{"name": "sandbox", "image": "sandbox:1",
                                     "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]}}


def spread(names: list[str], namespaces: list[str]) -> list[tuple[str, str]]:
    return [(namespaces[i % len(namespaces)], name) for i, name in enumerate(names)]


# ---------------------------------------------------------------- when names appear in a ConfigMap


class ListWatch:
    """Watches one ConfigMap; records when each wanted name first appears in data[KEY] (any format)."""

    def __init__(self, kube: Kube, ns: str, name: str, wanted: Iterable[str]) -> None:
        import kubernetes

        self.kubernetes = kubernetes
        self.core = kubernetes.client.CoreV1Api(kube.api)
        self.ns, self.name = ns, name
        self.pending = set(wanted)
        self.first_seen: dict[str, float] = {}
        self.versions = 0
        self.done = threading.Event()
        self._stop = threading.Event()
        obj = self.core.read_namespaced_config_map(name, ns)
        self._rv = obj.metadata.resource_version
        self._see(obj, time.monotonic())
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"watch-{name}")
        self._thread.start()

    def _see(self, obj, now: float) -> None:
        if not self.pending:
            return
        tokens = set(TOKEN_RE.findall((obj.data or {}).get(KEY, "")))
        found = self.pending & tokens
        for n in found:
            self.first_seen[n] = now
        self.pending -= found
        if not self.pending:
            self.done.set()

    def _run(self) -> None:
        while not self._stop.is_set() and not self.done.is_set():
            w = self.kubernetes.watch.Watch()
            try:
                for ev in w.stream(self.core.list_namespaced_config_map, self.ns,
                                   field_selector=f"metadata.name={self.name}", resource_version=self._rv,
                                   timeout_seconds=10):
                    now = time.monotonic()
                    obj = ev["object"]
                    if obj.metadata.resource_version != self._rv:
                        self.versions += 1
                    self._rv = obj.metadata.resource_version
                    self._see(obj, now)
                    if self._stop.is_set() or self.done.is_set():
                        break
            except Exception:  # expired resourceVersion or a dropped stream: start again from a read
                time.sleep(0.2)
                try:
                    obj = self.core.read_namespaced_config_map(self.name, self.ns)
                    self._rv = obj.metadata.resource_version
                    self._see(obj, time.monotonic())
                except Exception:
                    pass
            finally:
                w.stop()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(15)


# ---------------------------------------------------------------- the bare drain loop (own process)

BARE_DOC = ("scheduler:\n  name: bare-scheduler\n  scope:\n    type: namespace\n"
            "    namespaces: [\"tenant-slurm\"]\n")
BARE_LINE = re.compile(r"^(    namespaces: )(.*)$", re.M)


def bare_loop(kubeconfig: str, ready, stop) -> None:
    """Watch namespaces -> GET + PUT one ConfigMap with every matching new name, draining all
    events that arrived during the previous write into the next one (no window)."""
    import kubernetes
    from kubernetes.client.rest import ApiException

    api = kubernetes.config.new_client_from_config(config_file=kubeconfig)
    core = kubernetes.client.CoreV1Api(api)
    selector = ",".join(f"{k}={v}" for k, v in MATCH_LABELS.items())
    events: queue.Queue[str] = queue.Queue()

    def write(new: set[str]) -> None:
        while True:
            cm = core.read_namespaced_config_map(BARE_CM, BARE_NS)
            text = cm.data[KEY]
            m = BARE_LINE.search(text)
            have = json.loads(m.group(2))
            listed = set(have)
            missing = sorted(n for n in new if n not in listed)
            if not missing:
                return
            cm.data[KEY] = text[:m.start(2)] + json.dumps(have + missing) + text[m.end(2):]
            try:
                core.replace_namespaced_config_map(BARE_CM, BARE_NS, cm)
                return
            except ApiException as exc:
                if exc.status != 409:
                    raise

    listing = core.list_namespace(label_selector=selector)
    write({ns.metadata.name for ns in listing.items})
    rv = listing.metadata.resource_version

    def watch() -> None:
        nonlocal rv
        while not stop.is_set():
            w = kubernetes.watch.Watch()
            try:
                for ev in w.stream(core.list_namespace, label_selector=selector, resource_version=rv,
                                   timeout_seconds=30):
                    rv = ev["object"].metadata.resource_version
                    if ev["type"] in ("ADDED", "MODIFIED"):
                        events.put(ev["object"].metadata.name)
            except Exception:
                time.sleep(0.2)
                lst = core.list_namespace(label_selector=selector)  # relist (e.g. 410 Gone)
                rv = lst.metadata.resource_version
                for ns in lst.items:
                    events.put(ns.metadata.name)

    threading.Thread(target=watch, daemon=True).start()
    ready.set()
    while not stop.is_set():
        try:
            batch = {events.get(timeout=1.0)}
        except queue.Empty:
            continue
        while True:
            try:
                batch.add(events.get_nowait())
            except queue.Empty:
                break
        write(batch)


# ---------------------------------------------------------------- set-up


def install(kube: Kube) -> None:
    install_manifests(kube, SLURM_NS)


def prepare_slurm_ns(kube: Kube) -> None:
    """The token Secret in tenant-slurm and the operator's read grant (the manifests may hold it)."""
    from tests.integration.conftest import create_token_secret, grant_secret_read

    try:
        grant_secret_read(kube, SLURM_NS)
    except Exception as exc:  # the shipped manifests may hold it already
        if getattr(exc, "status", None) != 409:
            raise
    create_token_secret(kube, SLURM_NS)


@contextlib.contextmanager
def bench_cluster(workers: int) -> Iterator[tuple[Any, Kube, Bulk, Any]]:
    """A fresh control plane with the shipped manifests, the admin's bulk client (`workers` calls at
    a time) and the runner API emulator: (cluster, kube, bulk, emulator), all stopped at exit."""
    from sunk_sandbox_devtools import devcluster
    from sunk_sandbox_operator.adapters.runnerapi.emulator import EmulatorState, running_emulator
    from tests.integration.conftest import ADMIN_TOKEN

    cluster = devcluster.temp_cluster()
    bulk = None
    try:
        kube = Kube(cluster)
        install(kube)
        bulk = Bulk(kube, workers)
        with running_emulator(EmulatorState(admin_tokens={ADMIN_TOKEN})) as emulator:
            yield cluster, kube, bulk, emulator
    finally:
        if bulk is not None:
            bulk.close()
        cluster.stop()


def populate(kube: Kube, bulk: Bulk, emulator, namespaces: int, pods: int) -> tuple[str, list[str]]:
    """What every start is measured on: the token Secret, the scheduler, one runner, `namespaces`
    namespaces (half `ds-*` matching) and `pods` sandbox pods spread over the matching ones.
    Returns the runner's id and the matching namespaces."""
    from tests.integration.conftest import make_scheduler, new_runner

    prepare_slurm_ns(kube)
    make_scheduler(kube, SLURM_NS, name=SCHEDULER_NAME, scope_namespaces=[SLURM_NS])
    runner_id = new_runner(emulator, {})
    half = namespaces // 2
    matching = [f"ds-{i:05d}" for i in range(half)]
    t = time.monotonic()
    bulk.namespaces(matching, MATCH_LABELS)
    bulk.namespaces([f"other-{i:05d}" for i in range(namespaces - half)], None)
    log(f"{namespaces} namespaces created in {time.monotonic() - t:.1f}s")
    t = time.monotonic()
    bulk.pods(spread([f"sbx-{i:06d}" for i in range(pods)], matching))
    log(f"{pods} sandbox pods created in {time.monotonic() - t:.1f}s")
    return runner_id, matching


def scale_spec(runner_id: str, emulator, grant: bool) -> dict:
    """The measured binding: the matching namespaces by label; with `grant`, the README example."""
    from tests.integration.conftest import binding_spec

    scope = {"alwaysInclude": [SLURM_NS], **({"grantClusterRole": "sunk-scheduler-sandbox"} if grant else {})}
    return binding_spec(runner_id, emulator, sandboxNamespaces={"selector": {"matchLabels": MATCH_LABELS}}, scope=scope)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def log(msg: str) -> None:
    print(f"[scale {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def binding_status(kube: Kube) -> dict:
    return kube.binding(SLURM_NS, BINDING).get("status") or {}


def scope_synced(status: dict) -> bool:
    return any(c.get("type") == "ScopeSynced" and c.get("status") == "True" for c in status.get("conditions") or [])


def wait_generation(kube: Kube, timeout: float) -> None:
    def done():
        b = kube.binding(SLURM_NS, BINDING)
        return (b.get("status") or {}).get("observedGeneration") == b["metadata"]["generation"]
    wait_for(done, timeout, lambda: "observedGeneration never caught up", interval=0.25)


def get_calls(emulator, runner_id: str) -> int:
    with emulator.state.lock:
        return sum(1 for c in emulator.state.call_log
                   if c.get("runner_id") == runner_id and c.get("method") == "GetManagedRunner")


def mib(kib: int | None) -> str:
    return "?" if kib is None else f"{kib / 1024:.1f} MiB"


# ---------------------------------------------------------------- phases


def phase_start(kube: Kube, operator, started: float, pods: int, timeout: float) -> tuple[str, str, float | None]:
    """(memory, the start's cell, its seconds: None when not reached)."""
    synced_at = pods_at = None
    status: dict = {}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            status = binding_status(kube)
        except Exception:
            status = {}
        now = time.monotonic()
        if synced_at is None and scope_synced(status):
            synced_at = now
        observed = (status.get("placement") or {}).get("podsObserved")
        if pods_at is None and observed == pods:
            pods_at = now
        if synced_at is not None and pods_at is not None:
            break
        time.sleep(0.1)
    cpu = cpu_seconds(operator.proc.pid)
    mem = memory_kib(operator.proc.pid)
    rss = f"{mib(mem.get('VmRSS'))} ({mib(mem.get('VmHWM'))})"
    fmt = lambda t: "never" if t is None else f"{t - started:.1f} s"  # noqa: E731
    if synced_at is None or pods_at is None:
        observed = (status.get("placement") or {}).get("podsObserved")
        return (rss + f" at the {timeout:.0f} s timeout",
                f"not reached in {timeout:.0f} s (ScopeSynced {fmt(synced_at)}, podsObserved {observed}/{pods}); "
                f"{cpu:.1f} CPU-s", None)
    seconds = max(synced_at, pods_at) - started
    return rss, (f"{seconds:.1f} s (ScopeSynced {fmt(synced_at)}, all {pods} pods "
                 f"{fmt(pods_at)}); {cpu:.1f} CPU-s"), seconds


def phase_burst(kube: Kube, bulk: Bulk, operator, n: int) -> tuple[str, str, str, str]:
    names = [f"ds-burst-{i:05d}" for i in range(n)]
    gen0, _ = scheduler_rolls(kube)
    before = Snapshot(operator)
    slo = PlacementSLO(operator)
    ours = ListWatch(kube, SLURM_NS, CM, names)
    bare = ListWatch(kube, BARE_NS, BARE_CM, names)
    created: dict[str, float] = {}
    t0 = time.monotonic()
    bulk.namespaces(names, MATCH_LABELS, created)
    log(f"burst: {n} namespaces created in {time.monotonic() - t0:.1f}s")
    timeout = max(60.0, n * 0.12)
    for w in (ours, bare):
        w.done.wait(max(1.0, t0 + timeout - time.monotonic()))
    ours.stop()
    bare.stop()
    time.sleep(1.5)  # a last coalesced sync may follow
    writes = Snapshot(operator).scope - before.scope

    def cell(w: ListWatch, writes_text: str) -> str:
        lat = [w.first_seen[x] - created[x] for x in names if x in w.first_seen]
        if not lat:
            return f"none listed in {timeout:.0f} s; {writes_text}"
        text = (f"p50 {percentile(lat, 0.5) * 1000:.0f} / p95 {percentile(lat, 0.95) * 1000:.0f} / "
                f"p99 {percentile(lat, 0.99) * 1000:.0f} ms; {writes_text}")
        if w.pending:
            text += f"; {len(w.pending)}/{n} NOT listed after {timeout:.0f} s"
        return text
    rolls = rolls_until_on_list(kube, gen0)
    slo.wait(n, 120.0)
    return (cell(ours, f"{writes:.0f} ConfigMap writes ({ours.versions} versions seen)"),
            cell(bare, f"{bare.versions} ConfigMap writes"), rolls, slo.cell(n))


def phase_resync(kube: Kube, operator, emulator, runner_id: str, resyncs: int = 3) -> str:
    kube.custom.patch_namespaced_custom_object("sunksandbox.dev", "v1alpha1", SLURM_NS, "sunksandboxbindings",
                                               BINDING, {"spec": {"resyncInterval": "10s"}})
    wait_generation(kube, 60)
    time.sleep(3.0)  # the status writer's minimum interval is 2 s: let the change's writes land
    base = get_calls(emulator, runner_id)
    wait_for(lambda: get_calls(emulator, runner_id) > base, 30, lambda: "no resync within 30 s")
    a = Snapshot(operator)
    wait_for(lambda: get_calls(emulator, runner_id) >= base + 1 + resyncs, 15 * resyncs,
             lambda: f"{get_calls(emulator, runner_id) - base - 1} of {resyncs} resyncs")
    b = Snapshot(operator)
    n = b.reconciles - a.reconciles or resyncs
    return (f"{b.status - a.status:.0f} status, {b.policy - a.policy:.0f} policy, {b.scope - a.scope:.0f} ConfigMap "
            f"writes over {n:.0f} resyncs; {(b.cpu - a.cpu) / n:.3f} CPU-s per resync")


def scheduler_rolls(kube: Kube) -> tuple[int, bool]:
    """(the scheduler Deployment's generation: one per pod-template change, i.e. per roll; whether its
    template carries the hash of the list the ConfigMap holds now)."""
    import yaml

    from sunk_sandbox_operator.api.keys import SCOPE_HASH_ANNOTATION
    from sunk_sandbox_operator.core.scope.template import scope_hash

    dep = kube.apps.read_namespaced_deployment(SCHEDULER_DEPLOYMENT, SLURM_NS)
    doc = yaml.safe_load(kube.core.read_namespaced_config_map(CM, SLURM_NS).data[KEY])
    listed = doc["scheduler"]["scope"].get("namespaces") or []
    on_list = (dep.spec.template.metadata.annotations or {}).get(SCOPE_HASH_ANNOTATION) == scope_hash(listed)
    return dep.metadata.generation, on_list


def rolls_until_on_list(kube: Kube, gen0: int, timeout: float = 45.0) -> str:
    """Pod-template changes since `gen0` once the scheduler runs the whole list (the folded roll
    comes at the end of spec.scope.minRollInterval, 30 s by default)."""
    deadline = time.monotonic() + timeout
    while True:
        gen, on_list = scheduler_rolls(kube)
        if on_list or time.monotonic() > deadline:
            suffix = "" if on_list else f" (not on the list after {timeout:.0f} s)"
            return f"{gen - gen0} roll(s){suffix}"
        time.sleep(0.2)


def phase_trickle(kube: Kube, bulk: Bulk, operator, n: int = 15, every: float = 2.0) -> tuple[str, str]:
    gen0, _ = scheduler_rolls(kube)
    slo = PlacementSLO(operator)
    t0 = time.monotonic()
    log(f"trickle: {n} namespaces, one every {every:g} s")
    for i in range(n):
        bulk.namespaces([f"ds-trickle-{i:03d}"], MATCH_LABELS)
        time.sleep(max(0.0, t0 + every * (i + 1) - time.monotonic()))
    rolls = f"{rolls_until_on_list(kube, gen0)} for {n} namespaces one every {every:.0f} s (was {n})"
    slo.wait(n, 90.0)
    return rolls, slo.cell(n)


def phase_churn(bulk: Bulk, operator, namespaces: list[str], c: int) -> tuple[str, list[str]]:
    placed = spread([f"churn-{i:05d}" for i in range(c)], namespaces)
    log_size = operator.log_path.stat().st_size
    before = Snapshot(operator)
    t0 = time.monotonic()
    bulk.pods(placed)
    bulk.patch_pods(placed)
    bulk.delete_pods(placed)
    log(f"churn: {c} pods created, patched, deleted in {time.monotonic() - t0:.1f}s")
    # At least 3 events a pod (ADDED, the patch, DELETED); an unscheduled pod's DELETE also shows
    # deletionTimestamp in a MODIFIED event first, so 4 a pod are usual. Waiting ends on a quiet operator.
    expected = 3 * c
    deadline = time.monotonic() + max(60.0, c * 0.05)
    while True:
        # quiet: under 0.03 CPU-s over 3 s (longer than the status writer's 2 s interval); then one scrape
        cpu = cpu_seconds(operator.proc.pid)
        time.sleep(3.0)
        if time.monotonic() > deadline:
            after = Snapshot(operator)
            break
        if cpu_seconds(operator.proc.pid) - cpu < 0.03:
            after = Snapshot(operator)
            if after.pod_events - before.pod_events >= expected:
                break
    events = after.pod_events - before.pod_events
    cpu = after.cpu - before.cpu
    with open(operator.log_path, "rb") as f:
        f.seek(log_size)
        new = f.read().decode(errors="replace").splitlines()
    messages = collections.Counter()
    info = 0  # lines at info or above
    for line in new:
        try:
            record = json.loads(line)
            messages[str(record.get("message", line))[:100]] += 1
            info += str(record.get("severity", "info")).lower() != "debug"
        except (ValueError, AttributeError):
            messages[line[:100]] += 1
            info += 1
    top = [f"{count} x {msg}" for msg, count in messages.most_common(4)]
    per = events or expected
    text = (f"{cpu / (per / 1000):.3f} CPU-s / 1,000 events ({events:.0f} pod events handled for {c} pods, "
            f"{cpu:.2f} CPU-s); {len(new) / per:.3f} log lines / event ({len(new)} lines at the shipped level; "
            f"{info} at info or above)")
    return text, top


# ---------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.scale", description=__doc__.splitlines()[0])
    parser.add_argument("--namespaces", type=int, default=400, help="namespaces before the operator starts "
                        "(half match); default 400")
    parser.add_argument("--pods", type=int, default=2000, help="sandbox pods before the operator starts; default 2000")
    parser.add_argument("--burst", type=int, default=100, help="new matching namespaces in the burst; default 100")
    parser.add_argument("--churn", type=int, default=500, help="pods created, updated, deleted; default 500")
    parser.add_argument("--workers", type=int, default=12, help="concurrent admin requests; default 12")
    parser.add_argument("--grant", action="store_true", help="the README example: scope.grantClusterRole "
                        "sunk-scheduler-sandbox (one RoleBinding per matching namespace)")
    parser.add_argument("--rollout-seconds", type=float, default=5.0, help="a new scheduler template is rolled "
                        "out and Ready this long after it appears (the harness plays the Deployment controller); "
                        "default 5")
    args = parser.parse_args(argv)

    from sunk_sandbox_devtools.devcluster import OperatorProcess

    wall0 = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="ssb-scale-"))
    cells: dict[str, object] = {}
    top_churn: list[str] = []
    operator = bare = None
    final_mem: dict[str, int] = {}
    mp = multiprocessing.get_context("spawn")
    stop_bare = mp.Event()
    with bench_cluster(args.workers) as (cluster, kube, bulk, emulator):
        try:
            kube.create_namespace(BARE_NS)
            kube.core.create_namespaced_config_map(BARE_NS, {"metadata": {"name": BARE_CM},
                                                             "data": {KEY: BARE_DOC}})
            runner_id, matching = populate(kube, bulk, emulator, args.namespaces, args.pods)
            rollouts = Rollouts(kube, args.rollout_seconds)

            ready = mp.Event()
            bare = mp.Process(target=bare_loop, args=(str(cluster.kubeconfig), ready, stop_bare), daemon=True)
            bare.start()
            if not ready.wait(120):
                raise RuntimeError("the bare drain loop did not start")

            kubeconfig = cluster.service_account_kubeconfig(OPERATOR_NS, OPERATOR_SA, work / "operator.kubeconfig")
            log(f"starting the operator (log: {work / 'operator.log'})")
            started = time.monotonic()
            # The shipped settings: --log-format=json, no --verbose.
            operator = OperatorProcess(kubeconfig, work / "operator.log", args=("--log-format=json",),
                                       env={"SSB_STATUS_MIN_INTERVAL_SECONDS": "2", **LOOPBACK_API, **FAST_RESYNC, **ALL_GRANTS}, timeout=120, verbose=False)
            kube.create_binding(SLURM_NS, BINDING, scale_spec(runner_id, emulator, args.grant))

            phases = [
                ("start", lambda: phase_start(kube, operator, started, args.pods, 60 + args.pods / 250)),
                ("burst", lambda: phase_burst(kube, bulk, operator, args.burst)),
                ("trickle", lambda: phase_trickle(kube, bulk, operator)),
                ("resync", lambda: phase_resync(kube, operator, emulator, runner_id)),
                ("churn", lambda: phase_churn(bulk, operator, matching, args.churn)),
            ]
            for name, run in phases:
                if operator.proc.poll() is not None:
                    cells[name] = f"operator exited ({operator.proc.returncode})"
                    continue
                t = time.monotonic()
                try:
                    cells[name] = run()
                except Exception as exc:
                    traceback.print_exc()
                    cells[name] = f"phase failed: {type(exc).__name__}: {str(exc)[:120]}"
                log(f"phase {name}: {time.monotonic() - t:.1f}s")
                if name == "resync":  # back to the default before the churn (no resync inside it)
                    try:
                        kube.custom.patch_namespaced_custom_object(
                            "sunksandbox.dev", "v1alpha1", SLURM_NS, "sunksandboxbindings", BINDING,
                            {"spec": {"resyncInterval": "5m"}})
                        wait_generation(kube, 60)
                        time.sleep(3.0)
                    except Exception:
                        traceback.print_exc()
                elif name == "churn" and isinstance(cells[name], tuple):
                    cells[name], top_churn = cells[name]
            final_mem = memory_kib(operator.proc.pid) if operator.proc.poll() is None else {}
            rollouts.stop()
        finally:
            stop_bare.set()
            if bare is not None:
                bare.join(5)
                if bare.is_alive():
                    bare.terminate()
                    bare.join(5)
            if operator is not None:
                operator.stop()

    def pick(name: str, i: int | None = None) -> str:
        v = cells.get(name, "not run")
        if isinstance(v, tuple):
            return v[i or 0]
        return v if i in (None, 0) else "—"

    wall = time.monotonic() - wall0
    usage = resource.getrusage(resource.RUSAGE_SELF)
    print()
    print(f"scale bench: {args.namespaces} namespaces ({args.namespaces // 2} matching), {args.pods} sandbox pods, "
          f"burst {args.burst}, churn {args.churn}{', grants (one RoleBinding per matching namespace)' if args.grant else ''}")
    print()
    print("| figure | operator | bare drain loop, same run | goal |")
    print("|---|---|---|---|")
    print(f"| operator RSS after the first reconcile: VmRSS (VmHWM) | {pick('start', 0)} | — | ≤ 150 MiB |")
    print(f"| start → ScopeSynced and every pod observed; operator CPU so far | {pick('start', 1)} | — | ≤ 10 s |")
    print(f"| burst of {args.burst} namespaces, list holding ~{args.namespaces // 2}: creation → listed, "
          f"p50 / p95 / p99; ConfigMap writes | {pick('burst', 0)} | {pick('burst', 1)} | "
          f"p50 and p99 ≤ 1.5× the bare loop, p99 ≤ 2 s |")
    print(f"| scheduler rolls during the burst (until it runs the whole list) | {pick('burst', 2)} | — | ≤ 2 |")
    print(f"| placement SLO, burst: creation → listed → granted → scheduler rolled and Ready "
          f"(ssb_placement_ready_seconds) | {pick('burst', 3)} | — | p99 ≤ 60 s (the objective) |")
    print(f"| scheduler rolls for a trickle | {pick('trickle', 0)} | — | ≤ 2 |")
    print(f"| placement SLO, trickle | {pick('trickle', 1)} | — | p99 ≤ 60 s (the objective) |")
    print(f"| no-op resync at the listed size: writes; operator CPU per resync | {pick('resync')} | — | "
          f"0 writes, ≤ 0.2 CPU-s |")
    print(f"| pod churn ({args.churn} pods created, updated, deleted): operator CPU per 1,000 events; log lines "
          f"per event | {pick('churn')} | — | ≤ 0.3 CPU-s / 1,000; 0 lines per event |")
    print()
    if final_mem:
        print(f"operator at the end: VmRSS {mib(final_mem.get('VmRSS'))}, VmHWM {mib(final_mem.get('VmHWM'))}")
    if top_churn:
        print("most common operator log lines during the churn: " + "; ".join(top_churn))
    print(f"harness CPU {usage.ru_utime + usage.ru_stime:.1f} s; wall time {wall:.0f} s; operator log "
          f"{work / 'operator.log'}")
    print(f"this run:  PYTHONPATH=operator .venv/bin/python -m tests.bench.scale --namespaces {args.namespaces} "
          f"--pods {args.pods} --burst {args.burst} --churn {args.churn}{' --grant' if args.grant else ''} "
          f"--rollout-seconds {args.rollout_seconds:g}")
    print(f"full size: PYTHONPATH=operator .venv/bin/python -m tests.bench.scale {FULL}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
