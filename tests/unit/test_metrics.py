"""Prometheus text of the operator's metrics: process-wide series, and the per-binding series the collector
reads from live bindings at scrape time (so they vanish with the binding)."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from sunk_sandbox_operator.adapters.metrics import BindingCounters, BindingSample, Metrics
from sunk_sandbox_operator.controller.state import Registry

from tests.unit.fakes import binding_body


def samples(metrics: Metrics) -> dict[tuple[str, tuple], float]:
    """(sample name, sorted labels) -> value, parsed back from the exposition text."""
    out = {}
    for family in text_string_to_metric_families(metrics.render().decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_process_wide_counters_and_histogram_in_text_format() -> None:
    m = Metrics()
    m.runner_api_calls.labels(method="GetManagedRunner", code="ok").inc()
    m.runner_api_calls.labels(method="GetManagedRunner", code="ok").inc(2)
    m.reconciles.labels(handler="binding").inc()
    m.reconcile_errors.labels(handler="delete").inc()
    m.pod_events.inc(5)
    m.scope_sync_latency.observe(0.07)
    m.scope_sync_latency.observe(0.5)
    text = m.render().decode()
    assert "# TYPE ssb_runner_api_calls_total counter" in text
    assert "# TYPE ssb_scope_sync_latency_seconds histogram" in text
    got = samples(m)
    assert got[("ssb_runner_api_calls_total", (("code", "ok"), ("method", "GetManagedRunner")))] == 3
    assert got[("ssb_reconciles_total", (("handler", "binding"),))] == 1
    assert got[("ssb_reconcile_errors_total", (("handler", "delete"),))] == 1
    assert got[("ssb_sandbox_pod_events_total", ())] == 5
    assert got[("ssb_scope_sync_latency_seconds_bucket", (("le", "0.05"),))] == 0
    assert got[("ssb_scope_sync_latency_seconds_bucket", (("le", "0.1"),))] == 1
    assert got[("ssb_scope_sync_latency_seconds_bucket", (("le", "1.0"),))] == 2
    assert got[("ssb_scope_sync_latency_seconds_bucket", (("le", "+Inf"),))] == 2
    assert got[("ssb_scope_sync_latency_seconds_count", ())] == 2


def test_each_context_has_its_own_registry() -> None:
    a, b = Metrics(), Metrics()
    a.pod_events.inc()
    assert samples(a)[("ssb_sandbox_pod_events_total", ())] == 1
    assert samples(b)[("ssb_sandbox_pod_events_total", ())] == 0


def test_per_binding_series_come_from_the_live_bindings_and_vanish_when_forgotten() -> None:
    reg = Registry()
    m = Metrics(reg.samples)
    state = reg.ensure(binding_body("b", "ns"))
    state.counters.policy_writes = 2
    state.counters.drift_corrections = 1
    state.counters.status_patches = 4
    state.counters.scope_writes = 3
    state.counters.scope_namespaces = 7
    state.status = {"conditions": [{"type": "Ready", "status": "False"}, {"type": "ScopeSynced", "status": "True"}]}
    other = reg.ensure(binding_body("c", "ns", uid="u2"))      # no scope sync yet: no namespaces gauge
    got = samples(m)
    b = (("binding", "ns/b"),)
    assert got[("ssb_policy_writes_total", b)] == 2
    assert got[("ssb_policy_drift_corrections_total", b)] == 1
    assert got[("ssb_status_patches_total", b)] == 4
    assert got[("ssb_scope_writes_total", b)] == 3
    assert got[("ssb_scope_namespaces", b)] == 7
    assert ("ssb_scope_namespaces", (("binding", "ns/c"),)) not in got
    assert got[("ssb_policy_writes_total", (("binding", "ns/c"),))] == 0
    ready = {status: got[("ssb_condition", (("binding", "ns/b"), ("condition", "Ready"), ("status", status)))]
             for status in ("True", "False", "Unknown")}
    assert ready == {"True": 0, "False": 1, "Unknown": 0}
    assert got[("ssb_condition", (("binding", "ns/b"), ("condition", "ScopeSynced"), ("status", "True")))] == 1

    reg.forget(state.key)
    text = m.render().decode()
    assert 'binding="ns/b"' not in text and 'binding="ns/c"' in text
    reg.forget(other.key)
    assert "binding=" not in m.render().decode()


def test_label_values_are_escaped() -> None:
    m = Metrics(lambda: [BindingSample('a/"b"', BindingCounters(scope_namespaces=5), [])])
    assert 'ssb_scope_namespaces{binding="a/\\"b\\""} 5.0' in m.render().decode()


def test_the_process_platform_and_gc_collectors_build_info_and_no_created_series() -> None:
    """Issue 34: the operator's own RSS and GC are exported, its version is a series, and no counter or
    histogram brings a `*_created` twin."""
    from sunk_sandbox_operator import __version__

    m = Metrics()
    m.runner_api_calls.labels(method="GetManagedRunner", code="ok").inc()
    m.scope_sync_latency.observe(0.1)
    got = samples(m)
    names = {name for name, _ in got}
    assert {"process_resident_memory_bytes", "process_cpu_seconds_total", "process_open_fds",
            "python_gc_collections_total", "python_gc_objects_collected_total"} <= names
    assert got[("process_resident_memory_bytes", ())] > 0
    assert got[("ssb_build_info", (("version", __version__),))] == 1
    assert any(name == "python_info" for name, _ in got)
    assert not [name for name in names if name.endswith("_created")], sorted(names)
    defined = {name for name in names if not name.startswith(("process_", "python_"))}
    assert all(name.startswith("ssb_") for name in defined), sorted(defined)


def test_the_reconcile_duration_histogram_has_one_series_per_handler_from_the_start() -> None:
    from sunk_sandbox_operator.adapters.metrics import HANDLERS

    m = Metrics()
    got = samples(m)
    for handler in HANDLERS:
        assert got[("ssb_reconcile_duration_seconds_count", (("handler", handler),))] == 0
        assert got[("ssb_reconciles_total", (("handler", handler),))] == 0
    m.reconcile_duration.labels(handler="binding").observe(0.3)
    got = samples(m)
    assert got[("ssb_reconcile_duration_seconds_bucket", (("handler", "binding"), ("le", "0.25")))] == 0
    assert got[("ssb_reconcile_duration_seconds_bucket", (("handler", "binding"), ("le", "0.5")))] == 1
    labels = {tuple(dict(lbl).get("handler") for _ in [0]) for name, lbl in got
              if name.startswith(("ssb_reconciles", "ssb_reconcile_errors", "ssb_reconcile_duration"))}
    assert labels == {(h,) for h in HANDLERS}  # bounded: one label value per handler, nothing per binding
