"""The grants loop's decision in core (issue 32): core.scope.grant_loop.reads / decide / settle (the
RoleBindings to create and delete, the SubjectAccessReviews to ask, the memory and findings the acts
leave), and ScopeSynced's check chain over the three loops' results (core.scope.report)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from sunk_sandbox_operator.core.scope import grant_loop as gl
from sunk_sandbox_operator.core.scope import grants as g
from sunk_sandbox_operator.core.scope import list_loop as ll
from sunk_sandbox_operator.core.scope import rbac
from sunk_sandbox_operator.core.scope import roll_loop as rl
from sunk_sandbox_operator.core.scope.errors import Finding
from sunk_sandbox_operator.core.scope.report import CHAIN, Results, report

from tests.unit.test_scope_loops import REF, WALL, obs

NOW = 100.0
SA = ("slurm", "sa")
LIVE = ("ds-a", "ds-b", "ds-c")
OWNER = gl.Owner("slurm", "b", "u1")


def settings(role: str = "", **kw) -> gl.GrantSettings:
    return gl.GrantSettings(**{"owner": OWNER, "service_account": SA, "role": role, **kw})


def gobs(listed=("ds-a", "slurm"), where=("ds-a",), *, role="sched-role", live=None, allowed=None, settings_kw=None,
         **kw) -> gl.GrantObservation:
    w = gl.Where(frozenset(where), frozenset(where if live is None else live),
                 frozenset(where if allowed is None else allowed))
    return gl.GrantObservation(settings(role, **(settings_kw or {})), listed, w, **{"now": NOW, **kw})


def mem(**kw) -> gl.GrantState:
    """A binding past its first wakes: the grants listed (none), the scheduler allowed everywhere."""
    return gl.GrantState(**{"granted": frozenset(), "permits": rbac.Permits(sa=SA, cluster=True), **kw})


def grant(ns: str, role: str = "sched-role") -> g.Grant:
    return g.grant_of(g.rolebinding("slurm", "b", "u1", ns, role, "sa", "slurm"))


def act(o: gl.GrantObservation, m: gl.GrantState, **done) -> tuple[gl.GrantStep, gl.GrantState]:
    step = gl.decide(o, m)
    return step, gl.settle(o, step, gl.Done(**done))


# ---------------------------------------------------------------- the grants


@pytest.mark.parametrize("case, o, m, create, delete, have", [
    ("the first wake: grants in what the binding may grant in, listed and live",
     gobs(("ds-a", "ds-b", "admin", "slurm"), ("ds-a", "ds-b"), live=("ds-a",), found=()), mem(granted=None),
     ["ds-a"], [], set()),
    ("a resync replaces a stale grant and removes a stray",
     gobs(periodic=True, found=(grant("ds-a", "edited"), grant("gone-ns"))), mem(granted=frozenset({"ds-a"})),
     ["ds-a"], ["ds-a", "gone-ns"], set()),
    ("a signalled wake plans from memory: the namespace left the binding",
     gobs(where=()), mem(granted=frozenset({"ds-a"})), [], ["ds-a"], {"ds-a"}),  # held until the delete is done
    ("... and keeps what it holds", gobs(), mem(granted=frozenset({"ds-a"})), [], [], {"ds-a"}),
    ("grantClusterRole unset: ours are removed", gobs(role="", periodic=True, found=(grant("ds-a"),)),
     mem(granted=frozenset({"ds-a"})), [], ["ds-a"], set()),
])
def test_the_grants_plan(case, o, m, create, delete, have) -> None:
    step = gl.decide(o, m)
    assert step.grants is not None, case
    assert step.grants.to_create == create and [ns for ns, _, _ in step.grants.to_delete] == delete, case
    assert step.memory.granted == frozenset(have), case
    assert [b["metadata"]["namespace"] for b in step.create] == create, case
    assert all(b["roleRef"]["name"] == "sched-role" and b["subjects"][0]["name"] == "sa" for b in step.create), case


@pytest.mark.parametrize("case, o, m", [
    ("nothing granted and no role: no list at every resync", gobs(role="", periodic=True), mem(granted=frozenset())),
    ("Observe mode", gobs(periodic=True, settings_kw={"observe": True}), mem(granted=None)),
    ("the list in error or scope type cluster", gobs(listed=None, periodic=True), mem(granted=None)),
])
def test_grants_are_not_kept(case, o, m) -> None:
    step = gl.decide(o, m)
    assert step.grants is None, case
    if o.listed is not None:
        assert not gl.reads(o.settings, m, o.periodic).rolebindings, case


def test_our_rolebindings_are_read_only_when_refreshing() -> None:
    s = settings("sched-role")
    assert gl.reads(s, mem(granted=None), periodic=False).rolebindings        # the first wake
    assert gl.reads(s, mem(), periodic=True).rolebindings                     # a resync
    assert not gl.reads(s, mem(), periodic=False).rolebindings                # a signalled wake: memory


def test_the_granted_role_is_read_only_when_a_namespace_review_may_follow() -> None:
    s = settings("sched-role")
    assert gl.reads(s, mem(permits=rbac.Permits()), periodic=False).role       # never asked yet
    assert gl.reads(s, mem(), periodic=True).role                              # a resync asks again
    assert not gl.reads(s, mem(), periodic=False).role                         # allowed everywhere
    assert not gl.reads(settings(), mem(granted=frozenset({"ds-a"})), periodic=True).role  # no role: removing ours


def test_grant_outcomes() -> None:
    o = gobs(("ds-a", "ds-b", "slurm"), ("ds-a", "ds-b"), found=())
    step = gl.decide(o, mem(granted=None))
    out = gl.settle(o, step, gl.Done(created=(gl.GrantResult("ds-a"), gl.GrantResult("ds-b", "403", forbidden=True))))
    assert out.granted == frozenset({"ds-a"})
    assert out.problem is not None and out.problem.reason == "Forbidden"
    assert "1 failed (create in ds-b: 403)" in out.problem.message
    assert "needs `bind` on ClusterRole sched-role" in out.problem.message
    taken = gl.settle(o, step, gl.Done(created=(gl.GrantResult("ds-a", "409", taken=True), gl.GrantResult("ds-b")),
                                       deleted=(gl.GrantResult("x", "boom"),)))
    assert taken.problem is not None and taken.problem.reason == "GrantFailed" and taken.granted == frozenset({"ds-b"})
    assert f"(delete in x: boom; create in ds-a: a RoleBinding named {g.rolebinding_name('u1')} exists there" \
        in taken.problem.message
    left = gobs(where=())
    held = gl.decide(left, mem(granted=frozenset({"ds-a"})))
    assert gl.settle(left, held, gl.Done(deleted=(gl.GrantResult("ds-a"),))).granted == set()
    assert gl.settle(left, held, gl.Done(deleted=(gl.GrantResult("ds-a", "500"),))).granted == {"ds-a"}
    listing = gl.decide(replace(o, found=None, found_forbidden="denied"), mem(granted=None))
    assert listing.grants is None and listing.problem == Finding("Forbidden", "the operator may not list RoleBindings: "
                                                                               "denied")
    assert gl.grants_event("u1", "", ["a"], ["b"]).endswith("to ClusterRole -: created in a; removed from b")


def test_grants_only_inside_the_admins_bound_and_none_without_one() -> None:
    """Finding 5: a RoleBinding for the ServiceAccount the binding picked is made only in a namespace the
    admin's --allow-grant gives its namespace (`Where.allowed`); with no bound at all, none is made, those
    held are removed, and ScopeSynced says so naming the setting."""
    o = gobs(("ds-a", "victim", "slurm"), ("ds-a", "victim"), allowed=("ds-a",), found=())
    step = gl.decide(o, mem(granted=None))
    assert step.grants is not None and step.grants.to_create == ["ds-a"]
    assert [b["metadata"]["namespace"] for b in step.create] == ["ds-a"]
    unbounded = gobs(periodic=True, found=(grant("ds-a"),), allowed=(), settings_kw={"bounded": False})
    step = gl.decide(unbounded, mem(granted=frozenset({"ds-a"})))
    assert step.grants is not None and step.grants.to_create == [] and \
        [ns for ns, _, _ in step.grants.to_delete] == ["ds-a"]
    out = gl.settle(unbounded, step, gl.Done(deleted=(gl.GrantResult("ds-a"),)))
    assert out.problem is not None and out.problem.reason == "GrantsNotAllowed" and out.problem.status == "False"
    assert "--allow-grant" in out.problem.message and out.granted == frozenset()
    # denied outside the bound: the fix names the bound, not grantClusterRole (already set)
    denied = replace(o, found=None)
    step = gl.decide(denied, mem(permits=rbac.Permits(SA, False, denied=frozenset({"victim"}))))
    out = gl.settle(denied, step, gl.Done(answers=gl.Answers(False, None, {"victim": False})))
    assert out.rbac is not None and out.rbac.reason == "SchedulerNotPermitted" and "victim are outside where" in \
        out.rbac.message


def test_what_the_roll_waits_for_is_the_listed_namespaces_without_a_current_rolebinding_of_ours() -> None:
    s, w = settings("sched-role"), gl.Where(frozenset({"ds-a", "ds-b", "ds-c"}), frozenset({"ds-a", "ds-b"}),
                                            frozenset({"ds-a", "ds-b", "ds-c"}))
    listed = ("ds-a", "ds-b", "ds-c", "slurm")
    assert gl.owed(s, listed, w, ()) == 2                                        # ds-c is not live
    assert gl.owed(s, listed, w, (grant("ds-a"),)) == 1
    assert gl.owed(s, listed, w, (grant("ds-a", "edited"), grant("ds-b"))) == 1  # a stale one is owed still
    other = g.grant_of(g.rolebinding("slurm", "b", "u2", "ds-a", "sched-role", "sa", "slurm"))
    assert gl.owed(s, listed, w, (other, grant("ds-b"))) == 1                    # another binding's is not ours
    assert gl.owed(settings(), listed, w, ()) == 0                               # no grants asked


# ---------------------------------------------------------------- the scheduler's RBAC reviews


def robs(**kw) -> gl.GrantObservation:
    return gobs(LIVE + ("slurm",), LIVE, role="", **kw)


@pytest.mark.parametrize("case, o, permits, cluster, asked", [
    ("never asked: the cluster-wide review first", robs(), rbac.Permits(), True, LIVE),
    ("allowed everywhere: nothing to ask", robs(), rbac.Permits(SA, True), False, ()),
    ("... until a resync asks again", robs(periodic=True), rbac.Permits(SA, True), True, LIVE),
    ("a confirmed namespace is not asked again, a denied one not inside the recheck",
     robs(), rbac.Permits(SA, False, frozenset({"ds-a"}), frozenset({"ds-b"}), NOW - 1), False, ("ds-c",)),
    ("a denied one is asked again after DENIED_RECHECK_SECONDS",
     robs(), rbac.Permits(SA, False, frozenset({"ds-a"}), frozenset({"ds-b"}), NOW - rbac.DENIED_RECHECK_SECONDS),
     False, ("ds-b", "ds-c")),
    ("... or at a resync (cluster-wide first)",
     robs(periodic=True), rbac.Permits(SA, False, frozenset({"ds-a"}), frozenset({"ds-b"}), NOW - 1), True,
     ("ds-b", "ds-c")),
    ("another ServiceAccount starts afresh", robs(), rbac.Permits(("slurm", "old"), True, frozenset(LIVE)), True, LIVE),
    ("no ServiceAccount known: nothing to check",
     replace(robs(), settings=settings(service_account=("slurm", ""))), rbac.Permits(), False, ()),
])
def test_the_review_cadence(case, o, permits, cluster, asked) -> None:
    reviews = gl.decide(o, mem(permits=permits)).reviews
    assert reviews.cluster == cluster, case
    if cluster:  # the namespaces only when the cluster-wide review denies (not when it allows, or no answer came)
        assert (rbac.second_round(reviews, False), rbac.second_round(reviews, True), rbac.second_round(reviews, None)) == \
            (asked, (), ()), case
    else:        # the remembered answer decides
        assert rbac.second_round(reviews, None) == asked, case


def test_review_answers_are_kept_and_the_denied_reported() -> None:
    o = robs()
    step = gl.decide(o, mem(permits=rbac.Permits()))
    out = gl.settle(o, step, gl.Done(answers=gl.Answers(cluster=False, namespaces={"ds-a": True, "ds-b": False,
                                                                                   "ds-c": None})))
    p = out.permits
    assert (p.sa, p.cluster, p.permitted, p.denied, p.denied_asked) == (SA, False, {"ds-a"}, {"ds-b"}, NOW)
    assert out.rbac is not None and out.rbac.reason == "SchedulerNotPermitted"
    assert "slurm/sa may not watch pods or create pods/binding in 1 of the binding's listed namespace(s): ds-b" \
        in out.rbac.message
    everywhere = gl.settle(o, step, gl.Done(answers=gl.Answers(cluster=True)))
    assert everywhere.permits == rbac.Permits(SA, True) and everywhere.rbac is None
    unknown = gl.settle(o, step, gl.Done(answers=gl.Answers()))  # no answer: asked again next time
    assert unknown.permits == rbac.Permits(SA) and unknown.rbac is None
    refused = gl.settle(o, step, gl.Done(answers=gl.Answers(cluster_forbidden="no SAR")))
    assert refused.rbac is not None and refused.rbac.reason == "Forbidden"
    assert "may not create SubjectAccessReviews to check the scheduler's RBAC: no SAR" in refused.rbac.message


def test_the_namespaces_the_binding_may_not_grant_in_are_not_checked() -> None:
    o = gobs(LIVE + ("slurm",), ("ds-a",), role="")
    assert gl.decide(o, mem(permits=rbac.Permits())).reviews.namespaces == ("ds-a",)


def test_namespaces_our_grant_covers_are_not_reviewed() -> None:
    o = gobs(LIVE + ("slurm",), LIVE, role="sunk-scheduler-sandbox", role_covers=True)
    first = gl.decide(o, mem(permits=rbac.Permits(), granted=frozenset({"ds-a"})))
    assert first.grants is not None and first.grants.to_create == ["ds-b", "ds-c"]
    assert first.reviews.cluster and rbac.second_round(first.reviews, False) == ()  # held or created now: covered
    # Without a role that covers, each is asked as before.
    plain = gl.decide(replace(o, role_covers=False), mem(permits=rbac.Permits(), granted=frozenset({"ds-a"})))
    assert rbac.second_round(plain.reviews, False) == LIVE


def test_a_covered_namespace_is_permitted_only_if_our_grant_stands_after_the_wake() -> None:
    o = gobs(LIVE + ("slurm",), LIVE, role="sunk-scheduler-sandbox", role_covers=True)
    step = gl.decide(o, mem(permits=rbac.Permits(SA, False, denied=frozenset({"ds-c"})), granted=frozenset({"ds-a"})))
    done = gl.Done(created=(gl.GrantResult("ds-b"), gl.GrantResult("ds-c", "500: etcd")),
                   answers=gl.Answers(cluster=False))
    out = gl.settle(o, step, done)
    assert (out.permits.permitted, out.permits.denied) == ({"ds-a", "ds-b"}, {"ds-c"})  # ds-c: its create failed
    assert out.problem is not None and out.problem.reason == "GrantFailed"  # the grants' problem comes first
    # Asked and allowed everywhere: nothing per namespace, covered or not.
    fresh = gl.decide(o, mem(permits=rbac.Permits(), granted=frozenset({"ds-a"})))
    assert gl.settle(o, fresh, replace(done, answers=gl.Answers(cluster=True))).permits == rbac.Permits(SA, True)


# ---------------------------------------------------------------- the problem chain


def test_the_first_problem_is_the_lists_then_the_chain_roll_grants_rbac() -> None:
    listed = ll.decide(obs(sandbox=LIVE), ll.ListState(REF)).memory
    roll = rl.RollState(problem=Finding("Forbidden", "the operator may not patch Deployment slurm/sched"))
    grants = gl.GrantState(problem=Finding("GrantFailed", "RoleBindings for the scheduler's ServiceAccount: 1 failed"),
                           rbac=Finding("SchedulerNotPermitted", "the scheduler's ServiceAccount slurm/sa may not"))

    def reported(lst=listed, r=roll, g_=grants) -> str:
        out = report(Results(lst, r, g_), prev=None, now=WALL)
        assert out is not None
        return f"{out.reason}: {out.message}"

    broken = listed.failed(Finding("TargetNotFound", "ConfigMap slurm/cm not found: create it"))
    assert reported(broken).startswith("TargetNotFound: ")                          # the list's own first
    assert reported().startswith("Forbidden: the operator may not patch")
    assert reported(r=rl.RollState()).startswith("GrantFailed: ")
    assert reported(r=rl.RollState(), g_=replace(grants, problem=None)).startswith("SchedulerNotPermitted: ")
    assert reported(r=rl.RollState(), g_=gl.GrantState()).startswith("Synced: ")
    assert [c.__name__ for c in CHAIN] == ["_roll", "_grants", "_rbac"]
    unknown = listed.failed(Finding("Error", "scope list failed: boom; retrying", "Unknown"))
    out = report(Results(unknown, rl.RollState(), gl.GrantState()), prev={"namespaceCount": 4}, now=WALL)
    assert out is not None and out.status == "Unknown" and out.section["namespaceCount"] == 4  # what it said stays
