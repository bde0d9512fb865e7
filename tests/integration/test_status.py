"""Status bookkeeping on a live binding: observedGeneration, the six conditions, transition times."""

from __future__ import annotations

import re

import pytest

from tests.conftest import wait_for
from tests.integration.conftest import binding_spec, new_runner

pytestmark = pytest.mark.integration

TYPES = ["Ready", "SchedulerReady", "PolicySynced", "ScopeSynced", "GracePeriodSafe", "SlurmReady", "PlacementVerified"]
RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")


def test_observed_generation_and_six_conditions(installed, operator, emulator, binding_ns):
    runner = new_runner(emulator, {})
    installed.create_binding(binding_ns, "b", binding_spec(runner, emulator))
    wait_for(lambda: (installed.binding(binding_ns, "b").get("status") or {}).get("observedGeneration") == 1, 20)
    status = installed.binding(binding_ns, "b")["status"]
    assert [c["type"] for c in status["conditions"]] == TYPES
    for cond in status["conditions"]:
        assert cond["status"] in ("True", "False", "Unknown")
        assert re.match(r"^[A-Z][A-Za-z]+$", cond["reason"]), cond
        assert cond["observedGeneration"] == 1
        assert RFC3339.match(cond["lastTransitionTime"])
        assert cond["message"]

    # a spec change is observed: generation 2 everywhere, transition times kept where status held
    before = {c["type"]: c for c in status["conditions"]}
    installed.custom.patch_namespaced_custom_object("sunksandbox.dev", "v1alpha1", binding_ns, "sunksandboxbindings",
                                                    "b", {"spec": {"partition": "other"}})
    wait_for(lambda: installed.binding(binding_ns, "b")["status"].get("observedGeneration") == 2, 20)
    after = {c["type"]: c for c in installed.binding(binding_ns, "b")["status"]["conditions"]}
    for ctype, cond in after.items():
        assert cond["observedGeneration"] == 2
        if cond["status"] == before[ctype]["status"]:
            assert cond["lastTransitionTime"] == before[ctype]["lastTransitionTime"], ctype
    wait_for(lambda: emulator.state.runners[runner]["policy"]["base"]["metadata"]["annotations"]
             ["sunk.coreweave.com/partition"] == "other", 20)


def test_a_resync_interval_below_the_operators_floor_is_raised_and_ready_says_so(installed, operator, emulator,
                                                                                 binding_ns):
    """The session operator's floor is 1s (tests/conftest.py FAST_RESYNC); the binding asks 500ms."""
    installed.create_binding(binding_ns, "fast", binding_spec(new_runner(emulator, {}), emulator,
                                                               resyncInterval="500ms"))
    note = ("note: spec.resyncInterval 500ms is below the operator's minimum (--min-resync-interval 1s): "
            "resynced every 1s")

    def ready() -> dict:
        conds = (installed.binding(binding_ns, "fast").get("status") or {}).get("conditions") or []
        return next((c for c in conds if c["type"] == "Ready"), {})
    wait_for(lambda: note in ready().get("message", ""), 20, lambda: f"Ready: {ready()}")
    assert ready()["status"] == "True", ready()  # a note, not a failure
    out = installed.kubectl("describe", "ssb", "fast", "-n", binding_ns).stdout
    assert "below the operator's minimum" in " ".join(out.split()), out
