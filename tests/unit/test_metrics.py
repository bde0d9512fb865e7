from sunk_sandbox_operator import metrics as mx


def test_render_counter_gauge_histogram_text_format():
    c = mx.Counter("t_calls_total", "Calls.", ("method", "code"))
    c.inc(method="Get", code="ok")
    c.inc(2, method="Get", code="ok")
    g = mx.Gauge("t_ns", "Namespaces.", ("binding",))
    g.set(5, binding='a/"b"')
    h = mx.Histogram("t_latency_seconds", "Latency.", (0.1, 1.0), ("binding",))
    h.observe(0.05, binding="x")
    h.observe(0.5, binding="x")
    text = mx.render()
    assert "# TYPE t_calls_total counter" in text
    assert 't_calls_total{method="Get",code="ok"} 3' in text
    assert 't_ns{binding="a/\\"b\\""} 5' in text
    assert 't_latency_seconds_bucket{binding="x",le="0.1"} 1' in text
    assert 't_latency_seconds_bucket{binding="x",le="1"} 2' in text
    assert 't_latency_seconds_bucket{binding="x",le="+Inf"} 2' in text
    assert 't_latency_seconds_count{binding="x"} 2' in text


def test_condition_gauge_and_forget():
    mx.set_conditions("ns/b", [{"type": "Ready", "status": "False"}])
    assert mx.CONDITION.get(binding="ns/b", condition="Ready", status="False") == 1
    assert mx.CONDITION.get(binding="ns/b", condition="Ready", status="True") == 0
    mx.STATUS_PATCHES.inc(binding="ns/b")
    mx.forget_binding("ns/b")
    assert 'binding="ns/b"' not in mx.render()


def test_forget_removes_histogram_series_too():
    mx.SCOPE_SYNC_LATENCY.observe(0.1, binding="ns/gone")
    assert 'ssb_scope_sync_latency_seconds_count{binding="ns/gone"} 1' in mx.render()
    mx.forget_binding("ns/gone")
    assert 'binding="ns/gone"' not in mx.render()
