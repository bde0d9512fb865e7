"""core/doctor/node_room.py: requests counted as the kube-scheduler counts them, and the room they leave."""

from __future__ import annotations

from decimal import Decimal

from sunk_sandbox_operator.core.units import parse_quantity
from sunk_sandbox_operator.core.doctor import node_room as room

GI = Decimal(2**30)


def c(name: str, cpu: str | None = None, memory: str | None = None, *, limits: dict | None = None) -> dict:
    req = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v is not None}
    return {"name": name, "resources": {"requests": req, "limits": limits or {}}}


def test_a_pod_takes_its_containers_summed_or_its_largest_init_container_plus_overhead() -> None:
    pod = {"spec": {"containers": [c("a", "1", "1Gi"), c("b", "500m", "1Gi")],
                    "initContainers": [c("init", "4", "512Mi")], "overhead": {"cpu": "100m"}}}
    assert room.pod_requests(pod, parse_quantity) == room.Resources(Decimal("4.1"), 2 * GI)


def test_a_missing_request_is_its_limit_as_the_api_server_defaults_it() -> None:
    pod = {"spec": {"containers": [c("a", limits={"cpu": "2", "memory": "1Gi"})]}}
    assert room.pod_requests(pod, parse_quantity) == room.Resources(Decimal(2), GI)


def test_room_leaves_out_finished_and_sandbox_pods_and_counts_slurmd_apart() -> None:
    node = {"status": {"allocatable": {"cpu": "16", "memory": "64Gi"}}}
    slurmd = {"metadata": {"ownerReferences": [{"kind": "NodeSet", "name": "cpu"}]},
              "spec": {"containers": [c("slurmd", "12", "48Gi")]}}
    daemon = {"spec": {"containers": [c("agent", "1", "1Gi")]}}
    done = {"spec": {"containers": [c("job", "8", "8Gi")]}, "status": {"phase": "Succeeded"}}
    sandbox = {"metadata": {"labels": {"sbx": "1"}}, "spec": {"containers": [c("main", "2", "2Gi")]}}
    r = room.node_room("n1", node, [slurmd, daemon, done, sandbox], parse_quantity,
                       is_sandbox=lambda p: "sbx" in (p.get("metadata") or {}).get("labels", {}))
    assert (r.nodesets, r.slurmd, r.others) == (("cpu",), room.Resources(Decimal(12), 48 * GI), room.Resources(Decimal(1), GI))
    assert r.free == room.Resources(Decimal(3), 15 * GI)
    assert r.free.fits(room.Resources(Decimal("0.5"), GI)) and not r.free.fits(room.Resources(Decimal(4), GI))


def test_what_could_not_be_read_leaves_no_known_room() -> None:
    assert room.node_room("n1", None, [], parse_quantity, is_sandbox=lambda p: False, error="forbidden").free is None
    node = {"status": {"allocatable": {"cpu": "16"}}}
    assert room.node_room("n1", node, [], parse_quantity, is_sandbox=lambda p: False, error="pods: forbidden").free is None


def test_quantities_read_as_kubectl_shows_them() -> None:
    assert room.Resources(Decimal("0.5"), 512 * Decimal(2**20)).show() == "500m CPU, 512Mi memory"
    assert room.Resources(Decimal(16), Decimal("1.5") * GI).show() == "16 CPU, 1.5Gi memory"
    assert room.memory_text(-GI) == "-1Gi"
