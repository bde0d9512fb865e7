"""The Argo CD health check (Lua) for SunkSandboxBinding, executed with lupa.

Argo CD runs health scripts in gopher-lua (Lua 5.1) with the live object as the global
`obj` (JSON numbers become floats) and reads `status` and `message` of the table the script
returns. These tests do the same with lupa's Lua 5.1 runtime; tests/integration/
test_argocd_health_engine.py runs these samples through Argo CD's own engine and expects the same.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

try:  # Lua 5.1 is what Argo CD's gopher-lua implements
    from lupa.lua51 import LuaRuntime
except ImportError:  # pragma: no cover - older lupa builds ship a single runtime
    from lupa import LuaRuntime

ROOT = Path(__file__).resolve().parents[2]
HEALTH_LUA = ROOT / "manifests" / "argocd" / "health.lua"
COMPONENT = ROOT / "manifests" / "argocd" / "kustomization.yaml"
ARGOCD_KEY = "resource.customizations.health.sunksandbox.dev_SunkSandboxBinding"


def to_lua(lua, value, *, floats: bool = False):
    """Python JSON-like value -> Lua value; lists become 1-based sequence tables."""
    if isinstance(value, dict):
        table = lua.table()
        for key, item in value.items():
            table[key] = to_lua(lua, item, floats=floats)
        return table
    if isinstance(value, (list, tuple)):
        table = lua.table()
        for index, item in enumerate(value, start=1):
            table[index] = to_lua(lua, item, floats=floats)
        return table
    if floats and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


def run_health(obj: dict, *, floats: bool = False) -> dict:
    lua = LuaRuntime(unpack_returned_tuples=True)
    lua.globals().obj = to_lua(lua, obj, floats=floats)
    result = lua.execute(HEALTH_LUA.read_text())
    assert result is not None, "health.lua must return the hs table"
    out = {"status": result["status"], "message": result["message"]}
    assert out["status"] in {"Healthy", "Progressing", "Degraded", "Suspended", "Missing", "Unknown"}
    assert isinstance(out["message"], str) and out["message"], "Argo CD shows the message: never empty"
    return out


def condition(type_: str, status: str, reason: str, message: str = "", generation: int | None = 3) -> dict:
    out = {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": "2025-01-01T00:00:00Z",
    }
    if generation is not None:
        out["observedGeneration"] = generation
    return out


def binding(generation: int = 3, status: dict | None = None) -> dict:
    obj = {
        "apiVersion": "sunksandbox.dev/v1alpha1",
        "kind": "SunkSandboxBinding",
        "metadata": {"name": "cpu-sandboxes", "namespace": "tenant-slurm", "generation": generation},
        "spec": {"runner": {"id": "runner-7f3a"}},
    }
    if status is not None:
        obj["status"] = status
    return obj


def full_status(ready: dict, observed: int | None = 3) -> dict:
    others = [
        condition("SchedulerReady", "True", "SchedulerFound", "slurm-scheduler has 1 ready pod"),
        condition("PolicySynced", "True", "PolicyApplied"),
    ]
    status = {"conditions": [*others, ready, condition("ScopeSynced", "False", "ScopeWriteFailed", "x")]}
    if observed is not None:
        status["observedGeneration"] = observed
    return status


@pytest.mark.parametrize("floats", [False, True], ids=["int", "float"])
def test_ready_true_current_generation_is_healthy(floats):
    ready = condition("Ready", "True", "AllSynced", "sandboxes of runner-7f3a go to slurm-scheduler")
    result = run_health(binding(3, full_status(ready)), floats=floats)
    assert result == {"status": "Healthy", "message": "AllSynced: sandboxes of runner-7f3a go to slurm-scheduler"}


def test_ready_true_but_stale_generation_is_progressing():
    ready = condition("Ready", "True", "AllSynced", "fine", generation=2)
    result = run_health(binding(3, full_status(ready, observed=2)))
    assert result["status"] == "Progressing"
    assert "generation 3" in result["message"]
    assert "generation 2" in result["message"]


def test_condition_generation_wins_over_status_generation():
    # status.observedGeneration is current but Ready itself was computed for an older spec.
    ready = condition("Ready", "True", "AllSynced", "fine", generation=2)
    assert run_health(binding(3, full_status(ready, observed=3)))["status"] == "Progressing"
    # Ready is current although status.observedGeneration lags: Ready decides.
    ready = condition("Ready", "True", "AllSynced", "fine", generation=3)
    assert run_health(binding(3, full_status(ready, observed=2)))["status"] == "Healthy"


def test_status_generation_used_when_condition_has_none():
    ready = condition("Ready", "True", "AllSynced", "fine", generation=None)
    assert run_health(binding(3, full_status(ready, observed=3)))["status"] == "Healthy"
    assert run_health(binding(3, full_status(ready, observed=2)))["status"] == "Progressing"


def test_no_generation_observed_anywhere_is_progressing():
    ready = condition("Ready", "True", "AllSynced", "fine", generation=None)
    result = run_health(binding(3, full_status(ready, observed=None)))
    assert result["status"] == "Progressing"


def test_ready_unknown_is_progressing_with_its_message():
    ready = condition("Ready", "Unknown", "Reconciling", "waiting for the scheduler to be found")
    result = run_health(binding(3, full_status(ready)))
    assert result == {"status": "Progressing", "message": "Reconciling: waiting for the scheduler to be found"}


def test_ready_false_is_degraded_with_reason_and_message():
    ready = condition(
        "Ready", "False", "RunnerConflict", "binding other/ssb already manages runner runner-7f3a: delete one"
    )
    result = run_health(binding(3, full_status(ready)))
    assert result == {
        "status": "Degraded",
        "message": "RunnerConflict: binding other/ssb already manages runner runner-7f3a: delete one",
    }


def test_ready_false_without_message_still_says_why():
    ready = condition("Ready", "False", "SchedulerNotFound", "")
    assert run_health(binding(3, full_status(ready))) == {"status": "Degraded", "message": "SchedulerNotFound"}


def test_ready_false_for_old_generation_is_progressing_not_degraded():
    # After a sync that fixes the spec, the old failure must not flash Degraded.
    ready = condition("Ready", "False", "SchedulerNotFound", "no scheduler pods", generation=2)
    assert run_health(binding(3, full_status(ready, observed=2)))["status"] == "Progressing"


def test_no_status_is_progressing():
    result = run_health(binding(1, None))
    assert result["status"] == "Progressing"
    assert "status" in result["message"]


def test_empty_status_is_progressing():
    assert run_health(binding(1, {}))["status"] == "Progressing"


def test_conditions_without_ready_are_progressing():
    status = {
        "observedGeneration": 3,
        "conditions": [condition("SchedulerReady", "True", "SchedulerFound", "ok")],
    }
    result = run_health(binding(3, status))
    assert result["status"] == "Progressing"
    assert "Ready" in result["message"]


def test_deleting_binding_is_progressing():
    ready = condition("Ready", "True", "AllSynced", "fine")
    obj = binding(3, full_status(ready))
    obj["metadata"]["deletionTimestamp"] = "2025-01-01T00:00:00Z"
    assert run_health(obj)["status"] == "Progressing"


def test_healthy_only_when_ready_true_not_other_conditions():
    # Only Ready summarises: a True sub-condition with Ready False stays Degraded.
    ready = condition("Ready", "False", "PolicyRejected", "runner API refused the policy")
    obj = binding(3, full_status(ready))
    assert run_health(copy.deepcopy(obj))["status"] == "Degraded"


def test_component_ships_the_script_under_the_argocd_key():
    doc = yaml.safe_load(COMPONENT.read_text())
    assert doc["kind"] == "Component"
    (generator,) = doc["configMapGenerator"]
    assert generator["name"] == "argocd-cm"
    assert generator["namespace"] == "argocd"
    assert generator["behavior"] == "merge"
    assert generator["options"]["disableNameSuffixHash"] is True
    assert generator["files"] == [f"{ARGOCD_KEY}=health.lua"]


PAUSED_READY = condition("Ready", "False", "Paused", 'paused by the annotation sunksandbox.dev/paused="true"')


def paused(obj: dict, value: str = "true") -> dict:
    obj["metadata"]["annotations"] = {"sunksandbox.dev/paused": value}
    return obj


def test_paused_binding_is_suspended_with_the_operators_message():
    assert run_health(paused(binding(3, full_status(PAUSED_READY)))) == {
        "status": "Suspended", "message": 'Paused: paused by the annotation sunksandbox.dev/paused="true"'}


def test_paused_before_the_operator_acknowledged_is_suspended():
    # Also with a spec edited while paused (the operator observes no generation while paused).
    for status in (None, full_status(condition("Ready", "True", "Ready", "fine"), observed=2)):
        result = run_health(paused(binding(3, status)))
        assert result["status"] == "Suspended"
        assert "waiting for the operator to acknowledge" in result["message"]


def test_only_the_value_true_pauses():
    ready = condition("Ready", "True", "Ready", "fine")
    assert run_health(paused(binding(3, full_status(ready)), "false"))["status"] == "Healthy"
    assert run_health(paused(binding(3, full_status(ready)), "True"))["status"] == "Healthy"


def test_resumed_but_not_yet_reconciled_is_progressing_not_degraded():
    result = run_health(binding(3, full_status(PAUSED_READY)))
    assert result["status"] == "Progressing"
    assert result["message"].startswith("Resuming")


def test_deleting_a_paused_binding_is_progressing():
    obj = paused(binding(3, full_status(PAUSED_READY)))
    obj["metadata"]["deletionTimestamp"] = "2025-01-01T00:00:00Z"
    assert run_health(obj)["status"] == "Progressing"
