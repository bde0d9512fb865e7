"""The shipped alerts and dashboard (manifests/monitoring/) name only what the operator exposes.

Every metric a rule or a dashboard panel reads is one the operator's registry
(adapters/metrics.py) really serves, with the labels the expression matches or groups by, except
the Lease series that kube-state-metrics exposes (a cluster without a leader may have no operator
left to say so). `promtool test rules` runs the rules on series in
tests/integration/test_alerts_promtool.py; here is what needs no binary.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from sunk_sandbox_operator.adapters.metrics import BindingCounters, BindingSample, Metrics

ROOT = Path(__file__).resolve().parents[2]
MONITORING = ROOT / "manifests" / "monitoring"
RULES = MONITORING / "prometheusrule.yaml"
DASHBOARD = MONITORING / "sunk-sandbox-operator.json"
# Series read from elsewhere, with the labels they carry there.
EXTERNAL = {"kube_lease_renew_time": {"lease", "namespace"}}  # kube-state-metrics, `leases` collector
# Labels Prometheus adds to every series it scrapes (what tells one replica's process_* from another's).
TARGET_LABELS = {"instance", "job"}
REQUIRED_ALERTS = {
    "SunkSandboxBindingNotReady",      # a binding not Ready for 10 min
    "SunkSandboxScopeSyncSlow",        # scope sync latency p99 above 2 s
    "SunkSandboxRunnerAPIErrors",      # runner API errors
    "SunkSandboxScopeReverts",         # scope reverts rising
    "SunkSandboxOperatorNoLeader",     # no leader
    "SunkSandboxOperatorAbsent",       # no replica scraped at all
    "SunkSandboxPlacementSLOFastBurn",  # the placement SLO's budget: 14.4x over 1h and 5m
    "SunkSandboxPlacementSLOSlowBurn",  # ... 6x over 6h and 30m
}
SLO_SECONDS = "60.0"  # the placement objective's bound (docs/operations.md: Placement SLO), a bucket of the histogram
_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless",
             "offset", "inf", "nan"}


# ---------------------------------------------------------------- what the operator exposes


def exposed() -> dict[str, set[str]]:
    """Sample name -> label names, from the operator's own registry with one live binding and every
    labelled metric used once (so each family shows its samples)."""
    sample = BindingSample("ns/b", BindingCounters(scope_namespaces=3), [{"type": "Ready", "status": "True"}])
    metrics = Metrics(lambda: [sample])
    for metric in vars(metrics).values():
        names = getattr(metric, "_labelnames", ())
        if names:
            metric.labels(*["x"] * len(names))
    out: dict[str, set[str]] = {}
    for family in metrics.registry.collect():
        for s in family.samples:
            out.setdefault(s.name, set()).update(s.labels)
    return out


# ---------------------------------------------------------------- reading PromQL (enough of it)


def _strip(expr: str) -> str:
    expr = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'', '""', expr)
    return re.sub(r"\[[^\]]*\]", "", expr)


def selectors(expr: str) -> list[tuple[str, set[str]]]:
    """(metric name, label names matched) of every series selector in `expr`."""
    text = _strip(expr)
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    out = []
    for m in re.finditer(r"(?<![\w:$])([A-Za-z_:][\w:]*)(?![\w:])\s*(\{[^}]*\})?(?!\s*\()", text):
        name, matchers = m.group(1), m.group(2) or ""
        if name.lower() in _KEYWORDS or re.fullmatch(r"\d\w*", name):
            continue
        out.append((name, set(re.findall(r"([A-Za-z_]\w*)\s*(?:=~|!~|!=|=)", matchers))))
    return out


def grouping_labels(expr: str) -> set[str]:
    labels: set[str] = set()
    for group in re.findall(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)", _strip(expr)):
        labels.update(x.strip() for x in group.split(",") if x.strip())
    return labels


def test_the_promql_reader() -> None:
    expr = ('sum by (code) (rate(ssb_runner_api_calls_total{code!~"ok|a"}[15m])) / ignoring (code) group_left '
            'sum(rate(x_total[$__rate_interval])) > 0.05 or absent(up{job="a,b"}) and on() vector(1)')
    assert selectors(expr) == [("ssb_runner_api_calls_total", {"code"}), ("x_total", set()), ("up", {"job"})]
    assert grouping_labels(expr) == {"code"}
    assert selectors("histogram_quantile(0.99, sum by (le) (rate(h_bucket[5m]))) > 2") == [("h_bucket", set())]


# ---------------------------------------------------------------- the shipped expressions


def all_rules() -> list[dict]:
    return [r for g in yaml.safe_load(RULES.read_text())["spec"]["groups"] for r in g["rules"]]


def rule_objects() -> list[dict]:
    """The alerts."""
    return [r for r in all_rules() if "alert" in r]


def recording_rules() -> list[dict]:
    return [r for r in all_rules() if "record" in r]


def recorded() -> dict[str, set[str]]:
    """Series the recording rules make, with the labels their aggregation keeps."""
    return {r["record"]: grouping_labels(r["expr"]) for r in recording_rules()}


def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def expressions() -> list[tuple[str, str]]:
    out = [(f"alert {r['alert']}", r["expr"]) for r in rule_objects()]
    out += [(f"record {r['record']}", r["expr"]) for r in recording_rules()]
    for panel in dashboard()["panels"]:
        out += [(f"panel {panel['title']!r}", t["expr"]) for t in panel["targets"]]
    return out


@pytest.mark.parametrize(("where", "expr"), expressions(), ids=[w for w, _ in expressions()])
def test_every_series_read_is_exposed_with_the_labels_used(where: str, expr: str) -> None:
    known = {name: labels | TARGET_LABELS for name, labels in {**exposed(), **EXTERNAL, **recorded()}.items()}
    found = selectors(expr)
    assert found, f"{where}: no series in {expr!r}"
    labels_here: set[str] = set()
    for name, matched in found:
        assert name in known, f"{where}: {name} is not a metric the operator exposes ({sorted(known)})"
        assert matched <= known[name], f"{where}: {name} has no label {sorted(matched - known[name])}"
        labels_here |= known[name]
    assert grouping_labels(expr) <= labels_here, f"{where}: groups by a label none of its series has"


def test_the_required_alerts_are_there_and_say_what_to_do() -> None:
    rules = rule_objects()
    assert {r["alert"] for r in rules} == REQUIRED_ALERTS
    for rule in rules:
        assert rule["labels"]["severity"] in {"warning", "critical"}, rule["alert"]
        assert "for" in rule and rule["annotations"]["summary"] and rule["annotations"]["description"]
        # Descriptions are plain text (the promtool test compares them as they are); summaries template.
        assert "{{" not in rule["annotations"]["description"], rule["alert"]


def test_the_thresholds_the_issue_asks_for() -> None:
    by_name = {r["alert"]: r for r in rule_objects()}
    assert by_name["SunkSandboxBindingNotReady"]["for"] == "10m"
    assert 'condition="Ready"' in by_name["SunkSandboxBindingNotReady"]["expr"]
    assert "histogram_quantile(0.99," in by_name["SunkSandboxScopeSyncSlow"]["expr"]
    assert by_name["SunkSandboxScopeSyncSlow"]["expr"].rstrip().endswith("> 2")


def test_the_placement_slo_rules_read_the_objectives_bucket_and_link_their_runbook() -> None:
    from sunk_sandbox_operator.adapters.metrics import PLACEMENT_BUCKETS

    assert float(SLO_SECONDS) in PLACEMENT_BUCKETS  # le="60.0" is a bucket the registry serves
    assert f'le="{SLO_SECONDS}"' in " ".join(f'{x}' for x in exposed_buckets())
    for r in recording_rules():
        assert f'ssb_placement_ready_seconds_bucket{{le="{SLO_SECONDS}"}}' in r["expr"], r["record"]
        window = r["record"].rsplit("rate", 1)[1]
        assert r["expr"].count(f"[{window}]") == 2, r["record"]
    readme = (ROOT / "docs" / "operations.md").read_text()
    by_name = {r["alert"]: r for r in rule_objects()}
    for name, (long, short, rate) in {"SunkSandboxPlacementSLOFastBurn": ("1h", "5m", "14.4"),
                                      "SunkSandboxPlacementSLOSlowBurn": ("6h", "30m", "6")}.items():
        rule = by_name[name]
        assert f"ssb:placement_slow:ratio_rate{long} > ({rate} * 0.01)" in rule["expr"]
        assert f"ssb:placement_slow:ratio_rate{short} > ({rate} * 0.01)" in rule["expr"]
        url = rule["annotations"]["runbook_url"]
        # Its own runbook heading (as every alert's), which links the Placement SLO section.
        assert url.endswith("docs/operations.md#" + name.lower()) and "\n## Placement SLO\n" in readme, url
        section = readme[readme.index(f"#### `{name}`"):]
        assert "(#placement-slo)" in section[:section.index("\n####", 5)], name


def exposed_buckets() -> list[str]:
    metrics = Metrics()
    metrics.placement_ready.labels("rolled").observe(1.0)
    return [f'le="{s.labels["le"]}"' for f in metrics.registry.collect() for s in f.samples
            if s.name == "ssb_placement_ready_seconds_bucket"]


def test_the_dashboard_is_importable_grafana_json() -> None:
    dash = dashboard()
    assert dash["uid"] == "sunk-sandbox-operator" and dash["title"]
    (variable,) = dash["templating"]["list"]
    assert variable["type"] == "datasource" and variable["query"] == "prometheus"
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dash["panels"]:
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        assert panel["targets"] and all(t["refId"] and t["expr"] for t in panel["targets"]), panel["title"]
        grid = panel["gridPos"]
        assert 0 <= grid["x"] and grid["x"] + grid["w"] <= 24, panel["title"]
    # Every alert has a panel that shows what it watches.
    shown = " ".join(t["expr"] for p in dash["panels"] for t in p["targets"])
    for rule in rule_objects():
        for name, _ in selectors(rule["expr"]):
            assert name in shown, f"{rule['alert']} reads {name}, which no panel shows"


def test_the_monitoring_component_ships_the_rules_the_dashboard_and_a_service_monitor() -> None:
    component = yaml.safe_load((MONITORING / "kustomization.yaml").read_text())
    assert component["kind"] == "Component"
    assert set(component["resources"]) == {"servicemonitor.yaml", "prometheusrule.yaml"}
    (generator,) = component["configMapGenerator"]
    assert generator["files"] == [DASHBOARD.name]
    assert generator["options"]["labels"]["grafana_dashboard"] == "1"
    monitor = yaml.safe_load((MONITORING / "servicemonitor.yaml").read_text())
    service = yaml.safe_load((ROOT / "manifests" / "service.yaml").read_text())
    assert monitor["spec"]["selector"]["matchLabels"].items() <= {
        **service["metadata"]["labels"], "app.kubernetes.io/name": "sunk-sandbox-operator"}.items()
    assert monitor["spec"]["endpoints"][0]["port"] == service["spec"]["ports"][0]["name"]
    main = yaml.safe_load((ROOT / "manifests" / "kustomization.yaml").read_text())
    assert "monitoring" not in " ".join(main["resources"]), "optional: not in the default install"


RUNBOOKS = "https://github.com/sunksandbox/sunk-sandbox-operator/blob/main/docs/operations.md#"


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading: lower case, punctuation dropped, spaces as '-'."""
    text = re.sub(r"[^\w\- ]", "", heading.lower()).strip()
    return text.replace(" ", "-")


def test_every_alert_links_its_runbook_section_in_the_readme() -> None:
    """Each alert's runbook_url is a stable anchor of its own section of docs/operations.md."""
    headings = [line.lstrip("#").strip() for line in (ROOT / "docs" / "operations.md").read_text().splitlines()
                if line.startswith("#")]
    anchors = [github_anchor(h) for h in headings]
    assert github_anchor("`SunkSandboxBindingNotReady`") == "sunksandboxbindingnotready"
    assert github_anchor("Alerts and dashboard") == "alerts-and-dashboard"
    for rule in rule_objects():
        url = rule["annotations"].get("runbook_url", "")
        assert url == RUNBOOKS + rule["alert"].lower(), (rule["alert"], url)
        assert anchors.count(rule["alert"].lower()) == 1, f"{rule['alert']}: no docs/operations.md heading (or several) for {url}"
