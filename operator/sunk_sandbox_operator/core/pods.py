"""Sandbox pods as the operator keeps them (pure): decoded once into a compact `PodRecord`.

Resources are reduced to the hazards they show (quantities parsed by the caller's parser),
annotations to the sunk.coreweave.com/ ones, and the few strings interned, so 50,000 pods
cost a few hundred bytes each.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from decimal import Decimal
from typing import Any, Callable, Hashable

from ..api.events import EventReason
from ..api.keys import ANNOTATION_PREFIX, JOB_NAME_LABELS, SANDBOX_ID_LABEL

PARTITION_ANNOTATION = ANNOTATION_PREFIX + "partition"
USER_ID_ANNOTATION = ANNOTATION_PREFIX + "user-id"
GROUP_ID_ANNOTATION = ANNOTATION_PREFIX + "group-id"
EXCLUSIVE_ANNOTATION = ANNOTATION_PREFIX + "exclusive"
DEFAULT_GRACE_SECONDS = 30

GUARANTEED_QOS = EventReason.GUARANTEED_QOS.value  # hazard kinds: each is a Warning event's reason
GPU_REQUESTED = EventReason.GPU_REQUESTED.value
MISSING_REQUESTS = EventReason.MISSING_REQUESTS.value
NON_NUMERIC_USER_ID = EventReason.NON_NUMERIC_USER_ID.value
GRACE_TOO_LONG = EventReason.GRACE_TOO_LONG.value
EXCLUSIVE_OK_ON_GPU = EventReason.EXCLUSIVE_OK_ON_GPU.value
HAZARDS = (GUARANTEED_QOS, GPU_REQUESTED, MISSING_REQUESTS, NON_NUMERIC_USER_ID, GRACE_TOO_LONG, EXCLUSIVE_OK_ON_GPU)

_NO_HAZARDS: frozenset[str] = frozenset()

# ---------------------------------------------------------------- quantities

# Quantities are parsed by the caller's parser (the shell passes core.quantity's, apimachinery's
# grammar, memoized): `Decimal` out, ValueError on anything invalid.
QuantityParser = Callable[[Any], Decimal]


def _quantity_or_none(parse: QuantityParser, q: Any) -> Decimal | None:
    try:
        return parse(q)
    except (ValueError, ArithmeticError):
        return None


# ---------------------------------------------------------------- time


# RFC 3339 with nanoseconds and an offset is 35 characters; a tenant writes some of these (an annotation).
MAX_TIME_CHARS = 64


def parse_time(s: Any) -> float | None:
    """RFC 3339 (creationTimestamp, status times) as epoch seconds; None if absent, malformed or longer
    than MAX_TIME_CHARS."""
    if not isinstance(s, str) or not s or len(s) > MAX_TIME_CHARS:
        return None
    try:
        t = datetime.fromisoformat(s.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        return None
    if t.tzinfo is None:
        t = t.replace(tzinfo=timezone.utc)  # the API server always speaks UTC
    return t.timestamp()


# ---------------------------------------------------------------- one pod, decoded


def _mapping(v: Any) -> Mapping[str, Any]:
    return v if isinstance(v, Mapping) else {}


def _resources(container: Mapping[str, Any]) -> tuple[Mapping[str, Any], Mapping[str, Any]]:
    res = _mapping(container.get("resources"))
    return _mapping(res.get("requests")), _mapping(res.get("limits"))


# The resources Kubernetes computes a pod's QoS class from (v1 qos.GetPodQOS).
_QOS_RESOURCES = ("cpu", "memory")


def _requests_with_defaults(container: Mapping[str, Any]) -> tuple[Mapping[str, Any], Mapping[str, Any]]:
    """(requests, limits); a request missing where a limit is set is the limit, as the API server
    defaults it (raw objects in tests and dry runs are not defaulted)."""
    requests, limits = _resources(container)
    return {**{k: v for k, v in limits.items() if k in _QOS_RESOURCES}, **requests}, limits


def guaranteed_qos(containers: list[Any], parse: QuantityParser) -> bool:
    """Kubernetes' own rule (GetPodQOS): every container (init ones included) has non-zero CPU and
    memory limits, and the pod's summed CPU and memory requests equal its summed limits."""
    requests: dict[str, Decimal] = {}
    limits: dict[str, Decimal] = {}
    guaranteed = bool(containers)
    for c in containers:
        reqs, lims = _requests_with_defaults(_mapping(c))
        for res in _QOS_RESOURCES:
            req, lim = _quantity_or_none(parse, reqs.get(res)), _quantity_or_none(parse, lims.get(res))
            if req is not None and req > 0:
                requests[res] = requests.get(res, Decimal(0)) + req
            if lim is not None and lim > 0:
                limits[res] = limits.get(res, Decimal(0)) + lim
            else:
                guaranteed = False
    return guaranteed and requests == limits and bool(requests)


def _integer_cpu(container: Mapping[str, Any], parse: QuantityParser) -> bool:
    cpu = _quantity_or_none(parse, _requests_with_defaults(container)[0].get("cpu"))
    return cpu is not None and cpu > 0 and cpu == cpu.to_integral_value()


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
        if not cpu_req or not mem_req:
            found.add(MISSING_REQUESTS)
    if not containers:
        found.add(MISSING_REQUESTS)
    # The static CPU manager's condition for exclusive (pinned) CPUs: a Guaranteed pod, and a
    # container whose CPU request is a whole number. Burstable pods, and Guaranteed ones with
    # fractional CPU requests, share the node's CPU pool: both QoS classes work with SUNK.
    everything = [_mapping(c) for c in init_containers + containers]
    if guaranteed_qos(everything, parse) and any(_integer_cpu(c, parse) for c in everything):
        found.add(GUARANTEED_QOS)
    return found


def resources_key(containers: list[Any], init_containers: list[Any]) -> Hashable | None:
    """What `_container_hazards` reads of a pod, as a hashable value: pods with equal keys show the
    same hazards. Each quantity is keyed with its type (True == 1, but True is not a quantity);
    None when a value cannot be hashed (hostile input: judged without the memo)."""
    def one(c: Any) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
        requests, limits = _resources(_mapping(c))
        return (tuple((k, type(v), v) for k, v in requests.items()),
                tuple((k, type(v), v) for k, v in limits.items()))
    key = (tuple(one(c) for c in init_containers), tuple(one(c) for c in containers))
    try:
        hash(key)
    except TypeError:
        return None
    return key


# Hazards of a pod from its (containers, init containers): the shell may pass a memo of it.
Hazards = Callable[[list[Any], list[Any]], frozenset[str]]


def container_hazards(containers: list[Any], init_containers: list[Any], parse: QuantityParser) -> frozenset[str]:
    return _interned_hazards(_container_hazards(containers, init_containers, parse))


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
    sandbox_id: str | None = None    # the sandbox.coreweave.com/sandbox-id label (placeholder job names)
    job_name: str | None = None      # its Job's name (label): a gang's pods share one placeholder job

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


def decode_pod(pod: Any, quantity: QuantityParser, share: Callable[[Any], Any] = lambda x: x,
               hazards_of: Hazards | None = None) -> PodRecord:
    """The record of a pod object (raw camelCase, as the API server sends it).

    `share(value)` returns an equal value already held (the caller's table), so the annotation
    sets and creation seconds that thousands of pods have in common are stored once;
    `hazards_of(containers, init_containers)` is `container_hazards` or a memo of it."""
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
    containers = cs if isinstance(cs := spec.get("containers"), list) else []
    inits = ics if isinstance(ics := spec.get("initContainers"), list) else []
    hazards = hazards_of(containers, inits) if hazards_of else container_hazards(containers, inits, quantity)
    annotations = share(tuple(sorted((k, v) for k, v in _mapping(meta.get("annotations")).items()
                                     if isinstance(k, str) and k.startswith(ANNOTATION_PREFIX)
                                     and isinstance(v, (str, int, float, bool, type(None))))))
    created = _str_or_none(meta.get("creationTimestamp"))
    created = share(created) if created is not None else None
    labels = _mapping(meta.get("labels"))
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
        resource_hazards=hazards,
        error=error,
        sandbox_id=_str_or_none(labels.get(SANDBOX_ID_LABEL)),
        job_name=next((v for k in JOB_NAME_LABELS if isinstance(v := labels.get(k), str) and v), None),
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
