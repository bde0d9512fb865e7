"""Which RoleBindings the scheduler needs for `scope.grantClusterRole`, and their names (pure).

One RoleBinding per namespace the binding itself matches (its sandbox namespaces, and the
alwaysInclude entries its namespace may reach) that the list holds and that exists: never for
what else the list holds (an admin's entries, another binding's, or names a tenant wrote into its
own target), never in a system namespace the operator's settings do not let it reach.

A RoleBinding is ours when it carries this binding's UID label (a binding deleted and created
again under the same name is another binding) and is named from a digest of that UID, so two
bindings can never want the same name (`team`/`x-prod` and `team-x`/`prod` once did). Only ours
are counted as granted or deleted.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Callable, Container, Iterable, Mapping

from ...api.keys import BINDING_LABEL, BINDING_UID_LABEL, MANAGED_BY_LABEL

NAME_PREFIX = "sunk-scheduler-"


def binding_label(namespace: str, name: str) -> str:
    """Label value naming the binding, for people (`kubectl get rolebindings -l`); ≤ 63 characters."""
    value = f"{namespace}.{name}"
    if len(value) <= 63:
        return value
    digest = hashlib.sha256(value.encode()).hexdigest()[:10]
    return f"{value[:52].rstrip('.-_')}-{digest}"


def rolebinding_name(uid: str) -> str:
    """From the binding's UID alone: unique per binding, whatever its namespace and name."""
    return NAME_PREFIX + hashlib.sha256(uid.encode()).hexdigest()[:20]


def legacy_rolebinding_name(namespace: str, name: str) -> str:
    """The name versions before 0.3 gave (collides across bindings): found and replaced, never created."""
    rb = f"{NAME_PREFIX}{namespace}-{name}"
    if len(rb) <= 253:
        return rb
    digest = hashlib.sha256(f"{namespace}/{name}".encode()).hexdigest()[:10]
    return f"{rb[:242].rstrip('.-')}-{digest}"


def selector(namespace: str, name: str) -> str:
    """Lists ours and legacy ones (`is_ours` then tells them from look-alikes)."""
    return f"{BINDING_LABEL}={binding_label(namespace, name)}"


@dataclass(frozen=True, slots=True)
class Grant:
    """The few facts of a RoleBinding carrying our label that a grant plan reads (what the RoleBinding
    informer keeps: 10,000 of them are a few MiB, not the objects)."""

    namespace: str
    name: str
    uid: str | None
    binding: str                 # the BINDING_LABEL value
    binding_uid: str | None      # the BINDING_UID_LABEL value (None: made before UID labels)
    managed: bool                # labelled app.kubernetes.io/managed-by: sunk-sandbox-operator
    role: tuple[str, str, str]   # roleRef (apiGroup, kind, name)
    subjects: tuple[tuple[str, str, str], ...]  # (kind, name, namespace)


def grant_of(rb: Mapping[str, Any]) -> Grant:
    meta = rb.get("metadata") or {}
    labels = meta.get("labels") or {}
    ref = rb.get("roleRef") or {}
    return Grant(str(meta.get("namespace") or ""), str(meta.get("name") or ""), meta.get("uid"),
                 str(labels.get(BINDING_LABEL) or ""), labels.get(BINDING_UID_LABEL),
                 labels.get(MANAGED_BY_LABEL[0]) == MANAGED_BY_LABEL[1],
                 (str(ref.get("apiGroup") or ""), str(ref.get("kind") or ""), str(ref.get("name") or "")),
                 tuple((str(s.get("kind") or ""), str(s.get("name") or ""), str(s.get("namespace") or ""))
                       for s in rb.get("subjects") or () if isinstance(s, Mapping)))


def is_ours(rb: Mapping[str, Any] | Grant, uid: str, legacy_name: str) -> bool:
    """Made for this binding: its UID label, or (before UID labels) the legacy name without one."""
    g = rb if isinstance(rb, Grant) else grant_of(rb)
    if g.binding_uid is not None:
        return g.binding_uid == uid
    return g.name == legacy_name and g.managed


def rolebinding(binding_ns: str, binding_name: str, uid: str, namespace: str, cluster_role: str,
                service_account: str, sa_namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": rolebinding_name(uid), "namespace": namespace,
                     "labels": {BINDING_LABEL: binding_label(binding_ns, binding_name), BINDING_UID_LABEL: uid,
                                MANAGED_BY_LABEL[0]: MANAGED_BY_LABEL[1]}},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": cluster_role},
        "subjects": [{"kind": "ServiceAccount", "name": service_account, "namespace": sa_namespace}],
    }


def is_current(found: Mapping[str, Any] | Grant, want: Mapping[str, Any] | Grant) -> bool:
    f = found if isinstance(found, Grant) else grant_of(found)
    w = want if isinstance(want, Grant) else grant_of(want)
    return (f.name, f.binding_uid, f.role, f.subjects) == (w.name, w.binding_uid, w.role, w.subjects)


def grantable(listed: Iterable[str], sandbox: Container[str], always: Container[str],
              may_reach: Callable[[str], bool], system: Callable[[str], bool]) -> list[str]:
    """The listed namespaces this binding may grant in: its own sandbox namespaces (a system one only
    where the settings let its namespace reach it) and the alwaysInclude entries it may reach."""
    out = []
    for ns in listed:
        if ns in sandbox:
            ok = not system(ns) or may_reach(ns)
        else:
            ok = ns in always and may_reach(ns)
        if ok:
            out.append(ns)
    return out


@dataclass
class GrantPlan:
    have: set[str] = field(default_factory=set)             # namespaces already holding a current grant
    to_create: list[str] = field(default_factory=list)
    to_delete: list[tuple[str, str, str | None]] = field(default_factory=list)  # (namespace, name, uid precondition)

    @property
    def empty(self) -> bool:
        return not self.to_create and not self.to_delete


def plan_grants(*, role: str, wanted: Iterable[str], known: Iterable[str] | None,
                found: Iterable[Mapping[str, Any] | Grant] | None, want_body: Callable[[str], dict[str, Any]],
                uid: str, legacy_name: str) -> GrantPlan:
    """`found` (a fresh list of RoleBindings carrying our label) wins over `known` (what we believe we
    hold). Only ours in `found` count (`is_ours`): a look-alike is neither granted nor deleted.

    `want_body(namespace)` builds the RoleBinding we want there.
    """
    want = set(wanted) if role else set()
    name = rolebinding_name(uid)
    out = GrantPlan()
    if found is not None:
        for rb in found:
            g = rb if isinstance(rb, Grant) else grant_of(rb)
            if not is_ours(g, uid, legacy_name):
                continue
            if role and g.namespace in want and g.namespace not in out.have and is_current(g, want_body(g.namespace)):
                out.have.add(g.namespace)
            else:
                out.to_delete.append((g.namespace, g.name, g.uid))
    else:
        out.have = set(known or ())
        out.to_delete = [(ns, name, None) for ns in sorted(out.have - want)]
    out.to_create = sorted(want - out.have)
    return out
