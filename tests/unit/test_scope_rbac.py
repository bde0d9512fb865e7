"""core.scope.rbac: when our RoleBinding alone permits the scheduler (no review there), by RBAC's own
rule matching over the granted ClusterRole, and what the plan asks and keeps with it."""

from __future__ import annotations

from dataclasses import replace

import pytest

from sunk_sandbox_operator.core import scope_outcome as so
from sunk_sandbox_operator.core import scope_plan as sp
from sunk_sandbox_operator.core.scope import rbac as rbac

from tests.unit.test_scope_plan import LIVE, NOW, SA, WALL, mem, rbac_obs


PODS = {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}
BIND = {"apiGroups": [""], "resources": ["pods/binding"], "verbs": ["create"]}


@pytest.mark.parametrize("case, rules, covers", [
    ("the shipped sunk-scheduler-sandbox", [PODS, BIND, {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]}],
     True),
    ("one wildcard rule", [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}], True),
    ("*/binding covers the subresource", [PODS, {"apiGroups": [""], "resources": ["*/binding"], "verbs": ["create"]}],
     True),
    ("pods does not cover pods/binding", [{"apiGroups": [""], "resources": ["pods"], "verbs": ["*"]}], False),
    ("no watch", [{**PODS, "verbs": ["get", "list"]}, BIND], False),
    ("another API group", [{**PODS, "apiGroups": ["apps"]}, BIND], False),
    ("limited to resourceNames", [{**PODS, "resourceNames": ["one"]}, BIND], False),
    ("an aggregated role not aggregated yet", [], False),
    ("not read", None, False),
    ("garbage", ["x", {"apiGroups": None}], False),
])
def test_role_covers_by_rbac_matching(case, rules, covers) -> None:
    assert rbac.role_covers(rules) is covers, case


def grant_obs(**kw) -> sp.SyncObservation:
    return rbac_obs(grant_role="sunk-scheduler-sandbox", **kw)


def test_namespaces_our_grant_covers_are_not_reviewed() -> None:
    o = grant_obs(role_covers=True)
    first = sp.decide_sync(o, mem(permits=rbac.Permits(), grants=frozenset({"ds-a"})), NOW)
    assert first.grants is not None and first.grants.to_create == ["ds-b", "ds-c"]
    assert first.reviews.cluster and rbac.second_round(first.reviews, False) == ()  # held or created now: covered
    # Without a role that covers, each is asked as before.
    plain = sp.decide_sync(replace(o, role_covers=False), mem(permits=rbac.Permits(), grants=frozenset({"ds-a"})), NOW)
    assert rbac.second_round(plain.reviews, False) == LIVE


def test_a_covered_namespace_is_permitted_only_if_our_grant_stands_after_the_sync() -> None:
    o = grant_obs(role_covers=True)
    plan = sp.decide_sync(o, mem(permits=rbac.Permits(SA, False, denied=frozenset({"ds-c"})), grants=frozenset({"ds-a"})),
                          NOW)
    done = so.Done(created=(so.GrantResult("ds-b"), so.GrantResult("ds-c", "500: etcd")),
                   answers=so.Answers(cluster=False))
    out = so.outcome(o, plan, done, prev=None, now=WALL)
    p = out.memory.permits
    assert (p.permitted, p.denied) == ({"ds-a", "ds-b"}, {"ds-c"})  # ds-c: its create failed, still as it was
    assert out.report.reason == "GrantFailed"  # the grants' problem comes before the RBAC one
    # Asked and allowed everywhere: nothing per namespace, covered or not.
    fresh = sp.decide_sync(o, mem(permits=rbac.Permits(), grants=frozenset({"ds-a"})), NOW)
    allowed = so.outcome(o, fresh, replace(done, answers=so.Answers(cluster=True)), prev=None, now=WALL)
    assert allowed.memory.permits == rbac.Permits(SA, True)
