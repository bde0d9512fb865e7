"""The placement SLO's bookkeeping (core/scope/slo.py): stages in order, the dominant one, the
give-up, the bounds, the rollout rule, and what the roll loop's observation says the scheduler runs."""

from __future__ import annotations

from sunk_sandbox_operator.api.keys import SCOPE_HASH_ANNOTATION
from sunk_sandbox_operator.core.scope.membership import NamespaceInfo
from sunk_sandbox_operator.core.scope.roll_loop import RollObservation, RollSettings
from sunk_sandbox_operator.core.scope.slo import (FRESH_SECONDS, GIVE_UP_SECONDS, PlacementClock, Placed, created_at,
                                                  rolled_out, running)
from sunk_sandbox_operator.core.scope.template import scope_hash

T0 = 1_800_000_000.0


def test_stages_in_order_and_the_dominant_one() -> None:
    c = PlacementClock()
    c.created("a", T0, T0 + 0.5)
    c.created("b", T0, T0 + 0.5)
    assert c.awaits("listed") and not c.awaits("rolled")
    c.granted(None, T0 + 1)  # not listed yet: granting means nothing
    assert c.rolled(None, T0 + 1) == []
    c.listed({"a", "b"}, T0 + 1)
    c.granted({"a"}, T0 + 2)
    assert c.awaits("granted") and c.awaits("rolled")
    assert c.rolled(frozenset(), T0 + 3) == []  # the scheduler not on the list yet
    assert c.rolled({"a", "b"}, T0 + 40) == [Placed("a", 40.0, "rolled")]  # b is not granted
    c.granted(None, T0 + 50)
    assert c.rolled({"a", "b"}, T0 + 51) == [Placed("b", 51.0, "granted")]
    assert not c.waiting


def test_listing_dominates_a_slow_list() -> None:
    c = PlacementClock()
    c.created("a", T0, T0)
    c.listed(None, T0 + 20)  # scope type cluster: everything is listed
    c.granted(None, T0 + 21)
    assert c.rolled(None, T0 + 22) == [Placed("a", 22.0, "listed")]  # the operator does not roll: granted is last


def test_a_namespace_never_placeable_is_observed_once_as_slow() -> None:
    c = PlacementClock()
    c.created("stuck", T0, T0)
    c.listed({"stuck"}, T0 + 1)
    assert c.expire(T0 + GIVE_UP_SECONDS - 1) == []
    assert c.expire(T0 + GIVE_UP_SECONDS) == [Placed("stuck", GIVE_UP_SECONDS, "granted", given_up=True)]
    assert c.expire(T0 + 2 * GIVE_UP_SECONDS) == [] and not c.waiting


def test_only_new_namespaces_are_timed_and_at_most_the_limit() -> None:
    c = PlacementClock(limit=2)
    c.created("old", T0, T0 + FRESH_SECONDS + 1)  # relabelled or long known: no start to measure from
    c.created("unknown", None, T0)
    c.created("a", T0, T0)
    c.created("a", T0 + 5, T0 + 5)  # seen twice: the first start stays
    c.created("b", T0, T0)
    c.created("c", T0, T0)
    assert list(c.waiting) == ["a", "b"] and c.untimed == 1
    assert c.waiting["a"].created == T0
    c.gone("a")  # deleted or relabelled out before placeable: not observed
    c.listed(None, T0 + 1)
    c.granted(None, T0 + 1)
    assert [p.namespace for p in c.rolled(None, T0 + 1)] == ["b"]


def test_a_clock_skewed_creation_is_not_negative() -> None:
    c = PlacementClock()
    c.created("a", T0 + 3, T0)  # the API server's clock ahead of ours
    c.listed(None, T0)
    c.granted(None, T0)
    assert c.rolled(None, T0) == [Placed("a", 0.0, "listed")]


def test_creation_timestamps() -> None:
    assert created_at({"creationTimestamp": "2027-01-15T08:00:00Z"}) == 1800000000.0
    assert created_at({"creationTimestamp": "1970-01-01T00:01:00Z"}) == 60.0
    for bad in (None, {}, {"creationTimestamp": 5}, {"creationTimestamp": "yesterday"},
                {"creationTimestamp": "9" * 100}):
        assert created_at(bad) is None
    info = NamespaceInfo.from_object({"metadata": {"name": "n", "creationTimestamp": "1970-01-01T00:00:02Z"}})
    assert info.created == 2.0


def deployment(*, generation=2, observed=2, replicas=1, updated=1, total=1, available=1, hash_of=None) -> dict:
    annotations = {SCOPE_HASH_ANNOTATION: scope_hash(hash_of)} if hash_of is not None else {}
    return {"kind": "Deployment", "metadata": {"name": "slurm-scheduler", "generation": generation},
            "spec": {"replicas": replicas, "template": {"metadata": {"labels": {"app": "s"}, "annotations": annotations}}},
            "status": {"observedGeneration": observed, "updatedReplicas": updated, "replicas": total,
                       "availableReplicas": available}}


def test_rolled_out_is_kubectl_rollout_status() -> None:
    assert rolled_out(deployment())
    assert not rolled_out(None)
    assert not rolled_out(deployment(observed=1))            # the controller has not seen the new template
    assert not rolled_out(deployment(updated=0))             # no replica runs it yet
    assert not rolled_out(deployment(total=2))               # an old one is still there
    assert not rolled_out(deployment(available=0))           # not Ready
    assert not rolled_out({"kind": "Deployment", "metadata": {"generation": 1}, "spec": {}})  # no status at all
    sts = {"kind": "StatefulSet", "metadata": {"generation": 1}, "spec": {"replicas": 1},
           "status": {"observedGeneration": 1, "updatedReplicas": 1, "readyReplicas": 1,
                      "currentRevision": "r2", "updateRevision": "r2"}}
    assert rolled_out(sts)
    assert not rolled_out({**sts, "status": {**sts["status"], "currentRevision": "r1"}})


def test_what_the_scheduler_runs() -> None:
    rolls = RollSettings(can_roll=True, pod_selector={"matchLabels": {"app": "s"}})
    listed = ("a", "b")
    on = deployment(hash_of=listed)
    assert running(RollObservation(rolls, listed, workloads=(on,)), {}) == {"a", "b"}
    assert running(RollObservation(rolls, listed, workloads=(deployment(hash_of=("a",)),)), {}) == ()  # not rolled yet
    assert running(RollObservation(rolls, listed, workloads=(deployment(hash_of=listed, available=0),)), {}) == ()
    assert running(RollObservation(rolls, listed, workloads=None), {}) == ()  # could not look
    assert running(RollObservation(rolls, listed, workloads=()), {}) is None  # nothing runs it: not ours to roll
    assert running(RollObservation(RollSettings(can_roll=True, restart=False), listed, workloads=(on,)), {}) is None
    assert running(RollObservation(rolls, None), {}) is None
    # A trickle: the list changed again since the roll; the roll's namespaces are placeable once it is Ready.
    earlier = deployment(hash_of=("a",))
    assert running(RollObservation(rolls, ("a", "b", "c"), workloads=(earlier,)), {scope_hash(("a",)): {"a"}}) == {"a"}


def test_a_roll_remembers_the_waiting_namespaces_it_was_for() -> None:
    c = PlacementClock()
    for ns in ("a", "b"):
        c.created(ns, T0, T0)
    c.listed({"a"}, T0 + 1)
    c.granted(None, T0 + 1)
    c.rolled_for("h1", {"a", "x"})
    assert c.rolls == {"h1": {"a", "b"} & {"a", "x"}}
    c.listed({"a", "b"}, T0 + 2)
    c.granted(None, T0 + 2)
    assert c.rolled(c.rolls["h1"], T0 + 10) == [Placed("a", 10.0, "rolled")]  # b waits for the next roll
    for i in range(6):
        c.rolled_for(f"h{i + 2}", {"b"})
    assert len(c.rolls) == 4 and "h7" in c.rolls
