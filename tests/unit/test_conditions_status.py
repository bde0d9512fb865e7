from sunk_sandbox_operator.core import conditions as c
from sunk_sandbox_operator.core import compose as st

T0, T1 = "2026-11-30T00:00:00Z", "2026-11-30T00:05:00Z"


def test_transition_time_changes_only_on_status_flip():
    conds = c.set_condition([], "PolicySynced", "False", "APIUnavailable", "down", 1, T0)
    conds = c.set_condition(conds, "PolicySynced", "False", "PermissionDenied", "403", 2, T1)
    assert conds[0]["lastTransitionTime"] == T0 and conds[0]["reason"] == "PermissionDenied"
    assert conds[0]["observedGeneration"] == 2
    conds = c.set_condition(conds, "PolicySynced", "True", "Synced", "ok", 2, T1)
    assert conds[0]["lastTransitionTime"] == T1


def test_initial_conditions_all_unknown_not_reconciled():
    conds = c.initial(3, T0)
    assert [x["type"] for x in conds] == ["Ready", "SchedulerReady", "PolicySynced", "ScopeSynced",
                                          "GracePeriodSafe", "SlurmReady", "PlacementVerified"]
    assert all(x["status"] == "Unknown" and x["reason"] == "NotReconciled" for x in conds)


def _all(status_by_type):
    conds = []
    for t, (s, r) in status_by_type.items():
        conds = c.set_condition(conds, t, s, r, f"{t} {r}", 1, T0)
    return conds


OK = {"SchedulerReady": ("True", "SchedulerFound"), "PolicySynced": ("True", "Synced"),
      "ScopeSynced": ("True", "Synced"), "GracePeriodSafe": ("True", "Safe"),
      "PlacementVerified": ("Unknown", "NoSandboxPods")}


def test_ready_true_when_placement_unknown():
    assert c.ready(_all(OK))[0] == "True"


def test_ready_false_names_first_failing_reason():
    conds = _all({**OK, "ScopeSynced": ("False", "Forbidden"), "GracePeriodSafe": ("False", "GracePeriodTooLong")})
    assert c.ready(conds)[:2] == ("False", "Forbidden")


def test_false_beats_earlier_unknown():
    conds = _all({**OK, "SchedulerReady": ("Unknown", "NotReconciled"), "PlacementVerified": ("False", "PolicyNotPropagated")})
    assert c.ready(conds)[:2] == ("False", "PolicyNotPropagated")


def test_unknown_input_makes_ready_unknown():
    conds = _all({**OK, "GracePeriodSafe": ("Unknown", "KillWaitUnknown")})
    assert c.ready(conds)[:2] == ("Unknown", "KillWaitUnknown")


def test_compose_is_stable_and_patch_none_when_unchanged():
    parts = [st.Part("PolicySynced", "True", "Synced", "ok", "policy", {"etag": "e1"})]
    first = st.compose({}, parts, 1, T0)
    second = st.compose(first, parts, 1, T1)
    assert first == second
    assert st.merge_patch(first, second) is None
    assert first["observedGeneration"] == 1 and first["policy"] == {"etag": "e1"}


def test_merge_patch_removes_and_changes():
    old = {"a": {"b": 1, "c": 2}, "d": [1], "e": 1}
    new = {"a": {"b": 1, "c": 3}, "d": [2]}
    assert st.merge_patch(old, new) == {"a": {"c": 3}, "d": [2], "e": None}


def test_without_volatile_ignores_check_times():
    a = {"policy": {"etag": "x", "lastCheckedTime": T0}}
    b = {"policy": {"etag": "x", "lastCheckedTime": T1}}
    assert st.without_volatile(a) == st.without_volatile(b)
