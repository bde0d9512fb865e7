"""The pure decide functions the controller calls: core.policy.decide, core.scope.plan (decide_list,
restore_plan), core.scope.report (report, section), core.scope.template (decide_roll) and
core.scope.grants (plan_grants, names)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from sunk_sandbox_operator.api.keys import BINDING_LABEL, BINDING_UID_LABEL, MANAGED_BY_LABEL
from sunk_sandbox_operator.api.spec import LabelSelector, parse_spec
from sunk_sandbox_operator.api.status import OwnedPath
from sunk_sandbox_operator.core.scope import grants as g
from sunk_sandbox_operator.core.policy import decide as pd
from sunk_sandbox_operator.core.scope import plan as sc
from sunk_sandbox_operator.core.scope import report as sr
from sunk_sandbox_operator.core.scope import list_loop
from sunk_sandbox_operator.core.scope import template as st
from sunk_sandbox_operator.core.scope.errors import Finding
from sunk_sandbox_operator.core.scope.grant_loop import GrantState
from sunk_sandbox_operator.core.scope.list_loop import ListState
from sunk_sandbox_operator.core.scope.roll_loop import RollState
from sunk_sandbox_operator.core.scope.target_ref import TargetRef

HASH = "sunksandbox.dev/scope-hash"
PARTITION = 'base.metadata.annotations["sunk.coreweave.com/partition"]'


def spec(**overrides):
    return parse_spec({"runner": {"id": "r", "tokenSecretRef": {"name": "s"}}, "partition": "a",
                       "sandboxNamespaces": {"names": ["ds-*"]}, **overrides})


# ---------------------------------------------------------------- core.policy.decide


def test_decide_without_a_scheduler_name_reports_and_writes_nothing() -> None:
    d = pd.decide(pd.PolicyObservation(spec(), None, {}, "1", []), "T")
    assert d.write is None and d.report.reason == "SchedulerNameUnknown" and d.report.status == "False"


def test_decide_with_a_blank_scheduler_name_is_an_invalid_binding() -> None:
    d = pd.decide(pd.PolicyObservation(spec(), "  ", {}, "1", []), "T")
    assert d.write is None and d.report.reason == "InvalidBinding"


def test_decide_leaves_a_malformed_policy_alone() -> None:
    d = pd.decide(pd.PolicyObservation(spec(), "sched", {"base": []}, "7", []), "T")
    assert d.write is None and d.report.reason == "InvalidPolicy" and "left alone" in d.report.message
    assert d.report.section == {"etag": "7"}


def test_decide_writes_a_change_and_written_reports_it() -> None:
    obs = pd.PolicyObservation(spec(), "sched", {}, "1", [])
    d = pd.decide(obs, "T1")
    assert d.report is None and not d.drift
    assert d.write == {"base": {"spec": {"schedulerName": "sched"},
                                "metadata": {"annotations": {"sunk.coreweave.com/partition": "a"}}}}
    assert {o.path for o in d.owned} >= {"base.spec.schedulerName", PARTITION}
    assert any("schedulerName" in c for c in d.changes)
    r = pd.written(obs, d, "2", "T2")
    assert (r.status, r.reason) == ("True", "Synced")
    assert "scheduler 'sched' with 1 pinned annotation(s); applies to new sandboxes only" in r.message
    assert r.section["etag"] == "2" and r.section["lastAppliedTime"] == r.section["lastCheckedTime"] == "T2"
    assert r.section["owned"] == [o.wire() for o in d.owned]


def test_decide_on_a_policy_holding_our_values_confirms_without_writing() -> None:
    first = pd.decide(pd.PolicyObservation(spec(), "sched", {}, "1", []), "T1")
    d = pd.decide(pd.PolicyObservation(spec(), "sched", first.write, "2", first.owned), "T2")
    assert d.write is None and (d.report.status, d.report.reason) == ("True", "Synced")
    assert d.report.section["etag"] == "2" and d.report.section["lastCheckedTime"] == "T2"
    assert "lastAppliedTime" not in d.report.section


def test_decide_calls_it_drift_only_when_someone_changed_what_we_own() -> None:
    first = pd.decide(pd.PolicyObservation(spec(), "sched", {}, "1", []), "T1")
    edited = {"base": {"spec": {"schedulerName": "other"}, "metadata": first.write["base"]["metadata"]}}
    d = pd.decide(pd.PolicyObservation(spec(), "sched", edited, "2", first.owned), "T2")
    assert d.drift and d.write["base"]["spec"]["schedulerName"] == "sched"
    assert pd.written(pd.PolicyObservation(spec(), "sched", edited, "2", first.owned), d, "3", "T3").reason == \
        "DriftCorrected"
    # A spec change (new partition) is a change of what we want, not drift.
    changed = pd.decide(pd.PolicyObservation(spec(partition="b"), "sched", first.write, "2", first.owned), "T2")
    assert changed.write is not None and not changed.drift


def test_decide_in_observe_mode_reports_what_it_would_change() -> None:
    d = pd.decide(pd.PolicyObservation(spec(mode="Observe"), "sched", {}, "1", []), "T")
    assert d.write is None and (d.report.status, d.report.reason) == ("False", "Drifted")
    assert d.report.message.startswith("Observe mode, nothing written; the operator would change: ")
    assert "owned" not in d.report.section


@pytest.mark.parametrize("code, reason", [
    ("unauthenticated", "Unauthenticated"), ("permission_denied", "PermissionDenied"), ("not_found", "RunnerNotFound"),
    ("invalid_argument", "PolicyRejected"), ("out_of_range", "PolicyRejected"), ("unimplemented", "APIUnavailable"),
    ("unavailable", "APIUnavailable"), ("internal", "APIUnavailable"),
])
def test_api_errors_by_connect_code(code: str, reason: str) -> None:
    r = pd.api_error(code, "the server said so")
    assert (r.status, r.reason) == ("False", reason)
    if reason == "PolicyRejected":
        assert "the server said so" in r.message


def test_conflict_exhausted_and_the_transient_reasons() -> None:
    r = pd.conflict_exhausted(6)
    assert r.reason == "ConflictRetriesExhausted" and "6 times in a row" in r.message
    assert {"APIUnavailable", "ConflictRetriesExhausted", "CredentialsMissing", "RecordFailed"} == {str(x) for x in pd.TRANSIENT}


def test_policy_section_merges_into_the_previous_one_through_the_model() -> None:
    prev = {"etag": "1", "lastAppliedTime": "T0", "owned": [{"path": "base", "value": "{}"}], "warnings": ["w"]}
    assert pd.section(prev, {"etag": "2", "warnings": []}) == {
        "etag": "2", "lastAppliedTime": "T0", "owned": [{"path": "base", "value": "{}"}]}  # empty lists omitted
    assert pd.section(None, {"etag": None}) == {}                                        # None: unset
    with pytest.raises(ValueError):
        pd.section({}, {"owned": [{"path": "x"}]})                                       # the model validates


# ---------------------------------------------------------------- core.scope.plan: decide_list


REF = TargetRef("SchedulerConfigMap", "slurm", "cm", "scheduler.scope.namespaces", "scheduler.conf")


def obs(values, sandbox=(), *, always=(), pre=None, added=(), observe=False, scope_type="namespace", error=None):
    return sc.ScopeObservation(target="ConfigMap slurm/cm", values=values, scope_type=scope_type, error=error,
                               sandbox=frozenset(sandbox), always=tuple(always),
                               preexisting=tuple(pre) if pre is not None else None, added=tuple(added),
                               observe=observe)


def test_decide_list_a_first_write_records_what_was_there() -> None:
    d = sc.decide_list(obs(["slurm"], {"ds-a", "ds-b"}))
    assert d.write == ["ds-a", "ds-b", "slurm"] and d.final == d.write
    assert d.preexisting == ["slurm"] and d.added == ["ds-a", "ds-b"]
    assert d.diff == sc.ScopeDiff(added=["ds-a", "ds-b"], removed=[]) and not d.cluster and d.error is None


def test_decide_list_unchanged_keeps_the_list_as_is() -> None:
    d = sc.decide_list(obs(["slurm", "ds-a", "ds-a"], {"ds-a"}, pre=["slurm"], added=["ds-a"]))
    assert d.write is None and d.final == ["slurm", "ds-a", "ds-a"]  # order and duplicates are not changes
    assert d.added == ["ds-a"] and d.preexisting == ["slurm"]


def test_decide_list_removes_only_our_stale_entries() -> None:
    d = sc.decide_list(obs(["admin", "ds-gone", "ds-a", "slurm"], {"ds-a"}, pre=["slurm"], added=["ds-gone", "ds-a"]))
    assert d.write == ["admin", "ds-a", "slurm"] and d.diff.removed == ["ds-gone"] and d.added == ["ds-a"]


def test_decide_list_observe_writes_nothing_and_keeps_the_ledger() -> None:
    d = sc.decide_list(obs(["slurm"], {"ds-a"}, observe=True, added=["x"]))
    assert d.write is None and d.final == ["slurm"] and d.added == ["x"] and d.preexisting == ["slurm"]


def test_decide_list_cluster_scope_and_errors() -> None:
    d = sc.decide_list(obs(None, {"ds-a"}, scope_type="cluster", pre=["p"], added=["a"]))
    assert d.cluster and d.write is None and d.preexisting == ["p"] and d.added == ["a"]
    e = sc.decide_list(obs(None, error="not a list"))
    assert e.write is None and e.error == "ConfigMap slurm/cm: not a list; it was left untouched: fix it by hand"


# ---------------------------------------------------------------- core.scope.report: report and section


def kept(o: sc.ScopeObservation) -> ListState:
    """What the list loop keeps after deciding over `o` (its first wake)."""
    return list_loop.decide(list_loop.ListObservation(o, REF, "slurm/b"), ListState()).memory


def test_report_synced_pending_problem_cluster_and_invalid() -> None:
    o = obs(["slurm"], {"ds-a"})
    r = sr.report(sr.Results(kept(o), RollState(note="note."), GrantState()), prev=None, now="T")
    assert (r.status, r.reason) == ("True", "Synced") and r.message.endswith("every sandbox namespace included. note.")
    assert r.section == {"type": "namespace", "namespaceCount": 2, "missing": [], "missingCount": 0, "addedCount": 1,
                         "lastSyncTime": "T"}
    p = sr.report(sr.Results(kept(o), RollState(), GrantState(problem=Finding("Forbidden", "no RBAC."))), prev=None,
                  now="T")
    assert (p.status, p.reason, p.message) == ("False", "Forbidden", "no RBAC.")
    many = obs(["slurm"], {f"ds-{i}" for i in range(7)}, observe=True)
    pending = sr.report(sr.Results(kept(many), RollState(), GrantState()), prev=None, now="T")
    assert (pending.status, pending.reason) == ("False", "Pending")
    assert "7 sandbox namespace(s) missing" in pending.message and "Observe mode" in pending.message
    assert pending.message.rstrip(".").endswith("…")
    assert pending.section["missing"] == [f"ds-{i}" for i in range(5)] and pending.section["missingCount"] == 7
    c = obs(None, scope_type="cluster")
    assert sr.report(sr.Results(kept(c), RollState(), GrantState()), prev=None, now="T").reason == "ClusterScope"
    bad = kept(obs(None, error="broken"))
    invalid = sr.report(sr.Results(bad, RollState(), GrantState()), prev={"namespaceCount": 3, "lastSyncTime": "T0"},
                        now="T")
    assert (invalid.status, invalid.reason) == ("False", "InvalidConfig")
    assert invalid.section["namespaceCount"] == 3 and invalid.section["lastSyncTime"] == "T0"
    assert sr.report(sr.Results(ListState(), RollState(), GrantState()), prev=None, now="T") is None  # not looked yet


def test_section_moves_last_sync_time_only_when_something_changed() -> None:
    f = list_loop.ListFacts("ConfigMap slurm/cm", None, "namespace", False, count=1, added_count=1)
    first = sr.section(None, f, now="T1")
    assert first["lastSyncTime"] == "T1"
    same = sr.section(first, f, now="T2")
    assert same == first                                                 # a confirming resync: no churn
    wrote = sr.section(first, f, now="T3", wrote=True)
    assert wrote["lastSyncTime"] == "T3"
    other = sr.section(first, replace(f, count=2), now="T4")
    assert other["lastSyncTime"] == "T4" and other["namespaceCount"] == 2
    err = sr.section(other, None, now="T5")
    assert err == other                                                  # an error keeps what was known
    wrote_list = kept(obs(["slurm"], {"ds-a"}))                          # a list wake that wrote
    after = sr.report(sr.Results(wrote_list, RollState(), GrantState()), prev=None, now="T6")
    assert after is not None and after.section["lastSyncTime"] == "T6"
    later = sr.report(sr.Results(wrote_list, RollState(), GrantState()), prev=after.section, now="T7", after_list=False)
    assert later is not None and later.section == after.section          # another loop's wake: that write is not new


# ---------------------------------------------------------------- core.scope.template: decide_roll; restore_plan


SELECTOR = LabelSelector(match_labels={"app": "sched"})


def dep(name: str, labels: dict, hash_value: str | None = None) -> dict:
    meta = {"labels": labels} | ({"annotations": {HASH: hash_value}} if hash_value else {})
    return {"metadata": {"name": name}, "spec": {"template": {"metadata": meta}}}


def test_decide_roll() -> None:
    values = ["a", "b"]
    want = st.scope_hash(values)
    none = st.decide_roll([dep("x", {"app": "other"})], SELECTOR, "slurm", values, wrote=True, hash_annotation=HASH)
    assert none.workload is None and "No Deployment or StatefulSet in slurm" in none.note
    roll = st.decide_roll([dep("z", {"app": "sched"}), dep("y", {"app": "sched"})], SELECTOR, "slurm", values,
                          wrote=True, hash_annotation=HASH)
    assert (roll.workload, roll.hash, roll.note) == ("y", want, None)    # the first by name
    assert st.decide_roll([dep("y", {"app": "sched"}, want)], SELECTOR, "slurm", values, wrote=True,
                          hash_annotation=HASH) == st.RollDecision()        # already rolled onto this list
    assert st.decide_roll([dep("y", {"app": "sched"})], SELECTOR, "slurm", values, wrote=False,
                          hash_annotation=HASH) == st.RollDecision()        # never rolled, nothing written: alone
    stale = st.decide_roll([dep("y", {"app": "sched"}, "old")], SELECTOR, "slurm", values, wrote=False,
                           hash_annotation=HASH)
    assert (stale.workload, stale.hash) == ("y", want)                    # our hash, reverted: corrected


def test_restore_plan() -> None:
    p = sc.restore_plan(["slurm", "ds-a", "keep", "admin"], ["keep", "absent"], ["slurm"], ["ds-a", "keep"])
    assert p.new_list == ["admin", "keep", "slurm"] and p.diff.removed == ["ds-a"] and p.diff.added == []
    assert "absent" not in p.new_list                                      # alwaysInclude is not re-added
    nothing = sc.restore_plan(["slurm"], [], None, [])
    assert not nothing.changed and nothing.new_list == ["slurm"]


def test_change_message_names_a_few() -> None:
    diff = sc.ScopeDiff(added=[f"ds-{i:02d}" for i in range(12)], removed=["old"])
    msg = sc.change_message("T", diff)
    assert msg.startswith("T: added ds-00, ") and "(+2 more)" in msg and msg.endswith("; removed old")


# ---------------------------------------------------------------- core.scope.grants


def test_binding_label_and_rolebinding_name_fit() -> None:
    label = g.binding_label("n" * 63, "b" * 253)
    assert len(label) <= 63 and label[-1].isalnum()
    assert g.binding_label("slurm", "b") == "slurm.b"
    other = ("n" * 63, "b" * 252 + "c")
    assert g.binding_label(*other) != label
    assert g.selector("slurm", "b") == f"{BINDING_LABEL}=slurm.b"
    uid = "6f1c2d3e-0000-4000-8000-000000000001"
    assert g.rolebinding_name(uid).startswith("sunk-scheduler-") and len(g.rolebinding_name(uid)) <= 63


def test_rolebinding_names_of_two_bindings_never_collide() -> None:
    """`team`/`x-prod` and `team-x`/`prod` were both sunk-scheduler-team-x-prod: one tenant blocked
    (409 counted as granted) or deleted (by name) the other's grant. Names come from the UID now."""
    assert g.legacy_rolebinding_name("team", "x-prod") == g.legacy_rolebinding_name("team-x", "prod")
    assert g.rolebinding_name("uid-of-team/x-prod") != g.rolebinding_name("uid-of-team-x/prod")
    a = g.rolebinding("team", "x-prod", "uid-a", "ds-1", "role", "sa", "team")
    b = g.rolebinding("team-x", "prod", "uid-b", "ds-1", "role", "sa", "team-x")
    assert a["metadata"]["name"] != b["metadata"]["name"]
    assert g.is_ours(a, "uid-a", g.legacy_rolebinding_name("team", "x-prod")) and not g.is_ours(b, "uid-a", "x")


def test_rolebinding_body() -> None:
    rb = g.rolebinding("slurm", "b", "u1", "ds-a", "role", "sa", "sched-ns")
    assert rb["metadata"] == {"name": g.rolebinding_name("u1"), "namespace": "ds-a",
                              "labels": {BINDING_LABEL: "slurm.b", BINDING_UID_LABEL: "u1",
                                         MANAGED_BY_LABEL[0]: MANAGED_BY_LABEL[1]}}
    assert rb["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "role"}
    assert rb["subjects"] == [{"kind": "ServiceAccount", "name": "sa", "namespace": "sched-ns"}]


def _want(role: str = "role", uid: str = "u1"):
    return lambda ns: g.rolebinding("slurm", "b", uid, ns, role, "sa", "slurm")


LEGACY = g.legacy_rolebinding_name("slurm", "b")


def test_plan_grants_from_a_fresh_list() -> None:
    name = g.rolebinding_name("u1")
    found = [_want()("ds-a"), _want("old-role")("ds-b"), _want()("gone")]
    plan = g.plan_grants(role="role", wanted=["ds-a", "ds-b", "ds-c"], known={"stale-belief"}, found=found,
                         want_body=_want(), uid="u1", legacy_name=LEGACY)
    assert plan.have == {"ds-a"}                                            # the fresh list wins over the belief
    assert sorted(plan.to_delete) == [("ds-b", name, None), ("gone", name, None)]  # out of date, or not wanted
    assert plan.to_create == ["ds-b", "ds-c"] and not plan.empty


def test_plan_grants_counts_and_deletes_only_its_own() -> None:
    """A RoleBinding carrying our label but another binding's UID (a look-alike, or the binding of the
    same name before it was deleted and created again) is neither counted as granted nor deleted."""
    look_alike = _want(uid="u-other")("ds-a")
    legacy = {**_want()("ds-b"), "metadata": {"name": LEGACY, "namespace": "ds-b", "uid": "x",
                                             "labels": {BINDING_LABEL: "slurm.b", MANAGED_BY_LABEL[0]: MANAGED_BY_LABEL[1]}}}
    plan = g.plan_grants(role="role", wanted=["ds-a", "ds-b"], known=None, found=[look_alike, legacy],
                         want_body=_want(), uid="u1", legacy_name=LEGACY)
    assert plan.have == set() and plan.to_create == ["ds-a", "ds-b"]
    assert plan.to_delete == [("ds-b", LEGACY, "x")]                        # ours, by the name we once gave


def test_plan_grants_from_what_we_believe_we_hold() -> None:
    name = g.rolebinding_name("u1")
    plan = g.plan_grants(role="role", wanted=["ds-a", "ds-c"], known={"ds-a", "ds-b"}, found=None,
                         want_body=_want(), uid="u1", legacy_name=LEGACY)
    assert plan.to_delete == [("ds-b", name, None)] and plan.to_create == ["ds-c"]
    assert g.plan_grants(role="role", wanted=["ds-a"], known={"ds-a"}, found=None, want_body=_want(),
                         uid="u1", legacy_name=LEGACY).empty


def test_plan_grants_without_a_role_removes_all_of_ours() -> None:
    name = g.rolebinding_name("u1")
    plan = g.plan_grants(role="", wanted=["ds-a"], known=None, found=[_want()("ds-a")], want_body=_want(""),
                         uid="u1", legacy_name=LEGACY)
    assert plan.to_delete == [("ds-a", name, None)] and plan.to_create == [] and plan.have == set()


def test_grants_go_only_where_the_binding_matches() -> None:
    """Whatever else the list holds (kube-system, the operator's namespace, an admin's entries,
    names a tenant wrote into its own target) gets no grant."""
    listed = ["ds-a", "kube-system", "sunk-sandbox-operator-system", "admin-ns", "tenant", "other-team"]
    system = lambda ns: ns.startswith("kube-") or ns == "sunk-sandbox-operator-system"  # noqa: E731
    reach = lambda ns: ns == "tenant"  # noqa: E731
    assert g.grantable(listed, {"ds-a"}, {"tenant", "other-team"}, reach, system) == ["ds-a", "tenant"]
    # A system namespace the binding names itself is granted only where the settings let it reach it.
    assert g.grantable(["kube-system"], {"kube-system"}, set(), reach, system) == []
    assert g.grantable(["kube-system"], {"kube-system"}, set(), lambda ns: True, system) == ["kube-system"]


def test_owned_path_wire_shape_is_what_status_holds() -> None:
    assert OwnedPath(path="p", value="v").wire() == {"path": "p", "value": "v"}
