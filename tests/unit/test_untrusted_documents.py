"""Each tenant-written document kind refuses the alias bomb through core/untrusted, hurting only its binding.

Scheduler discovery: the error names the ConfigMap, the other sources still count, it never raises.
"""

from __future__ import annotations

import copy

import pytest

from sunk_sandbox_operator.adapters import targets
from sunk_sandbox_operator.api.reasons import ScopeSynced
from sunk_sandbox_operator.api.spec import parse_spec
from sunk_sandbox_operator.controller import scope
from sunk_sandbox_operator.core import app_values as av
from sunk_sandbox_operator.core import ledger as lg
from sunk_sandbox_operator.core import scope_doc, untrusted
from sunk_sandbox_operator.core.scheduler import discover, scheduler_condition
from sunk_sandbox_operator.core.scheduler_conf import parse_scheduler_conf

from tests.unit.fakes import FakeKube, binding_body, discovery, harness_fixture, namespace  # noqa: F401 (fixture)
from tests.unit.test_untrusted import BOMB

PATH = "scheduler.scope.namespaces"
REFUSED = "refused as untrusted input: it holds a YAML alias (`*l0` at line 7, column 10)"
OURS = lg.Ledger({"slurm/b": lg.Entry(("ds-a",), ())})
CONF = "scheduler:\n  scope:\n    type: namespace\n    namespaces: [team]\n"


@pytest.fixture
def scans(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    seen: list[int] = []
    scan = untrusted._scan
    monkeypatch.setattr(untrusted, "_scan", lambda text: (seen.append(len(text)), scan(text))[1])
    return seen


# ---------------------------------------------------------------- scheduler discovery


def _scheduler_objects(conf: str) -> tuple[list[dict], list[dict]]:
    pod = {"metadata": {"name": "s-0", "namespace": "slurm", "labels": {"app.kubernetes.io/name": "sunk-scheduler"}},
           "spec": {"containers": [{"name": "scheduler", "args": ["--scheduler-name=from-args"]}]},
           "status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    cm = {"metadata": {"name": "slurm-scheduler-config", "namespace": "slurm",
                       "labels": {"app.kubernetes.io/component": "scheduler"}}, "data": {"scheduler.conf": conf}}
    return [pod], [cm]


def test_discovery_refuses_the_bomb_naming_the_configmap(scans: list[int]) -> None:
    spec = parse_spec({"runner": {"id": "r", "tokenSecretRef": {"name": "s"}}, "sandboxNamespaces": {"names": ["ds-*"]}})
    d = discover(spec, "slurm", *_scheduler_objects(BOMB))
    assert d.errors == [f"ConfigMap slurm/slurm-scheduler-config key scheduler.conf: scheduler.conf {REFUSED}, and "
                        "the operator never expands aliases in a tenant-written document: write it without anchors "
                        "and aliases (repeat the values where they are used)"]
    assert (d.name, d.name_source, d.scope_type) == ("from-args", "args", None)   # the other sources still count
    status, reason, message = scheduler_condition(d)
    assert "ConfigMap slurm/slurm-scheduler-config key scheduler.conf" in message and "`*l0`" in message
    assert scans == [len(BOMB)]


@pytest.mark.parametrize("conf, fragment", [
    ("scheduler:\n  name: s\n  when: 2024-13-45\n", "not valid YAML: month must be in 1..12"),    # ValueError
    ("scheduler:\n  name: s\n  x: 1" + ":59" * 200 + ".5\n", "not valid YAML"),                # OverflowError
    ("scheduler:\n  name: s\n  x: 1" + ":59" * untrusted.MAX_INT_CHARS + "\n", "an integer of"),
    ("scheduler:\n  name: s\n  x: " + "[" * 200 + "]" * 200 + "\n", "nests more than"),
])
def test_discovery_reports_what_it_cannot_read_and_never_raises(conf: str, fragment: str) -> None:
    assert fragment in parse_scheduler_conf(conf).error
