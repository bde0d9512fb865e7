"""The coordination.k8s.io/v1 Lease as the leader elector reads and writes it (client-go's
resourcelock.LeaseLock): the three calls, the bodies of a create, a take-over or renew and a release,
what tells one observation of it from the next, and the holder identities. No clock, no loop: those
are controller/leader.py's.
"""

from __future__ import annotations

import datetime as dt
import os
import socket
import uuid
from typing import Protocol

DEFAULT_LEASE_NAME = "sunk-sandbox-operator"


class LeaseAPI(Protocol):
    """The three Lease calls of `adapters.kube.Kube` the elector needs (raw camelCase dicts)."""

    async def get_lease(self, namespace: str, name: str) -> dict: ...

    async def create_lease(self, namespace: str, body: dict) -> dict: ...

    async def replace_lease(self, namespace: str, name: str, body: dict) -> dict: ...


def micro_time_now() -> str:
    """metav1.MicroTime: RFC 3339 in UTC with microseconds."""
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def new_identity(pod_name: str | None = None) -> str:
    """The pod name (POD_NAME, else the host name) and a random suffix: a restart is a new identity."""
    base = pod_name or os.environ.get("POD_NAME") or socket.gethostname()
    return f"{base}_{uuid.uuid4().hex[:12]}"


def new(namespace: str, name: str, identity: str, seconds: int, now: str) -> dict:
    """A Lease that did not exist, held by `identity` from `now`."""
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"holderIdentity": identity, "leaseDurationSeconds": seconds,
                 "acquireTime": now, "renewTime": now, "leaseTransitions": 0},
    }


def held(lease: dict, identity: str, seconds: int, now: str) -> dict:
    """`lease` renewed by `identity` (its holder) or taken over by it (one more transition). The read's
    metadata, resourceVersion included, is kept: the PUT's precondition."""
    spec = lease.get("spec") or {}
    ours = (spec.get("holderIdentity") or "") == identity
    transitions = int(spec.get("leaseTransitions") or 0)
    new_spec = {
        **spec,
        "holderIdentity": identity,
        "leaseDurationSeconds": seconds,
        "acquireTime": spec.get("acquireTime") if ours and spec.get("acquireTime") else now,
        "renewTime": now,
        "leaseTransitions": transitions if ours else transitions + 1,
    }
    return {**lease, "spec": new_spec}


def released(lease: dict, now: str) -> dict:
    """`lease` freed (client-go's ReleaseOnCancel): holderIdentity "" and leaseDurationSeconds 1."""
    spec = lease.get("spec") or {}
    return {**lease, "spec": {**spec, "holderIdentity": "", "leaseDurationSeconds": 1,
                              "acquireTime": now, "renewTime": now,
                              "leaseTransitions": int(spec.get("leaseTransitions") or 0)}}


def change_key(lease: dict) -> tuple:
    """What changes when anyone writes the Lease: (holderIdentity, renewTime, resourceVersion)."""
    spec = lease.get("spec") or {}
    return (spec.get("holderIdentity") or "", spec.get("renewTime"),
            (lease.get("metadata") or {}).get("resourceVersion"))
