"""The grants loop's decision (pure): the namespaces the binding may grant in vs our labelled
RoleBindings → creates, deletes, and the SubjectAccessReviews that check the scheduler's RBAC.

A wake of the loop (`controller/scope/grant_loop.py`) reads the target's list, which of the listed
namespaces the binding may grant in (`core.scope.grants.grantable`, the admin's `--allow-grant`),
and, when refreshing (a resync, or before the first listing), our RoleBindings; `decide` plans the
creates, the deletes and the reviews once; `settle` keeps what the acts returned and the two
findings ScopeSynced ranks after the roll's: the grants', then the scheduler's RBAC.

Between resyncs the plan starts from memory (what this loop made and removed), not from the
RoleBinding informer: a RoleBinding just created may not have reached it yet, and planning it again
would meet its own name (409).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterator, Mapping

from ...api.reasons import ScopeSynced
from . import grants as g
from .errors import Finding
from .plan import names
from .rbac import Permits, Reviews, everywhere, permits_after, plan_reviews


@dataclass(frozen=True)
class Owner:
    """The binding: what its RoleBindings are named and labelled from."""

    namespace: str
    name: str
    uid: str


@dataclass(frozen=True)
class GrantSettings:
    owner: Owner
    service_account: tuple[str, str]        # the scheduler's (namespace, name)
    role: str = ""                          # spec.scope.grantClusterRole
    bounded: bool = True                    # the admin's --allow-grant names somewhere this binding may grant
    observe: bool = False                   # spec.mode Observe


@dataclass(frozen=True)
class GrantState:
    """The grants loop's memory, as `decide` and `settle` returned it."""

    granted: frozenset[str] | None = None   # namespaces holding our RoleBinding (None: not listed yet)
    permits: Permits = field(default_factory=Permits)  # what the SubjectAccessReviews said
    problem: Finding | None = None          # the grants' (ScopeSynced: after the roll's)
    rbac: Finding | None = None             # the scheduler's RBAC (ScopeSynced: last)

    def failed(self, problem: Finding) -> "GrantState":
        return replace(self, problem=problem)

    def none_held(self) -> "GrantState":
        """Every RoleBinding of ours was removed (deletion, a refused binding)."""
        return replace(self, granted=frozenset())


@dataclass(frozen=True)
class Reads:
    """What a wake reads besides the list and the namespaces."""

    rolebindings: bool = False              # our RoleBindings (a refresh)
    role: bool = False                      # the granted ClusterRole: do its rules cover the scheduler's needs?


def _kept(s: GrantSettings, mem: GrantState) -> bool:
    """Grants are kept unless in Observe mode, or when nothing is granted and no role asks for any."""
    return not s.observe and not (not s.role and mem.granted == frozenset())


def reads(s: GrantSettings, mem: GrantState, periodic: bool) -> Reads:
    """Our RoleBindings only when refreshing (a resync, or none listed yet); the role only when a
    per-namespace review may follow (`core.scope.rbac.may_ask`)."""
    kept = _kept(s, mem)
    ask = bool(s.service_account[1]) and (periodic or mem.permits.sa != s.service_account or
                                          mem.permits.cluster is not True)
    return Reads(kept and (periodic or mem.granted is None), bool(s.role) and kept and ask)


@dataclass(frozen=True)
class Where:
    """Where this binding may grant: its sandbox namespaces and alwaysInclude entries it may reach
    (`core.scope.grants.grantable`), of those the ones that exist and are not terminating, and those
    inside the admin's --allow-grant for its namespace (only there is a RoleBinding made)."""

    grantable: frozenset[str] = frozenset()
    live: frozenset[str] = frozenset()
    allowed: frozenset[str] = frozenset()


@dataclass(frozen=True)
class GrantObservation:
    settings: GrantSettings
    listed: tuple[str, ...] | None          # the target's list (None: in error or scope type cluster)
    where: Where = field(default_factory=Where)
    found: tuple[g.Grant, ...] | None = None  # our RoleBindings, when `reads` asked (else memory says)
    found_forbidden: str | None = None
    role_covers: bool = False               # the role's rules cover the scheduler's needs (core.scope.rbac)
    periodic: bool = False                  # a resync: level-triggered, the cluster-wide review asked again
    now: float = 0.0                        # monotonic


@dataclass(frozen=True)
class GrantStep:
    memory: GrantState                      # before acting: `settle` adds what the acts returned
    grants: g.GrantPlan | None = None       # None: grants are not kept in this wake
    body: Callable[[str], dict[str, Any]] | None = None  # the RoleBinding wanted in a namespace
    reviews: Reviews = field(default_factory=Reviews)
    problem: Finding | None = None          # our RoleBindings could not be listed

    @property
    def create(self) -> Iterator[dict[str, Any]]:
        """The RoleBindings of grants.to_create, made one at a time as the creates go out (5,000
        bodies held at once were 6 MiB of the start's peak)."""
        if self.grants is not None and self.body is not None:
            yield from map(self.body, self.grants.to_create)


def wanted(s: GrantSettings, listed: tuple[str, ...], where: Where) -> list[str]:
    """The listed namespaces that should hold our RoleBinding: grantable, live, inside the admin's bound."""
    if not s.role:
        return []
    return [ns for ns in listed if ns in where.grantable and ns in where.live and ns in where.allowed]


def decide(obs: GrantObservation, mem: GrantState) -> GrantStep:
    """A RoleBinding in every namespace `wanted`, ours elsewhere removed; the reviews to ask (with a
    ClusterRole that covers the scheduler's needs, a namespace holding or about to hold our RoleBinding
    needs none). A list in error or scope type cluster: nothing granted, removed or asked."""
    s, m = obs.settings, replace(mem, problem=None, rbac=None)
    if obs.listed is None:
        return GrantStep(m)
    w = obs.where
    mine = [ns for ns in obs.listed if ns in w.grantable]  # the listed namespaces the binding may grant in
    plan, body, problem = None, None, None
    if _kept(s, mem):
        if obs.found is None and obs.found_forbidden is not None:
            problem = Finding(ScopeSynced.FORBIDDEN, f"the operator may not list RoleBindings: {obs.found_forbidden}")
        else:
            o, (sa_ns, sa) = s.owner, s.service_account
            body = lambda ns: g.rolebinding(o.namespace, o.name, o.uid, ns, s.role, sa, sa_ns)  # noqa: E731
            plan = g.plan_grants(role=s.role, wanted=wanted(s, obs.listed, w), known=mem.granted, found=obs.found,
                                 want_body=body, uid=o.uid, legacy_name=g.legacy_rolebinding_name(o.namespace, o.name))
            m = replace(m, granted=frozenset(plan.have))
    covered = frozenset(m.granted or ()) | frozenset(plan.to_create) if plan is not None and obs.role_covers \
        else frozenset()
    reviews = plan_reviews(s.service_account, mem.permits, periodic=obs.periodic, mine=mine,
                           live=tuple(ns for ns in mine if ns in w.live), covered=covered, now=obs.now)
    return GrantStep(replace(m, permits=reviews.before), plan, body, reviews, problem)


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
    """What the wake's acts returned."""

    deleted: tuple[GrantResult, ...] = ()
    created: tuple[GrantResult, ...] = ()
    answers: Answers = field(default_factory=Answers)


def _grants_problem(obs: GrantObservation, step: GrantStep, done: Done) -> Finding | None:
    s = obs.settings
    if s.role and not s.bounded:
        return Finding(ScopeSynced.GRANTS_NOT_ALLOWED, (
            f"spec.scope.grantClusterRole {s.role}: the operator's admin lets bindings in {s.owner.namespace} grant "
            "in no namespace (--allow-grant / SSB_ALLOWED_GRANTS), so no RoleBinding is made (any made before is "
            "removed): a grant gives the scheduler pods' ServiceAccount, which the binding picks, every pod spec of "
            f"the namespace. Ask the admin (e.g. --allow-grant {s.owner.namespace}=ds-*), or grant the scheduler "
            "through the Slurm chart and remove grantClusterRole"))
    if step.problem is not None:
        return step.problem
    errors = [f"delete in {x.namespace}: {x.error}" for x in done.deleted if x.error is not None]
    for x in done.created:
        if x.taken:
            errors.append(f"create in {x.namespace}: a RoleBinding named {g.rolebinding_name(s.owner.uid)} exists "
                          "there and was not made for this binding (delete it)")
        elif x.error is not None:
            errors.append(f"create in {x.namespace}: {x.error}")
    if not errors:
        return None
    forbidden = any(x.forbidden for x in done.created)
    fix = (f" The operator needs `bind` on ClusterRole {s.role} (add it to resourceNames in manifests/rbac.yaml)."
           if forbidden else "")
    return Finding(ScopeSynced.FORBIDDEN if forbidden else ScopeSynced.GRANT_FAILED,
                   f"RoleBindings for the scheduler's ServiceAccount: {len(errors)} failed ({'; '.join(errors[:3])})."
                   + fix)


def _rbac_problem(obs: GrantObservation, reviews: Reviews, answers: Answers, permits: Permits) -> Finding | None:
    if answers.cluster_forbidden is not None:
        return Finding(ScopeSynced.FORBIDDEN, "the operator may not create SubjectAccessReviews to check the "
                                              f"scheduler's RBAC: {answers.cluster_forbidden}")
    if everywhere(reviews, answers.cluster) is not False:
        return None  # allowed everywhere, nothing to check, or unknown this time
    denied = [ns for ns in reviews.live if ns in permits.denied]
    sa = reviews.sa
    if not denied or sa is None:
        return None
    s = obs.settings
    outside = sorted(ns for ns in denied if ns not in obs.where.allowed) if s.role else []
    fix = ("Set spec.scope.grantClusterRole: sunk-scheduler-sandbox (shipped with the operator) so the operator grants "
           "it in each of them, or grant it through the Slurm chart")
    if outside:
        fix = (f"{names(outside)} are outside where the operator's admin lets bindings in {s.owner.namespace} grant "
               "(--allow-grant / SSB_ALLOWED_GRANTS): ask the admin, or grant it through the Slurm chart")
    return Finding(ScopeSynced.SCHEDULER_NOT_PERMITTED, (
        f"the scheduler's ServiceAccount {sa[0]}/{sa[1]} may not watch pods or create pods/binding in "
        f"{len(denied)} of the binding's listed namespace(s): {names(sorted(denied))}; its sandboxes there stay "
        f"Pending. {fix}"))


def settle(obs: GrantObservation, step: GrantStep, done: Done) -> GrantState:
    """The memory the acts leave: the namespaces holding our RoleBinding, the review answers, and the
    findings (grants first, then the scheduler's RBAC)."""
    if obs.listed is None:
        return step.memory
    granted = step.memory.granted
    if step.grants is not None:
        have = set(granted or ())
        have.difference_update(x.namespace for x in done.deleted if x.error is None)
        have.update(x.namespace for x in done.created if x.error is None)
        granted = frozenset(have)
    a = done.answers
    permits = permits_after(step.reviews, a.cluster, a.namespaces, granted)
    return GrantState(granted, permits, _grants_problem(obs, step, done), _rbac_problem(obs, step.reviews, a, permits))


def grants_event(uid: str, role: str, created: list[str], removed: list[str]) -> str:
    """The ScopeGrantsUpdated message."""
    parts = [f"created in {names(created)}" if created else "", f"removed from {names(removed)}" if removed else ""]
    return f"RoleBinding {g.rolebinding_name(uid)} to ClusterRole {role or '-'}: " + "; ".join(x for x in parts if x)


def owed(s: GrantSettings, listed: tuple[str, ...], where: Where, found: tuple[g.Grant, ...]) -> int:
    """How many listed namespaces still lack a current RoleBinding of ours (`found`): what the roll
    waits for with grants on (a fact the roll loop reads; the grants loop's writes wake it)."""
    want = wanted(s, listed, where)
    if not want:
        return 0
    o, (sa_ns, sa) = s.owner, s.service_account
    probe = g.grant_of(g.rolebinding(o.namespace, o.name, o.uid, "", s.role, sa, sa_ns))
    legacy = g.legacy_rolebinding_name(o.namespace, o.name)
    have = {x.namespace for x in found if g.is_ours(x, o.uid, legacy) and g.is_current(x, probe)}
    return sum(1 for ns in want if ns not in have)
