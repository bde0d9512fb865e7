"""Scheduler RBAC for `scope.grantClusterRole`: gather our RoleBindings → plan (core.grants) → write.

The plan is made by `core.grants.plan_grants`; this module lists, creates and deletes, and
turns failures into a ScopeSynced problem with the fix.
"""

from __future__ import annotations

from typing import Any, Callable

from ..api.events import EventReason
from ..adapters import grants as io
from ..adapters import kube as k
from ..core.problems import Problem
from ..api.reasons import ScopeSynced
from ..core import grants as g
from ..core import scope as sc
from .context import Context
from .state import BindingState, ScopeMemory

DENIED_RECHECK_SECONDS = 5.0  # how soon a grant to a denied namespace is seen while syncs keep coming


def _want_body(state: BindingState, role: str) -> Callable[[str], dict[str, Any]]:
    d = state.discovery
    assert d is not None  # grants follow a sync that read the target the discovery names
    return lambda ns: g.rolebinding(state.namespace, state.name, state.uid, ns, role, d.service_account, d.namespace)


def _legacy_name(state: BindingState) -> str:
    return g.legacy_rolebinding_name(state.namespace, state.name)


def grantable(ctx: Context, state: BindingState, listed: list[str], sandbox: frozenset[str]) -> list[str]:
    """The listed namespaces this binding may grant in (core.grants.grantable with the settings)."""
    return g.grantable(listed, sandbox, frozenset(state.admitted_spec.scope.always_include),
                       lambda ns: ctx.tenancy.may_reach(state.namespace, ns), ctx.tenancy.system)


async def sync(ctx: Context, state: BindingState, mem: ScopeMemory, grantable: list[str], *, refresh: bool) -> None:
    """A RoleBinding in every grantable (existing, not terminating) namespace; ours elsewhere removed."""
    role = state.admitted_spec.scope.grant_cluster_role
    if not role and mem.grants == set() and not refresh:
        return
    wanted = [ns for ns in grantable if (info := ctx.namespaces.get(ns)) is not None and not info.terminating]
    found = None
    if refresh or mem.grants is None:
        if not role and mem.grants == set():
            return  # nothing granted, nothing to grant: no cluster-wide list at every resync
        found = await _ours(ctx, state)
    plan = g.plan_grants(role=role, wanted=wanted, known=mem.grants, found=found,
                         want_body=_want_body(state, role), uid=state.uid, legacy_name=_legacy_name(state))
    mem.grants = set(plan.have)
    if plan.empty:
        return
    errors: list[str] = []
    removed: list[str] = []
    for (ns, _, _), err in zip(plan.to_delete, await io.delete(ctx.kube, plan.to_delete)):
        if err is None:
            mem.grants.discard(ns)
            removed.append(ns)
        else:
            errors.append(f"delete in {ns}: {err}")
    body = _want_body(state, role)
    created: list[str] = []
    forbidden = False
    for ns, err in zip(plan.to_create, await io.create(ctx.kube, [body(ns) for ns in plan.to_create])):
        if err is None:
            # The RoleBinding carries the binding's label: listing finds it after any crash.
            ctx.failpoints.hit("after-rolebinding-create")
            mem.grants.add(ns)
            created.append(ns)
        elif isinstance(err, k.Conflict):  # not in our list, yet the name is taken: not ours, left alone
            errors.append(f"create in {ns}: a RoleBinding named {g.rolebinding_name(state.uid)} exists there and "
                          "was not made for this binding (delete it)")
        else:
            forbidden = forbidden or isinstance(err, k.Forbidden)
            errors.append(f"create in {ns}: {err}")
    if created or removed:
        parts = [f"created in {sc.names(created)}" if created else "", f"removed from {sc.names(removed)}" if removed else ""]
        ctx.event(state, EventReason.SCOPE_GRANTS_UPDATED, f"RoleBinding {g.rolebinding_name(state.uid)} "
                  f"to ClusterRole {role or '-'}: " + "; ".join(x for x in parts if x))
    if errors:
        fix = (f" The operator needs `bind` on ClusterRole {role} (add it to resourceNames in manifests/rbac.yaml)."
               if forbidden else "")
        raise Problem(ScopeSynced.FORBIDDEN if forbidden else ScopeSynced.GRANT_FAILED,
                            f"RoleBindings for the scheduler's ServiceAccount: {len(errors)} failed "
                            f"({'; '.join(errors[:3])})." + fix)


async def _ours(ctx: Context, state: BindingState) -> list[g.Grant]:
    """The RoleBindings carrying this binding's label: from the RoleBinding informer once it has
    listed (no API call), else one label-selected LIST."""
    if ctx.grants is not None and ctx.grants.ready:
        return ctx.grants.for_binding(g.binding_label(state.namespace, state.name))
    try:
        return [g.grant_of(rb) for rb in await io.list_ours(ctx.kube, g.selector(state.namespace, state.name))]
    except k.Forbidden as exc:
        raise Problem(ScopeSynced.FORBIDDEN, f"the operator may not list RoleBindings: {exc}") from None


async def remove_all(ctx: Context, state: BindingState, mem: ScopeMemory | None) -> None:
    """On deletion, or when the binding is refused: every RoleBinding made for this binding goes
    (and nothing else that carries its label). Listed afresh: a deletion must not miss one the
    informer has not delivered yet."""
    try:
        found = [g.grant_of(rb) for rb in await io.list_ours(ctx.kube, g.selector(state.namespace, state.name))]
        ours = [x for x in found if g.is_ours(x, state.uid, _legacy_name(state))]
        await io.delete(ctx.kube, [(x.namespace, x.name, x.uid) for x in ours])
    except k.Forbidden as exc:
        ctx.event(state, EventReason.SCOPE_NOT_RESTORED, f"RoleBindings not removed: {exc}")
        return
    if mem is not None:
        mem.grants = set()


async def revoke(ctx: Context, state: BindingState) -> None:
    """A refused binding keeps no grant: remove ours once (not at every refused reconcile)."""
    if state.scope is not None and state.scope.grants == set():
        return
    await remove_all(ctx, state, state.scope)


async def verify_scheduler(ctx: Context, state: BindingState, mem: ScopeMemory, listed: list[str], *,
                           refresh: bool) -> None:
    """SubjectAccessReview: may the scheduler's ServiceAccount watch pods and bind them in every
    listed namespace the binding matches (`grantable`: where its sandboxes are; what else the list
    holds is not this binding's to check or grant)? (What the seed runbook gets from Helm granting
    RBAC with the scope.) One
    cluster-wide review first; else one per namespace not yet answered: a confirmed namespace is
    not asked again while it stays listed, a denied one at a resync or at most every
    DENIED_RECHECK_SECONDS (not at every sync of a burst: that would ask about every denied
    namespace once per write; the backoff retry brings a sync when nothing else does)."""
    d = state.discovery
    if d is None or not d.service_account:
        return
    sa = (d.namespace, d.service_account)
    if mem.permit_sa != sa:
        mem.permit_sa, mem.permitted, mem.denied, mem.cluster_permitted = sa, set(), set(), None
    if refresh or mem.cluster_permitted is None:
        (everywhere,) = await io.scheduler_permitted(ctx.kube, sa, [""])
        if isinstance(everywhere, k.Forbidden):
            raise Problem(ScopeSynced.FORBIDDEN, "the operator may not create SubjectAccessReviews to check "
                                f"the scheduler's RBAC: {everywhere}")
        if isinstance(everywhere, Exception):
            return  # unknown this time: checked again at the next sync
        mem.cluster_permitted = everywhere
    if mem.cluster_permitted:
        return
    now = ctx.monotonic()
    again = refresh or now >= mem.denied_asked + DENIED_RECHECK_SECONDS
    if again:
        mem.denied_asked = now
    live = [ns for ns in listed if (info := ctx.namespaces.get(ns)) is not None and not info.terminating]
    mem.permitted &= set(listed)
    mem.denied &= set(live)
    todo = [ns for ns in live if ns not in mem.permitted and (again or ns not in mem.denied)]
    for ns, allowed in zip(todo, await io.scheduler_permitted(ctx.kube, sa, todo)):
        if allowed is True:
            mem.permitted.add(ns)
            mem.denied.discard(ns)
        elif allowed is False:
            mem.denied.add(ns)
    if mem.denied:
        denied = [ns for ns in live if ns in mem.denied]
        raise Problem(ScopeSynced.SCHEDULER_NOT_PERMITTED, (
            f"the scheduler's ServiceAccount {sa[0]}/{sa[1]} may not watch pods or create pods/binding in "
            f"{len(denied)} of the binding's listed namespace(s): {sc.names(sorted(denied))}; its sandboxes there stay "
            "Pending. Set spec.scope.grantClusterRole: sunk-scheduler-sandbox (shipped with the operator) so the "
            "operator grants it in each of them, or grant it through the Slurm chart"))
