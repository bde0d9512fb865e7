"""Thin Kubernetes access: raw camelCase dicts in and out, nothing decided here.

The `kubernetes` client is synchronous; every call runs in a worker thread so the kopf event
loop never blocks. Responses are read with `_preload_content=False` and parsed as JSON, so the
pure core sees exactly what the API server sent (camelCase), as in tests and fixtures.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
from typing import Any

import kubernetes
from kubernetes.client.rest import ApiException

from ..api import keys as m

_api_client: kubernetes.client.ApiClient | None = None


class Conflict(Exception):
    """409: the object changed since it was read (resourceVersion precondition)."""


class NotFound(Exception):
    pass


class Forbidden(Exception):
    pass


class Invalid(Exception):
    """422: the server refused the object (e.g. an immutable ConfigMap)."""


def api_client() -> kubernetes.client.ApiClient:
    """One shared client: in-cluster credentials in a pod, else KUBECONFIG."""
    global _api_client
    if _api_client is None:
        cfg = kubernetes.client.Configuration()
        if os.environ.get("KUBERNETES_SERVICE_HOST") and not os.environ.get("KUBECONFIG"):
            kubernetes.config.load_incluster_config(client_configuration=cfg)
        else:
            kubernetes.config.load_kube_config(client_configuration=cfg)
        cfg.connection_pool_maxsize = 32
        _api_client = kubernetes.client.ApiClient(cfg)
    return _api_client


def _translate(exc: ApiException) -> Exception:
    if exc.status == 404:
        return NotFound(_reason(exc))
    if exc.status == 409:
        return Conflict(_reason(exc))
    if exc.status == 403:
        return Forbidden(_reason(exc))
    if exc.status == 422:
        return Invalid(_reason(exc))
    return exc


def _reason(exc: ApiException) -> str:
    try:
        return json.loads(exc.body).get("message") or str(exc.reason)
    except Exception:
        return str(exc.reason)


def _json(resp: Any) -> dict:
    return json.loads(resp.data)


async def _call(fn, *args, **kwargs) -> dict:
    def run() -> dict:
        try:
            return _json(fn(*args, _preload_content=False, **kwargs))
        except ApiException as exc:
            raise _translate(exc) from None

    return await asyncio.to_thread(run)


def core() -> kubernetes.client.CoreV1Api:
    return kubernetes.client.CoreV1Api(api_client())


def apps() -> kubernetes.client.AppsV1Api:
    return kubernetes.client.AppsV1Api(api_client())


def rbac() -> kubernetes.client.RbacAuthorizationV1Api:
    return kubernetes.client.RbacAuthorizationV1Api(api_client())


def custom() -> kubernetes.client.CustomObjectsApi:
    return kubernetes.client.CustomObjectsApi(api_client())


# ------------------------------------------------------------------ reads


async def list_pods(namespace: str, label_selector: str | None) -> list[dict]:
    kwargs = {"label_selector": label_selector} if label_selector else {}
    return (await _call(core().list_namespaced_pod, namespace, **kwargs))["items"]


async def list_configmaps(namespace: str) -> list[dict]:
    return (await _call(core().list_namespaced_config_map, namespace))["items"]


async def get_configmap(namespace: str, name: str) -> dict:
    return await _call(core().read_namespaced_config_map, name, namespace)


async def list_namespaces() -> list[dict]:
    return (await _call(core().list_namespace))["items"]


async def read_secret_key(namespace: str, name: str, key: str) -> str:
    """The decoded value of one Secret key (never logged by callers)."""
    secret = await _call(core().read_namespaced_secret, name, namespace)
    raw = (secret.get("data") or {}).get(key)
    if raw is None:
        raise KeyError(key)
    return base64.b64decode(raw).decode().strip()


async def list_deployments(namespace: str) -> list[dict]:
    return (await _call(apps().list_namespaced_deployment, namespace))["items"]


async def list_bindings() -> list[dict]:
    return (await _call(custom().list_cluster_custom_object, m.GROUP, m.VERSION, m.PLURAL))["items"]




# ------------------------------------------------------------------ writes


async def patch_binding_status(namespace: str, name: str, status_patch: dict) -> dict:
    return await _call(
        custom().patch_namespaced_custom_object_status, m.GROUP, m.VERSION, namespace, m.PLURAL, name,
        {"status": status_patch},
    )




async def get_application(namespace: str, name: str) -> dict:
    return await _call(custom().get_namespaced_custom_object, "argoproj.io", "v1alpha1", namespace, "applications", name)




async def list_rolebindings(label_selector: str) -> list[dict]:
    return (await _call(rbac().list_role_binding_for_all_namespaces, label_selector=label_selector))["items"]


async def create_rolebinding(namespace: str, body: dict) -> dict:
    return await _call(rbac().create_namespaced_role_binding, namespace, body)


async def delete_rolebinding(namespace: str, name: str) -> None:
    try:
        await _call(rbac().delete_namespaced_role_binding, name, namespace)
    except NotFound:
        pass


# ------------------------------------------------------------------ scope sync


async def replace_configmap_checked(namespace: str, name: str, body: dict) -> dict:
    """PUT with resourceVersion (409 → Conflict, 422 → Invalid)."""
    return await _call(core().replace_namespaced_config_map, name, namespace, body)


async def merge_patch_deployment(namespace: str, name: str, patch: dict) -> dict:
    """JSON merge patch (the generated client would pick json-patch for a dict body)."""
    return await _call(apps().patch_namespaced_deployment, name, namespace, patch,
                       _content_type="application/merge-patch+json")


async def merge_patch_application(namespace: str, name: str, patch: dict) -> dict:
    """JSON merge patch of an Argo CD Application; include metadata.resourceVersion for a precondition."""
    return await _call(custom().patch_namespaced_custom_object, "argoproj.io", "v1alpha1", namespace,
                           "applications", name, patch, _content_type="application/merge-patch+json")
