"""Sandbox pod observations, pure: did the policy reach new pods, and which pods are hazards?

A policy change applies to *new* sandboxes only and takes a while to propagate (domain.md
step 5), so the verdict rests on the newest pod created after the last policy write, and a
mismatch within the propagation window after that write is Unknown (PolicyPropagating), not
False; the verdict is a function of the summary, the write time, the window and `now`. Pods are
fed one event at a time into a `PlacementTracker` holding a few small facts per pod, so a
cluster with 10k sandbox pods costs a few MB; counts and the verdict are kept per event, so a
status write under churn costs nothing per pod. One pod's facts are `pod_facts.py`'s.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Literal

from .conditions import Status
from .pods import (  # noqa: F401  (pod decoding and hazard names are part of this module's API)
    DEFAULT_GRACE_SECONDS, EXCLUSIVE_ANNOTATION, EXCLUSIVE_OK_ON_GPU, GPU_REQUESTED, GRACE_TOO_LONG,
    GROUP_ID_ANNOTATION, GUARANTEED_QOS, HAZARDS, MISSING_REQUESTS, NON_NUMERIC_USER_ID, PARTITION_ANNOTATION,
    USER_ID_ANNOTATION, _NO_HAZARDS, QuantityParser, _interned_hazards, _str_or_none,
)
from .pods import PodRecord as PodRecord, decode_pod as decode_pod, parse_time as parse_time  # the shell's too
from ..api.reasons import PlacementVerified
from ..api.status import Mismatch, PlacementStatus
from .slurm.jobs import JobSummary, jobs_condition, jobs_note
from .pod_facts import (  # one pod (the shell and the tests find them here too)
    PodFacts as PodFacts, hazard_message as hazard_message, new_hazards as new_hazards, observe_pod as observe_pod,
)


# ---------------------------------------------------------------- many pods

EventType = Literal["ADDED", "MODIFIED", "DELETED"]


@dataclass(frozen=True)
class PlacementSummary:
    pods_observed: int
    pods_after_policy: int  # pods created after the last policy write (all, when that time is unknown)
    pods_mismatched: int
    last_mismatch: Mismatch | None
    latest_mismatch_created: str | None
    latest_match_created: str | None
    hazards: dict[str, int]
    max_grace: int | None

    def to_status(self, jobs: JobSummary | None = None) -> PlacementStatus:
        return PlacementStatus(
            pods_observed=self.pods_observed,
            pods_mismatched=self.pods_mismatched,
            last_mismatch=self.last_mismatch,
            hazards=dict(self.hazards),
            jobs=jobs.to_status() if jobs is not None else None,
        )


def _counted(f: PodFacts, since: float | None) -> bool:
    """Does the pod count for the verdict on a policy written at `since`? Both times have one-second
    resolution: a pod of the same second may predate the write, so it counts only as a match."""
    return since is None or not (f.created_ts is None or f.created_ts < since or (f.created_ts == since and f.mismatch))


@dataclass
class _Verdict:
    """The verdict's running aggregate for one policy write time, kept per event (not one pass over
    every pod per status write); `stale` when the newest pod of a kind left: the next summary rescans."""

    applied: str | None
    since: float | None
    after: int = 0
    mismatched: int = 0
    newest_bad: PodFacts | None = None
    newest_good: PodFacts | None = None
    stale: bool = False

    def add(self, f: PodFacts) -> None:
        if not _counted(f, self.since):
            return
        self.after += 1
        if f.mismatch:
            self.mismatched += 1
            if self.newest_bad is None or _newer(f, self.newest_bad):
                self.newest_bad = f
        elif self.newest_good is None or _newer(f, self.newest_good):
            self.newest_good = f

    def replace(self, old: PodFacts | None, new: PodFacts | None) -> None:
        if self.stale:
            return
        if old is not None and _counted(old, self.since):
            self.after -= 1
            self.mismatched -= bool(old.mismatch)
            newest = self.newest_bad if old.mismatch else self.newest_good
            if newest is old:  # the newest of its kind changed or left
                same = (new is not None and _counted(new, self.since) and bool(new.mismatch) == bool(old.mismatch)
                        and (new.created_ts, new.ref) == (old.created_ts, old.ref))
                if not same:
                    self.stale = True
                    return
                if old.mismatch:
                    self.newest_bad = None
                else:
                    self.newest_good = None
        if new is not None:
            self.add(new)


class PlacementTracker:
    """Per-binding aggregate of sandbox pods, fed watch events; O(pods) memory, O(1) per event."""

    def __init__(self) -> None:
        self._pods: dict[str, PodFacts] = {}
        self._hazards: Counter[str] = Counter()
        self._graces: Counter[int] = Counter()
        self._version = 0
        self._cache: tuple[int, str | None, PlacementSummary] | None = None
        self._verdict: _Verdict | None = None

    def __len__(self) -> int:
        return len(self._pods)

    def get(self, key: str) -> PodFacts | None:
        return self._pods.get(key)

    def _forget(self, old: PodFacts) -> None:
        self._hazards.subtract(old.hazards)
        self._graces[old.grace] -= 1
        if self._graces[old.grace] <= 0:
            del self._graces[old.grace]

    def apply(self, event_type: str, facts: PodFacts) -> bool:
        """Record one watch event; True when the aggregate changed."""
        if not facts.name and not facts.uid:
            return False  # unidentifiable (malformed) pod: nothing to track
        old = self._pods.get(facts.key)
        if event_type == "DELETED":
            if old is None:
                return False
            self._forget(old)
            del self._pods[facts.key]
            new = None
        elif event_type in ("ADDED", "MODIFIED"):
            if old == facts:
                return False
            if old is not None:
                self._forget(old)
            self._pods[facts.key] = new = facts
            self._hazards.update(facts.hazards)
            self._graces[facts.grace] += 1
        else:
            return False
        if self._verdict is not None:
            self._verdict.replace(old, new)
        self._version += 1
        return True

    def clear(self) -> None:
        self.__init__()  # type: ignore[misc]  # re-initialised in place: every aggregate back to empty

    def summary(self, policy_applied_time: str | None) -> PlacementSummary:
        """Counts over all pods; the mismatch verdict over pods created after `policy_applied_time`."""
        if self._cache and self._cache[0] == self._version and self._cache[1] == policy_applied_time:
            return self._cache[2]
        v = self._verdict
        if v is None or v.stale or v.applied != policy_applied_time:  # one pass, then kept per event
            v = self._verdict = _Verdict(policy_applied_time, parse_time(policy_applied_time))
            for f in self._pods.values():
                v.add(f)
        newest_bad, newest_good = v.newest_bad, v.newest_good
        result = PlacementSummary(
            pods_observed=len(self._pods),
            pods_after_policy=v.after,
            pods_mismatched=v.mismatched,
            last_mismatch=(
                Mismatch(pod=newest_bad.ref, reason=newest_bad.mismatch or "", time=newest_bad.created or "")
                if newest_bad
                else None
            ),
            latest_mismatch_created=newest_bad.created if newest_bad else None,
            latest_match_created=newest_good.created if newest_good else None,
            hazards={k: v for k, v in sorted(self._hazards.items()) if v > 0},
            max_grace=max(self._graces) if self._graces else None,
        )
        self._cache = (self._version, policy_applied_time, result)
        return result


def _newer(a: PodFacts, b: PodFacts) -> bool:
    # Unknown creation times sort oldest; the name breaks ties so results are deterministic.
    return (a.created_ts or 0.0, a.ref) > (b.created_ts or 0.0, b.ref)


def propagation_end(policy_applied_time: str | None, window_seconds: float) -> float | None:
    """When the propagation window after the policy write ends (epoch seconds); None: no window."""
    applied = parse_time(policy_applied_time)
    if applied is None or window_seconds <= 0:
        return None
    return applied + window_seconds


def propagating_until(summary: PlacementSummary, policy_applied_time: str | None, *, window_seconds: float = 0,
                      now: str | None = None) -> float | None:
    """The window's end while the verdict is PolicyPropagating, else None (time alone changes nothing).

    A policy change takes a while to reach new sandboxes, so a mismatching pod is not a failure
    while the window [write, write + window] lasts and the newest mismatch was created inside it.
    Both times have one-second resolution: a pod of the window's last second, and a `now` of that
    second, may still be inside it (the benefit of the doubt, as for a pod of the write's second).
    Once the window is over the same pods make it PolicyNotPropagated: they were created during
    propagation, but nothing newer has shown the policy arriving, so "wait" is no longer the
    answer. A matching pod at least as new as the newest mismatch verifies it at any time.
    """
    end = propagation_end(policy_applied_time, window_seconds)
    now_ts = parse_time(now)
    if end is None or now_ts is None or not _mismatch_wins(summary):
        return None
    bad_ts = parse_time(summary.latest_mismatch_created)
    if bad_ts is None or bad_ts > end or now_ts > end:
        return None
    return end


def _mismatch_wins(summary: PlacementSummary) -> bool:
    """A mismatch after the policy write and no matching pod at least as new (policy not shown to arrive)."""
    if summary.last_mismatch is None or summary.pods_after_policy == 0:
        return False
    bad_ts = parse_time(summary.latest_mismatch_created)
    good_ts = parse_time(summary.latest_match_created)
    return good_ts is None or (bad_ts is not None and bad_ts > good_ts)


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(math.ceil(ts), timezone.utc).isoformat().replace("+00:00", "Z")


def placement_condition(summary: PlacementSummary, policy_applied_time: str | None, *, window_seconds: float = 0,
                        now: str | None = None, jobs: JobSummary | None = None) -> tuple[Status, str, str]:
    """PlacementVerified as (status, reason, message).

    `window_seconds` is the propagation window after the policy write and `now` the current time
    (RFC 3339); without them (or with a zero window) a mismatch is judged at once. `jobs`: the
    placeholder jobs in Slurm (None: not read). The policy's verdict comes first when False (pods
    without the policy are not placed by SUNK at all); then a stuck or missing placeholder job
    (Slurm's side of the same pods); then the policy's verdict, with the jobs found.
    """
    status, reason, message = _policy_condition(summary, policy_applied_time, window_seconds=window_seconds, now=now)
    if jobs is None or summary.pods_observed == 0 or status == "False":
        return status, reason, message
    verdict = jobs_condition(jobs)
    if verdict is not None:
        return verdict
    return status, reason, message + jobs_note(jobs)


def _policy_condition(summary: PlacementSummary, policy_applied_time: str | None, *, window_seconds: float,
                      now: str | None) -> tuple[Status, str, str]:
    if summary.pods_observed == 0:
        return (
            "Unknown",
            PlacementVerified.NO_SANDBOX_PODS,
            "no sandbox pods seen in the sandbox namespaces yet: create a sandbox on the runner to verify "
            "that it gets the scheduler name and pinned annotations",
        )
    if summary.pods_after_policy == 0:
        return (
            "Unknown",
            PlacementVerified.NO_NEW_SANDBOX_PODS,
            f"{summary.pods_observed} sandbox pod(s) seen, all created before the policy was written at "
            f"{policy_applied_time}; policy changes apply only to new sandboxes — create one to verify",
        )
    end = propagating_until(summary, policy_applied_time, window_seconds=window_seconds, now=now)
    if end is not None:
        m = summary.last_mismatch
        assert m is not None
        return (
            "Unknown",
            PlacementVerified.POLICY_PROPAGATING,
            f"newest sandbox pod {m.pod} (created {m.time}) lacks the policy written at {policy_applied_time}: "
            f"{m.reason}. A policy change takes a while to propagate, so pods created within "
            f"{window_seconds:g} s of the write may still have the old values: this is re-checked when the "
            f"window ends at {_iso(end)} (a newer matching sandbox pod verifies it sooner)",
        )
    # A matching pod at least as new as the newest mismatch shows the policy has arrived.
    if _mismatch_wins(summary):
        m = summary.last_mismatch
        assert m is not None
        when = f" after the policy write at {policy_applied_time}" if policy_applied_time else ""
        return (
            "False",
            PlacementVerified.POLICY_NOT_PROPAGATED,
            f"newest sandbox pod {m.pod} (created {m.time or 'at an unknown time'}{when}) lacks the policy: "
            f"{m.reason}. Policy changes apply only to new sandboxes and take a while to propagate: create "
            "another sandbox and check again; if new pods keep the old values, read the runner policy back "
            "and check that clients select this runner",
        )
    return (
        "True",
        PlacementVerified.VERIFIED,
        f"the newest sandbox pod created after the policy write carries the scheduler name and pinned "
        f"annotations ({summary.pods_after_policy - summary.pods_mismatched} of {summary.pods_after_policy} "
        "such pods match)",
    )
