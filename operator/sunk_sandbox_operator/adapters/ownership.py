"""Where policy ownership records live: one ConfigMap per binding in the operator's namespace.

Outside the binding (status can be wiped, a binding restored from a backup without status) and
outside tenants' reach (only the operator may write its own namespace). Named after the binding
(a digest keeps the name valid), labelled with it for `kubectl get cm -l`.
"""

from __future__ import annotations

import hashlib
from typing import Any

from ..api.keys import BINDING_LABEL, MANAGED_BY_LABEL
from ..core.scope import grants
from ..core.policy.ownership import Record, from_json
from . import kube as k

KEY = "record.json"


def name_for(binding: str) -> str:
    return "ssb-policy-" + hashlib.sha256(binding.encode()).hexdigest()[:20]


class OwnershipStore:
    def __init__(self, kube: k.KubeAPI, namespace: str) -> None:
        self.kube, self.namespace = kube, namespace

    async def load(self, binding: str) -> Record | None:
        try:
            cm = await self.kube.get_configmap(self.namespace, name_for(binding))
        except k.NotFound:
            return None
        return from_json((cm.get("data") or {}).get(KEY))

    async def save(self, record: Record) -> None:
        """Create or replace the record (last writer wins: one binding has one writer)."""
        ns, name = record.binding.split("/", 1)
        body: dict[str, Any] = {"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": name_for(record.binding), "namespace": self.namespace,
                             "labels": {BINDING_LABEL: grants.binding_label(ns, name),
                                        MANAGED_BY_LABEL[0]: MANAGED_BY_LABEL[1]}},
                "data": {KEY: record.to_json()}}
        try:
            await self.kube.replace_configmap(self.namespace, body["metadata"]["name"], body)
        except k.NotFound:
            await self.kube.create_configmap(self.namespace, body)

    async def delete(self, binding: str) -> None:
        await self.kube.delete_configmap(self.namespace, name_for(binding))
