"""The list loop's and the roll loop's decisions in core (issue 32): core.scope.list_loop.decide (the
write, the ledger and its generation, the memory it leaves, leaving a moved target) and
core.scope.roll_loop.decide (the template check, the rationing, the holds, Restore), as tables of pure
cases; then a property over a run of roll wakes: never two rolls inside the interval, and in the end
the scheduler runs the list. The grants loop and the report chain: test_grant_loop.py."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sunk_sandbox_operator.api.keys import SCOPE_GENERATION_ANNOTATION, SCOPE_HASH_ANNOTATION, SCOPE_ROLLED_AT_ANNOTATION
from sunk_sandbox_operator.api.spec import LabelSelector
from sunk_sandbox_operator.core.scope import list_loop as ll
from sunk_sandbox_operator.core.scope import pacing
from sunk_sandbox_operator.core.scope import plan as sc
from sunk_sandbox_operator.core.scope import roll_loop as rl
from sunk_sandbox_operator.core.scope import template as tp
from sunk_sandbox_operator.core.scope.grant_loop import GrantState
from sunk_sandbox_operator.core.scope.ledger import Entry, Ledger
from sunk_sandbox_operator.core.scope.report import Results, report
from sunk_sandbox_operator.core.scope.target_ref import TargetRef

SEL = LabelSelector(match_labels={"app": "sched"})
OWNER = "slurm/b"
REF = TargetRef("SchedulerConfigMap", "slurm", "cm", "scheduler.scope.namespaces", "scheduler.conf")
WALL = "2026-01-01T00:01:40Z"   # NOW on the wall clock
NOW = 100.0
TARGET = "ConfigMap slurm/cm key scheduler.conf at scheduler.scope.namespaces"


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
        error=None, others=frozenset(), ref=REF, **kw) -> ll.ListObservation:
    scope = sc.ScopeObservation(target=TARGET, values=list(values), scope_type=scope_type, error=error,
                                sandbox=frozenset(sandbox), always=(), preexisting=preexisting, added=tuple(added),
                                observe=observe, others=others, own_namespace="slurm")
    return ll.ListObservation(scope, ref, OWNER, **{"list_field": ("data", "scheduler.conf"), "pod_selector": SEL,
                                                   "workloads": (dep(),), **kw})


# ---------------------------------------------------------------- the list: the write, the ledger and its generation


@pytest.mark.parametrize("case, o, values, entry, generation", [
    ("a new namespace: the list and our entry, generation moved", obs(),
     ["ds-a", "slurm"], Entry(("ds-a",), ("slurm",)), 8),
    ("nothing changed: no write", obs(values=("ds-a", "slurm"), added=("ds-a",)), None, None, None),
    ("shared target: only our claim changes (ledger alone)",
     obs(values=("ds-a", "slurm"), others=frozenset({"ds-a"})), None, Entry(("ds-a",), ("slurm",)), 7),
    ("Observe mode writes nothing", obs(observe=True), None, None, None),
    ("put back, remover not recorded: the scheduler must re-read", obs(added=("ds-a",)),
     ["ds-a", "slurm"], Entry(("ds-a",), ("slurm",)), 8),
    ("put back after a helm upgrade that restarted the scheduler on its own list",
     obs(added=("ds-a",), target_meta=list_changed_by("helm", "2026-01-01T00:00:10Z"),
         workloads=(dep(template_changed="2026-01-01T00:00:20Z"),)), ["ds-a", "slurm"], Entry(("ds-a",), ("slurm",)), 8),
    ("put back after an admin's edit alone: the running scheduler still has our list",
     obs(added=("ds-a",), target_meta=list_changed_by("kubectl-edit", "2026-01-01T00:00:10Z"),
         workloads=(dep(template_changed="2026-01-01T00:00:05Z"),)), ["ds-a", "slurm"], Entry(("ds-a",), ("slurm",)), 7),
    ("put back, workloads not readable: re-read to be sure",
     obs(added=("ds-a",), target_meta=list_changed_by("helm", "2026-01-01T00:00:10Z"), workloads=None),
     ["ds-a", "slurm"], Entry(("ds-a",), ("slurm",)), 8),
])
def test_the_write_and_the_ledger_generation(case, o, values, entry, generation) -> None:
    step = ll.decide(replace(o, ledger=Ledger(generation=7)), ll.ListState(REF))
    assert step.values == values, case
    assert (step.ledger.get(OWNER) if step.ledger else None) == entry, case
    assert (step.ledger.generation if step.ledger else None) == generation, case


def test_the_workloads_are_read_before_the_write_only_for_a_put_back_whose_remover_is_recorded() -> None:
    recorded = list_changed_by("helm", "2026-01-01T00:00:10Z")
    assert ll.needs_workloads(obs(added=("ds-a",), target_meta=recorded, workloads=None))
    assert not ll.needs_workloads(obs(added=("ds-a",), target_meta=recorded))           # read already
    assert not ll.needs_workloads(obs(added=("ds-a",), workloads=None))                 # remover unknown
    assert not ll.needs_workloads(obs(target_meta=recorded, workloads=None))            # not a put-back
    assert not ll.needs_workloads(obs(added=("ds-a",), target_meta=recorded, workloads=None, list_field=None))


def test_the_memory_a_wake_leaves() -> None:
    before = ll.ListState(REF, added=("old",))
    m = ll.decide(obs(), before).memory
    assert (m.added, m.preexisting, m.known, m.problem) == (("ds-a",), ("slurm",), frozenset({"ds-a", "slurm"}), None)
    assert m.facts is not None and (m.facts.count, m.facts.added_count, m.facts.wrote) == (2, 1, True)
    assert ll.decide(obs(observe=True), before).memory.added == ("old",)          # Observe claims nothing
    failed = ll.decide(obs(error="bad YAML"), before).memory
    assert (failed.added, failed.known) == (("old",), None) and failed.problem is not None
    assert failed.problem.reason == "InvalidConfig" and "left untouched" in failed.problem.message
    cluster = ll.decide(obs(scope_type="cluster"), replace(before, known=frozenset({"x"}))).memory
    assert cluster.cluster and cluster.known is None and cluster.facts is not None and cluster.facts.cluster


def test_a_second_wake_over_what_the_first_wrote_writes_nothing() -> None:
    first = ll.decide(obs(), ll.ListState(REF))
    assert first.values is not None and first.ledger is not None
    again = ll.decide(obs(values=tuple(first.values), added=first.memory.added, ledger=first.ledger), first.memory)
    assert again.ledger is None and again.memory.facts is not None and not again.memory.facts.wrote


def test_another_tool_rendering_the_target_is_said_once() -> None:
    helm = {"annotations": {"meta.helm.sh/release-name": "slurm", "meta.helm.sh/release-namespace": "slurm"}}
    first = ll.decide(obs(target_meta=helm), ll.ListState(REF))
    assert first.warn and first.manager is not None and first.memory.manager_warned == "Helm (release slurm/slurm)"
    assert first.memory.facts is not None and first.memory.facts.managed_by == "Helm (release slurm/slurm)"
    again = ll.decide(obs(target_meta=helm), first.memory)
    assert not again.warn and again.manager == first.manager
    assert ll.decide(obs(target_meta=helm, target_kind="Application"), ll.ListState(REF)).manager is None


def test_a_moved_target_is_left_first_and_the_new_one_starts_fresh() -> None:
    other = replace(REF, name="cm2")
    kept = ll.ListState(REF, preexisting=("slurm",), added=("ds-a",), known=frozenset({"ds-a", "slurm"}))
    step = ll.decide(obs(ref=other), kept)
    assert step.leave == REF and step.ledger is None and step.memory == ll.ListState(other)
    assert ll.moved(kept, other) == REF and ll.moved(kept, REF) is None and ll.moved(ll.ListState(), REF) is None
    # Leaving: our names and our ledger entry go (unless another live binding claims them).
    ledger = Ledger({OWNER: Entry(("ds-a", "ds-b"), ("slurm",))}, generation=3)
    out = ll.decide_restore(["ds-a", "ds-b", "slurm"], ledger, OWNER, (), Entry(("ds-a", "ds-b"), ("slurm",)),
                            frozenset({"ds-b"}))
    assert out is not None and out.values == ["ds-b", "slurm"] and out.ledger.get(OWNER) is None
    assert out.ledger.generation == 4
    unlisted = ll.decide_restore(["slurm"], ledger, OWNER, (), Entry(("ds-a",), ("slurm",)), frozenset())
    assert unlisted is not None and unlisted.values is None and unlisted.ledger.generation == 3  # the entry only
    assert ll.decide_restore(["slurm"], Ledger(), OWNER, (), Entry(), frozenset()) is None       # nothing of ours


# ---------------------------------------------------------------- the roll


ROLL = rl.RollSettings(can_roll=True, restart=True, interval=30.0, namespace="slurm", pod_selector=SEL)
LISTED = ("ds-a", "slurm")
CURRENT = dep(tp.scope_hash(LISTED), 1)  # a template that runs LISTED at generation 1


def roll_obs(values=LISTED, generation=1, workloads=(dep(),), **kw) -> rl.RollObservation:
    return rl.RollObservation(**{"settings": ROLL, "values": values, "generation": generation, "workloads": workloads,
                                 "now": NOW, "now_iso": WALL, **kw})


def rolled(values=LISTED, generation: int | None = 1) -> tp.RollDecision:
    return tp.RollDecision(workload="sched", kind="Deployment", hash=tp.scope_hash(values), generation=generation)


@pytest.mark.parametrize("case, o, m, patch, wake", [
    ("our write, the first roll: at once", roll_obs(), rl.RollState(), rolled(), None),
    ("our write inside the interval: folded into one roll at its end", roll_obs(), rl.RollState(90.0), None, 20.0),
    ("minRollInterval 0: every write rolls", roll_obs(settings=replace(ROLL, interval=0.0)), rl.RollState(99.0),
     rolled(), None),
    ("a burst goes on (a namespace that belongs is not listed yet): held", roll_obs(unlisted=1), rl.RollState(),
     None, rl.HOLD_RECHECK),
    ("listed namespaces wait for their RoleBinding: held", roll_obs(ungranted=2), rl.RollState(), None,
     rl.HOLD_RECHECK),
    ("held as long as HOLD_SECONDS at most", roll_obs(ungranted=2), rl.RollState(held_since=NOW - rl.HOLD_SECONDS),
     rolled(), None),
    ("folded and held: the interval's end first", roll_obs(unlisted=1), rl.RollState(90.0), None, 20.0),
    ("the template found stale (an admin's edit): rationed like ours", roll_obs(workloads=(dep("old", 1),)),
     rl.RollState(95.0), None, 25.0),
    ("... past the interval: at once", roll_obs(workloads=(dep("old", 1),)), rl.RollState(60.0), rolled(), None),
    ("the template runs the list: nothing", roll_obs(workloads=(CURRENT,)), rl.RollState(10.0), None, None),
    ("the list written again since the roll (a put-back): rolled for the new generation",
     roll_obs(generation=2, workloads=(CURRENT,)), rl.RollState(), rolled(generation=2), None),
    ("Observe mode never rolls", roll_obs(settings=replace(ROLL, observe=True)), rl.RollState(), None, None),
    ("restartScheduler: false", roll_obs(settings=replace(ROLL, restart=False)), rl.RollState(), None, None),
    ("a target its own tool rolls (Argo CD, Flux)", roll_obs(settings=replace(ROLL, can_roll=False)), rl.RollState(),
     None, None),
    ("the list in error or scope type cluster: nothing to roll for", roll_obs(values=None), rl.RollState(), None, None),
])
def test_the_roll(case, o, m, patch, wake) -> None:
    step = rl.decide(o, m)
    assert (step.patch, step.wake) == (patch, wake), case
    assert (step.memory.due is not None) == (patch is None and wake is not None and wake != rl.HOLD_RECHECK), case
    if step.memory.due is not None:
        assert step.memory.next_roll_at == pacing.after(WALL, wake), case


def test_a_folded_roll_keeps_its_time_however_many_wakes_see_it() -> None:
    """status.scope.nextRollTime does not move while the same folded roll is due (no status churn)."""
    first = rl.decide(roll_obs(), rl.RollState(90.0)).memory
    later = rl.decide(roll_obs(now=NOW + 3.7, now_iso="2026-01-01T00:01:44Z"), first)
    assert later.wake == pytest.approx(16.3) and later.memory.next_roll_at == first.next_roll_at == "2026-01-01T00:02:00Z"


def test_a_roll_is_owed_while_the_ledger_says_the_operator_wrote_the_list() -> None:
    """A process that died between its list write and its roll (after-scope-write) left only the
    ledger's generation: its successor finds the template without our hash and rolls it, rationed
    like any roll; a scheduler the operator never wrote a list for is left alone."""
    assert rl.decide(roll_obs(), rl.RollState()).patch == rolled()
    assert rl.decide(roll_obs(), rl.RollState(90.0)).wake == 20.0
    assert rl.decide(roll_obs(generation=0), rl.RollState()).patch is None  # never ours: left alone


def rolled_at(when: str, hash_value: str = "old") -> dict:
    """The scheduler's Deployment, rolled by the operator at `when` (its rolled-at annotation)."""
    d = dep(hash_value)
    d["spec"]["template"]["metadata"]["annotations"][SCOPE_ROLLED_AT_ANNOTATION] = when
    return d


@pytest.mark.parametrize("case, m, template, wait, last", [
    ("status lost the roll (a death before its flush): the template's, as the end of its second",
     rl.RollState(), "2026-01-01T00:01:30Z", 21.0, (91.0, "2026-01-01T00:01:30Z")),
    ("the template's is later than status's", rl.RollState(85.0, "2026-01-01T00:01:24Z"),
     "2026-01-01T00:01:30Z", 21.0, (91.0, "2026-01-01T00:01:30Z")),
    ("the same roll memory knows (this process made it): memory's, to the fraction",
     rl.RollState(90.5, "2026-01-01T00:01:30Z"), "2026-01-01T00:01:30Z", 20.5, (90.5, "2026-01-01T00:01:30Z")),
    ("an older one on the template: memory's", rl.RollState(95.5, "2026-01-01T00:01:35Z"),
     "2026-01-01T00:01:30Z", 25.5, (95.5, "2026-01-01T00:01:35Z")),
    ("not a time: memory's", rl.RollState(), "yesterday", None, (None, None)),
    ("past the interval: at once", rl.RollState(), "2026-01-01T00:01:00Z", None, (61.0, "2026-01-01T00:01:00Z")),
])
def test_the_last_roll_is_the_later_of_memorys_and_the_templates(case, m, template, wait, last) -> None:
    step = rl.decide(roll_obs(workloads=(rolled_at(template),)), m)
    assert (step.patch, step.wake) == ((None, wait) if wait else (rolled(), None)), case
    assert (step.memory.last_roll, step.memory.last_roll_at) == last, case
    if step.patch is None:
        assert step.memory.times().get("lastRollTime") == last[1], case   # status says it again


def test_a_patch_made_settles_the_roll_and_the_next_one_waits_the_interval() -> None:
    step = rl.decide(roll_obs(), rl.RollState())
    done = rl.rolled(step.memory, (NOW, WALL))
    assert (done.last_roll, done.last_roll_at, done.due) == (NOW, WALL, None) and done.times() == {"lastRollTime": WALL}
    nxt = rl.decide(roll_obs(values=("ds-a", "ds-b", "slurm"), now=NOW + 1), done)
    assert nxt.patch is None and nxt.wake == 29.0 and nxt.memory.due is not None    # never two inside it
    assert nxt.memory.times() == {"lastRollTime": WALL, "nextRollTime": nxt.memory.next_roll_at}


def test_a_refused_patch_is_reported_and_tried_again_and_a_gone_workload_is_not() -> None:
    step = rl.decide(roll_obs(), rl.RollState())
    refused = rl.refused(step.memory, rolled(), "slurm", "no patch for you")
    assert refused.problem is not None and refused.problem.reason == "Forbidden" and refused.last_roll is None
    assert "may not patch Deployment slurm/sched: no patch for you" in refused.problem.message
    assert rl.decide(roll_obs(), refused).patch == rolled()                 # the next wake tries again
    gone = rl.rolled(step.memory, None)  # the patch found no workload (NotFound): nothing left to roll
    assert gone.last_roll is None and gone.problem is None
    forbidden = rl.decide(roll_obs(workloads=None, workloads_forbidden="denied"), rl.RollState())
    assert forbidden.memory.problem is not None and forbidden.patch is None
    assert "may not list Deployments and StatefulSets in slurm: denied" in forbidden.memory.problem.message


def test_restore_rolls_at_once_onto_the_restored_list_if_the_template_carries_our_hash() -> None:
    """Restore on deletion: the same decision with the binding leaving: not rationed, not held; a
    template without our hash (never rolled by us) is left alone."""
    leaving = dict(leaving=True, values=("slurm",), unlisted=3, ungranted=2)
    assert rl.decide(roll_obs(workloads=(CURRENT,), **leaving), rl.RollState(99.0)).patch == rolled(("slurm",), None)
    assert rl.decide(roll_obs(workloads=(dep(),), **leaving), rl.RollState()).patch is None


def test_no_workload_runs_the_scheduler_is_a_note() -> None:
    step = rl.decide(roll_obs(workloads=()), rl.RollState())
    assert step.patch is None and step.memory.note and "No Deployment or StatefulSet in slurm" in step.memory.note
    listed = ll.decide(obs(), ll.ListState(REF)).memory
    r = report(Results(listed, step.memory, GrantState()), prev=None, now=WALL)
    assert r is not None and r.reason == "Synced" and r.message.endswith(
        "restart it by hand if it reads its config only at start.")


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.floats(0.1, 20.0), st.booleans(), st.booleans(), st.integers(0, 2)), max_size=40),
       st.sampled_from([0.0, 5.0, 30.0]))
def test_a_run_of_roll_wakes_never_rolls_twice_inside_the_interval(steps, interval, ) -> None:
    """Roll wakes at random gaps (some after a list write adding a namespace, some while namespaces are
    not listed yet or wait for grants), an admin editing the scheduler's template now and then, the
    loop's own timer firing at the wake it asked for, every patch made: rolls are `interval` apart, and
    in the end the scheduler runs the list."""
    s = replace(ROLL, interval=interval)
    now, m, timer, listed, generation, template, rolls = 0.0, rl.RollState(), None, ["slurm"], 0, None, []

    def wake(held: int = 0) -> None:
        nonlocal m, timer, template
        workload = dep(template, generation if template else None)
        step = rl.decide(rl.RollObservation(s, tuple(listed), generation, (workload,), unlisted=held, now=now,
                                            now_iso=WALL), m)
        m, timer = step.memory, (now + step.wake if step.wake is not None else None)
        if step.patch is not None:
            rolls.append(now)
            template = step.patch.hash
            m = rl.rolled(m, (now, WALL))

    for gap, new_namespace, edit, held in steps:
        while timer is not None and timer <= now + gap:
            now, timer = timer, None
            wake()
        now += gap
        if new_namespace:
            listed.insert(0, f"ds-{len(listed)}")
            generation += 1
        if edit:
            template = "an admin's edit"  # the next wake finds it stale: rationed like ours
        wake(held)
    now += 1.0
    wake()  # a last wake with nothing held, then the timers it leaves
    while timer is not None:
        now, timer = timer, None
        wake()
    assert all(b - a >= interval - 1e-6 for a, b in zip(rolls, rolls[1:])), rolls
    assert template == tp.scope_hash(listed) or (generation == 0 and template in (None, "an admin's edit")), \
        (template, listed)
