"""Scheduler discovery: parsers and precedence over realistic SUNK 7 / SUNK 8 objects."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sunk_sandbox_operator.api import BindingSpec, SchedulerStatus, parse_spec
from sunk_sandbox_operator.core.scheduler.conf import (
    parse_go_duration,
    parse_scheduler_args,
    parse_scheduler_conf,
)
from sunk_sandbox_operator.core.scheduler.slurm_conf import parse_slurm_kill_wait, slurm_kill_wait
from sunk_sandbox_operator.core.scheduler.discovery import (
    Discovery,
    discover,
    scheduler_condition,
    to_status,
)

FIXTURES = Path(__file__).parent / "fixtures" / "scheduler"


def fx(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / f"{name}.json").read_text())


def spec(**over: Any) -> BindingSpec:
    base: dict[str, Any] = {
        "runner": {"id": "runner-7f3a", "tokenSecretRef": {"name": "coreweave-api"}},
        "sandboxNamespaces": {"names": ["ds-*"]},
    }
    base.update(over)
    return parse_spec(base)


# ------------------------------------------------------------------ Go durations


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30s", 30),
        ("1m30s", 90),
        ("2m", 120),
        ("1h", 3600),
        ("1.5s", 1.5),
        ("500ms", 0.5),
        ("0", 0),
        ("0s", 0),
        ("1h2m3s", 3723),
        ("-1m", -60),
        ("+5s", 5),
        (".5m", 30),
        ("100us", 0.0001),
        ("100µs", 0.0001),
        ("1000000ns", 0.001),
    ],
)
def test_parse_go_duration(text: str, seconds: float) -> None:
    assert parse_go_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("junk", ["", "30", "s", "1x", "1m 30s", "abc", "1.2.3s", "--1s", "-", ".s", "1d", None, 30])
def test_parse_go_duration_rejects_junk(junk: Any) -> None:
    with pytest.raises(ValueError):
        parse_go_duration(junk)


_units = {"h": 3600, "m": 60, "s": 1, "ms": 0.001}


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 10_000), st.sampled_from(sorted(_units))), min_size=1, max_size=4))
def test_parse_go_duration_sums_parts(parts: list[tuple[int, str]]) -> None:
    text = "".join(f"{n}{u}" for n, u in parts)
    assert parse_go_duration(text) == pytest.approx(sum(n * _units[u] for n, u in parts))


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=12))
def test_parse_go_duration_never_crashes_otherwise(text: str) -> None:
    try:
        value = parse_go_duration(text)
    except ValueError:
        return
    assert isinstance(value, float)


# ------------------------------------------------------------------ scheduler.conf (SUNK 8)


def test_scheduler_conf_from_fixture() -> None:
    conf = parse_scheduler_conf(fx("sunk8_configmap")["data"]["scheduler.conf"])
    assert conf.name == "slurm-scheduler"
    assert conf.scope_type == "namespace"
    assert conf.kill_wait_seconds is None
    assert conf.error is None


@pytest.mark.parametrize(
    ("doc", "seconds"),
    [
        ("scheduler:\n  name: s\n  slurmKillWait: 45s\n", 45),
        ("scheduler:\n  name: s\n  killWait: 1m\n", 60),
        ("scheduler:\n  name: s\n  killWait: 90\n", 90),
        ("scheduler:\n  name: s\n  killWaitSeconds: '120'\n", 120),
        ("scheduler:\n  name: s\n  slurm:\n    killWait: 60s\n", 60),
    ],
)
def test_scheduler_conf_kill_wait_spellings(doc: str, seconds: int) -> None:
    conf = parse_scheduler_conf(doc)
    assert (conf.kill_wait_seconds, conf.error) == (seconds, None)


@pytest.mark.parametrize(
    "text",
    [
        fx("malformed_scheduler_conf_yaml")["data"]["scheduler.conf"],
        fx("malformed_scheduler_conf_list")["data"]["scheduler.conf"],
        "",
        "scheduler: just-a-string\n",
        "other: {}\n",
        "scheduler:\n  name: 42\n",
        "scheduler:\n  name: s\n  killWait: forever\n",
        "scheduler:\n  name: s\n  killWait: true\n",
        "scheduler:\n  name: s\n  scope: cluster\n",
        None,
        b"scheduler: {}",
    ],
)
def test_scheduler_conf_malformed_reports_error(text: Any) -> None:
    conf = parse_scheduler_conf(text)
    assert conf.error


def test_scheduler_conf_keeps_good_fields_next_to_a_bad_one() -> None:
    conf = parse_scheduler_conf("scheduler:\n  name: s\n  killWait: forever\n  scope: {type: cluster}\n")
    assert conf.name == "s" and conf.scope_type == "cluster" and conf.kill_wait_seconds is None
    assert "killWait" in (conf.error or "")


# ------------------------------------------------------------------ args (SUNK 7)


def test_args_equals_form_from_pod() -> None:
    a = parse_scheduler_args(fx("sunk7_pod"))
    assert (a.name, a.kill_wait_seconds, a.error) == ("tenant-slurm-slurm-scheduler", 30, None)


def test_args_space_form_across_command_and_args() -> None:
    a = parse_scheduler_args(fx("sunk7_pod_space_args"))
    assert (a.name, a.kill_wait_seconds, a.error) == ("slurm-scheduler", 90, None)


def test_args_from_deployment_expands_env_reference() -> None:
    a = parse_scheduler_args(fx("sunk7_deployment"))
    assert (a.name, a.kill_wait_seconds, a.error) == ("tenant-slurm-slurm-scheduler", 60, None)


def test_args_from_bare_podspec_and_single_dash_and_shell() -> None:
    podspec = {"containers": [{"name": "scheduler", "args": ["-scheduler-name=x", "-slurm-kill-wait", "2m"]}]}
    assert parse_scheduler_args(podspec).name == "x"
    assert parse_scheduler_args(podspec).kill_wait_seconds == 120
    shell = {"containers": [{"name": "scheduler", "command": ["/bin/sh", "-c", "exec sunk --scheduler-name y --slurm-kill-wait=45s"]}]}
    a = parse_scheduler_args(shell)
    assert (a.name, a.kill_wait_seconds) == ("y", 45)


def test_args_last_flag_wins_like_go() -> None:
    podspec = {"containers": [{"name": "scheduler", "args": ["--slurm-kill-wait=30s", "--slurm-kill-wait=60s"]}]}
    assert parse_scheduler_args(podspec).kill_wait_seconds == 60


def test_args_only_the_scheduler_container_counts() -> None:
    podspec = {"containers": [{"name": "sidecar", "args": ["--scheduler-name=wrong"]}, {"name": "scheduler", "args": []}]}
    a = parse_scheduler_args(podspec)
    assert a.name is None and a.error is None


def test_sunk8_pod_has_no_flags() -> None:
    a = parse_scheduler_args(fx("sunk8_pod"))
    assert (a.name, a.kill_wait_seconds, a.error) == (None, None, None)


@pytest.mark.parametrize(
    "obj",
    [
        fx("malformed_pod_no_containers"),
        fx("malformed_pod_bad_killwait"),
        {"containers": [{"name": "scheduler", "args": ["--scheduler-name"]}]},
        {"containers": [{"name": "scheduler", "args": "--scheduler-name=x"}]},
        {"containers": [{"name": "scheduler", "args": ["--slurm-kill-wait=-5s"]}]},
        {"containers": [{"name": "scheduler", "args": ["--scheduler-name=$(UNSET)"]}]},
        {"containers": [{"name": "other"}]},
        {"containers": [{"name": "scheduler", "env": [{"name": {"x": 1}}], "args": ["--slurm-kill-wait="]}]},
        {},
        [],
        None,
        "pod",
    ],
)
def test_args_malformed_reports_error(obj: Any) -> None:
    assert parse_scheduler_args(obj).error


def test_bad_kill_wait_keeps_the_name() -> None:
    a = parse_scheduler_args(fx("malformed_pod_bad_killwait"))
    assert a.name == "slurm-scheduler" and a.kill_wait_seconds is None and "thirty" in (a.error or "")


# ------------------------------------------------------------------ slurm.conf


def test_slurm_conf_fixture_kill_wait_ignores_comments() -> None:
    assert parse_slurm_kill_wait(fx("slurm_conf_configmap")["data"]["slurm.conf"]) == 60


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("KillWait=60\n", 60),
        ("killwait = 45\n", 45),
        ("KILLWAIT=90 # raised for sandboxes\n", 90),
        ("  KillWait=30\nKillWait=120\n", 120),
        ("InactiveLimit=0 KillWait=75 MinJobAge=300\n", 75),
        ("# KillWait=60\n", None),
        ("UnkillableStepTimeout=60\n", None),
        ("", None),
        ("KillWait=sixty\n", None),
        (None, None),
    ],
)
def test_parse_slurm_kill_wait(text: Any, expected: int | None) -> None:
    assert parse_slurm_kill_wait(text) == expected


def test_slurm_kill_wait_reports_bad_value() -> None:
    value, error = slurm_kill_wait("KillWait=sixty\n")
    assert value is None and "sixty" in (error or "")


# ------------------------------------------------------------------ discover


def test_discover_sunk8_configmap_and_slurm_conf() -> None:
    d = discover(spec(), "tenant-slurm", [fx("sunk8_pod")], [fx("sunk8_configmap"), fx("slurm_conf_configmap")])
    assert (d.name, d.name_source) == ("slurm-scheduler", "configMap")
    assert (d.kill_wait_seconds, d.kill_wait_source) == (60, "slurmConf")
    assert d.ready_replicas == 1 and d.pods_found == 1
    assert d.configmap_name == "slurm-scheduler-config"
    assert d.service_account == "slurm-scheduler"
    assert d.scope_type == "namespace"
    assert d.errors == []


def test_discover_a_lower_sunk7_flag_beats_slurm_conf_and_notes_mismatch() -> None:
    d = discover(spec(), "tenant-slurm", [fx("sunk7_pod")], [fx("slurm_conf_configmap")])
    assert (d.name, d.name_source) == ("tenant-slurm-slurm-scheduler", "args")
    assert (d.kill_wait_seconds, d.kill_wait_source) == (30, "args")   # the scheduler waits 30 s only
    assert any("30 s" in m and "60 s" in m and "equal" in m for m in d.messages)


def test_discover_slurm_conf_first_whatever_a_higher_flag_says() -> None:
    """SUNK 8.2 has no --slurm-kill-wait (it reads Slurm's KillWait): slurm.conf is the first source;
    a higher flag left from an older release never raises it (Slurm kills after its own KillWait)."""
    pod = fx("sunk7_pod")
    pod["spec"]["containers"][0]["args"] = [a.replace("30s", "90s") for a in pod["spec"]["containers"][0]["args"]]
    d = discover(spec(), "tenant-slurm", [pod], [fx("slurm_conf_configmap")])
    assert d.scheduler_kill_wait == (90, "args")
    assert (d.kill_wait_seconds, d.kill_wait_source) == (60, "slurmConf")
    assert any("90 s" in m and "60 s" in m and "equal" in m for m in d.messages)


def test_discover_keeps_both_sides_of_the_kill_wait_comparison() -> None:
    d = discover(spec(), "tenant-slurm", [fx("sunk7_pod")], [fx("slurm_conf_configmap")])
    assert d.scheduler_kill_wait == (30, "args")
    assert d.slurm_kill_wait == (60, "slurm.conf in ConfigMap slurm-conf")
    d = discover(spec(), "tenant-slurm", [fx("sunk7_pod")], [fx("slurm_conf_no_killwait_configmap")])
    assert d.slurm_kill_wait is not None and d.slurm_kill_wait[0] == 30 and "default" in d.slurm_kill_wait[1]
    d = discover(spec(), "tenant-slurm", [fx("sunk8_pod")], [fx("sunk8_configmap")])
    assert d.scheduler_kill_wait is None and d.slurm_kill_wait is None


def test_discover_configmap_name_beats_args_and_notes_the_difference() -> None:
    d = discover(spec(), "tenant-slurm", [fx("sunk7_pod")], [fx("sunk8_configmap")])
    assert (d.name, d.name_source) == ("slurm-scheduler", "configMap")
    assert any("tenant-slurm-slurm-scheduler" in m for m in d.messages)


def test_discover_spec_name_wins_but_difference_is_noted() -> None:
    d = discover(spec(scheduler={"name": "my-scheduler"}), "tenant-slurm", [fx("sunk8_pod")], [fx("sunk8_configmap")])
    assert (d.name, d.name_source) == ("my-scheduler", "spec")
    assert d.discovered_name == "slurm-scheduler"
    assert any("my-scheduler" in m and "slurm-scheduler" in m for m in d.messages)


def test_discover_spec_name_equal_to_discovered_is_silent() -> None:
    d = discover(spec(scheduler={"name": "slurm-scheduler"}), "tenant-slurm", [fx("sunk8_pod")], [fx("sunk8_configmap")])
    assert d.name_source == "spec" and d.messages == []


def test_discover_a_lower_configmap_kill_wait_beats_slurm_conf() -> None:
    d = discover(spec(), "tenant-slurm", [fx("sunk8_pod")], [fx("sunk8_configmap_killwait"), fx("slurm_conf_configmap")])
    assert (d.kill_wait_seconds, d.kill_wait_source) == (45, "configMap")
    assert d.scope_type == "cluster"
    assert any("45 s" in m and "60 s" in m for m in d.messages)


def test_discover_spec_kill_wait_only_when_nothing_else() -> None:
    s = spec(scheduler={"killWaitSeconds": 90})
    d = discover(s, "tenant-slurm", [fx("sunk8_pod")], [fx("sunk8_configmap")])
    assert (d.kill_wait_seconds, d.kill_wait_source) == (90, "spec")
    d = discover(s, "tenant-slurm", [fx("sunk8_pod")], [fx("sunk8_configmap"), fx("slurm_conf_configmap")])
    assert (d.kill_wait_seconds, d.kill_wait_source) == (60, "slurmConf")
    assert any("killWaitSeconds is 90" in m for m in d.messages)


def test_discover_slurm_default_kill_wait_is_last_resort() -> None:
    cms = [fx("sunk8_configmap"), fx("slurm_conf_no_killwait_configmap")]
    d = discover(spec(), "tenant-slurm", [fx("sunk8_pod")], cms)
    assert (d.kill_wait_seconds, d.kill_wait_source) == (30, "slurmConfDefault")
    d = discover(spec(scheduler={"killWaitSeconds": 60}), "tenant-slurm", [fx("sunk8_pod")], cms)
    assert (d.kill_wait_seconds, d.kill_wait_source) == (60, "spec")


def test_discover_slurm_conf_with_include_is_not_assumed_default() -> None:
    cm = fx("slurm_conf_no_killwait_configmap")
    cm["data"]["slurm.conf"] += "Include /etc/slurm/extra.conf\n"
    d = discover(spec(), "tenant-slurm", [fx("sunk8_pod")], [fx("sunk8_configmap"), cm])
    assert d.kill_wait_seconds is None and d.kill_wait_source is None


def test_discover_nothing_known() -> None:
    d = discover(spec(), "tenant-slurm", [fx("sunk8_pod")], [])
    assert d.name is None and d.kill_wait_seconds is None and d.configmap_name is None


def test_discover_ignores_unlabelled_or_keyless_configmaps() -> None:
    unlabelled = copy.deepcopy(fx("sunk8_configmap"))
    del unlabelled["metadata"]["labels"]
    keyless = copy.deepcopy(fx("sunk8_configmap"))
    keyless["data"] = {"other.conf": "x"}
    d = discover(spec(), "tenant-slurm", [fx("sunk8_pod")], [unlabelled, keyless])
    assert d.name is None and d.configmap_name is None


def test_discover_named_configmap_from_scope_target() -> None:
    cm = copy.deepcopy(fx("sunk8_configmap"))
    del cm["metadata"]["labels"]  # found by name, not by label
    s = spec(scope={"target": {"configMap": {"name": "slurm-scheduler-config"}}})
    d = discover(s, "tenant-slurm", [fx("sunk8_pod")], [cm])
    assert d.configmap_name == "slurm-scheduler-config" and d.name == "slurm-scheduler"


def test_discover_named_configmap_reads_the_targets_key_and_notes_a_missing_one() -> None:
    cm = copy.deepcopy(fx("sunk8_configmap"))
    cm["data"] = {"custom.conf": cm["data"]["scheduler.conf"]}
    s = spec(scope={"target": {"configMap": {"name": "slurm-scheduler-config", "key": "custom.conf"}}})
    d = discover(s, "tenant-slurm", [fx("sunk8_pod")], [cm])
    assert d.configmap_name == "slurm-scheduler-config" and d.name == "slurm-scheduler"
    # Named: a labelled one under another name does not stand in for it.
    other = copy.deepcopy(fx("sunk8_configmap"))
    other["metadata"]["name"] = "other"
    d = discover(s, "tenant-slurm", [fx("sunk8_pod")], [other])
    assert d.configmap_name is None
    assert "ConfigMap slurm-scheduler-config (spec.scope.target.configMap.name) not found in tenant-slurm" in d.messages


@pytest.mark.parametrize("target", [
    {"kind": "ArgoCDApplication", "application": {"name": "slurm"}},
    {"kind": "FluxHelmRelease", "helmRelease": {"name": "slurm"}},
])
def test_discover_with_another_target_kind_ignores_configmap_name_and_key(target: dict[str, Any]) -> None:
    # configMap.* is for the SchedulerConfigMap target only: the labelled scheduler.conf is read.
    s = spec(scope={"target": {**target, "configMap": {"name": "absent", "key": "custom.conf"}}})
    d = discover(s, "tenant-slurm", [fx("sunk8_pod")], [fx("sunk8_configmap")])
    assert d.configmap_name == "slurm-scheduler-config" and (d.name, d.name_source) == ("slurm-scheduler", "configMap")
    assert not any("absent" in m for m in d.messages) and not d.errors


def test_discover_several_labelled_configmaps_is_deterministic_and_noted() -> None:
    a, b = fx("sunk8_configmap"), copy.deepcopy(fx("sunk8_configmap"))
    b["metadata"]["name"] = "aaa-scheduler-config"
    b["data"]["scheduler.conf"] = "scheduler:\n  name: other\n"
    d1 = discover(spec(), "tenant-slurm", [fx("sunk8_pod")], [a, b])
    d2 = discover(spec(), "tenant-slurm", [fx("sunk8_pod")], [b, a])
    assert d1.configmap_name == d2.configmap_name == "aaa-scheduler-config"
    assert any("2 ConfigMaps" in m for m in d1.messages)


def test_discover_ready_count_excludes_not_ready_and_terminating() -> None:
    terminating = copy.deepcopy(fx("sunk7_pod"))
    terminating["metadata"]["name"] = "slurm-scheduler-old"
    terminating["metadata"]["deletionTimestamp"] = "2025-05-02T10:00:00Z"
    pods = [fx("sunk7_pod"), fx("sunk7_pod_not_ready"), terminating]
    d = discover(spec(), "tenant-slurm", pods, [])
    assert d.pods_found == 3 and d.ready_replicas == 1


def test_discover_prefers_newest_ready_pod_and_notes_disagreement() -> None:
    old = fx("sunk7_pod")
    new = copy.deepcopy(old)
    new["metadata"]["name"] = "slurm-scheduler-new"
    new["metadata"]["creationTimestamp"] = "2025-06-01T00:00:00Z"
    new["spec"]["containers"][0]["args"] = ["--scheduler-name=tenant-slurm-slurm-scheduler", "--slurm-kill-wait=60s"]
    d = discover(spec(), "tenant-slurm", [old, new], [])
    assert d.kill_wait_seconds == 60
    assert any("disagree" in m for m in d.messages)


def test_discover_service_account_default() -> None:
    pod = copy.deepcopy(fx("sunk7_pod"))
    del pod["spec"]["serviceAccountName"], pod["spec"]["serviceAccount"]
    assert discover(spec(), "tenant-slurm", [pod], []).service_account == "default"


def test_discover_uses_scheduler_namespace_override() -> None:
    d = discover(spec(scheduler={"namespace": "slurm"}), "tenant-slurm", [], [])
    assert d.namespace == "slurm"


def test_discover_malformed_inputs_are_reported_not_raised() -> None:
    pods: list[Any] = [fx("malformed_pod_no_containers"), "junk", None]
    cms: list[Any] = [fx("malformed_scheduler_conf_yaml"), fx("malformed_slurm_conf_configmap"), 7, {"data": "x"}]
    d = discover(spec(), "tenant-slurm", pods, cms)
    assert d.name is None and d.kill_wait_seconds is None
    assert any("not valid YAML" in e for e in d.errors)
    assert any("sixty" in e for e in d.errors)
    assert any("containers" in e for e in d.errors)
    assert d.pods_found == 1


def test_discover_malformed_conf_falls_back_to_args() -> None:
    d = discover(spec(), "tenant-slurm", [fx("sunk7_pod")], [fx("malformed_scheduler_conf_list")])
    assert (d.name, d.name_source) == ("tenant-slurm-slurm-scheduler", "args")
    assert d.errors and "mapping" in d.errors[0]


# ------------------------------------------------------------------ condition and status


def _d(**kw: Any) -> Discovery:
    base: dict[str, Any] = dict(namespace="tenant-slurm", selector="app.kubernetes.io/name=sunk-scheduler")
    base.update(kw)
    return Discovery(**base)


def test_condition_found() -> None:
    status, reason, message = scheduler_condition(
        _d(name="slurm-scheduler", name_source="configMap", ready_replicas=2, pods_found=2, kill_wait_seconds=60, kill_wait_source="args")
    )
    assert (status, reason) == ("True", "SchedulerFound")
    assert "slurm-scheduler" in message and "60" in message


def test_condition_not_found_says_what_to_do() -> None:
    status, reason, message = scheduler_condition(_d())
    assert (status, reason) == ("False", "SchedulerNotFound")
    assert "kubectl get pods -n tenant-slurm -l app.kubernetes.io/name=sunk-scheduler" in message
    assert "scheduler.enabled: true" in message


def test_condition_not_running() -> None:
    status, reason, message = scheduler_condition(_d(name="s", pods_found=1, ready_replicas=0))
    assert (status, reason) == ("False", "SchedulerNotRunning")
    assert "none is Ready" in message


def test_condition_name_unknown() -> None:
    status, reason, message = scheduler_condition(_d(pods_found=1, ready_replicas=1, errors=["ConfigMap x: bad"]))
    assert (status, reason) == ("False", "NameUnknown")
    assert "spec.scheduler.name" in message and "ConfigMap x: bad" in message


def test_condition_quotes_set_based_selector() -> None:
    _, _, message = scheduler_condition(_d(selector="tier in (a,b)"))
    assert "-l 'tier in (a,b)'" in message


def test_to_status() -> None:
    d = discover(spec(), "tenant-slurm", [fx("sunk8_pod")], [fx("sunk8_configmap"), fx("slurm_conf_configmap")])
    assert to_status(d) == SchedulerStatus(
        name="slurm-scheduler", name_source="configMap", kill_wait_seconds=60, kill_wait_source="slurmConf", ready_replicas=1
    )


def test_a_scheduler_crash_looping_names_the_upgrade_order_hazard() -> None:
    """A scheduler pod in CrashLoopBackOff right after a Slurm chart upgrade: SUNK's "upgrade the sunk
    chart first" hazard, named with its fix."""
    crashing = fx("sunk8_pod")
    crashing["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "False"}],
                          "containerStatuses": [{"name": "scheduler", "ready": False, "restartCount": 6, "state": {
                              "waiting": {"reason": "CrashLoopBackOff", "message": "back-off 5m0s restarting"}}}]}
    d = discover(spec(), "tenant-slurm", [crashing], [fx("sunk8_configmap")])
    assert d.crash_looping == ("slurm-scheduler-5c6d7f8b9-k2j4l",) and d.ready_replicas == 0
    status, reason, message = scheduler_condition(d)
    assert (status, reason) == ("False", "SchedulerNotRunning")
    assert "slurm-scheduler-5c6d7f8b9-k2j4l in CrashLoopBackOff" in message
    assert "upgrade the `sunk` chart (operator and CRDs) to the matching release first" in message
    waiting = copy.deepcopy(crashing)
    waiting["status"]["containerStatuses"][0]["state"] = {"waiting": {"reason": "ContainerCreating"}}
    d = discover(spec(), "tenant-slurm", [waiting], [fx("sunk8_configmap")])
    assert d.crash_looping == () and "CrashLoopBackOff" not in scheduler_condition(d)[2]


def test_discover_args_kill_wait_beats_configmap() -> None:
    d = discover(spec(), "tenant-slurm", [fx("sunk7_pod")], [fx("sunk8_configmap_killwait")])
    assert (d.kill_wait_seconds, d.kill_wait_source) == (30, "args")
    assert (d.name, d.name_source) == ("slurm-scheduler", "configMap")


def test_an_unchanged_scheduler_conf_is_parsed_once() -> None:
    """Every reconcile re-reads scheduler.conf: the same text (a new string each read) is not parsed
    again; another text is."""
    text = "scheduler:\n  name: s\n  scope:\n    type: namespace\n    namespaces: [" + ", ".join(
        f"ds-{i}" for i in range(50)) + "]\n"
    first = parse_scheduler_conf(text)
    again = parse_scheduler_conf("".join(list(text)))  # equal, not the same object
    assert again is first and first.name == "s" and first.scope_type == "namespace"
    other = parse_scheduler_conf(text.replace("name: s", "name: t"))
    assert other is not first and other.name == "t"
