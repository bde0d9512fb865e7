"""The grants loop (I/O): the namespaces the binding may grant in vs our labelled RoleBindings.

A wake reads the target's list, where the binding may grant (its sandbox namespaces and the
alwaysInclude entries it may reach, the admin's `--allow-grant`) and, when `core.scope.grant_loop.reads`
asks, our RoleBindings (a refresh) and the granted ClusterRole; `decide` plans once; the deletes go,
then the creates (a bounded few at a time, from a lazy queue), then the SubjectAccessReviews the plan
asks; `settle` keeps what they returned. Its creates wake the roll loop, which waits for listed
namespaces without our RoleBinding. On deletion, or when the binding is refused, every RoleBinding
made for it goes.
"""

from __future__ import annotations

from ...adapters import grants as io
from ...adapters import kube as k
from ...api.events import EventReason
from ...api.reasons import ScopeSynced
from ...core.redact import describe
from ...core.scope import grants as g
from ...core.scope import rbac
from ...core.scope.grant_loop import (Answers, Done, GrantObservation, GrantResult, GrantStep, decide, grants_event,
                                      reads, settle)
from ..context import Context
from ..state import BindingState, ScopeMemory
from . import facts, slo

TRANSIENT = (ScopeSynced.ERROR, ScopeSynced.SCHEDULER_NOT_PERMITTED)  # retried with backoff (a grant may come)


async def run(ctx: Context, state: BindingState, *, periodic: bool) -> None:
    mem = state.scope
    assert mem is not None
    loop = mem.grant_loop

    async def body() -> None:
        obs = await _observe(ctx, state, mem, periodic)
        step = decide(obs, loop.latest)
        deleted, created = await _apply(ctx, state, step)
        loop.latest = settle(obs, step, Done(deleted, created, await _review(ctx, step.reviews)))
        placeable = slo.granted(ctx, mem, loop.latest)  # the roll loop judges the last stage
        if not periodic and (placeable or any(x.error is None for x in created)):  # (a resync runs the roll next)
            mem.roll_loop.runs.signal()

    await facts.wake(ctx, state, loop, "grants", body, TRANSIENT, retried=lambda g: g.problem or g.rbac)


async def _observe(ctx: Context, state: BindingState, mem: ScopeMemory, periodic: bool) -> GrantObservation:
    s = facts.grant_settings(ctx, state)
    listed = facts.listed(state, await facts.read(ctx, facts.target(ctx, state, mem), trusted=periodic))
    if listed is None:
        return GrantObservation(s, None)
    where = facts.where(ctx, state, facts.belonging(ctx, state, mem, full=False))
    r = reads(s, mem.grant_loop.latest, periodic)
    found, forbidden = await facts.our_grants(ctx, state) if r.rolebindings else (None, None)
    covers = await _role_covers(ctx, s.role) if r.role else False  # where our RoleBinding covers, no review
    return GrantObservation(s, listed, where, found, forbidden, covers, periodic, ctx.monotonic())


async def _role_covers(ctx: Context, role: str) -> bool:
    """Whether the ClusterRole granted covers what the scheduler needs (`core.scope.rbac.role_covers`):
    then our RoleBinding permits it where it exists, with no review. Unreadable (not found, not
    allowed, an error): False, and the reviews decide as without it."""
    try:
        return rbac.role_covers((await ctx.kube.get_clusterrole(role)).get("rules"))
    except k.KubeError:
        return False


async def _apply(ctx: Context, state: BindingState,
                 step: GrantStep) -> tuple[tuple[GrantResult, ...], tuple[GrantResult, ...]]:
    """Delete, then create, what the plan says: one result each."""
    plan = step.grants
    if plan is None or plan.empty:
        return (), ()
    deleted = tuple(GrantResult(ns, None if err is None else describe(err))
                    for (ns, _, _), err in zip(plan.to_delete, await io.delete(ctx.kube, plan.to_delete)))
    created = []
    for ns, err in zip(plan.to_create, await io.create(ctx.kube, step.create)):
        if err is None:
            # The RoleBinding carries the binding's label: listing finds it after any crash.
            ctx.failpoints.hit("after-rolebinding-create")
        created.append(GrantResult(ns, None if err is None else describe(err), forbidden=isinstance(err, k.Forbidden),
                                   taken=isinstance(err, k.Conflict)))  # not in our list, yet the name is taken
    made = [x.namespace for x in created if x.error is None]
    removed = [x.namespace for x in deleted if x.error is None]
    if made or removed:
        ctx.event(state, EventReason.SCOPE_GRANTS_UPDATED,
                  grants_event(state.uid, state.admitted_spec.scope.grant_cluster_role, made, removed))
    return deleted, tuple(created)


async def _review(ctx: Context, reviews: rbac.Reviews) -> Answers:
    """The SubjectAccessReviews the plan asks: the cluster-wide one first, then the namespaces its
    answer leaves (core.scope.rbac.second_round)."""
    if reviews.sa is None:
        return Answers()
    cluster: bool | None = None
    forbidden: str | None = None
    if reviews.cluster:
        (everywhere,) = await io.scheduler_permitted(ctx.kube, reviews.sa, [""])
        if isinstance(everywhere, k.Forbidden):
            forbidden = str(everywhere)
        elif isinstance(everywhere, bool):
            cluster = everywhere  # another error: unknown this time, asked again at the next wake
    todo = rbac.second_round(reviews, cluster)
    answers = await io.scheduler_permitted(ctx.kube, reviews.sa, list(todo)) if todo else []
    return Answers(cluster, forbidden, {ns: a if isinstance(a, bool) else None for ns, a in zip(todo, answers)})


async def remove_all(ctx: Context, state: BindingState) -> None:
    """On deletion, or when the binding is refused: every RoleBinding made for this binding goes
    (and nothing else that carries its label). Listed afresh: a deletion must not miss one the
    informer has not delivered yet."""
    legacy = g.legacy_rolebinding_name(state.namespace, state.name)
    try:
        found = [g.grant_of(rb) for rb in await io.list_ours(ctx.kube, g.selector(state.namespace, state.name))]
        ours = [x for x in found if g.is_ours(x, state.uid, legacy)]
        await io.delete(ctx.kube, [(x.namespace, x.name, x.uid) for x in ours])
    except k.Forbidden as exc:
        ctx.event(state, EventReason.SCOPE_NOT_RESTORED, f"RoleBindings not removed: {describe(exc)}")
        return
    if state.scope is not None:
        state.scope.grant_loop.latest = state.scope.grant_loop.latest.none_held()
