"""One sandbox pod judged against one binding's expectations, pure: the mismatch and the hazards.

The one-pod half of the placement check; `placement.py` keeps the many pods' summary and verdict
(and re-exports these names, the shell's and the tests' way in).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .grace import is_safe
from .pods import (
    EXCLUSIVE_ANNOTATION, EXCLUSIVE_OK_ON_GPU, GPU_REQUESTED, GRACE_TOO_LONG, GROUP_ID_ANNOTATION, GUARANTEED_QOS,
    MISSING_REQUESTS, NON_NUMERIC_USER_ID, PARTITION_ANNOTATION, USER_ID_ANNOTATION, _NO_HAZARDS, PodRecord,
    QuantityParser, _interned_hazards, _str_or_none, decode_pod,
)


@dataclass(frozen=True, slots=True)
class PodFacts:
    """One pod judged against one binding's expectations: the record plus the verdict."""

    pod: PodRecord
    mismatch: str | None
    hazards: frozenset[str]

    # The record's facts, read through (no copy per binding).
    namespace = property(lambda self: self.pod.namespace)
    name = property(lambda self: self.pod.name)
    uid = property(lambda self: self.pod.uid)
    created = property(lambda self: self.pod.created)
    created_ts = property(lambda self: self.pod.created_ts)
    phase = property(lambda self: self.pod.phase)
    scheduler_name = property(lambda self: self.pod.scheduler_name)
    grace = property(lambda self: self.pod.grace)
    error = property(lambda self: self.pod.error)

    @property
    def partition(self) -> str | None:
        return _str_or_none(self.pod.annotation(PARTITION_ANNOTATION))

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def key(self) -> str:
        # uid separates a pod from a recreated namesake; ns/name when a test object lacks one.
        return self.uid or self.ref


def _describe(value: str | None) -> str:
    return repr(value) if value is not None else "unset"


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
        return PodFacts(pod, None, _NO_HAZARDS)
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
    if GPU_REQUESTED in pod.resource_hazards and pod.annotation(EXCLUSIVE_ANNOTATION) == "ok":
        hazards.add(EXCLUSIVE_OK_ON_GPU)
    return PodFacts(pod, "; ".join(differences) or None, _interned_hazards(hazards))


def new_hazards(previous: PodFacts | None, current: PodFacts) -> frozenset[str]:
    """Hazards this pod shows now and did not before: one Warning event each."""
    return current.hazards - (previous.hazards if previous is not None else _NO_HAZARDS)


def hazard_message(kind: str, pod_ref: str) -> str:
    """A Warning event message for a hazard on a pod, saying the fix."""
    fixes = {
        GUARANTEED_QOS: "is Guaranteed QoS (CPU and memory requests equal their limits in every container) with "
        "an integer CPU request: that is the condition on which the kubelet's static CPU manager pins whole CPUs "
        "to a container, and SUNK's known limitations warn that CPU pinning drains Slurm nodes. SUNK works with "
        "Guaranteed and Burstable pods alike: set the CPU request below its limit (Burstable), or make it "
        "fractional (e.g. 1500m), in the sandbox's ResourceOptions",
        EXCLUSIVE_OK_ON_GPU: f"requests a GPU and carries {EXCLUSIVE_ANNOTATION}: ok, which SUNK's annotation "
        "reference says is not for GPU pods (ok is for CPU pods only): use none or user (spec.slurm.exclusive "
        "when the binding pins it); GPU sandboxes are not supported with this integration anyway",
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
