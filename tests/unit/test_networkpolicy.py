"""The shipped NetworkPolicy admits exactly the operator's listening ports and selects its pods."""

from __future__ import annotations

from tests.unit.test_manifests import OPERATOR_NS, container, deployment, find, objects  # noqa: F401 (fixtures)


def test_the_network_policy_selects_the_operator_pods_and_admits_only_their_ports(objects, deployment, container):
    policy = find(objects, "NetworkPolicy", "sunk-sandbox-operator", OPERATOR_NS)
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= pod_labels.items()
    assert set(policy["spec"]["policyTypes"]) == {"Ingress", "Egress"}
    admitted = {p["port"] for rule in policy["spec"]["ingress"] for p in rule["ports"]}
    listening = {p["containerPort"] for p in container.get("ports") or []}
    assert listening <= admitted and admitted - listening <= {9443}  # 9443: the optional webhook component
    egress = {(p["protocol"], p["port"]) for rule in policy["spec"]["egress"] for p in rule["ports"]}
    # DNS, the API server, the runner API, and slurmrestd's default port (spec.slurm.restAPI).
    assert egress == {("UDP", 53), ("TCP", 53), ("TCP", 443), ("TCP", 6443), ("TCP", 6820)}
