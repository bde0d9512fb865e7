"""One scope sync decided in core (issue 20): core.scope_plan.decide_sync (the write, the ledger and its
generation, the roll, the grants, the SubjectAccessReviews to ask, the memory, the wake) and
core.scope_outcome.outcome (the memory the acts leave, the problem chain roll → grants → RBAC), as
tables of pure cases; then a property over a run of syncs: never two rolls inside the interval."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sunk_sandbox_operator.api.keys import SCOPE_GENERATION_ANNOTATION, SCOPE_HASH_ANNOTATION, SCOPE_ROLLED_AT_ANNOTATION
from sunk_sandbox_operator.api.spec import LabelSelector
from sunk_sandbox_operator.core import grants as g
from sunk_sandbox_operator.core import roll_pacing as pacing
from sunk_sandbox_operator.core import scope as sc
from sunk_sandbox_operator.core import scope_outcome as so
from sunk_sandbox_operator.core import scope_plan as sp
from sunk_sandbox_operator.core import scope_rbac as rbac
from sunk_sandbox_operator.core.ledger import Entry, Ledger

SEL = LabelSelector(match_labels={"app": "sched"})
OWNER = sp.Owner("slurm", "b", "u1")
WALL = "2026-01-01T00:01:40Z"   # NOW on the wall clock
NOW = 100.0
TARGET = "ConfigMap slurm/cm key scheduler.conf at scheduler.scope.namespaces"
ROLL = sp.RollSettings(can_roll=True, restart=True, interval=30.0, namespace="slurm", pod_selector=SEL,
                       list_field=("data", "scheduler.conf"))


def dep(hash_value: str | None = None, generation: int | None = None, template_changed: str | None = None) -> dict:
    """The scheduler's Deployment; `template_changed`: when another manager last wrote its pod template."""
    annotations = {SCOPE_HASH_ANNOTATION: hash_value} if hash_value else {}
    if generation is not None:
        annotations[SCOPE_GENERATION_ANNOTATION] = str(generation)
    managed = [{"manager": "helm", "time": template_changed, "fieldsV1": {"f:spec": {"f:template": {}}}}] \
        if template_changed else []
    return {"kind": "Deployment", "metadata": {"name": "sched", "managedFields": managed},
            "spec": {"template": {"metadata": {"labels": {"app": "sched"}, "annotations": annotations}}}}


def list_changed_by(manager: str, when: str) -> dict:
    """Target metadata recording who last wrote the list's key."""
    return {"managedFields": [{"manager": manager, "time": when, "fieldsV1": {"f:data": {"f:scheduler.conf": {}}}}]}


def obs(values=("slurm",), sandbox=("ds-a",), *, added=(), preexisting=("slurm",), observe=False, scope_type="namespace",
        error=None, others=frozenset(), **kw) -> sp.SyncObservation:
    scope = sc.ScopeObservation(target=TARGET, values=list(values), scope_type=scope_type, error=error,
                                sandbox=frozenset(sandbox), always=(), preexisting=preexisting, added=tuple(added),
                                observe=observe, others=others, own_namespace="slurm")
    base = dict(roll=ROLL, service_account=("slurm", "sa"), now_iso=WALL, workloads=(dep(),),
                grantable=frozenset(sandbox), live=frozenset(sandbox), may_grant=frozenset(sandbox))
    return sp.SyncObservation(scope, OWNER, **{**base, **kw})


def mem(**kw) -> sp.SyncMemory:
    """A binding past its first syncs: the grants listed (none), the scheduler allowed everywhere."""
    return sp.SyncMemory(**{"grants": frozenset(), "permits": rbac.Permits(sa=("slurm", "sa"), cluster=True), **kw})


def act(o: sp.SyncObservation, m: sp.SyncMemory, now: float = NOW, **done) -> tuple[sp.SyncPlan, so.Outcome]:
    plan = sp.decide_sync(o, m, now)
    return plan, so.outcome(o, plan, so.Done(**done), prev=None, now=WALL)


# ---------------------------------------------------------------- the write, the ledger and its generation


@pytest.mark.parametrize("case, o, values, entry, generation", [
    ("a new namespace: the list and our entry, generation moved", obs(),
     ["ds-a", "slurm"], Entry(("ds-a",), ("slurm",)), 8),
    ("nothing changed: no write", obs(values=("ds-a", "slurm"), added=("ds-a",)), None, None, 7),
    ("shared target: only our claim changes (ledger alone)",
     obs(values=("ds-a", "slurm"), others=frozenset({"ds-a"})), None, Entry(("ds-a",), ("slurm",)), 7),
    ("Observe mode writes nothing", obs(observe=True), None, None, 7),
    ("put back, remover not recorded: the scheduler must re-read", obs(added=("ds-a",)),
     ["ds-a", "slurm"], Entry(("ds-a",), ("slurm",)), 8),
    ("put back after a helm upgrade that restarted the scheduler on its own list",
     obs(added=("ds-a",), target_meta=list_changed_by("helm", "2026-01-01T00:00:10Z"),
         workloads=(dep(template_changed="2026-01-01T00:00:20Z"),)), ["ds-a", "slurm"], Entry(("ds-a",), ("slurm",)), 8),
    ("put back after an admin's edit alone: the running scheduler still has our list",
     obs(added=("ds-a",), target_meta=list_changed_by("kubectl-edit", "2026-01-01T00:00:10Z"),
         workloads=(dep(template_changed="2026-01-01T00:00:05Z"),)), ["ds-a", "slurm"], Entry(("ds-a",), ("slurm",)), 7),
    ("put back, workloads not readable: re-read to be sure",
     obs(added=("ds-a",), target_meta=list_changed_by("helm", "2026-01-01T00:00:10Z"), workloads=None,
         workloads_forbidden="denied"), ["ds-a", "slurm"], Entry(("ds-a",), ("slurm",)), 8),
])
def test_the_write_and_the_ledger_generation(case, o, values, entry, generation) -> None:
    o = replace(o, ledger=Ledger(generation=7))
    write = sp.decide_write(o)
    assert write.values == values, case
    assert (write.ledger.get(OWNER.ref) if write.ledger else None) == entry, case
    assert write.generation == generation and write.bumped == (generation == 8), case
    assert sp.decide_sync(o, mem(), NOW).write == write  # the plan writes what was decided before the write


def test_the_workloads_are_listed_before_the_write_only_for_a_put_back_whose_remover_is_recorded() -> None:
    recorded = list_changed_by("helm", "2026-01-01T00:00:10Z")
    assert sp.workloads_for_write(obs(added=("ds-a",), target_meta=recorded, workloads=None))
    assert not sp.workloads_for_write(obs(added=("ds-a",), target_meta=recorded))           # listed already
    assert not sp.workloads_for_write(obs(added=("ds-a",), workloads=None))                 # remover unknown
    assert not sp.workloads_for_write(obs(target_meta=recorded, workloads=None))            # not a put-back
    assert not sp.workloads_for_write(obs(added=("ds-a",), target_meta=recorded, workloads=None,
                                          roll=replace(ROLL, list_field=None)))             # not a ConfigMap we roll


def test_the_memory_the_list_leaves() -> None:
    w = sp.after_write(obs(), mem(added=("old",)))
    assert (w.memory.added, w.memory.preexisting, w.memory.known_list, w.memory.roll_due) == \
        (("ds-a",), ("slurm",), frozenset({"ds-a", "slurm"}), True)
    assert sp.after_write(obs(observe=True), mem(added=("old",))).memory.added == ("old",)  # Observe claims nothing
    assert sp.after_write(obs(error="bad YAML"), mem(added=("old",))).memory == mem(added=("old",))
    cluster = sp.after_write(obs(scope_type="cluster"), mem(known_list=frozenset({"x"}))).memory
    assert cluster.cluster and cluster.known_list is None


def test_another_tool_rendering_the_target_is_said_once() -> None:
    helm = {"annotations": {"meta.helm.sh/release-name": "slurm", "meta.helm.sh/release-namespace": "slurm"}}
    first = sp.after_write(obs(target_meta=helm), mem())
    assert first.warn and first.manager is not None and first.memory.manager_warned == "Helm (release slurm/slurm)"
    again = sp.after_write(obs(target_meta=helm), first.memory)
    assert not again.warn and again.manager == first.manager
    assert sp.after_write(obs(target_meta=helm, target_kind="Application"), mem()).manager is None


def test_deciding_from_the_memory_after_the_write_is_the_same_plan() -> None:
    o, m = obs(), mem(last_roll=90.0)
    assert sp.decide_sync(o, m, NOW) == sp.decide_sync(o, sp.after_write(o, m).memory, NOW)


@pytest.mark.parametrize("o", [obs(error="bad YAML"), obs(scope_type="cluster")])
def test_a_list_in_error_or_cluster_scope_ends_the_sync_at_the_list(o) -> None:
    plan, out = act(replace(o, periodic=True), mem(roll_due=True))
    assert plan.roll == sp.RollPlan() and plan.grants is None and plan.reviews.sa is None and plan.wake is None
    assert sp.late_needs(o, mem(), NOW) == sp.Needs()
    assert out.report.reason in ("InvalidConfig", "ClusterScope")


# ---------------------------------------------------------------- the roll


def rolled(values: list[str], generation: int = 0) -> sc.RollDecision:
    return sc.RollDecision(workload="sched", kind="Deployment", hash=sc.scope_hash(values), generation=generation)


LISTED = ["ds-a", "slurm"]
CURRENT = dep(sc.scope_hash(LISTED), 0)  # a template that runs LISTED at generation 0


@pytest.mark.parametrize("case, o, m, roll, due, wake", [
    ("our write, the first roll: at once", obs(), mem(), sp.RollPlan(patch=rolled(LISTED, 1)), True, None),
    ("our write inside the interval: folded into one roll at its end", obs(), mem(last_roll=90.0),
     sp.RollPlan(wait=20.0), True, 20.0),
    ("... and a folded roll already set carries it", obs(roll_timer_pending=True), mem(last_roll=90.0),
     sp.RollPlan(wait=20.0), True, None),
    ("a burst goes on: its last write rolls", obs(burst_goes_on=True), mem(), sp.RollPlan(), True, None),
    ("minRollInterval 0: every write rolls", obs(roll=replace(ROLL, interval=0.0)), mem(last_roll=99.0),
     sp.RollPlan(patch=rolled(LISTED, 1)), True, None),
    ("a resync finds the template stale: rationed like ours",
     obs(values=LISTED, added=("ds-a",), periodic=True, workloads=(dep("old"),)), mem(last_roll=95.0),
     sp.RollPlan(wait=25.0), True, 25.0),
    ("a resync finds the template stale past the interval: at once",
     obs(values=LISTED, added=("ds-a",), periodic=True, workloads=(dep("old"),)), mem(last_roll=60.0),
     sp.RollPlan(patch=rolled(LISTED)), False, None),
    ("a resync finds it current: nothing, nothing due", obs(values=LISTED, added=("ds-a",), periodic=True,
                                                             workloads=(CURRENT,)), mem(roll_due=True, last_roll=10.0),
     sp.RollPlan(), False, None),
    ("a signalled sync that wrote nothing: nothing to check", obs(values=LISTED, added=("ds-a",)), mem(),
     sp.RollPlan(), False, None),
    ("no workload runs the scheduler: a note", obs(workloads=()), mem(), None, False, None),
    ("Observe mode never rolls", obs(observe=True, periodic=True), mem(), sp.RollPlan(), False, None),
    ("restartScheduler: false", obs(roll=replace(ROLL, restart=False)), mem(), sp.RollPlan(), True, None),
    ("a target its own tool rolls (Argo CD, Flux)", obs(roll=replace(ROLL, can_roll=False, list_field=None)), mem(),
     sp.RollPlan(), True, None),
])
def test_the_roll(case, o, m, roll, due, wake) -> None:
    plan = sp.decide_sync(replace(o, ledger=Ledger()), m, NOW)
    if roll is None:
        assert plan.roll.note and "No Deployment or StatefulSet in slurm" in plan.roll.note, case
    else:
        assert plan.roll == roll, case
    assert (plan.memory.roll_due, plan.wake) == (due, wake), case
    if wake is not None:
        assert plan.memory.next_roll_at == pacing.after(WALL, wake), case


def test_a_roll_is_owed_while_the_ledger_says_the_operator_wrote_the_list() -> None:
    """A process that died between its list write and its roll (after-scope-write) left no roll due in
    memory; its successor's resync finds the template without our hash and the ledger's generation
    saying the operator wrote the list: the scheduler is rolled onto it, rationed like any roll."""
    o = obs(values=LISTED, added=("ds-a",), periodic=True, ledger=Ledger(generation=1))
    assert sp.decide_sync(o, mem(), NOW).roll == sp.RollPlan(patch=rolled(LISTED, 1))
    folded = sp.decide_sync(o, mem(last_roll=90.0), NOW)
    assert (folded.roll, folded.memory.roll_due, folded.wake) == (sp.RollPlan(wait=20.0), True, 20.0)
    assert sp.decide_sync(replace(o, ledger=Ledger()), mem(), NOW).roll == sp.RollPlan()  # never ours: left alone
    for never in (replace(o, roll=replace(ROLL, restart=False)),                        # restartScheduler: false
                  replace(o, roll=replace(ROLL, can_roll=False, list_field=None)),      # Argo CD, Flux
                  obs(values=LISTED, added=("ds-a",), periodic=True, observe=True, ledger=Ledger(generation=1))):
        plan = sp.decide_sync(never, mem(), NOW)
        assert (plan.roll, plan.memory.roll_due) == (sp.RollPlan(), False), never.roll


def rolled_at(when: str, hash_value: str = "old") -> dict:
    """The scheduler's Deployment, rolled by the operator at `when` (its rolled-at annotation)."""
    d = dep(hash_value)
    d["spec"]["template"]["metadata"]["annotations"][SCOPE_ROLLED_AT_ANNOTATION] = when
    return d


@pytest.mark.parametrize("case, m, template, wait, last", [
    ("status lost the roll (a death before its flush): the template's, as the end of its second",
     mem(), "2026-01-01T00:01:30Z", 21.0, (91.0, "2026-01-01T00:01:30Z")),
    ("the template's is later than status's", mem(last_roll=85.0, last_roll_at="2026-01-01T00:01:24Z"),
     "2026-01-01T00:01:30Z", 21.0, (91.0, "2026-01-01T00:01:30Z")),
    ("the same roll memory knows (this process made it): memory's, to the fraction",
     mem(last_roll=90.5, last_roll_at="2026-01-01T00:01:30Z"), "2026-01-01T00:01:30Z", 20.5,
     (90.5, "2026-01-01T00:01:30Z")),
    ("an older one on the template: memory's", mem(last_roll=95.5, last_roll_at="2026-01-01T00:01:35Z"),
     "2026-01-01T00:01:30Z", 25.5, (95.5, "2026-01-01T00:01:35Z")),
    ("not a time: memory's", mem(), "yesterday", None, (None, None)),
    ("past the interval: at once", mem(), "2026-01-01T00:01:00Z", None, (61.0, "2026-01-01T00:01:00Z")),
])
def test_the_last_roll_is_the_later_of_memorys_and_the_templates(case, m, template, wait, last) -> None:
    plan = sp.decide_sync(obs(workloads=(rolled_at(template),)), replace(m, roll_unread=True), NOW)
    assert plan.roll == (sp.RollPlan(wait=wait) if wait else sp.RollPlan(patch=rolled(LISTED, 1))), case
    assert (plan.memory.last_roll, plan.memory.last_roll_at, plan.memory.roll_unread) == (*last, False), case
    if plan.roll.patch is None:
        out = so.outcome(obs(), plan, so.Done(), prev=None, now=WALL)
        assert out.report.section["lastRollTime"] == last[1], case   # status says it again


def test_a_roll_folded_from_a_last_roll_not_compared_with_the_template_reads_the_workloads() -> None:
    """The first decision after a start: status's lastRollTime may be older than the template's (the
    roll after it was never flushed), so a roll it would fold reads the workloads to wait from the later."""
    o = obs(workloads=None)
    assert sp.late_needs(o, mem(last_roll=90.0, roll_unread=True), NOW).workloads
    assert not sp.late_needs(o, mem(last_roll=90.0), NOW).workloads            # compared already: memory says
    assert not sp.late_needs(obs(workloads=None, burst_goes_on=True), mem(roll_unread=True), NOW).workloads


def test_a_patch_made_settles_the_roll_and_the_next_one_waits_the_interval() -> None:
    plan, out = act(obs(), mem(), rolled_at=(NOW, WALL))
    assert plan.roll.patch is not None and plan.wake is None
    assert (out.memory.roll_due, out.memory.last_roll, out.memory.last_roll_at) == (False, NOW, WALL)
    assert out.report.section["lastRollTime"] == WALL and "nextRollTime" not in out.report.section
    nxt = sp.decide_sync(obs(values=LISTED, sandbox=("ds-a", "ds-b"), added=("ds-a",)), out.memory, NOW + 1)
    assert nxt.roll == sp.RollPlan(wait=29.0) and nxt.memory.roll_due                  # never two inside it
    report = so.outcome(obs(), nxt, so.Done(), prev=None, now=WALL).report
    assert report.section["nextRollTime"] == nxt.memory.next_roll_at


def test_a_refused_patch_keeps_the_roll_due_and_a_gone_workload_does_not() -> None:
    _, refused = act(obs(), mem(), roll_forbidden="no patch for you")
    assert refused.memory.roll_due and refused.memory.last_roll is None
    assert (refused.report.reason, refused.report.status) == ("Forbidden", "False")
    assert "may not patch Deployment slurm/sched: no patch for you" in refused.report.message
    _, gone = act(obs(), mem())  # the patch found no workload (NotFound): nothing left to roll
    assert not gone.memory.roll_due and gone.memory.last_roll is None


def test_the_workloads_are_gathered_after_the_write_only_when_the_roll_may_patch_now() -> None:
    late = dict(workloads=None)
    assert sp.late_needs(obs(**late), mem(), NOW).workloads                               # the first roll
    assert not sp.late_needs(obs(burst_goes_on=True, **late), mem(), NOW).workloads       # a burst's intermediate sync
    assert not sp.late_needs(obs(**late), mem(last_roll=90.0), NOW).workloads             # folded
    assert not sp.late_needs(obs(values=LISTED, added=("ds-a",), **late), mem(), NOW).workloads  # nothing due
    assert sp.late_needs(obs(values=LISTED, added=("ds-a",), periodic=True, **late), mem(), NOW).workloads
    assert not sp.late_needs(obs(), mem(), NOW).workloads                                  # listed for the write
    forbidden = obs(workloads=None, workloads_forbidden="denied")
    assert not sp.late_needs(forbidden, mem(), NOW).workloads
    _, out = act(forbidden, mem())
    assert out.report.reason == "Forbidden" and "may not list Deployments and StatefulSets in slurm: denied" \
        in out.report.message and out.memory.roll_due


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.floats(0.1, 20.0), st.booleans(), st.booleans(), st.booleans()), max_size=40),
       st.sampled_from([0.0, 5.0, 30.0]))
def test_a_run_of_syncs_never_rolls_twice_inside_the_interval(steps, interval) -> None:
    """Signalled syncs (some list one more namespace) and resyncs at random gaps, an admin editing the
    scheduler's template now and then, the folded roll's timer firing as a sync at its wake, every
    patch made: rolls are `interval` apart, and in the end the scheduler runs the list."""
    roll = replace(ROLL, interval=interval)
    now, m, timer, names, rolls, template = 0.0, mem(), None, ["slurm"], [], None

    def sync(periodic: bool) -> None:
        nonlocal m, timer, template
        o = obs(values=tuple(listed), sandbox=tuple(n for n in names if n != "slurm"), added=tuple(listed[:-1]),
                periodic=periodic, roll=roll, workloads=(dep(template, 0),), roll_timer_pending=timer is not None)
        plan = sp.decide_sync(o, m, now)
        listed[:] = plan.listed.final
        if plan.wake is not None:
            timer = now + plan.wake
        if plan.roll.patch is not None:
            rolls.append(now)
            template = plan.roll.patch.hash
        m = so.outcome(o, plan, so.Done(rolled_at=(now, WALL) if plan.roll.patch else None), prev=None,
                       now=WALL).memory

    listed = ["slurm"]
    for gap, new_namespace, periodic, edit in steps:
        while timer is not None and timer <= now + gap:
            now, timer = timer, None
            sync(False)
        now += gap
        if new_namespace:
            names.append(f"ds-{len(names)}")
        if edit:
            template = "an admin's edit"  # a resync finds it stale with nothing due: rationed like ours
        sync(periodic)
    now += 1.0
    sync(True)  # a last resync (level-triggered), then the folded roll it may leave
    while timer is not None:
        now, timer = timer, None
        sync(False)
    assert all(b - a >= interval - 1e-6 for a, b in zip(rolls, rolls[1:])), rolls
    assert template == sc.scope_hash(listed) or (not rolls and template is None), (template, listed)


# ---------------------------------------------------------------- the grants


def grant(ns: str, role: str = "sched-role") -> g.Grant:
    return g.grant_of(g.rolebinding("slurm", "b", "u1", ns, role, "sa", "slurm"))


@pytest.mark.parametrize("case, o, m, create, delete, have", [
    ("the first sync: grants in what the binding may grant in, listed and live",
     obs(values=("ds-a", "ds-b", "admin", "slurm"), sandbox=("ds-a", "ds-b"), live=frozenset({"ds-a"}),
         grant_role="sched-role", found=()), mem(grants=None), ["ds-a"], [], set()),
    ("a resync replaces a stale grant and removes a stray",
     obs(values=("ds-a", "slurm"), added=("ds-a",), grant_role="sched-role", periodic=True,
         found=(grant("ds-a", "edited"), grant("gone-ns"))), mem(grants=frozenset({"ds-a"})),
     ["ds-a"], ["ds-a", "gone-ns"], set()),
    ("a signalled sync plans from memory: the namespace left the list",
     obs(values=("ds-a", "slurm"), sandbox=(), added=("ds-a",), grant_role="sched-role"),
     mem(grants=frozenset({"ds-a"})), [], ["ds-a"], {"ds-a"}),  # held until the delete is done (outcome)
    ("... and keeps what it holds", obs(values=("ds-a", "slurm"), added=("ds-a",), grant_role="sched-role"),
     mem(grants=frozenset({"ds-a"})), [], [], {"ds-a"}),
    ("grantClusterRole unset: ours are removed", obs(values=("ds-a", "slurm"), added=("ds-a",), periodic=True,
                                                   found=(grant("ds-a"),)), mem(grants=frozenset({"ds-a"})),
     [], ["ds-a"], set()),
])
def test_the_grants_plan(case, o, m, create, delete, have) -> None:
    plan = sp.decide_sync(o, m, NOW)
    assert plan.grants is not None, case
    assert plan.grants.to_create == create and [ns for ns, _, _ in plan.grants.to_delete] == delete, case
    assert plan.memory.grants == frozenset(have), case
    assert [b["metadata"]["namespace"] for b in plan.create] == create, case
    assert all(b["roleRef"]["name"] == "sched-role" and b["subjects"][0]["name"] == "sa" for b in plan.create), case


@pytest.mark.parametrize("case, o, m", [
    ("nothing granted and no role: no list at every resync", obs(periodic=True), mem(grants=frozenset())),
    ("Observe mode", obs(observe=True, periodic=True, grant_role="sched-role"), mem(grants=None)),
])
def test_grants_are_not_kept(case, o, m) -> None:
    assert sp.decide_sync(o, m, NOW).grants is None, case
    assert not sp.late_needs(o, m, NOW).rolebindings, case


def test_our_rolebindings_are_listed_only_when_refreshing() -> None:
    role = dict(grant_role="sched-role")
    assert sp.late_needs(obs(**role), mem(grants=None), NOW).rolebindings          # the first sync
    assert sp.late_needs(obs(periodic=True, **role), mem(), NOW).rolebindings      # a resync
    assert not sp.late_needs(obs(**role), mem(), NOW).rolebindings                 # a signalled sync: memory


def test_a_burst_grants_once_at_its_last_write_or_after_the_fold_limit() -> None:
    """While a burst goes on nothing is granted or asked (the list writes are what it waits for);
    its last write grants every namespace it listed; a burst longer than GRANT_FOLD_SECONDS grants
    then anyway. A resync never defers."""
    o = obs(values=("ds-a", "ds-b", "slurm"), sandbox=("ds-a", "ds-b"), added=("ds-a", "ds-b"), grant_role="sched-role",
            burst_goes_on=True)
    m = mem(grants=frozenset(), permits=rbac.Permits(SA, False, denied=frozenset({"ds-b"})))
    folded = sp.decide_sync(o, m, NOW)
    needs = sp.late_needs(o, m, NOW)
    assert folded.grants is None and list(folded.create) == [] and not (needs.rolebindings or needs.namespaces)
    assert not folded.reviews.cluster and rbac.second_round(folded.reviews, False) == ()  # nothing asked
    assert folded.memory.grants_owed_since == NOW
    out = so.outcome(o, folded, so.Done(), prev=None, now=WALL)
    assert out.report.reason == "SchedulerNotPermitted" and "ds-b" in out.report.message  # memory's verdict kept
    later = sp.decide_sync(o, replace(m, grants_owed_since=NOW), NOW + 1)
    assert later.grants is None and later.memory.grants_owed_since == NOW                 # the first deferral counts
    due = sp.decide_sync(o, replace(m, grants_owed_since=NOW), NOW + sp.GRANT_FOLD_SECONDS)
    assert due.grants is not None and due.grants.to_create == ["ds-a", "ds-b"] and due.memory.grants_owed_since is None
    last = sp.decide_sync(replace(o, burst_goes_on=False), replace(m, grants_owed_since=NOW), NOW + 1)
    assert last.grants is not None and last.grants.to_create == ["ds-a", "ds-b"]
    assert sp.decide_sync(replace(o, periodic=True, found=()), m, NOW).grants is not None
    plain = obs(values=("ds-a", "slurm"), added=("ds-a",), burst_goes_on=True)  # no grant role: nothing to fold
    assert sp.decide_sync(plain, mem(), NOW).memory.grants_owed_since is None


def test_a_grant_round_may_yield_to_a_new_change_until_the_fold_limit_and_a_cut_keeps_what_it_owes() -> None:
    """A signalled sync's creates may stop for a newer change (its list write goes first); the grants
    are then owed since the first deferral, so a stream of changes cannot starve them past
    GRANT_FOLD_SECONDS, and a resync never yields. A cut round keeps the roll it did not make due and
    counts only the creates it made."""
    o = obs(values=("ds-a", "ds-b", "slurm"), sandbox=("ds-a", "ds-b"), added=("ds-a", "ds-b"), grant_role="sched-role")
    m = mem(roll_due=True)
    assert sp.decide_sync(o, m, NOW).grants_yield_owed == NOW                            # owed from now if cut
    owed = replace(m, grants_owed_since=NOW - 1)
    assert sp.decide_sync(o, owed, NOW).grants_yield_owed == NOW - 1                     # the first deferral counts
    assert sp.decide_sync(o, replace(m, grants_owed_since=NOW - sp.GRANT_FOLD_SECONDS), NOW).grants_yield_owed is None
    assert sp.decide_sync(replace(o, periodic=True, found=()), m, NOW).grants_yield_owed is None
    assert sp.decide_sync(obs(values=("ds-a", "slurm"), added=("ds-a",)), mem(), NOW).grants_yield_owed is None
    plan, cut = act(o, m, created=(so.GrantResult("ds-a", None),), cut=True)
    assert plan.roll.patch is not None                                                   # a roll was planned ...
    assert cut.memory.roll_due and cut.memory.last_roll == m.last_roll                   # ... and stays owed
    assert cut.memory.grants == frozenset({"ds-a"}) and cut.memory.grants_owed_since == NOW
    _, whole = act(o, m, created=(so.GrantResult("ds-a", None), so.GrantResult("ds-b", None)), rolled_at=(NOW, WALL))
    assert not whole.memory.roll_due and whole.memory.grants_owed_since is None


def test_the_granted_role_is_read_only_when_a_namespace_review_may_follow() -> None:
    role = dict(grant_role="sched-role")
    assert sp.late_needs(obs(**role), mem(permits=rbac.Permits()), NOW).role            # never asked yet
    assert sp.late_needs(obs(periodic=True, **role), mem(), NOW).role                  # a resync asks again
    assert not sp.late_needs(obs(**role), mem(), NOW).role                             # allowed everywhere
    assert not sp.late_needs(obs(periodic=True), mem(grants=frozenset({"ds-a"})), NOW).role  # no role: removing ours


def test_grant_outcomes() -> None:
    o = obs(values=("ds-a", "ds-b", "slurm"), sandbox=("ds-a", "ds-b"), grant_role="sched-role", found=())
    plan = sp.decide_sync(o, mem(grants=None), NOW)
    out = so.outcome(o, plan, so.Done(created=(so.GrantResult("ds-a"), so.GrantResult("ds-b", "403", forbidden=True))),
                     prev=None, now=WALL)
    assert out.memory.grants == frozenset({"ds-a"})
    assert out.report.reason == "Forbidden" and "1 failed (create in ds-b: 403)" in out.report.message
    assert "needs `bind` on ClusterRole sched-role" in out.report.message
    taken = so.outcome(o, plan, so.Done(created=(so.GrantResult("ds-a", "409", taken=True), so.GrantResult("ds-b")),
                                        deleted=(so.GrantResult("x", "boom"),)), prev=None, now=WALL)
    assert taken.report.reason == "GrantFailed" and taken.memory.grants == frozenset({"ds-b"})
    assert f"(delete in x: boom; create in ds-a: a RoleBinding named {g.rolebinding_name('u1')} exists there" \
        in taken.report.message
    left = obs(values=("ds-a", "slurm"), sandbox=(), added=("ds-a",), grant_role="sched-role")
    held = sp.decide_sync(left, mem(grants=frozenset({"ds-a"})), NOW)
    assert so.outcome(left, held, so.Done(deleted=(so.GrantResult("ds-a"),)), prev=None, now=WALL).memory.grants == set()
    assert so.outcome(left, held, so.Done(deleted=(so.GrantResult("ds-a", "500"),)), prev=None,
                      now=WALL).memory.grants == {"ds-a"}
    listing = sp.decide_sync(replace(o, found=None, found_forbidden="denied"), mem(grants=None), NOW)
    assert listing.grants is None and listing.grants_problem == ("Forbidden", "the operator may not list RoleBindings: "
                                                                 "denied")
    assert so.grants_event("u1", "", ["a"], ["b"]).endswith("to ClusterRole -: created in a; removed from b")


def test_grants_only_inside_the_admins_bound_and_none_without_one() -> None:
    """Finding 5: a RoleBinding for the ServiceAccount the binding picked is made only in a namespace the
    admin's --allow-grant gives its namespace (`may_grant`); with no bound at all, none is made, those
    held are removed, and ScopeSynced says so naming the setting."""
    o = obs(values=("ds-a", "victim", "slurm"), sandbox=("ds-a", "victim"), grant_role="sched-role", found=(),
            may_grant=frozenset({"ds-a"}))
    plan = sp.decide_sync(o, mem(grants=None), NOW)
    assert plan.grants is not None and plan.grants.to_create == ["ds-a"]
    assert [b["metadata"]["namespace"] for b in plan.create] == ["ds-a"]
    unbounded = obs(values=("ds-a", "slurm"), added=("ds-a",), grant_role="sched-role", periodic=True,
                    found=(grant("ds-a"),), grants_bounded=False, may_grant=frozenset())
    plan = sp.decide_sync(unbounded, mem(grants=frozenset({"ds-a"})), NOW)
    assert plan.grants is not None and plan.grants.to_create == [] and \
        [ns for ns, _, _ in plan.grants.to_delete] == ["ds-a"]
    out = so.outcome(unbounded, plan, so.Done(deleted=(so.GrantResult("ds-a"),)), prev=None, now=WALL)
    assert out.report.reason == "GrantsNotAllowed" and out.report.status == "False"
    assert "--allow-grant" in out.report.message and out.memory.grants == frozenset()
    # denied outside the bound: the fix names the bound, not grantClusterRole (already set)
    denied = replace(o, found=None)
    plan = sp.decide_sync(denied, mem(permits=rbac.Permits(SA, False, denied=frozenset({"victim"}))), NOW)
    out = so.outcome(denied, plan, so.Done(answers=so.Answers(False, None, {"victim": False})), prev=None, now=WALL)
    assert out.report.reason == "SchedulerNotPermitted" and "victim are outside where" in out.report.message


# ---------------------------------------------------------------- the scheduler's RBAC reviews


SA = ("slurm", "sa")
LIVE = ("ds-a", "ds-b", "ds-c")


def rbac_obs(**kw) -> sp.SyncObservation:
    return obs(values=LIVE + ("slurm",), sandbox=LIVE, added=LIVE, **kw)


@pytest.mark.parametrize("case, o, permits, now, cluster, asked", [
    ("never asked: the cluster-wide review first", rbac_obs(), rbac.Permits(), NOW, True, LIVE),
    ("allowed everywhere: nothing to ask", rbac_obs(), rbac.Permits(SA, True), NOW, False, ()),
    ("... until a resync asks again", rbac_obs(periodic=True), rbac.Permits(SA, True), NOW, True, LIVE),
    ("a confirmed namespace is not asked again, a denied one not inside the recheck",
     rbac_obs(), rbac.Permits(SA, False, frozenset({"ds-a"}), frozenset({"ds-b"}), NOW - 1), NOW, False, ("ds-c",)),
    ("a denied one is asked again after DENIED_RECHECK_SECONDS",
     rbac_obs(), rbac.Permits(SA, False, frozenset({"ds-a"}), frozenset({"ds-b"}), NOW - rbac.DENIED_RECHECK_SECONDS),
     NOW, False, ("ds-b", "ds-c")),
    ("... or at a resync (cluster-wide first)",
     rbac_obs(periodic=True), rbac.Permits(SA, False, frozenset({"ds-a"}), frozenset({"ds-b"}), NOW - 1), NOW, True,
     ("ds-b", "ds-c")),
    ("another ServiceAccount starts afresh", rbac_obs(), rbac.Permits(("slurm", "old"), True, frozenset(LIVE)), NOW, True,
     LIVE),
    ("no ServiceAccount known: nothing to check", rbac_obs(service_account=("slurm", "")), rbac.Permits(), NOW, False, ()),
])
def test_the_review_cadence(case, o, permits, now, cluster, asked) -> None:
    reviews = sp.decide_sync(o, mem(permits=permits), now).reviews
    assert reviews.cluster == cluster, case
    if cluster:  # the namespaces only when the cluster-wide review denies (not when it allows, or no answer came)
        assert (rbac.second_round(reviews, False), rbac.second_round(reviews, True), rbac.second_round(reviews, None)) == \
            (asked, (), ()), case
    else:        # the remembered answer decides
        assert rbac.second_round(reviews, None) == asked, case


def test_review_answers_are_kept_and_the_denied_reported() -> None:
    o = rbac_obs()
    plan = sp.decide_sync(o, mem(permits=rbac.Permits()), NOW)
    answers = so.Answers(cluster=False, namespaces={"ds-a": True, "ds-b": False, "ds-c": None})
    out = so.outcome(o, plan, so.Done(answers=answers), prev=None, now=WALL)
    p = out.memory.permits
    assert (p.sa, p.cluster, p.permitted, p.denied, p.denied_asked) == (SA, False, {"ds-a"}, {"ds-b"}, NOW)
    assert out.report.reason == "SchedulerNotPermitted"
    assert "slurm/sa may not watch pods or create pods/binding in 1 of the binding's listed namespace(s): ds-b" \
        in out.report.message
    everywhere = so.outcome(o, plan, so.Done(answers=so.Answers(cluster=True)), prev=None, now=WALL)
    assert everywhere.memory.permits == rbac.Permits(SA, True) and everywhere.report.reason == "Synced"
    unknown = so.outcome(o, plan, so.Done(answers=so.Answers()), prev=None, now=WALL)  # no answer: asked again next time
    assert unknown.memory.permits == rbac.Permits(SA) and unknown.report.reason == "Synced"
    refused = so.outcome(o, plan, so.Done(answers=so.Answers(cluster_forbidden="no SAR")), prev=None, now=WALL)
    assert refused.report.reason == "Forbidden" and "may not create SubjectAccessReviews to check the scheduler's " \
        "RBAC: no SAR" in refused.report.message


def test_the_namespaces_the_binding_may_not_grant_in_are_not_checked() -> None:
    o = rbac_obs(grantable=frozenset({"ds-a"}), live=frozenset({"ds-a"}))
    assert sp.decide_sync(o, mem(permits=rbac.Permits()), NOW).reviews.namespaces == ("ds-a",)


# ---------------------------------------------------------------- the problem chain


def test_the_first_problem_of_the_chain_is_reported_roll_then_grants_then_rbac() -> None:
    o = obs(sandbox=LIVE, grantable=frozenset(LIVE), live=frozenset(LIVE), grant_role="sched-role", found=())
    plan = sp.decide_sync(o, mem(grants=None, permits=rbac.Permits()), NOW)
    assert plan.roll.patch is not None and plan.grants is not None and plan.reviews.cluster
    roll = dict(roll_forbidden="no patch")
    grants = dict(created=(so.GrantResult("ds-a", "403", forbidden=True),))
    denied = dict(answers=so.Answers(cluster=False, namespaces={"ds-a": False}))

    def reported(**done) -> str:
        r = so.outcome(o, plan, so.Done(**done), prev=None, now=WALL).report
        return r.reason + ": " + r.message

    assert "may not patch Deployment" in reported(**roll, **grants, **denied)
    assert "RoleBindings for the scheduler's ServiceAccount" in reported(**grants, **denied)
    assert reported(**denied).startswith("SchedulerNotPermitted: ")
    assert reported(rolled_at=(NOW, WALL), answers=so.Answers(cluster=True)).startswith("Synced: ")
    assert [c.__name__ for c in so.CHAIN] == ["_roll_check", "_grants_check", "_rbac_check"]


def test_a_roll_note_follows_the_problem_or_the_state() -> None:
    o = obs(workloads=())
    _, out = act(o, mem(), answers=so.Answers(cluster=True))
    assert out.report.reason == "Synced" and out.report.message.endswith(
        "restart it by hand if it reads its config only at start.")
