"""Sandbox pod observations, pure: did the policy reach new pods, and which pods are hazards?

A policy change applies to *new* sandboxes only and takes a while to propagate (domain.md
step 5), so the verdict rests on the newest pod created after the last policy write. Pods are
fed one event at a time into a `PlacementTracker` holding a few small facts per pod, so a
cluster with 10k sandbox pods costs a few MB and a summary is one linear pass.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from decimal import Decimal
from typing import Any, Callable, Literal

from .grace import is_safe
from ..api.keys import ANNOTATION_PREFIX
from ..api.reasons import PlacementVerified
from ..api.status import Mismatch, PlacementStatus

PARTITION_ANNOTATION = ANNOTATION_PREFIX + "partition"
USER_ID_ANNOTATION = ANNOTATION_PREFIX + "user-id"
GROUP_ID_ANNOTATION = ANNOTATION_PREFIX + "group-id"
DEFAULT_GRACE_SECONDS = 30

GUARANTEED_QOS = "GuaranteedQoS"
GPU_REQUESTED = "GPURequested"
MISSING_REQUESTS = "MissingRequests"
NON_NUMERIC_USER_ID = "NonNumericUserId"
GRACE_TOO_LONG = "GraceTooLong"
HAZARDS = (GUARANTEED_QOS, GPU_REQUESTED, MISSING_REQUESTS, NON_NUMERIC_USER_ID, GRACE_TOO_LONG)

_NO_HAZARDS: frozenset[str] = frozenset()

# ---------------------------------------------------------------- quantities

# Quantities are parsed by the caller's parser (the shell passes kubernetes.utils' one, wrapped
# to reject what apimachinery rejects): `Decimal` out, ValueError on anything invalid.
QuantityParser = Callable[[Any], Decimal]


def _quantity_or_none(parse: QuantityParser, q: Any) -> Decimal | None:
    try:
        return parse(q)
    except (ValueError, ArithmeticError):
        return None


# ---------------------------------------------------------------- time


def parse_time(s: Any) -> float | None:
    """RFC 3339 (creationTimestamp, status times) as epoch seconds; None if absent or malformed."""
    if not isinstance(s, str) or not s:
        return None
    try:
        t = datetime.fromisoformat(s.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        return None
    if t.tzinfo is None:
        t = t.replace(tzinfo=timezone.utc)  # the API server always speaks UTC
    return t.timestamp()


# ---------------------------------------------------------------- one pod


@dataclass(frozen=True, slots=True)
class PodFacts:
    """The few facts kept per sandbox pod."""

    namespace: str
    name: str
    uid: str
    created: str | None
    created_ts: float | None
    phase: str | None
    scheduler_name: str | None
    partition: str | None
    grace: int
    mismatch: str | None
    hazards: frozenset[str]
    error: str | None = None

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def key(self) -> str:
        # uid separates a pod from a recreated namesake; ns/name when a test object lacks one.
        return self.uid or self.ref


def _mapping(v: Any) -> Mapping[str, Any]:
    return v if isinstance(v, Mapping) else {}


def _resources(container: Mapping[str, Any]) -> tuple[Mapping[str, Any], Mapping[str, Any]]:
    res = _mapping(container.get("resources"))
    return _mapping(res.get("requests")), _mapping(res.get("limits"))


def _container_hazards(containers: list[Any], init_containers: list[Any], parse: QuantityParser) -> set[str]:
    found: set[str] = set()
    for c in init_containers + containers:
        requests, limits = _resources(_mapping(c))
        for res, q in list(requests.items()) + list(limits.items()):
            if "gpu" in str(res).lower():
                amount = _quantity_or_none(parse, q)
                if amount is None or amount > 0:  # unreadable: assume it asks for a GPU
                    found.add(GPU_REQUESTED)
    for c in containers:
        requests, limits = _resources(_mapping(c))
        # The API server defaults a missing request to the limit; do the same for raw objects.
        cpu_req = _quantity_or_none(parse, requests.get("cpu", limits.get("cpu")))
        mem_req = _quantity_or_none(parse, requests.get("memory", limits.get("memory")))
        cpu_lim = _quantity_or_none(parse, limits.get("cpu"))
        if not cpu_req or not mem_req:
            found.add(MISSING_REQUESTS)
        if cpu_req is not None and cpu_lim is not None and cpu_req == cpu_lim:
            found.add(GUARANTEED_QOS)
    if not containers:
        found.add(MISSING_REQUESTS)
    return found


def _describe(value: str | None) -> str:
    return repr(value) if value is not None else "unset"


@dataclass(frozen=True, slots=True)
class PodRecord:
    """What is kept of one sandbox pod: decoded once when it arrives, judged per binding.

    A few hundred bytes: the resources are reduced to the hazards they show, the annotations to
    the sunk.coreweave.com/ ones.
    """

    namespace: str
    name: str
    uid: str
    created: str | None
    created_ts: float | None
    phase: str | None
    scheduler_name: str | None
    node_name: str | None
    grace: int
    annotations: tuple[tuple[str, Any], ...]
    resource_hazards: frozenset[str]
    error: str | None = None

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"

    def annotation(self, key: str) -> Any:
        for k, v in self.annotations:
            if k == key:
                return v
        return None


def _str_or_none(v: Any) -> str | None:
    return v if isinstance(v, str) else None


def decode_pod(pod: Any, quantity: QuantityParser) -> PodRecord:
    """The record of a pod object (raw camelCase, as the API server sends it)."""
    if not isinstance(pod, Mapping):
        return PodRecord("", "", "", None, None, None, None, None, DEFAULT_GRACE_SECONDS, (), _NO_HAZARDS,
                         error=f"pod must be a mapping, got {type(pod).__name__}")
    meta, spec, status = _mapping(pod.get("metadata")), _mapping(pod.get("spec")), _mapping(pod.get("status"))
    error = None
    grace_raw = spec.get("terminationGracePeriodSeconds", DEFAULT_GRACE_SECONDS)
    if grace_raw is None:
        grace_raw = DEFAULT_GRACE_SECONDS
    if isinstance(grace_raw, int) and not isinstance(grace_raw, bool):
        grace = grace_raw
    else:
        error = f"terminationGracePeriodSeconds {grace_raw!r} is not an integer; assuming {DEFAULT_GRACE_SECONDS}"
        grace = DEFAULT_GRACE_SECONDS
    containers = spec.get("containers") if isinstance(spec.get("containers"), list) else []
    inits = spec.get("initContainers") if isinstance(spec.get("initContainers"), list) else []
    hazards = _container_hazards(containers, inits, quantity)
    annotations = tuple(sorted((k, v) for k, v in _mapping(meta.get("annotations")).items()
                               if isinstance(k, str) and k.startswith(ANNOTATION_PREFIX)))
    created = _str_or_none(meta.get("creationTimestamp"))
    return PodRecord(
        namespace=sys.intern(str(meta.get("namespace") or "")),
        name=str(meta.get("name") or ""),
        uid=str(meta.get("uid") or ""),
        created=created,
        created_ts=parse_time(created),
        phase=_intern(_str_or_none(status.get("phase"))),
        scheduler_name=_intern(_str_or_none(spec.get("schedulerName"))),
        node_name=_str_or_none(spec.get("nodeName")),
        grace=grace,
        annotations=annotations,
        resource_hazards=_interned_hazards(hazards),
        error=error,
    )


def _intern(s: str | None) -> str | None:
    return sys.intern(s) if s is not None else None


# Every combination of the known hazards, built once: pods share these few frozensets.
_CANONICAL_HAZARDS: Mapping[frozenset[str], frozenset[str]] = {
    fs: fs for fs in (frozenset(h for i, h in enumerate(HAZARDS) if mask >> i & 1) for mask in range(2 ** len(HAZARDS)))
}


def _interned_hazards(hazards: set[str]) -> frozenset[str]:
    """One frozenset object per distinct combination, not one per pod."""
    key = frozenset(hazards)
    return _CANONICAL_HAZARDS.get(key, key)


def observe_pod(
    pod: Any,
    *,
    scheduler_name: str | None,
    partition: str | None,
    pinned: Mapping[str, str],
    kill_wait: int | None,
    quantity: QuantityParser | None = None,
) -> PodFacts:
    """Facts about one sandbox pod against what the policy should have given it.

    `pod` is a PodRecord, or a raw pod object (then decoded with `quantity`). `partition` is the
    expected partition (spec.partition); `pinned` the other pinned annotations by full key. A
    None `scheduler_name` (not discovered yet) is not compared.
    """
    if not isinstance(pod, PodRecord):
        if quantity is None:
            raise TypeError("observe_pod needs a quantity parser to decode a raw pod")
        pod = decode_pod(pod, quantity)
    if pod.error and not pod.namespace and not pod.name:
        return PodFacts("", "", "", None, None, None, None, None, DEFAULT_GRACE_SECONDS, None, _NO_HAZARDS,
                        error=pod.error)
    differences: list[str] = []
    if scheduler_name is not None and pod.scheduler_name != scheduler_name:
        differences.append(f"spec.schedulerName is {_describe(pod.scheduler_name)}, expected {scheduler_name!r}")
    expected = dict(pinned)
    if partition is not None:
        expected[PARTITION_ANNOTATION] = partition
    for key in sorted(expected):
        have = pod.annotation(key)
        if have != expected[key]:
            differences.append(f"annotation {key} is {_describe(_str_or_none(have))}, expected {expected[key]!r}")
    hazards = set(pod.resource_hazards)
    for key in (USER_ID_ANNOTATION, GROUP_ID_ANNOTATION):
        value = pod.annotation(key)
        if value is not None and not (isinstance(value, str) and value.isascii() and value.isdigit()):
            hazards.add(NON_NUMERIC_USER_ID)
    if kill_wait is not None and not is_safe(pod.grace, kill_wait):
        hazards.add(GRACE_TOO_LONG)
    return PodFacts(
        namespace=pod.namespace,
        name=pod.name,
        uid=pod.uid,
        created=pod.created,
        created_ts=pod.created_ts,
        phase=pod.phase,
        scheduler_name=pod.scheduler_name,
        partition=_str_or_none(pod.annotation(PARTITION_ANNOTATION)),
        grace=pod.grace,
        mismatch="; ".join(differences) or None,
        hazards=_interned_hazards(hazards),
        error=pod.error,
    )


def new_hazards(previous: PodFacts | None, current: PodFacts) -> frozenset[str]:
    """Hazards this pod shows now and did not before: one Warning event each."""
    return current.hazards - (previous.hazards if previous is not None else _NO_HAZARDS)


def hazard_message(kind: str, pod_ref: str) -> str:
    """A Warning event message for a hazard on a pod, saying the fix."""
    fixes = {
        GUARANTEED_QOS: "CPU requests equal limits (Guaranteed QoS), which triggers static CPU pinning that "
        "drains Slurm nodes: set requests below limits in the sandbox's ResourceOptions",
        GPU_REQUESTED: "requests a GPU, but GPU sandboxes are not supported with the SUNK Pod Scheduler "
        "integration (CPU only): use a runner that does not route through SUNK for GPU sandboxes",
        MISSING_REQUESTS: "has a zero or missing CPU or memory request; SUNK reads requests.cpu and "
        "requests.memory (CPUsPerTask, MinMemoryNode) and both must be non-zero, or the pod never schedules",
        NON_NUMERIC_USER_ID: f"has a non-numeric {USER_ID_ANNOTATION} or {GROUP_ID_ANNOTATION}; it must be a "
        'numeric Linux UID/GID like "1000" — a user name blocks scheduling',
        GRACE_TOO_LONG: "has a terminationGracePeriodSeconds not strictly below the scheduler's kill-wait − 5 s, "
        "so Slurm drains the node when it stops: raise slurmConfig.KillWait (and the scheduler's kill-wait "
        "with it) above grace + 5",
    }
    return f"sandbox pod {pod_ref} " + fixes.get(kind, f"shows hazard {kind}")


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

    def to_status(self) -> PlacementStatus:
        return PlacementStatus(
            pods_observed=self.pods_observed,
            pods_mismatched=self.pods_mismatched,
            last_mismatch=self.last_mismatch,
            hazards=dict(self.hazards),
        )


class PlacementTracker:
    """Per-binding aggregate of sandbox pods, fed watch events; O(pods) memory."""

    def __init__(self) -> None:
        self._pods: dict[str, PodFacts] = {}
        self._hazards: Counter[str] = Counter()
        self._graces: Counter[int] = Counter()
        self._version = 0
        self._cache: tuple[int, str | None, PlacementSummary] | None = None

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
        elif event_type in ("ADDED", "MODIFIED"):
            if old == facts:
                return False
            if old is not None:
                self._forget(old)
            self._pods[facts.key] = facts
            self._hazards.update(facts.hazards)
            self._graces[facts.grace] += 1
        else:
            return False
        self._version += 1
        return True

    def clear(self) -> None:
        self.__init__()  # type: ignore[misc]

    def summary(self, policy_applied_time: str | None) -> PlacementSummary:
        """Counts over all pods; the mismatch verdict over pods created after `policy_applied_time`."""
        if self._cache and self._cache[0] == self._version and self._cache[1] == policy_applied_time:
            return self._cache[2]
        since = parse_time(policy_applied_time)
        after = mismatched = 0
        newest_bad: PodFacts | None = None
        newest_good: PodFacts | None = None
        for f in self._pods.values():
            if since is not None and (f.created_ts is None or f.created_ts < since or
                                      (f.created_ts == since and f.mismatch)):
                # Predates the policy write. Both times have one-second resolution: a pod of the same
                # second may predate it, so it counts only as positive evidence (a match).
                continue
            after += 1
            if f.mismatch:
                mismatched += 1
                if newest_bad is None or _newer(f, newest_bad):
                    newest_bad = f
            elif newest_good is None or _newer(f, newest_good):
                newest_good = f
        result = PlacementSummary(
            pods_observed=len(self._pods),
            pods_after_policy=after,
            pods_mismatched=mismatched,
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


def placement_condition(summary: PlacementSummary, policy_applied_time: str | None) -> tuple[str, str, str]:
    """PlacementVerified as (status, reason, message)."""
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
    bad_ts = parse_time(summary.latest_mismatch_created)
    good_ts = parse_time(summary.latest_match_created)
    # A matching pod at least as new as the newest mismatch shows the policy has arrived.
    if summary.last_mismatch is not None and (good_ts is None or (bad_ts is not None and bad_ts > good_ts)):
        m = summary.last_mismatch
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
