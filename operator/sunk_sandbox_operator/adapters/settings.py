"""Where the operator publishes its tenancy settings for `doctor`: one ConfigMap in its own namespace.

Written by the leader at the start of each leadership term (the settings in force are the
leader's: it alone decides about bindings), read by `doctor`. The operator may already write
ConfigMaps in its own namespace (its ownership records, manifests/rbac-operator.yaml); nothing
else is needed. Labelled as the operator's; the content is core/operator_settings.py's.
"""

from __future__ import annotations

from typing import Any

from ..api.keys import MANAGED_BY_LABEL
from ..core import operator_settings as ops
from . import kube as k

NAME = "sunk-sandbox-operator-settings"


async def publish(kube: k.KubeAPI, namespace: str, settings: ops.Published) -> None:
    """Create or replace the ConfigMap (last writer wins: one leader at a time)."""
    body: dict[str, Any] = {"apiVersion": "v1", "kind": "ConfigMap",
                            "metadata": {"name": NAME, "namespace": namespace,
                                         "labels": {MANAGED_BY_LABEL[0]: MANAGED_BY_LABEL[1],
                                                    "app.kubernetes.io/component": "settings"}},
                            "data": ops.encode(settings)}
    try:
        await kube.replace_configmap(namespace, NAME, body)
    except k.NotFound:
        await kube.create_configmap(namespace, body)


async def read(kube: k.KubeAPI, namespace: str) -> dict | None:
    """The ConfigMap's data, or None when the operator published nothing there (k.Forbidden raised)."""
    try:
        cm = await kube.get_configmap(namespace, NAME)
    except k.NotFound:
        return None
    data = cm.get("data")
    return data if isinstance(data, dict) else {}
