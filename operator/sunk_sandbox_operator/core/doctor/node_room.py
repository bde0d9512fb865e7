"""Room for a sandbox pod on the Nodes of shared NodeSets, pure: requests against allocatable.

A SUNK NodeSet places one slurmd pod (a container named `slurmd`, owned by the NodeSet) on each
Node it selects. By default its requests take most of the Node's allocatable CPU and memory, so a
sandbox pod bound there by the SUNK scheduler is refused by the kubelet (`OutOfcpu`,
`OutOfMemory`): the seed runbook's step 1.6. What is left on a Node is its allocatable less the
requests of every pod bound there that is not finished, sandbox pods aside (they are what needs
the room). Requests are counted as the kube-scheduler counts them: the sum over containers, or
the largest init container if that is larger, plus the pod's overhead. Quantities are parsed by
the caller's parser (core/units.py), as in core/pods.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from ..pods import QuantityParser

SLURMD_CONTAINER = "slurmd"
NODESET_KIND = "NodeSet"
FINISHED_PHASES = ("Succeeded", "Failed")
_GI, _MI = Decimal(2**30), Decimal(2**20)


@dataclass(frozen=True)
class Resources:
    """CPU (cores) and memory (bytes)."""

    cpu: Decimal = Decimal(0)
    memory: Decimal = Decimal(0)

    def __add__(self, other: Resources) -> Resources:
        return Resources(self.cpu + other.cpu, self.memory + other.memory)

    def __sub__(self, other: Resources) -> Resources:
        return Resources(self.cpu - other.cpu, self.memory - other.memory)

    def fits(self, need: Resources) -> bool:
        return self.cpu >= need.cpu and self.memory >= need.memory

    def largest(self, other: Resources) -> Resources:
        """Each resource's larger value: the request that fits either."""
        return Resources(max(self.cpu, other.cpu), max(self.memory, other.memory))

    def show(self) -> str:
        return f"{cpu_text(self.cpu)} CPU, {memory_text(self.memory)} memory"


def cpu_text(cores: Decimal) -> str:
    milli = (cores * 1000).to_integral_value()
    return f"{milli / 1000:g}" if milli % 1000 == 0 else f"{milli}m"


def memory_text(size: Decimal) -> str:
    sign = "-" if size < 0 else ""
    size = abs(size)
    if size >= _GI:
        return f"{sign}{(size / _GI).quantize(Decimal('0.1')).normalize():f}Gi"
    return f"{sign}{(size / _MI).to_integral_value():f}Mi"


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _amounts(values: Mapping[str, Any], parse: QuantityParser) -> Resources:
    def one(key: str) -> Decimal:
        try:
            return parse(values[key]) if key in values else Decimal(0)
        except (ValueError, ArithmeticError):
            return Decimal(0)  # the API server validated it; an odd one counts as nothing
    return Resources(one("cpu"), one("memory"))


def container_requests(container: Any, parse: QuantityParser) -> Resources:
    """A container's requests (a missing request defaults to its limit, as the API server does)."""
    res = _mapping(_mapping(container).get("resources"))
    return _amounts({**_mapping(res.get("limits")), **_mapping(res.get("requests"))}, parse)


def pod_requests(pod: Any, parse: QuantityParser) -> Resources:
    """What a pod takes of a Node: containers summed, or the largest init container, plus overhead."""
    spec = _mapping(_mapping(pod).get("spec"))
    total = Resources()
    for c in _list(spec.get("containers")):
        total = total + container_requests(c, parse)
    for c in _list(spec.get("initContainers")):
        total = total.largest(container_requests(c, parse))
    return total + _amounts(_mapping(spec.get("overhead")), parse)


def allocatable(node: Any, parse: QuantityParser) -> Resources | None:
    """The Node's allocatable CPU and memory; None when it states none."""
    values = _mapping(_mapping(_mapping(node).get("status")).get("allocatable"))
    return _amounts(values, parse) if "cpu" in values or "memory" in values else None


def is_slurmd(pod: Any) -> bool:
    return any(_mapping(c).get("name") == SLURMD_CONTAINER for c in _list(_mapping(_mapping(pod).get("spec")).get("containers")))


def nodeset_of(pod: Any) -> str:
    """The NodeSet owning a slurmd pod ("" when no ownerReference says)."""
    for ref in _list(_mapping(_mapping(pod).get("metadata")).get("ownerReferences")):
        if _mapping(ref).get("kind") == NODESET_KIND:
            return str(_mapping(ref).get("name") or "")
    return ""


def node_of(pod: Any) -> str:
    return str(_mapping(_mapping(pod).get("spec")).get("nodeName") or "")


def _finished(pod: Any) -> bool:
    return _mapping(_mapping(pod).get("status")).get("phase") in FINISHED_PHASES


@dataclass(frozen=True)
class NodeRoom:
    """One Node of a shared NodeSet: what it offers, what slurmd and the rest take."""

    node: str
    nodesets: tuple[str, ...]
    allocatable: Resources | None  # None: the Node could not be read or states none
    # ... and with `error`, what could not be read (the Node, or the pods bound there): no room is known
    slurmd: Resources
    others: Resources
    error: str | None = None

    @property
    def free(self) -> Resources | None:
        """What is left (None: unknown, when the Node or its pods could not be read)."""
        if self.allocatable is None or self.error:
            return None
        return self.allocatable - self.slurmd - self.others


def node_room(name: str, node: Any, pods: Iterable[Any], parse: QuantityParser, *, is_sandbox: Callable[[Any], bool],
              error: str | None = None) -> NodeRoom:
    """The room on Node `name` (its object, or None with `error`) given the pods bound there.
    `is_sandbox(pod)` tells the sandbox pods, which are left out."""
    slurmd, others, nodesets = Resources(), Resources(), set()
    for pod in pods:
        if _finished(pod) or is_sandbox(pod):
            continue
        if is_slurmd(pod):
            slurmd = slurmd + pod_requests(pod, parse)
            nodesets.add(nodeset_of(pod) or "-")
        else:
            others = others + pod_requests(pod, parse)
    return NodeRoom(name, tuple(sorted(nodesets)), allocatable(node, parse) if node is not None else None,
                    slurmd, others, error)
