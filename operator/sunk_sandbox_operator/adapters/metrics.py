"""Prometheus metrics in the text exposition format, served by a small aiohttp app.

A tiny registry of our own (counters, gauges, one histogram) keeps the dependency list to what
the design card fixes; the format is the plain text format Prometheus scrapes.
"""

from __future__ import annotations

import threading
from typing import Iterable

from aiohttp import web

_lock = threading.Lock()
_registry: list["_Metric"] = []


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(pairs: Iterable[tuple[str, str]]) -> str:
    items = [f'{k}="{_escape(str(v))}"' for k, v in pairs]
    return "{" + ",".join(items) + "}" if items else ""


class _Metric:
    kind = "untyped"

    def __init__(self, name: str, help_text: str, labelnames: tuple[str, ...] = ()) -> None:
        self.name, self.help, self.labelnames = name, help_text, labelnames
        self.values: dict[tuple[str, ...], float] = {}
        _registry.append(self)

    def _key(self, labels: dict[str, str]) -> tuple[str, ...]:
        return tuple(str(labels.get(n, "")) for n in self.labelnames)

    def get(self, **labels: str) -> float:
        return self.values.get(self._key(labels), 0.0)

    def _stores(self) -> tuple[dict, ...]:
        return (self.values,)

    def remove_matching(self, **labels: str) -> None:
        with _lock:
            for store in self._stores():
                for key in list(store):
                    if all(key[self.labelnames.index(k)] == v for k, v in labels.items() if k in self.labelnames):
                        del store[key]

    def render(self) -> list[str]:
        lines = [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} {self.kind}"]
        for key, value in sorted(self.values.items()):
            lines.append(f"{self.name}{_labels(zip(self.labelnames, key))} {value:g}")
        return lines


class Counter(_Metric):
    kind = "counter"

    def inc(self, amount: float = 1.0, **labels: str) -> None:
        with _lock:
            key = self._key(labels)
            self.values[key] = self.values.get(key, 0.0) + amount


class Gauge(_Metric):
    kind = "gauge"

    def set(self, value: float, **labels: str) -> None:
        with _lock:
            self.values[self._key(labels)] = float(value)


class Histogram(_Metric):
    kind = "histogram"

    def __init__(self, name: str, help_text: str, buckets: tuple[float, ...], labelnames: tuple[str, ...] = ()) -> None:
        super().__init__(name, help_text, labelnames)
        self.buckets = buckets
        self.series: dict[tuple[str, ...], list[float]] = {}  # bucket counts + [sum, count]

    def _stores(self) -> tuple[dict, ...]:
        return (self.values, self.series)

    def observe(self, value: float, **labels: str) -> None:
        with _lock:
            key = self._key(labels)
            row = self.series.setdefault(key, [0.0] * (len(self.buckets) + 2))
            for i, bound in enumerate(self.buckets):
                if value <= bound:
                    row[i] += 1
            row[-2] += value
            row[-1] += 1

    def render(self) -> list[str]:
        lines = [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} histogram"]
        for key, row in sorted(self.series.items()):
            base = list(zip(self.labelnames, key))
            for bound, count in zip(self.buckets, row):
                lines.append(f"{self.name}_bucket{_labels(base + [('le', f'{bound:g}')])} {count:g}")
            lines.append(f"{self.name}_bucket{_labels(base + [('le', '+Inf')])} {row[-1]:g}")
            lines.append(f"{self.name}_sum{_labels(base)} {row[-2]:g}")
            lines.append(f"{self.name}_count{_labels(base)} {row[-1]:g}")
        return lines


RECONCILES = Counter("ssb_reconciles_total", "Reconciles by handler.", ("handler",))
RECONCILE_ERRORS = Counter("ssb_reconcile_errors_total", "Reconcile errors by handler.", ("handler",))
RUNNER_API_CALLS = Counter("ssb_runner_api_calls_total", "Runner API calls by method and result code.", ("method", "code"))
DRIFT_CORRECTIONS = Counter("ssb_policy_drift_corrections_total", "Runner policy drift corrected.", ("binding",))
POLICY_WRITES = Counter("ssb_policy_writes_total", "Runner policy writes.", ("binding",))
STATUS_PATCHES = Counter("ssb_status_patches_total", "Binding status patches written.", ("binding",))
SCOPE_WRITES = Counter("ssb_scope_writes_total", "Writes of the scheduler scope target.", ("binding",))
SCOPE_NAMESPACES = Gauge("ssb_scope_namespaces", "Namespaces in the scheduler's watched list.", ("binding",))
SCOPE_SYNC_LATENCY = Histogram(
    "ssb_scope_sync_latency_seconds", "From a namespace event to the scope target holding it.",
    (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0), ("binding",))
CONDITION = Gauge("ssb_condition", "Binding condition status (1 for the current status).",
                  ("binding", "condition", "status"))
POD_EVENTS = Counter("ssb_sandbox_pod_events_total", "Sandbox pod watch events handled.")


def set_conditions(binding: str, conditions: list[dict]) -> None:
    for cond in conditions:
        for status in ("True", "False", "Unknown"):
            CONDITION.set(1.0 if cond.get("status") == status else 0.0,
                          binding=binding, condition=cond["type"], status=status)


def forget_binding(binding: str) -> None:
    for metric in _registry:
        if "binding" in metric.labelnames:
            metric.remove_matching(binding=binding)


def render() -> str:
    with _lock:
        lines: list[str] = []
        for metric in _registry:
            lines.extend(metric.render())
    return "\n".join(lines) + "\n"


async def _handle(_: web.Request) -> web.Response:
    return web.Response(text=render(), content_type="text/plain", charset="utf-8",
                        headers={"X-Content-Type-Options": "nosniff"})


async def serve(port: int, host: str = "0.0.0.0") -> web.AppRunner:
    app = web.Application()
    app.router.add_get("/metrics", _handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    return runner
