"""After a scope sync acted on its plan (pure): the memory the results leave, and ScopeSynced.

`outcome` takes the observation, the plan (`core.scope_plan.decide_sync`) and what acting returned
(`Done`: the patch, the RoleBinding deletes and creates, the review answers). The problem reported
is the first of one check chain over that one result, in the order ScopeSynced ranks them: the
roll, the grants, the scheduler's RBAC (cert-manager's `policies.Chain`: an ordered tuple of pure
checks, the first problem wins); with none, `core.scope.report` says the list's state.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping

from ..api.reasons import ScopeSynced
from . import grants as g
from . import scope as sc
from . import scope_plan as sp
from .scope_plan import Finding, SyncMemory, SyncObservation, SyncPlan
from .scope_rbac import Permits, everywhere, permits_after


# ---------------------------------------------------------------- after acting


@dataclass(frozen=True)
class Answers:
    cluster: bool | None = None            # the cluster-wide review (None: not asked, or no answer)
    cluster_forbidden: str | None = None   # the operator may not create SubjectAccessReviews
    namespaces: Mapping[str, bool | None] = field(default_factory=dict)  # None: no answer this time


@dataclass(frozen=True)
class GrantResult:
    namespace: str
    error: str | None = None               # None: done
    forbidden: bool = False                # the error is a 403
    taken: bool = False                    # create: the name is held by a RoleBinding not ours (409: an error)


@dataclass(frozen=True)
class Done:
    """What the shell's acts after the list write returned."""

    rolled_at: tuple[float, str] | None = None  # the patch was made: when (monotonic, RFC 3339)
    roll_forbidden: str | None = None      # the patch was refused (403)
    deleted: tuple[GrantResult, ...] = ()
    created: tuple[GrantResult, ...] = ()
    answers: Answers = field(default_factory=Answers)
    # The grant round stopped for a new change (`SyncPlan.grants_yield_owed`): the creates not made,
    # the roll and the reviews are the next sync's, after its list write.
    cut: bool = False


@dataclass(frozen=True)
class Result:
    """One observation, its plan and what acting on it returned: what the checks read."""

    obs: SyncObservation
    plan: SyncPlan
    done: Done
    permits: Permits


Check = Callable[[Result], Finding | None]


def _roll_check(r: Result) -> Finding | None:
    patch = r.plan.roll.patch
    if patch is not None and r.done.roll_forbidden is not None:
        return sp.cannot_patch(patch, r.obs.roll.namespace, r.done.roll_forbidden)
    return r.plan.roll.problem


def _grants_check(r: Result) -> Finding | None:
    if r.obs.grant_role and not r.obs.grants_bounded:
        return ScopeSynced.GRANTS_NOT_ALLOWED, (
            f"spec.scope.grantClusterRole {r.obs.grant_role}: the operator's admin lets bindings in "
            f"{r.obs.owner.namespace} grant in no namespace (--allow-grant / SSB_ALLOWED_GRANTS), so no RoleBinding is "
            "made (any made before is removed): a grant gives the scheduler pods' ServiceAccount, which the binding "
            f"picks, every pod spec of the namespace. Ask the admin (e.g. --allow-grant {r.obs.owner.namespace}=ds-*), "
            "or grant the scheduler through the Slurm chart and remove grantClusterRole")
    if r.plan.grants_problem is not None:
        return r.plan.grants_problem
    errors = [f"delete in {x.namespace}: {x.error}" for x in r.done.deleted if x.error is not None]
    for x in r.done.created:
        if x.taken:
            errors.append(f"create in {x.namespace}: a RoleBinding named {g.rolebinding_name(r.obs.owner.uid)} exists "
                          "there and was not made for this binding (delete it)")
        elif x.error is not None:
            errors.append(f"create in {x.namespace}: {x.error}")
    if not errors:
        return None
    forbidden = any(x.forbidden for x in r.done.created)
    fix = (f" The operator needs `bind` on ClusterRole {r.obs.grant_role} (add it to resourceNames in "
           "manifests/rbac.yaml)." if forbidden else "")
    return (ScopeSynced.FORBIDDEN if forbidden else ScopeSynced.GRANT_FAILED,
            f"RoleBindings for the scheduler's ServiceAccount: {len(errors)} failed ({'; '.join(errors[:3])})." + fix)


def _rbac_check(r: Result) -> Finding | None:
    reviews, answers = r.plan.reviews, r.done.answers
    if answers.cluster_forbidden is not None:
        return ScopeSynced.FORBIDDEN, ("the operator may not create SubjectAccessReviews to check the scheduler's "
                                       f"RBAC: {answers.cluster_forbidden}")
    if everywhere(reviews, answers.cluster) is not False:
        return None  # allowed everywhere, nothing to check, or unknown this time
    denied = [ns for ns in reviews.live if ns in r.permits.denied]
    sa = reviews.sa
    if not denied or sa is None:
        return None
    outside = sorted(ns for ns in denied if ns not in r.obs.may_grant) if r.obs.grant_role else []
    fix = ("Set spec.scope.grantClusterRole: sunk-scheduler-sandbox (shipped with the operator) so the operator grants "
           "it in each of them, or grant it through the Slurm chart")
    if outside:
        fix = (f"{sc.names(outside)} are outside where the operator's admin lets bindings in {r.obs.owner.namespace} "
               "grant (--allow-grant / SSB_ALLOWED_GRANTS): ask the admin, or grant it through the Slurm chart")
    return ScopeSynced.SCHEDULER_NOT_PERMITTED, (
        f"the scheduler's ServiceAccount {sa[0]}/{sa[1]} may not watch pods or create pods/binding in "
        f"{len(denied)} of the binding's listed namespace(s): {sc.names(sorted(denied))}; its sandboxes there stay "
        f"Pending. {fix}")


# The order ScopeSynced reports its first problem in: the roll, the grants, the scheduler's RBAC.
CHAIN: tuple[Check, ...] = (_roll_check, _grants_check, _rbac_check)


def first_problem(r: Result, chain: tuple[Check, ...] = CHAIN) -> Finding | None:
    for check in chain:
        problem = check(r)
        if problem is not None:
            return problem
    return None


def _grants_after(plan: SyncPlan, done: Done) -> frozenset[str] | None:
    if plan.grants is None:
        return plan.memory.grants
    have = set(plan.memory.grants or ())
    have.difference_update(x.namespace for x in done.deleted if x.error is None)
    have.update(x.namespace for x in done.created if x.error is None)
    return frozenset(have)


def status_times(m: SyncMemory) -> dict[str, str]:
    """status.scope.lastRollTime, and nextRollTime while a folded roll is due."""
    out = {"lastRollTime": m.last_roll_at} if m.last_roll_at else {}
    return {**out, "nextRollTime": m.next_roll_at} if m.next_roll_at and m.roll_due else out


def grants_event(uid: str, role: str, created: list[str], removed: list[str]) -> str:
    """The ScopeGrantsUpdated message."""
    parts = [f"created in {sc.names(created)}" if created else "", f"removed from {sc.names(removed)}" if removed else ""]
    return f"RoleBinding {g.rolebinding_name(uid)} to ClusterRole {role or '-'}: " + "; ".join(x for x in parts if x)


@dataclass(frozen=True)
class Outcome:
    report: sc.ScopeReport
    memory: SyncMemory


def outcome(obs: SyncObservation, plan: SyncPlan, done: Done, *, prev: dict[str, Any] | None, now: str) -> Outcome:
    """The memory the acts leave and ScopeSynced: the chain's first problem, else the list's state."""
    granted = _grants_after(plan, done)
    a = done.answers
    permits = permits_after(plan.reviews, a.cluster, a.namespaces, granted)
    m = replace(plan.memory, permits=permits, grants=granted)
    if done.cut:  # the rest is owed since the plan says; the planned roll was not made, so it stays due
        m = replace(m, grants_owed_since=plan.grants_yield_owed, roll_due=m.roll_due or plan.roll.patch is not None)
    elif plan.roll.patch is not None and done.roll_forbidden is None:  # made, or the workload is gone
        m = replace(m, roll_due=False, next_roll_at=None)
        if done.rolled_at is not None:
            m = replace(m, last_roll=done.rolled_at[0], last_roll_at=done.rolled_at[1])
    problem = first_problem(Result(obs, plan, done, permits))
    report = sc.report(obs.scope, plan.listed, prev=prev, now=now, wrote=plan.write.values is not None,
                       problem=problem, notes=[plan.roll.note] if plan.roll.note else [],
                       managed_by=plan.manager.describe() if plan.manager else None, rolls=status_times(m))
    return Outcome(report, m)
