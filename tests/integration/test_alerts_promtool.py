"""The shipped alerts run by Prometheus' own rule engine: `promtool check rules` and `promtool test
rules` (built from the Go module proxy by `make promtool`, cached like helm) on series named and
labelled as the operator exposes them (tests/unit/test_monitoring.py checks those names).

Each case feeds series, evaluates at a few moments, and states which alerts fire then, with their
labels and rendered summaries (`for:` periods included): a binding Ready=False for 10 min, a slow
scope sync, failing runner API calls (and stale etags that are not failures), scope reverts, a
Lease no one renews or no Lease at all, no operator scraped, and the placement SLO's two burn
rates (a fast and a slow burn, a burn that ended, a quiet cluster's one slow namespace).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from tests.unit.test_monitoring import RULES, all_rules, rule_objects

pytestmark = [pytest.mark.integration, pytest.mark.needs_tool("promtool")]

BINDING = "tenant-slurm/cpu-sandboxes"
LEASE = 'kube_lease_renew_time{lease="sunk-sandbox-operator", namespace="sunk-sandbox-operator-system"}'
PODS = "ssb_sandbox_pod_events_total"  # every replica exposes it from its start
HISTOGRAM_LE = ("0.05", "0.1", "0.25", "0.5", "1.0", "2.5", "5.0", "10.0", "+Inf")  # adapters/metrics.py


def promtool() -> Path:
    from sunk_sandbox_devtools import devcluster

    return devcluster.ensure_promtool()


def description(alert: str) -> str:
    return next(r["annotations"]["description"] for r in rule_objects() if r["alert"] == alert)


def runbook(alert: str) -> str:
    return next(r["annotations"]["runbook_url"] for r in rule_objects() if r["alert"] == alert)


def fired(alert: str, labels: dict[str, str], summary: str) -> dict:
    """The alert as it fires: its labels, the summary rendered, and its other annotations as written."""
    rule = next(r for r in rule_objects() if r["alert"] == alert)
    return {"exp_labels": labels, "exp_annotations": {**rule["annotations"], "summary": summary,
                                                      "description": description(alert)}}


def alive(minutes: int) -> dict:
    """The operator is scraped and leads (so only the alert under test fires)."""
    return [{"series": PODS, "values": f"0+1x{minutes}"},
            {"series": LEASE, "values": f"0+60x{minutes}"}]


def latency(per_minute_by_le: dict[str, int], minutes: int) -> list[dict]:
    series, total = [], 0
    for le in HISTOGRAM_LE:
        total = max(total, per_minute_by_le.get(le, total))
        series.append({"series": f'ssb_scope_sync_latency_seconds_bucket{{le="{le}"}}', "values": f"0+{total}x{minutes}"})
    return series


def placement(minutes: str, fast_per_minute: str, total_per_minute: str) -> list[dict]:
    """ssb_placement_ready_seconds as the SLO rules read it: the objective's bucket (60 s) and the count."""
    return [{"series": 'ssb_placement_ready_seconds_bucket{le="60.0", stage="rolled"}', "values": fast_per_minute},
            {"series": 'ssb_placement_ready_seconds_count{stage="rolled"}', "values": total_per_minute}]


def burn_summary(share: str, window: str) -> str:
    return f"{share} of new sandbox namespaces were not placeable within 60 s in the last {window}"


SLO_TESTS = [  # the placement SLO's burn-rate alerts
    {   # half the namespaces slow from the start: the fast burn pages after its 2 min, the slow one after 15 min
        "interval": "1m",
        "input_series": alive(40) + placement("40", "0+5x40", "0+10x40"),
        "alert_rule_test": [
            {"eval_time": "1m", "alertname": "SunkSandboxPlacementSLOFastBurn", "exp_alerts": []},  # pending
            {"eval_time": "5m", "alertname": "SunkSandboxPlacementSLOFastBurn", "exp_alerts": [fired(
                "SunkSandboxPlacementSLOFastBurn", {"severity": "critical"}, burn_summary("50%", "hour"))]},
            {"eval_time": "10m", "alertname": "SunkSandboxPlacementSLOSlowBurn", "exp_alerts": []},  # pending
            {"eval_time": "20m", "alertname": "SunkSandboxPlacementSLOSlowBurn", "exp_alerts": [fired(
                "SunkSandboxPlacementSLOSlowBurn", {"severity": "warning"}, burn_summary("50%", "6 hours"))]},
        ],
    },
    {   # 10 % slow: above the slow burn's 6 %, below the fast burn's 14.4 %
        "interval": "1m",
        "input_series": alive(60) + placement("60", "0+9x60", "0+10x60"),
        "alert_rule_test": [
            {"eval_time": "45m", "alertname": "SunkSandboxPlacementSLOFastBurn", "exp_alerts": []},
            {"eval_time": "45m", "alertname": "SunkSandboxPlacementSLOSlowBurn", "exp_alerts": [fired(
                "SunkSandboxPlacementSLOSlowBurn", {"severity": "warning"}, burn_summary("10%", "6 hours"))]},
        ],
    },
    {   # 20 % slow for an hour, then none: the 6h window still burns, the 30m one no longer, so silence
        "interval": "1m",
        "input_series": alive(130) + placement("130", "0+8x60 490+10x69", "0+10x130"),
        "alert_rule_test": [
            {"eval_time": "50m", "alertname": "SunkSandboxPlacementSLOFastBurn", "exp_alerts": [fired(
                "SunkSandboxPlacementSLOFastBurn", {"severity": "critical"}, burn_summary("20%", "hour"))]},
            {"eval_time": "125m", "alertname": "SunkSandboxPlacementSLOFastBurn", "exp_alerts": []},
            {"eval_time": "125m", "alertname": "SunkSandboxPlacementSLOSlowBurn", "exp_alerts": []},
        ],
    },
    {   # every namespace placeable in time; and a quiet cluster's one slow namespace an hour pages no one
        "interval": "1m",
        "input_series": alive(90) + placement("90", "0+10x90", "0+10x90") + [
            {"series": 'ssb_placement_ready_seconds_bucket{le="60.0", stage="granted"}', "values": "0x90"},
            {"series": 'ssb_placement_ready_seconds_count{stage="granted"}', "values": "0x30 1x60"},
        ],
        "alert_rule_test": [{"eval_time": "85m", "alertname": name, "exp_alerts": []}
                            for name in ("SunkSandboxPlacementSLOFastBurn", "SunkSandboxPlacementSLOSlowBurn")],
    },
    {   # (alone) one slow namespace in a quiet hour: 100 % slow, yet under the 5 the alerts ask for
        "interval": "1m",
        "input_series": alive(60) + placement("60", "0x60", "0x30 1x30"),
        "alert_rule_test": [{"eval_time": "40m", "alertname": name, "exp_alerts": []}
                            for name in ("SunkSandboxPlacementSLOFastBurn", "SunkSandboxPlacementSLOSlowBurn")],
    },
]


TESTS = [
    {   # not Ready: silent for the first 10 minutes, then firing; a Ready binding never
        "interval": "1m",
        "input_series": alive(40) + [
            {"series": f'ssb_condition{{binding="{BINDING}", condition="Ready", status="True"}}', "values": "0x40"},
            {"series": f'ssb_condition{{binding="{BINDING}", condition="Ready", status="False"}}', "values": "1x40"},
            {"series": 'ssb_condition{binding="t/ok", condition="Ready", status="True"}', "values": "1x40"},
        ],
        "alert_rule_test": [
            {"eval_time": "9m", "alertname": "SunkSandboxBindingNotReady", "exp_alerts": []},
            {"eval_time": "11m", "alertname": "SunkSandboxBindingNotReady", "exp_alerts": [fired(
                "SunkSandboxBindingNotReady", {"binding": BINDING, "severity": "warning"},
                f"SunkSandboxBinding {BINDING} has not been Ready for 10 minutes")]},
        ],
    },
    {   # a binding that turns Ready after 5 minutes never fires
        "interval": "1m",
        "input_series": alive(30) + [
            {"series": f'ssb_condition{{binding="{BINDING}", condition="Ready", status="True"}}', "values": "0x5 1x25"}],
        "alert_rule_test": [{"eval_time": "20m", "alertname": "SunkSandboxBindingNotReady", "exp_alerts": []}],
    },
    {   # every sync lands between 2.5 s and 5 s: p99 near 5 s, firing after 15 min
        "interval": "1m",
        "input_series": alive(60) + latency({"0.05": 0, "2.5": 0, "5.0": 10}, 60),
        "alert_rule_test": [
            {"eval_time": "10m", "alertname": "SunkSandboxScopeSyncSlow", "exp_alerts": []},  # pending
            {"eval_time": "30m", "alertname": "SunkSandboxScopeSyncSlow", "exp_alerts": [fired(
                "SunkSandboxScopeSyncSlow", {"severity": "warning"}, "Scope sync p99 latency is 4.975s (above 2 s)")]},
        ],
    },
    {   # every sync under 250 ms: never
        "interval": "1m",
        "input_series": alive(60) + latency({"0.05": 0, "0.1": 5, "0.25": 10}, 60),
        "alert_rule_test": [{"eval_time": "45m", "alertname": "SunkSandboxScopeSyncSlow", "exp_alerts": []}],
    },
    {   # a third of the calls unavailable: firing after 15 min; stale etags alone are not errors
        "interval": "1m",
        "input_series": alive(60) + [
            {"series": 'ssb_runner_api_calls_total{method="GetManagedRunner", code="ok"}', "values": "0+10x60"},
            {"series": 'ssb_runner_api_calls_total{method="GetManagedRunner", code="unavailable"}',
             "values": "0x20 0+5x40"},
            {"series": 'ssb_runner_api_calls_total{method="UpdateManagedRunner", code="failed_precondition"}',
             "values": "0+5x60"},
        ],
        "alert_rule_test": [
            {"eval_time": "20m", "alertname": "SunkSandboxRunnerAPIErrors", "exp_alerts": []},
            {"eval_time": "50m", "alertname": "SunkSandboxRunnerAPIErrors", "exp_alerts": [fired(
                "SunkSandboxRunnerAPIErrors", {"code": "unavailable", "severity": "warning"},
                "25% of runner API calls fail with unavailable")]},
        ],
    },
    {   # a revert a minute from minute 11 on (Helm re-applying its list): firing once more than 3 in 30 min
        "interval": "1m",
        "input_series": alive(40) + [
            {"series": f'ssb_scope_reverts_total{{binding="{BINDING}"}}', "values": "0x10 0+1x30"},
            {"series": 'ssb_scope_reverts_total{binding="t/calm"}', "values": "0x10 1x30"},
        ],
        "alert_rule_test": [
            {"eval_time": "12m", "alertname": "SunkSandboxScopeReverts", "exp_alerts": []},
            {"eval_time": "30m", "alertname": "SunkSandboxScopeReverts", "exp_alerts": [fired(
                "SunkSandboxScopeReverts", {"binding": BINDING, "severity": "warning"},
                f"The scope of {BINDING} was reverted 19 times in 30 minutes")]},
        ],
    },
    {   # the Lease renewed until minute 10, then never again: no leader, critical after 5 more minutes
        "interval": "1m",
        "input_series": [{"series": PODS, "values": "0+1x40"}, {"series": LEASE, "values": "0+60x10 600x30"}],
        "alert_rule_test": [
            {"eval_time": "10m", "alertname": "SunkSandboxOperatorNoLeader", "exp_alerts": []},
            {"eval_time": "14m", "alertname": "SunkSandboxOperatorNoLeader", "exp_alerts": []},
            {"eval_time": "17m", "alertname": "SunkSandboxOperatorNoLeader", "exp_alerts": [fired(
                "SunkSandboxOperatorNoLeader", {"severity": "critical"},
                "No sunk-sandbox-operator replica holds the leader Lease")]},
        ],
    },
    {   # no Lease at all (never elected) is no leader too; and no operator scraped at all
        "interval": "1m",
        "input_series": [{"series": "up", "values": "1x20"}],
        "alert_rule_test": [
            {"eval_time": "4m", "alertname": "SunkSandboxOperatorAbsent", "exp_alerts": []},
            {"eval_time": "12m", "alertname": "SunkSandboxOperatorNoLeader", "exp_alerts": [fired(
                "SunkSandboxOperatorNoLeader", {"lease": "sunk-sandbox-operator", "severity": "critical"},
                "No sunk-sandbox-operator replica holds the leader Lease")]},
            {"eval_time": "12m", "alertname": "SunkSandboxOperatorAbsent", "exp_alerts": [fired(
                "SunkSandboxOperatorAbsent", {"severity": "critical"},
                "Prometheus scrapes no sunk-sandbox-operator replica")]},
        ],
    },
    {   # a healthy operator: nothing fires
        "interval": "1m",
        "input_series": alive(30),
        "alert_rule_test": [{"eval_time": "25m", "alertname": name, "exp_alerts": []}
                            for name in ("SunkSandboxOperatorNoLeader", "SunkSandboxOperatorAbsent")],
    },
]

TESTS += SLO_TESTS


@pytest.fixture(scope="module")
def rules_file(tmp_path_factory) -> Path:
    """The PrometheusRule's spec is a Prometheus rule file."""
    path = tmp_path_factory.mktemp("rules") / "rules.yaml"
    path.write_text(yaml.safe_dump(yaml.safe_load(RULES.read_text())["spec"]))
    return path


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(promtool()), *args], capture_output=True, text=True, timeout=120)


def test_promtool_checks_the_rules(rules_file):
    done = run("check", "rules", str(rules_file))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(all_rules())} rules found" in done.stdout


def test_promtool_runs_the_alert_cases(rules_file):
    tests = rules_file.parent / "alerts_test.yaml"
    tests.write_text(yaml.safe_dump({"rule_files": [rules_file.name], "evaluation_interval": "1m", "tests": TESTS},
                                    sort_keys=False))
    done = run("test", "rules", str(tests))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_a_broken_expectation_fails(rules_file):
    """The harness can fail: the same not-Ready case, expecting nothing at 11 min."""
    case = {**TESTS[0], "alert_rule_test": [{"eval_time": "11m", "alertname": "SunkSandboxBindingNotReady",
                                             "exp_alerts": []}]}
    tests = rules_file.parent / "broken_test.yaml"
    tests.write_text(yaml.safe_dump({"rule_files": [rules_file.name], "tests": [case]}, sort_keys=False))
    done = run("test", "rules", str(tests))
    assert done.returncode != 0 and "SunkSandboxBindingNotReady" in done.stdout + done.stderr
