"""Discovery over hostile tenant text (issue 31, findings 1-3 and 10): what passes a bound is refused
with SchedulerReady=False InputRefused naming the object and key (or the pod, container and
argument), and everything else the objects say is still used; nothing copied into status carries a
control character."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from sunk_sandbox_operator.api import parse_spec
from sunk_sandbox_operator.core import doctor, scope_doc
from sunk_sandbox_operator.core.scheduler import discover, scheduler_condition, to_status

NS = "tenant-slurm"
SPEC = parse_spec({"runner": {"id": "r", "tokenSecretRef": {"name": "s"}}, "sandboxNamespaces": {"names": ["ds-*"]}})
LABEL = {"app.kubernetes.io/component": "scheduler"}


def pod(args: list[str], env: list[dict[str, Any]] | None = None, name: str = "sched-0") -> dict[str, Any]:
    return {"metadata": {"name": name, "creationTimestamp": "2024-01-01T00:00:00Z"},
            "spec": {"containers": [{"name": "scheduler", "args": args, "env": env or []}]},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}}


def cm(name: str, data: dict[str, str], labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels or {}}, "data": data}


CONF = cm("slurm-scheduler-config", {"scheduler.conf": "scheduler:\n  name: slurm-scheduler\n"}, LABEL)


def test_a_slurm_conf_line_of_140000_spaces_is_refused_and_the_rest_still_read() -> None:
    hostile = cm("evil", {"slurm.conf": "KillWait" + " " * 140_000 + "x\n"})
    good = cm("slurm-conf", {"slurm.conf": "ClusterName=c\nKillWait = 60\n"})
    started = time.thread_time()
    d = discover(SPEC, NS, [pod([])], [CONF, hostile, good])
    assert time.thread_time() - started < 0.5
    assert d.refused == [f"ConfigMap {NS}/evil key slurm.conf: refused as untrusted input: line 1 is 140,009 characters, "
                         "more than the 65,536 the operator reads: shorten it (Slurm's hostlist form, node[001-100], "
                         "keeps node lists short)"]
    assert (d.name, d.name_source) == ("slurm-scheduler", "configMap")          # scheduler.conf still counts
    assert (d.kill_wait_seconds, d.kill_wait_source) == (60, "slurmConf")      # so does the other slurm.conf
    status, reason, message = scheduler_condition(d)
    assert (status, reason) == ("False", "InputRefused")
    assert f"ConfigMap {NS}/evil key slurm.conf" in message and "'slurm-scheduler' (configMap)" in message
    assert to_status(d).name == "slurm-scheduler"


def test_a_refused_slurm_conf_makes_no_default_kill_wait() -> None:
    """It may set KillWait: Slurm's default is no safe guess next to it."""
    d = discover(SPEC, NS, [pod([])], [CONF, cm("evil", {"slurm.conf": "x" * 70_000}),
                                       cm("plain", {"slurm.conf": "ClusterName=c\n"})])
    assert d.kill_wait_seconds is None and d.slurm_kill_wait is None and len(d.refused) == 1


def test_an_argument_expanding_to_200_mb_is_refused_by_index_and_the_other_flags_read() -> None:
    env = [{"name": "X", "value": "A" * 20_000}]
    args = ["--verbose=" + "$(X)" * 10_000, "--scheduler-name=slurm-scheduler", "--slurm-kill-wait=1m30s"]
    started = time.thread_time()
    d = discover(SPEC, NS, [pod(args, env)], [])
    assert time.thread_time() - started < 0.5
    assert d.refused == [f"pod {NS}/sched-0 container 'scheduler' args[0]: refused as untrusted input: it expands past "
                         "the 131,072 Linux allows one argument (MAX_ARG_STRLEN: the container could not start): "
                         "shorten it or its $(VAR) references"]
    assert (d.name, d.kill_wait_seconds) == ("slurm-scheduler", 90)
    assert scheduler_condition(d)[1] == "InputRefused"


def test_a_container_past_its_budget_refuses_the_arguments_past_it() -> None:
    env = [{"name": "X", "value": "A" * 100_000}]
    d = discover(SPEC, NS, [pod(["--a=$(X)", "--b=$(X)", "--c=$(X)", "--scheduler-name=s"], env)], [])
    assert [r.split(":")[0] for r in d.refused] == [f"pod {NS}/sched-0 container 'scheduler' args[2]"]
    assert "past the 262,144 the operator expands for one container's" in d.refused[0]
    assert d.name == "s"  # a literal value is the pod's own text: it costs the budget nothing


def test_an_env_value_past_the_budget_is_refused_and_stays_unexpanded() -> None:
    env = [{"name": "A", "value": "x" * 1000}, {"name": "B", "value": "$(A)" * 200}]
    d = discover(SPEC, NS, [pod(["--scheduler-name=$(B)"], env)], [])
    assert d.refused[0].startswith(f"pod {NS}/sched-0 container 'scheduler' env[1] (B): refused as untrusted input")
    assert d.name is None and "unresolved variable" in d.errors[0]


def test_a_kill_wait_of_30000_digits_is_refused_and_the_name_kept() -> None:
    args = ["--scheduler-name=slurm-scheduler", "--slurm-kill-wait=" + "1" * 30_000 + "x"]
    started = time.thread_time()
    d = discover(SPEC, NS, [pod(args)], [])
    assert time.thread_time() - started < 0.1
    assert d.refused == [f"pod {NS}/sched-0 container 'scheduler' args[1]: --slurm-kill-wait refused as untrusted "
                         "input: a duration of 30,001 characters (at most 64): write it as Go does, e.g. 60s or 1m30s"]
    assert d.name == "slurm-scheduler" and d.kill_wait_seconds is None
    assert len(scheduler_condition(d)[2]) < 2_000


def test_scheduler_conf_strings_past_their_bounds_are_refused_one_by_one() -> None:
    conf = cm("slurm-scheduler-config", {"scheduler.conf": (
        "scheduler:\n  name: slurm-scheduler\n  killWait: '" + "9" * 100 + "s'\n  scope:\n    type: namespace\n")}, LABEL)
    d = discover(SPEC, NS, [pod([])], [conf])
    assert d.refused == [f"ConfigMap {NS}/slurm-scheduler-config key scheduler.conf: scheduler.killWait refused as "
                         "untrusted input: a duration of 101 characters (at most 64): write it as Go does, e.g. 60s "
                         "or 1m30s"]
    assert (d.name, d.scope_type) == ("slurm-scheduler", "namespace")


def test_a_scheduler_name_with_escape_sequences_never_reaches_status() -> None:
    evil = "slurm\x1b]0;pwned\x07\x1b[2J"
    conf = cm("slurm-scheduler-config", {"scheduler.conf": 'scheduler:\n  name: "slurm\\e]0;pwned\\a\\e[2J"\n'},
              LABEL)  # YAML's own escapes: a raw control character is not valid YAML
    d = discover(SPEC, NS, [pod(["--scheduler-name=slurm-scheduler"])], [conf])
    assert (d.name, d.name_source) == ("slurm-scheduler", "args")  # the next source, a name Kubernetes accepts
    assert to_status(d).name == "slurm-scheduler"
    status, reason, message = scheduler_condition(d)
    assert reason == "InputRefused" and "\x1b" not in message and "\x07" not in message
    assert "'slurm\\x1b]0;pwned\\x07\\x1b[2J' refused: it is not a DNS-1123 subdomain" in message

    d = discover(SPEC, NS, [pod([f"--scheduler-name={evil}"])], [])
    assert d.name is None and "\x1b" not in "".join(d.refused) and "args[0]" in d.refused[0]


def test_uppercase_or_overlong_names_are_no_scheduler_names() -> None:
    for name in ("Slurm-Scheduler", "a" * 300):
        d = discover(SPEC, NS, [pod([f"--scheduler-name={name}"])], [])
        assert d.name is None and d.refused and len(d.refused[0]) < 400


def test_a_scope_type_with_control_characters_is_escaped_for_status() -> None:
    read = scope_doc.read_list('scheduler:\n  scope:\n    type: "cl\\e[1muster"\n    namespaces: [a]\n',
                               "scheduler.scope.namespaces")
    assert read.scope_type == "'cl\\x1b[1muster'" and read.values == ["a"]
    assert scope_doc.read_list("scheduler:\n  scope:\n    type: cluster\n", "scheduler.scope.namespaces"
                               ).scope_type == "cluster"


def test_the_doctor_reports_the_same_refusals() -> None:
    from tests.unit.test_doctor import healthy
    d = discover(SPEC, NS, [pod(["--scheduler-name=slurm-scheduler", "--slurm-kill-wait=" + "1" * 100])], [])
    result = {r.id: r for r in doctor.evaluate(dataclasses.replace(healthy(), discovery=d))}["scheduler-name"]
    assert result.ok is False and "refused: pod tenant-slurm/sched-0 container 'scheduler' args[1]" in result.detail


def test_a_refusal_in_any_matching_pod_is_told_and_the_ready_pod_still_used() -> None:
    """A never-scheduled pod matching the podSelector is read too (it may be the rollout's next)."""
    evil = pod(["--slurm-kill-wait=" + "1" * 30_000 + "x"], name="sched-evil")
    evil["status"] = {}
    d = discover(SPEC, NS, [pod(["--scheduler-name=s", "--slurm-kill-wait=60s"]), evil], [])
    assert (d.name, d.kill_wait_seconds) == ("s", 60)
    assert [r.split(":")[0] for r in d.refused] == [f"pod {NS}/sched-evil container 'scheduler' args[0]"]
