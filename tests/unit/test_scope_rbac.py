"""core.scope.rbac: when our RoleBinding alone permits the scheduler (no review there), by RBAC's own
rule matching over the granted ClusterRole (what the grants loop asks and keeps with it:
test_grant_loop.py)."""

from __future__ import annotations

import pytest

from sunk_sandbox_operator.core.scope import rbac


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
