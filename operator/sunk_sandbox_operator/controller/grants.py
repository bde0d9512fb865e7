"""Scheduler RBAC for `scope.grantClusterRole` and its check (I/O): our RoleBindings, create and
delete, SubjectAccessReviews; on deletion, remove them all.

What to create, delete and ask is planned by `core.scope_plan` (with `core.grants.plan_grants`);
this module gathers and acts, and returns failures as facts for the plan's check chain.
"""

from __future__ import annotations

from typing import Callable, Iterator

from ..api.events import EventReason
from ..adapters import grants as io
from ..adapters import kube as k
from ..core import grants as g
from ..core import scope_outcome as so
from ..core import scope_plan as sp
from ..core import scope_rbac as rbac
from ..core.redact import describe
from .context import Context
from .state import BindingState, ScopeMemory


def _legacy_name(state: BindingState) -> str:
    return g.legacy_rolebinding_name(state.namespace, state.name)


def grantable(ctx: Context, state: BindingState,
              sandbox: frozenset[str]) -> tuple[frozenset[str], frozenset[str], frozenset[str]]:
    """The namespaces this binding may grant in (core.grants.grantable over its sandbox namespaces and
    alwaysInclude, with the settings: whatever the list holds, a listed one is grantable iff it is
    here), of those the ones that exist and are not terminating, and the ones inside the admin's
    `--allow-grant` for its namespace (only there is a RoleBinding made)."""
    always = frozenset(state.admitted_spec.scope.always_include)
    mine = frozenset(g.grantable(sandbox | always, sandbox, always, lambda ns: ctx.tenancy.may_reach(state.namespace, ns),
                                 ctx.tenancy.system))
    bound = ctx.tenancy.grant_bound(state.namespace)
    return (mine, frozenset(ns for ns in mine if (info := ctx.namespaces.get(ns)) is not None and not info.terminating),
            frozenset(ns for ns in mine if bound(ns)) if bound is not None else frozenset())


async def ours(ctx: Context, state: BindingState) -> tuple[tuple[g.Grant, ...] | None, str | None]:
    """The RoleBindings carrying this binding's label: from the RoleBinding informer once it has
    listed (no API call), else one label-selected LIST; or why they could not be listed."""
    if ctx.grants is not None and ctx.grants.ready:
        return tuple(ctx.grants.for_binding(g.binding_label(state.namespace, state.name))), None
    try:
        return tuple(g.grant_of(rb) for rb in await io.list_ours(ctx.kube, g.selector(state.namespace, state.name))), None
    except k.Forbidden as exc:
        return None, describe(exc)


async def role_covers(ctx: Context, role: str) -> bool:
    """Whether the ClusterRole granted covers what the scheduler needs (`core.scope_rbac.role_covers`):
    then our RoleBinding permits it where it exists, with no review. Unreadable (not found, not
    allowed, an error): False, and the reviews decide as without it."""
    try:
        return rbac.role_covers((await ctx.kube.get_clusterrole(role)).get("rules"))
    except k.KubeError:
        return False


async def apply(ctx: Context, state: BindingState, plan: sp.SyncPlan, role: str,
                new_change: Callable[[], bool]) -> tuple[tuple[so.GrantResult, ...], tuple[so.GrantResult, ...], bool]:
    """Delete, then create, what the plan says: (deleted, created, cut), one result each. When the
    plan lets the round yield, no create starts once `new_change()`: the round is cut (the list
    write that change asks for is not held up by the rest)."""
    if plan.grants is None or plan.grants.empty:
        return (), (), False
    deleted = tuple(so.GrantResult(ns, None if err is None else describe(err))
                    for (ns, _, _), err in zip(plan.grants.to_delete, await io.delete(ctx.kube, plan.grants.to_delete)))
    cut = False

    def bodies() -> Iterator[dict]:
        nonlocal cut
        for body in plan.create:
            if plan.grants_yield_owed is not None and new_change():
                cut = True
                return
            yield body

    created = []
    for ns, err in zip(plan.grants.to_create, await io.create(ctx.kube, bodies())):
        if err is None:
            # The RoleBinding carries the binding's label: listing finds it after any crash.
            ctx.failpoints.hit("after-rolebinding-create")
        created.append(so.GrantResult(ns, None if err is None else describe(err), forbidden=isinstance(err, k.Forbidden),
                                      taken=isinstance(err, k.Conflict)))  # not in our list, yet the name is taken
    made = [x.namespace for x in created if x.error is None]
    removed = [x.namespace for x in deleted if x.error is None]
    if made or removed:
        ctx.event(state, EventReason.SCOPE_GRANTS_UPDATED, so.grants_event(state.uid, role, made, removed))
    return deleted, tuple(created), cut


async def review(ctx: Context, reviews: rbac.Reviews) -> so.Answers:
    """The SubjectAccessReviews the plan asks: the cluster-wide one first, then the namespaces its
    answer leaves (core.scope_rbac.second_round)."""
    if reviews.sa is None:
        return so.Answers()
    cluster: bool | None = None
    forbidden: str | None = None
    if reviews.cluster:
        (everywhere,) = await io.scheduler_permitted(ctx.kube, reviews.sa, [""])
        if isinstance(everywhere, k.Forbidden):
            forbidden = str(everywhere)
        elif isinstance(everywhere, bool):
            cluster = everywhere  # another error: unknown this time, asked again at the next sync
    todo = rbac.second_round(reviews, cluster)
    answers = await io.scheduler_permitted(ctx.kube, reviews.sa, list(todo)) if todo else []
    return so.Answers(cluster, forbidden, {ns: a if isinstance(a, bool) else None for ns, a in zip(todo, answers)})


async def remove_all(ctx: Context, state: BindingState, mem: ScopeMemory | None) -> None:
    """On deletion, or when the binding is refused: every RoleBinding made for this binding goes
    (and nothing else that carries its label). Listed afresh: a deletion must not miss one the
    informer has not delivered yet."""
    try:
        found = [g.grant_of(rb) for rb in await io.list_ours(ctx.kube, g.selector(state.namespace, state.name))]
        ours = [x for x in found if g.is_ours(x, state.uid, _legacy_name(state))]
        await io.delete(ctx.kube, [(x.namespace, x.name, x.uid) for x in ours])
    except k.Forbidden as exc:
        ctx.event(state, EventReason.SCOPE_NOT_RESTORED, f"RoleBindings not removed: {describe(exc)}")
        return
    if mem is not None:
        mem.grants = frozenset()


async def revoke(ctx: Context, state: BindingState) -> None:
    """A refused binding keeps no grant: remove ours once (not at every refused reconcile)."""
    if state.scope is not None and state.scope.grants == frozenset():
        return
    await remove_all(ctx, state, state.scope)

