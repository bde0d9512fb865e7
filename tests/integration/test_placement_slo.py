"""The placement SLO against the real API server: a new sandbox namespace is observed once in
ssb_placement_ready_seconds when the scheduler, rolled onto a list holding it, is Ready — not before —
with the stage that took longest.

The control plane runs no controller-manager: the test plays the Deployment controller
(`roll_out`), a few seconds after the operator's roll, as a scheduler's restart would take.
"""

from __future__ import annotations

import re
import time
import uuid

import pytest

from sunk_sandbox_operator.core.scope.template import scope_hash
from tests.conftest import assert_stays, wait_for
from tests.integration.conftest import (binding_spec, create_token_secret, grant_secret_read, make_scheduler,
                                        new_runner, roll_out)

pytestmark = pytest.mark.integration

HASH = "sunksandbox.dev/scope-hash"
RESTART_SECONDS = 4.0  # the scheduler's simulated restart: the roll → rolled out and Ready


def observed(operator) -> dict[str, tuple[float, float]]:
    """stage -> (count, sum) of ssb_placement_ready_seconds."""
    out: dict[str, list[float]] = {}
    for m in re.finditer(r'^ssb_placement_ready_seconds_(count|sum)\{stage="(\w+)"\} (\S+)$', operator.metrics(), re.M):
        out.setdefault(m.group(2), [0.0, 0.0])[0 if m.group(1) == "count" else 1] = float(m.group(3))
    return {k: (v[0], v[1]) for k, v in out.items()}


def template_hash(kube, ns: str) -> str | None:
    dep = kube.apps.read_namespaced_deployment("slurm-scheduler", ns)
    return (dep.spec.template.metadata.annotations or {}).get(HASH)


def listed_hash(kube, ns: str, names: list[str]) -> str | None:
    """The hash of the list once it holds `names` (None before: a predicate of wait_for)."""
    import yaml

    conf = yaml.safe_load(kube.core.read_namespaced_config_map("slurm-scheduler-config", ns).data["scheduler.conf"])
    values = conf["scheduler"]["scope"].get("namespaces") or []
    return scope_hash(values) if set(names) <= set(values) else None


def test_a_new_namespace_is_observed_once_when_the_scheduler_runs_its_list_ready(installed, operator, emulator, ns):
    grant_secret_read(installed, ns)
    create_token_secret(installed, ns)
    make_scheduler(installed, ns, scope_namespaces=[ns])
    roll_out(installed, ns)
    prefix = "slo" + uuid.uuid4().hex[:6]
    spec = binding_spec(new_runner(emulator, {}), emulator, sandboxNamespaces={"names": [f"{prefix}-*"]},
                        scope={"minRollInterval": "1s"})
    installed.create_binding(ns, "b", spec)
    installed.wait_condition(ns, "b", "ScopeSynced", "True", timeout=30)
    before = observed(operator)

    created = time.time()
    name = f"{prefix}-a"
    installed.create_namespace(name)
    wait_for(lambda: (h := listed_hash(installed, ns, [name])) is not None and template_hash(installed, ns) == h, 30,
             lambda: f"the roll onto the list holding {name}")
    # Listed, permitted, rolled, but the scheduler not restarted yet: not placeable, nothing observed.
    def nothing_new() -> None:
        assert observed(operator) == before, "observed before the rollout was Ready"
    assert_stays(nothing_new, RESTART_SECONDS)
    roll_out(installed, ns)
    ready = time.time()

    def one_more() -> bool:
        return sum(c for c, _ in observed(operator).values()) == sum(c for c, _ in before.values()) + 1
    wait_for(one_more, 10, lambda: f"one observation: {observed(operator)} (before {before})")
    after = observed(operator)
    count, total = after["rolled"]
    count0, total0 = before.get("rolled", (0.0, 0.0))
    assert count == count0 + 1, after  # the restart dominated
    seconds = total - total0
    print(f"\nnamespace created -> placeable: {seconds:.1f} s observed (stage rolled)")
    # creationTimestamp has one second's resolution; the operator looks at the rollout every second
    assert ready - created - 1.0 <= seconds <= time.time() - created + 1.0, (seconds, ready - created)
    def once() -> None:
        assert observed(operator) == after, "observed twice"
    assert_stays(once, 3)
