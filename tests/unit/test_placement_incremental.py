"""The placement verdict kept per event: after any sequence of pod events and summaries (at any policy
write time), the summary equals one computed from scratch over the same pods, and a status write
does not pass over every pod (50,000 of them) when one changed."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from sunk_sandbox_operator.core import placement as pl
from sunk_sandbox_operator.core.placement import PlacementTracker

from tests.unit.test_placement import facts, sandbox

TIMES = ["2025-09-10T11:00:00Z", "2025-09-10T12:00:00Z", "2025-09-10T12:05:00Z", None]
CREATED = ["2025-09-10T11:00:00Z", "2025-09-10T12:00:00Z", "2025-09-10T12:05:00Z", "2025-09-10T12:10:00Z"]

op = st.tuples(st.sampled_from(["ADDED", "MODIFIED", "DELETED", "summary"]), st.sampled_from("abcde"),
               st.sampled_from(CREATED), st.booleans(), st.sampled_from(TIMES))


def pod(name: str, created: str, mismatched: bool) -> pl.PodFacts:
    return facts(sandbox(name, created=created, **({"spec__schedulerName": "default-scheduler"} if mismatched else {})))


@settings(max_examples=300, deadline=None)
@given(ops=st.lists(op, max_size=40))
def test_the_kept_verdict_equals_a_fresh_one(ops) -> None:
    t = PlacementTracker()
    for kind, name, created, mismatched, applied in ops:
        if kind == "summary":
            fresh = PlacementTracker()
            for f in t._pods.values():
                fresh.apply("ADDED", f)
            assert t.summary(applied) == fresh.summary(applied)
        else:
            old = t.get(pod(name, created, mismatched).key)
            # creationTimestamp never changes: a MODIFIED keeps the pod's own
            t.apply(kind, pod(name, old.created if old is not None and kind != "ADDED" else created, mismatched))
    for applied in TIMES:
        fresh = PlacementTracker()
        for f in t._pods.values():
            fresh.apply("ADDED", f)
        assert t.summary(applied) == fresh.summary(applied)


def test_a_summary_after_one_event_does_not_rescan_every_pod(monkeypatch) -> None:
    t = PlacementTracker()
    for i in range(200):
        t.apply("ADDED", pod(f"p{i:03d}", CREATED[i % 4], i % 7 == 0))
    t.summary(TIMES[1])
    counted = []
    real = pl._counted
    monkeypatch.setattr(pl, "_counted", lambda f, since: counted.append(f) or real(f, since))
    t.apply("ADDED", pod("znew", CREATED[3], True))
    t.apply("DELETED", pod("p005", CREATED[1], False))
    s = t.summary(TIMES[1])
    assert len(counted) <= 4 and s.last_mismatch is not None and s.last_mismatch.pod.endswith("/znew")
    t.apply("DELETED", pod("znew", CREATED[3], True))       # the newest mismatch left: one rescan
    assert t.summary(TIMES[1]).last_mismatch.pod != "ds-alice/znew" and len(counted) > 200
