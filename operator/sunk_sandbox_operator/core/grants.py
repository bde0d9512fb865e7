"""Which RoleBindings the scheduler needs for `scope.grantClusterRole`, and their names (pure).

One RoleBinding per listed, existing, non-terminating namespace, labelled with the binding it
belongs to; any of ours elsewhere (or out of date) is deleted.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping

from ..api.keys import BINDING_LABEL, MANAGED_BY_LABEL


def binding_label(namespace: str, name: str) -> str:
    """Label value naming the binding (≤ 63 characters: hashed when longer)."""
    value = f"{namespace}.{name}"
    if len(value) <= 63:
        return value
    digest = hashlib.sha256(value.encode()).hexdigest()[:10]
    return f"{value[:52].rstrip('.-_')}-{digest}"


def rolebinding_name(namespace: str, name: str) -> str:
    rb = f"sunk-scheduler-{namespace}-{name}"
    if len(rb) <= 253:
        return rb
    digest = hashlib.sha256(f"{namespace}/{name}".encode()).hexdigest()[:10]
    return f"{rb[:242].rstrip('.-')}-{digest}"


def selector(namespace: str, name: str) -> str:
    return f"{BINDING_LABEL}={binding_label(namespace, name)}"


def rolebinding(binding_ns: str, binding_name: str, namespace: str, cluster_role: str,
                service_account: str, sa_namespace: str) -> dict:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": rolebinding_name(binding_ns, binding_name), "namespace": namespace,
                     "labels": {BINDING_LABEL: binding_label(binding_ns, binding_name),
                                MANAGED_BY_LABEL[0]: MANAGED_BY_LABEL[1]}},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": cluster_role},
        "subjects": [{"kind": "ServiceAccount", "name": service_account, "namespace": sa_namespace}],
    }


def is_current(found: Mapping, want: Mapping) -> bool:
    return (found["metadata"].get("name") == want["metadata"]["name"] and found.get("roleRef") == want["roleRef"]
            and found.get("subjects") == want["subjects"])


@dataclass
class GrantPlan:
    have: set[str] = field(default_factory=set)             # namespaces already holding a current grant
    to_create: list[str] = field(default_factory=list)
    to_delete: list[tuple[str, str]] = field(default_factory=list)  # (namespace, name)

    @property
    def empty(self) -> bool:
        return not self.to_create and not self.to_delete


def plan_grants(*, role: str, wanted: Iterable[str], known: set[str] | None, found: list[Mapping] | None,
                want_body: Callable[[str], dict], name: str) -> GrantPlan:
    """`found` (a fresh list of our RoleBindings) wins over `known` (what we believe we hold).

    `want_body(namespace)` builds the RoleBinding we want there; `name` is its name.
    """
    want = set(wanted) if role else set()
    out = GrantPlan()
    if found is not None:
        for rb in found:
            ns = rb["metadata"]["namespace"]
            if role and ns in want and is_current(rb, want_body(ns)):
                out.have.add(ns)
            else:
                out.to_delete.append((ns, rb["metadata"]["name"]))
    else:
        out.have = set(known or ())
        out.to_delete = [(ns, name) for ns in sorted(out.have - want)]
    out.to_create = sorted(want - out.have)
    return out
