"""One scope sync, decided (pure): what to write, roll, grant and ask, and how ScopeSynced reports it.

The shell (`controller.scope_sync`) gathers, calls these, acts in the order they say, and reports:

1. the list facts (`SyncObservation`: the target's list and ledger, the namespaces that belong, the
   target's metadata); `workloads_for_write` says whether the revert rule needs the scheduler's
   workloads too; `decide_write` is the write: the list and the ledger in one request with the
   read's precondition (a lost race gathers and decides again);
2. once written, `after_write` is the memory the list leaves, kept at once (namespace events compare
   with it while the sync goes on);
3. the facts the write must not wait for, or that only its end can tell (`late_needs`: does a burst
   go on; the workloads when the roll may happen now, or its wait needs the template's rolled-at; our
   RoleBindings when refreshing; which listed namespaces the binding may grant in): a RoleBinding LIST
   never holds up the list write, and a burst that began during the write still defers the roll to
   its last write;
4. `decide_sync`: the whole plan (the write as decided; the roll: `core.roll_pacing.when_to_roll`,
   then the template check, rationed by `roll_wait`; the grants: `core.grants.plan_grants`; the
   SubjectAccessReviews to ask; the next memory; when to wake for the folded roll);
5. after acting, `core.scope_outcome.outcome`: the memory the results leave, and the report, whose
   problem is the first of one check chain over the results (roll → grants → the scheduler's RBAC;
   cert-manager's `policies.Chain` is the model), via `core.scope.report`.

`decide_sync` is idempotent over `after_write`: the shell may keep that memory first and decide
from it, or a test may decide from the memory before the sync; the plan is the same.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterator, Mapping

from ..api.keys import FIELD_MANAGER, SCOPE_GENERATION_ANNOTATION, SCOPE_HASH_ANNOTATION
from ..api.reasons import ScopeSynced, grant_targets
from ..api.spec import LabelSelector
from . import grants as g
from . import managers
from . import roll_pacing as pacing
from . import scope as sc
from .ledger import Entry, Ledger
from .scope_rbac import Permits, Reviews, plan_reviews

Finding = tuple[ScopeSynced, str]  # a problem ScopeSynced reports: (reason, message)
GRANT_FOLD_SECONDS = 5.0  # the longest a burst defers its grants (a stream of namespaces never starves them)


# ---------------------------------------------------------------- what a sync knows


@dataclass(frozen=True)
class Owner:
    """The binding: the ledger's key and what its RoleBindings are named and labelled from."""

    namespace: str
    name: str
    uid: str

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class RollSettings:
    can_roll: bool = False                  # the target takes effect only when the scheduler restarts
    restart: bool = True                    # spec.scope.restartScheduler
    interval: float = pacing.DEFAULT_INTERVAL  # spec.scope.minRollInterval, seconds
    namespace: str = ""                     # the scheduler's
    pod_selector: LabelSelector | None = None  # spec.scheduler.podSelector: which workload runs it
    list_field: tuple[str, ...] | None = None  # where the list lives in a ConfigMap we roll for (revert rule)


@dataclass(frozen=True)
class SyncObservation:
    """Everything one attempt gathered. The list facts come before the write; the rest (from
    `burst_goes_on` on) after it, as `late_needs` asks."""

    scope: sc.ScopeObservation             # the list facts (core.scope)
    owner: Owner
    ledger: Ledger = field(default_factory=Ledger)  # as read (its generation counts our list writes)
    target_meta: Mapping[str, Any] | None = None    # the target's metadata: managedFields, who renders it
    target_kind: str = "ConfigMap"
    periodic: bool = False                 # a resync (level-triggered: refresh grants and reviews)
    roll: RollSettings = field(default_factory=RollSettings)
    service_account: tuple[str, str] = ("", "")  # the scheduler's (namespace, name)
    grant_role: str = ""                   # spec.scope.grantClusterRole
    grants_bounded: bool = True            # the admin's --allow-grant names somewhere this binding may grant
    # the scheduler namespace's Deployments and StatefulSets (with managedFields), or why not
    workloads: tuple[Mapping[str, Any], ...] | None = None
    workloads_forbidden: str | None = None
    # ---- after the write
    burst_goes_on: bool = False            # more changes already signalled: the burst's last write rolls
    roll_timer_pending: bool = False       # a folded roll's sync is already set
    now_iso: str = ""
    grantable: frozenset[str] = frozenset()  # namespaces this binding may grant in (core.grants.grantable)
    live: frozenset[str] = frozenset()     # ... of those, the ones that exist and are not terminating
    may_grant: frozenset[str] = frozenset()  # ... of `grantable`, those inside the admin's --allow-grant
    found: tuple[g.Grant, ...] | None = None  # our RoleBindings, when refreshing (else None: memory says)
    role_covers: bool = False              # grant_role's rules cover the scheduler's needs (core.scope_rbac)
    found_forbidden: str | None = None


@dataclass(frozen=True)
class SyncMemory:
    """What a sync reads from and leaves in `controller.state.ScopeMemory`."""

    roll_due: bool = False                 # we wrote the list and the scheduler has not been rolled onto it
    last_roll: float | None = None         # monotonic
    last_roll_at: str | None = None        # status.scope.lastRollTime
    next_roll_at: str | None = None        # status.scope.nextRollTime, while a folded roll is due
    grants: frozenset[str] | None = None   # namespaces holding our RoleBinding (None: not listed yet)
    permits: Permits = field(default_factory=Permits)
    manager_warned: str | None = None      # the other writer of the target last warned about
    cluster: bool = False                  # the target says scope type cluster
    preexisting: tuple[str, ...] | None = None
    added: tuple[str, ...] = ()
    known_list: frozenset[str] | None = None  # the target's list as last read or written
    roll_unread: bool = False              # the template's rolled-at not read since this process started
    grants_owed_since: float | None = None  # monotonic: a burst has deferred its grants since


# ---------------------------------------------------------------- what a sync does


@dataclass(frozen=True)
class Write:
    values: list[str] | None = None        # the new list (None: as is)
    ledger: Ledger | None = None           # the ledger written with it (None: no write at all)
    bumped: bool = False                   # the ledger generation moved (the scheduler must re-read)
    generation: int = 0                    # the generation the target holds after it: what a roll is for


@dataclass(frozen=True)
class Written:
    memory: SyncMemory
    manager: managers.Manager | None       # another tool renders the target
    warn: bool = False                     # ... not said yet for this binding: a Warning event


@dataclass(frozen=True)
class Needs:
    """What to gather after the write."""

    workloads: bool = False                # the roll may patch now: the scheduler's workloads
    rolebindings: bool = False             # the grants are refreshed: our RoleBindings
    namespaces: bool = False               # grants or per-namespace reviews may run: grantable and live
    role: bool = False                     # ... both: whether the granted ClusterRole covers the scheduler


@dataclass(frozen=True)
class RollPlan:
    patch: sc.RollDecision | None = None   # patch this pod template now
    wait: float | None = None              # fold: one roll in `wait` seconds
    note: str | None = None                # for the condition message
    problem: Finding | None = None         # the workloads could not be listed


@dataclass(frozen=True)
class SyncPlan:
    listed: sc.ListDecision
    write: Write
    memory: SyncMemory                     # before acting; `outcome` adds what the acts returned
    manager: managers.Manager | None = None
    roll: RollPlan = field(default_factory=RollPlan)
    grants: g.GrantPlan | None = None      # None: grants are not kept in this sync
    body: Callable[[str], dict[str, Any]] | None = None  # the RoleBinding wanted in a namespace
    grants_problem: Finding | None = None  # our RoleBindings could not be listed
    reviews: Reviews = field(default_factory=Reviews)
    wake: float | None = None              # seconds to the folded roll's sync (None: no new timer)
    # A grant round may stop between creates when a new change is signalled (the list write it
    # asks for goes first); then its grants are owed since this (kept in memory). None: it may
    # not (a resync, or grants owed GRANT_FOLD_SECONDS already: a stream never starves them).
    grants_yield_owed: float | None = None

    @property
    def create(self) -> Iterator[dict[str, Any]]:
        """The RoleBindings of grants.to_create, made one at a time as the creates go out (5,000
        bodies held at once were 6 MiB of the start's peak)."""
        if self.grants is not None and self.body is not None:
            yield from map(self.body, self.grants.to_create)


# ---------------------------------------------------------------- before and at the write


def _foreign_list_change(obs: SyncObservation) -> str | None:
    """When another field manager last wrote the list's field of a ConfigMap we roll for (the API
    server's clock), or None."""
    path = obs.roll.list_field
    return managers.last_foreign_change(obs.target_meta, path, FIELD_MANAGER) if path is not None else None


def workloads_for_write(obs: SyncObservation) -> bool:
    """Does the write need the scheduler's workloads? Only for `rewrites_running_list` on a write that
    puts back what another writer removed, when that writer is recorded (rare)."""
    d = obs.scope.listed
    return (obs.workloads is None and obs.workloads_forbidden is None and d.write is not None and bool(d.reverted)
            and _foreign_list_change(obs) is not None)


def rewrites_running_list(obs: SyncObservation, d: sc.ListDecision) -> bool:
    """Must the scheduler re-read the list this write makes, even if its template already carries these
    names' hash? A write that changes our list rolls it by the hash anyway: yes. A write putting back
    what another writer removed: only when another manager changed the scheduler's pod template since
    that removal (a `helm upgrade` restarting it on the chart's list); a revert alone (a no-op upgrade,
    an admin's edit) left the running scheduler on our list."""
    since = _foreign_list_change(obs) if d.reverted else None
    if since is None or obs.workloads is None:
        return True  # not a revert, who removed them is not recorded, or the workloads are not readable
    dep = sc.scheduler_workload(obs.workloads, obs.roll.pod_selector)
    return dep is not None and managers.changed_since(dep.get("metadata"), ("spec", "template"), since, FIELD_MANAGER)


def decide_write(obs: SyncObservation) -> Write:
    """The list and the ledger entry in one request (a crash cannot split them), or no write."""
    d = obs.scope.listed
    if d.write is None and not d.claims_changed:
        return Write(generation=obs.ledger.generation)
    ledger = obs.ledger.with_entry(obs.owner.ref, Entry(tuple(d.added), tuple(d.preexisting or ())))
    bumped = d.write is not None and rewrites_running_list(obs, d)
    if bumped:
        ledger = ledger.next_generation()
    return Write(d.write, ledger, bumped, ledger.generation)


def after_write(obs: SyncObservation, mem: SyncMemory) -> Written:
    """The memory the list leaves once the write is done (or found not needed), and who else renders
    the target (said once per binding)."""
    d = obs.scope.listed
    manager = managers.other_manager(obs.target_meta, obs.scope.target) if obs.target_kind == "ConfigMap" else None
    warn = manager is not None and mem.manager_warned != manager.describe()
    m = replace(mem, manager_warned=manager.describe()) if manager is not None and warn else mem
    if d.error:
        return Written(m, manager, warn)
    m = replace(m, cluster=d.cluster, preexisting=tuple(d.preexisting) if d.preexisting is not None else None,
                added=m.added if obs.scope.observe else tuple(d.added),
                known_list=None if d.cluster else frozenset(d.final),
                roll_due=m.roll_due or (d.write is not None and not obs.scope.observe))
    return Written(m, manager, warn)


# ---------------------------------------------------------------- after the write


def _step(obs: SyncObservation, m: SyncMemory, now: float) -> pacing.RollStep:
    r = obs.roll
    return pacing.when_to_roll(can_roll=r.can_roll, restart=r.restart, observe=obs.scope.observe, roll_due=m.roll_due,
                               periodic=obs.periodic, burst_goes_on=obs.burst_goes_on, last_roll=m.last_roll,
                               now=now, interval=r.interval)


def _grants_kept(obs: SyncObservation, m: SyncMemory) -> bool:
    """Never in Observe mode; not when nothing is granted and no role asks for any."""
    return not obs.scope.observe and not (not obs.grant_role and m.grants == frozenset())


def _refresh(obs: SyncObservation, m: SyncMemory) -> bool:
    """Grants are planned from a fresh list at a resync and before the first one; else from memory."""
    return obs.periodic or m.grants is None


def late_needs(obs: SyncObservation, mem: SyncMemory, now: float) -> Needs:
    """What to gather after the write (`burst_goes_on` already observed there): the workloads only
    when the roll may patch now (not at a burst's intermediate syncs), our RoleBindings only when the
    grants are refreshed, the grantable namespaces only when grants or per-namespace reviews may run.
    A roll folded from a last roll this process has not compared with the template's rolled-at (the
    first decision after a start) reads the workloads too, to wait from the later of the two."""
    d = obs.scope.listed
    if d.error or d.cluster:
        return Needs()
    m = after_write(obs, mem).memory
    step = _step(obs, m, now)
    workloads = obs.workloads is None and obs.workloads_forbidden is None and (
        step.now or (step.wait > 0 and m.roll_unread))
    sa, p = obs.service_account, m.permits
    per_namespace = bool(sa[1]) and (obs.periodic or p.sa != sa or p.cluster is not True)
    kept = _grants_kept(obs, m)
    if _grants_folded(obs, m, now):
        return Needs(workloads)
    role = bool(obs.grant_role) and kept and per_namespace
    return Needs(workloads, kept and _refresh(obs, m), kept or per_namespace, role)


def cannot_list_workloads(namespace: str, error: str) -> Finding:
    return ScopeSynced.FORBIDDEN, (f"the operator may not list Deployments and StatefulSets in {namespace}: {error}; "
                                   f"{grant_targets(namespace)}")


def cannot_patch(d: sc.RollDecision, namespace: str, error: str) -> Finding:
    return ScopeSynced.FORBIDDEN, (f"the operator may not patch {d.kind} {namespace}/{d.workload}: {error}; "
                                   f"{grant_targets(namespace)}")


def template_check(workloads: tuple[Mapping[str, Any], ...] | None, forbidden: str | None, roll: RollSettings,
                   values: list[str], *, wrote: bool, generation: int | None) -> sc.RollDecision | Finding:
    """Does the scheduler's pod template say it runs `values` (core.scope.decide_roll)? The patch to
    make, or why the workloads could not be read."""
    if workloads is None:
        return cannot_list_workloads(roll.namespace, forbidden or "they were not listed")
    return sc.decide_roll(workloads, roll.pod_selector, roll.namespace, values, wrote=wrote,
                          hash_annotation=SCOPE_HASH_ANNOTATION, generation=generation,
                          generation_annotation=SCOPE_GENERATION_ANNOTATION)


def _last_rolled(obs: SyncObservation, m: SyncMemory, now: float) -> SyncMemory:
    """Memory with the roll the template records (`roll_pacing.rolled_later`), if later than memory's:
    status.scope.lastRollTime is written after the roll, so a death in between leaves it only there."""
    if obs.workloads is None:
        return m
    seen = pacing.rolled_later(sc.scheduler_workload(obs.workloads, obs.roll.pod_selector), m.last_roll_at,
                               obs.now_iso, now)
    m = replace(m, roll_unread=False)
    return m if seen is None else replace(m, last_roll=seen[0], last_roll_at=seen[1])


def _roll(obs: SyncObservation, m: SyncMemory, now: float, values: list[str],
          generation: int) -> tuple[RollPlan, SyncMemory, float | None]:
    """Roll now, fold into one roll later, or nothing (`when_to_roll`); a patch the template check
    finds needed at a resync (an admin's edit, a revert) is rationed by `roll_wait` like ours. A roll
    is owed while we wrote the list (`roll_due`) or the ledger's generation says the operator did: a
    process that died between its write and its roll leaves only that. The last roll is the later of
    memory's and the template's (`_last_rolled`)."""
    m = _last_rolled(obs, m, now)
    step = _step(obs, m, now)
    if not step.now:
        plan = RollPlan(wait=step.wait or None)
    else:
        check = template_check(obs.workloads, obs.workloads_forbidden, obs.roll, values,
                               wrote=m.roll_due or generation > 0, generation=generation)
        if isinstance(check, tuple):
            return RollPlan(problem=check), m, None
        if check.workload is None or check.hash is None:  # set together
            return RollPlan(note=check.note), replace(m, roll_due=False, next_roll_at=None), None
        wait = pacing.roll_wait(m.last_roll, now, obs.roll.interval)
        plan = RollPlan(wait=wait) if wait > 0 else RollPlan(patch=check)
    if plan.wait is None:
        return plan, m, None
    m = replace(m, roll_due=True)
    if obs.roll_timer_pending:  # one folded roll carries every change until it fires
        return plan, m, None
    return plan, replace(m, next_roll_at=pacing.after(obs.now_iso, plan.wait)), plan.wait


def _want_body(obs: SyncObservation) -> Callable[[str], dict[str, Any]]:
    o, (sa_ns, sa) = obs.owner, obs.service_account
    return lambda ns: g.rolebinding(o.namespace, o.name, o.uid, ns, obs.grant_role, sa, sa_ns)


def _grants_folded(obs: SyncObservation, m: SyncMemory, now: float) -> bool:
    """Grants (and the reviews they answer) wait while a burst goes on: its last write grants once
    for every namespace it listed, so the list writes a burst waits for are not held up by RoleBinding
    creates. At most GRANT_FOLD_SECONDS after the first deferred one."""
    return (obs.burst_goes_on and not obs.periodic and m.grants is not None and _grants_kept(obs, m)
            and _within_fold(m.grants_owed_since, now))


def _within_fold(owed_since: float | None, now: float) -> bool:
    return owed_since is None or now - owed_since < GRANT_FOLD_SECONDS


def _grants(obs: SyncObservation, m: SyncMemory,
            mine: list[str]) -> tuple[g.GrantPlan | None, Callable[[str], dict[str, Any]] | None, Finding | None,
                                      SyncMemory]:
    """A RoleBinding in every grantable live namespace the list holds; ours elsewhere removed."""
    if not _grants_kept(obs, m):
        return None, None, None, m
    refresh = _refresh(obs, m)
    if refresh and obs.found_forbidden is not None:
        return None, None, (ScopeSynced.FORBIDDEN, f"the operator may not list RoleBindings: {obs.found_forbidden}"), m
    body = _want_body(obs)
    wanted = [ns for ns in mine if ns in obs.live and ns in obs.may_grant]  # only where the admin allows
    plan = g.plan_grants(role=obs.grant_role, wanted=wanted, known=m.grants,
                         found=obs.found if refresh else None, want_body=body, uid=obs.owner.uid,
                         legacy_name=g.legacy_rolebinding_name(obs.owner.namespace, obs.owner.name))
    return plan, body, None, replace(m, grants=frozenset(plan.have))


def _reviews(obs: SyncObservation, m: SyncMemory, mine: list[str], grants: g.GrantPlan | None,
             now: float) -> Reviews:
    """`core.scope_rbac.plan_reviews`; with a ClusterRole that covers the scheduler's needs, the
    namespaces holding (or about to hold) our RoleBinding are covered by it."""
    live = tuple(ns for ns in mine if ns in obs.live)
    covered: frozenset[str] = frozenset()
    if grants is not None and obs.role_covers:
        covered = frozenset(m.grants or ()) | frozenset(grants.to_create)
    return plan_reviews(obs.service_account, m.permits, periodic=obs.periodic, mine=mine, live=live, covered=covered,
                        now=now)


def decide_sync(obs: SyncObservation, mem: SyncMemory, now: float) -> SyncPlan:
    """The whole plan of one sync (see the module docstring). A list in error or scope type cluster
    ends the sync after the list: nothing to roll, grant or check."""
    d = obs.scope.listed
    write = decide_write(obs)
    written = after_write(obs, mem)
    m = written.memory
    if d.error or d.cluster:
        return SyncPlan(d, write, m, written.manager)
    mine = [ns for ns in d.final if ns in obs.grantable]  # the listed namespaces the binding may grant in
    roll, m, wake = _roll(obs, m, now, d.final, write.generation)
    if _grants_folded(obs, m, now):  # nothing granted or asked; what memory says is reported
        p = m.permits
        reviews = Reviews(sa=obs.service_account if p.sa == obs.service_account else None, before=p, after=p,
                          live=tuple(ns for ns in d.final if ns in p.denied))
        m = replace(m, grants_owed_since=now if m.grants_owed_since is None else m.grants_owed_since)
        return SyncPlan(d, write, m, written.manager, roll, reviews=reviews, wake=wake)
    grants, body, grants_problem, m = _grants(obs, m, mine)
    reviews = _reviews(obs, m, mine, grants, now)
    owed, m = m.grants_owed_since, replace(m, grants_owed_since=None)
    yield_owed = None
    if grants is not None and grants.to_create and not obs.periodic and _within_fold(owed, now):
        yield_owed = now if owed is None else owed
    return SyncPlan(d, write, replace(m, permits=reviews.before), written.manager, roll, grants, body,
                    grants_problem, reviews, wake, yield_owed)
