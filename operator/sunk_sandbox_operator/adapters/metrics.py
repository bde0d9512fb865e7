"""Prometheus metrics with prometheus_client, served by a small aiohttp app.

Process-wide series (reconciles and their duration, runner API calls, pod events, scope latency)
are ordinary prometheus_client metrics on a registry of our own, with the library's process,
platform and GC collectors (the operator's own RSS, CPU, file descriptors, collections) and
`ssb_build_info{version}`. Per-binding series are not kept by hand: `BindingCollector` reads each
live binding's counters and conditions at scrape time, so a deleted binding's series vanish with it
and nothing has to be forgotten. Every series the operator defines starts with `ssb_` (the short
name of the CRD, as `kubectl get ssb`); no `*_created` series (one per counter and histogram,
which nothing reads).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Iterator

from aiohttp import web
from prometheus_client import (CollectorRegistry, Counter, Gauge,
                               GCCollector, Histogram, Info, PlatformCollector, ProcessCollector,
                               disable_created_metrics, generate_latest)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from .. import __version__
from ..api.reasons import ConditionType, PolicySynced

STATUSES = ("True", "False", "Unknown")
# One reconcile of a binding (`binding`: the daemon's reconcile; `delete`: the finalizer's restore):
# from a few ms (nothing changed) to the runner API's and the target's timeouts.
RECONCILE_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
HANDLERS = ("binding", "delete")
# The placement SLO's objective (docs/operations.md: Placement SLO) is one of these bounds.
PLACEMENT_BUCKETS = (1.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 45.0, 60.0, 90.0, 120.0, 300.0, 600.0, 900.0)


@dataclass
class BindingCounters:
    """Per-binding counts, kept in the binding's state and read at scrape time."""

    policy_writes: int = 0
    drift_corrections: int = 0
    status_patches: int = 0
    scope_writes: int = 0
    scope_reverts: int = 0               # list wakes that found entries we added removed by someone else
    scope_namespaces: int | None = None


@dataclass(frozen=True)
class BindingSample:
    ref: str                     # namespace/name
    counters: BindingCounters
    conditions: list[dict]


class BindingCollector:
    def __init__(self, source: Callable[[], Iterable[BindingSample]]) -> None:
        self.source = source

    def describe(self) -> list[Metric]:
        return []  # series depend on live bindings; nothing to pre-declare

    def collect(self) -> Iterator[Metric]:
        counters = {
            "policy_writes": CounterMetricFamily("ssb_policy_writes", "Runner policy writes.", labels=["binding"]),
            "drift_corrections": CounterMetricFamily("ssb_policy_drift_corrections",
                                                     "Runner policy drift corrected.", labels=["binding"]),
            "status_patches": CounterMetricFamily("ssb_status_patches", "Binding status patches written.",
                                                  labels=["binding"]),
            "scope_writes": CounterMetricFamily("ssb_scope_writes", "Writes of the scheduler scope target.",
                                                labels=["binding"]),
            "scope_reverts": CounterMetricFamily(
                "ssb_scope_reverts", "Syncs that found namespaces the operator added removed by another writer "
                "(Helm, Argo CD, an admin): a rising rate is a tug-of-war.", labels=["binding"]),
        }
        namespaces = GaugeMetricFamily("ssb_scope_namespaces", "Namespaces in the scheduler's watched list.",
                                       labels=["binding"])
        condition = GaugeMetricFamily("ssb_condition", "Binding condition status (1 for the current status).",
                                      labels=["binding", "condition", "status"])
        elsewhere = GaugeMetricFamily(
            "ssb_policy_managed_elsewhere", "1 while the operator does not write the binding's runner policy because "
            "another writer kept removing its keys (PolicySynced PolicyManagedElsewhere), else 0.", labels=["binding"])
        for sample in self.source():
            for attr, family in counters.items():
                family.add_metric([sample.ref], getattr(sample.counters, attr))
            if sample.counters.scope_namespaces is not None:
                namespaces.add_metric([sample.ref], sample.counters.scope_namespaces)
            stopped = any(c.get("type") == ConditionType.POLICY_SYNCED and c.get("reason") == PolicySynced.MANAGED_ELSEWHERE
                          for c in sample.conditions)
            elsewhere.add_metric([sample.ref], 1.0 if stopped else 0.0)
            for cond in sample.conditions:
                for status in STATUSES:
                    condition.add_metric([sample.ref, cond.get("type", ""), status],
                                         1.0 if cond.get("status") == status else 0.0)
        yield from counters.values()
        yield namespaces
        yield condition
        yield elsewhere


class Metrics:
    """The operator's metrics registry (built once per process, kept in the controller context)."""

    def __init__(self, bindings: Callable[[], Iterable[BindingSample]] = lambda: ()) -> None:
        disable_created_metrics()  # process-wide in prometheus_client; nothing here reads *_created
        self.registry = CollectorRegistry(auto_describe=False)
        r = self.registry
        # The library's default collectors, on our registry (the default one is not served).
        ProcessCollector(registry=r)
        PlatformCollector(registry=r)
        GCCollector(registry=r)
        self.build = Info("ssb_build", "The operator's version (ssb_build_info{version} 1).", registry=r)
        self.build.info({"version": __version__})
        self.reconciles = Counter("ssb_reconciles", "Reconciles by handler.", ["handler"], registry=r)
        self.reconcile_errors = Counter("ssb_reconcile_errors", "Reconcile errors by handler.", ["handler"],
                                        registry=r)
        self.reconcile_duration = Histogram(
            "ssb_reconcile_duration_seconds", "Duration of one reconcile by handler (binding: the periodic or woken "
            "reconcile; delete: the finalizer's restore).", ["handler"], buckets=RECONCILE_BUCKETS, registry=r)
        for handler in HANDLERS:  # every series from the start (rate() of a series born at 1 misses the 1)
            self.reconciles.labels(handler=handler)
            self.reconcile_errors.labels(handler=handler)
            self.reconcile_duration.labels(handler=handler)
        self.runner_api_calls = Counter("ssb_runner_api_calls", "Runner API calls by method and result code.",
                                        ["method", "code"], registry=r)
        self.pod_events = Counter("ssb_sandbox_pod_events", "Sandbox pod watch events handled.", registry=r)
        self.dependency_wakes = Counter(
            "ssb_dependency_wakes", "Reconciles woken by a change to a scheduler ConfigMap or pod, or to the scope "
            "target (not counting the echo of the operator's own writes).", registry=r)
        self.dependency_watches = Gauge("ssb_dependency_watches", "Running watches of scheduler ConfigMaps, scheduler "
                                        "pods and scope targets (one per kind and namespace).", registry=r)
        self.dependency_objects = Gauge("ssb_dependency_watch_objects", "Objects those watches know (names and "
                                        "resourceVersions only).", registry=r)
        self.slurm_requests = Counter("ssb_slurm_requests", "slurmrestd requests by endpoint (jobs, partitions, "
                                      "partition, ping, diag) and HTTP code (304: unchanged since update_time).",
                                      ["endpoint", "code"], registry=r)
        self.slurm_pollers = Gauge("ssb_slurm_pollers", "Running job-list pollers (one per slurmrestd URL and user, "
                                   "shared by every binding naming them).", registry=r)
        self.slurm_jobs = Gauge("ssb_slurm_jobs", "Jobs in the job lists the pollers hold.", registry=r)
        self.leader = Gauge("ssb_leader", "1 while this replica holds the leader Lease (it alone writes), else 0.",
                            registry=r)
        self.loop_lag = Histogram(
            "ssb_event_loop_lag_seconds", "How late the main event loop's heartbeat (every 0.5 s) woke: the time "
            "the loop spent on one step (a reconcile's CPU, a large decode) without turning.",
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0), registry=r)
        self.over_budget = Counter("ssb_reconcile_over_budget", "Reconciles that used more CPU than the reconcile "
                                   "budget (the binding says OverBudget and is backed off).", registry=r)
        self.scope_sync_latency = Histogram(
            "ssb_scope_sync_latency_seconds", "From a namespace event to the scope target holding it.",
            buckets=(0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0), registry=r)
        self.placement_ready = Histogram(
            "ssb_placement_ready_seconds", "From a new sandbox namespace's creationTimestamp to the moment a "
            "sandbox there can be placed: listed in the scope target, the scheduler's RBAC there, the scheduler "
            "rolled onto a list holding it and Ready. `stage`: the step that took longest (listed, granted, "
            "rolled); one observation per namespace and binding, or one at 900 s for a namespace never placeable.",
            ["stage"], buckets=PLACEMENT_BUCKETS, registry=r)
        r.register(BindingCollector(bindings))

    def render(self) -> bytes:
        return generate_latest(self.registry)

    async def serve(self, port: int, host: str = "0.0.0.0") -> web.AppRunner:
        async def handle(_: web.Request) -> web.Response:
            return web.Response(body=self.render(), headers={"Content-Type": CONTENT_TYPE_LATEST,
                                                             "X-Content-Type-Options": "nosniff"})

        app = web.Application()
        app.router.add_get("/metrics", handle)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, host, port).start()
        return runner
