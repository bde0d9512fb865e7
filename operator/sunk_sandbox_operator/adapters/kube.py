"""Kubernetes access: raw camelCase dicts in and out, typed errors, nothing decided here.

The `kubernetes` client is synchronous; every call runs in a worker thread so the event loop
never blocks. Responses are read with `_preload_content=False` and parsed as JSON, so the core
sees exactly what the API server sent (camelCase), as in tests and fixtures. One `Kube` is
built at start-up and handed around in the controller context (no module-level client).
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
from typing import Any, Callable

import kubernetes
from kubernetes.client.rest import ApiException

from ..api import keys

ARGO_GROUP, ARGO_VERSION, ARGO_PLURAL = "argoproj.io", "v1alpha1", "applications"
FLUX_GROUP, FLUX_VERSION, FLUX_PLURAL = "helm.toolkit.fluxcd.io", "v2", "helmreleases"
MERGE_PATCH = "application/merge-patch+json"


class KubeError(Exception):
    """Base of the typed API errors below."""


class Conflict(KubeError):
    """409: the object changed since it was read (resourceVersion precondition) or already exists."""


class NotFound(KubeError):
    pass


class Forbidden(KubeError):
    pass


class Invalid(KubeError):
    """422: the server refused the object (e.g. an immutable ConfigMap)."""


class NotLeader(KubeError):
    """A write was attempted while this replica does not hold the leader Lease: refused locally."""


def _translate(exc: ApiException) -> Exception:
    kind = {404: NotFound, 409: Conflict, 403: Forbidden, 422: Invalid}.get(exc.status)
    return kind(_reason(exc)) if kind else exc


def _reason(exc: ApiException) -> str:
    try:
        return json.loads(exc.body).get("message") or str(exc.reason)
    except Exception:
        return str(exc.reason)


def load_api_client() -> kubernetes.client.ApiClient:
    """In-cluster credentials in a pod, else KUBECONFIG."""
    cfg = kubernetes.client.Configuration()
    if os.environ.get("KUBERNETES_SERVICE_HOST") and not os.environ.get("KUBECONFIG"):
        kubernetes.config.load_incluster_config(client_configuration=cfg)
    else:
        kubernetes.config.load_kube_config(client_configuration=cfg)
    cfg.connection_pool_maxsize = 32
    return kubernetes.client.ApiClient(cfg)


class Kube:
    """The reads and writes the operator makes, as coroutines."""

    def __init__(self, api_client: kubernetes.client.ApiClient) -> None:
        self.api_client = api_client
        # The write gate: leader election opens it while this replica leads. Every write below
        # checks it first, so a replica that lost its Lease writes nothing, whatever is in flight.
        self.writable: Callable[[], bool] = lambda: True
        # The scope target is read and replaced on every burst write: when set (KubeHTTP), those
        # two calls stream JSON on the event loop instead of going through the generated client.
        self.http: Any = None
        self.core = kubernetes.client.CoreV1Api(api_client)
        self.apps = kubernetes.client.AppsV1Api(api_client)
        self.rbac = kubernetes.client.RbacAuthorizationV1Api(api_client)
        self.custom = kubernetes.client.CustomObjectsApi(api_client)
        self.authz = kubernetes.client.AuthorizationV1Api(api_client)

    def check_writable(self) -> None:
        if not self.writable():
            raise NotLeader("this replica is not the leader: nothing is written")

    async def _call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> dict:
        def run() -> dict:
            try:
                return json.loads(fn(*args, _preload_content=False, **kwargs).data)
            except ApiException as exc:
                raise _translate(exc) from None

        return await asyncio.to_thread(run)

    # ------------------------------------------------------------ reads

    async def list_pods(self, namespace: str, label_selector: str | None) -> list[dict]:
        kwargs = {"label_selector": label_selector} if label_selector else {}
        return (await self._call(self.core.list_namespaced_pod, namespace, **kwargs))["items"]

    async def list_configmaps(self, namespace: str) -> list[dict]:
        return (await self._call(self.core.list_namespaced_config_map, namespace))["items"]

    async def get_configmap(self, namespace: str, name: str) -> dict:
        if self.http is not None:
            return await self.http.get(f"/api/v1/namespaces/{namespace}/configmaps/{name}", {})
        return await self._call(self.core.read_namespaced_config_map, name, namespace)

    async def read_secret_key(self, namespace: str, name: str, key: str) -> str:
        """The decoded value of one Secret key (never logged by callers). KeyError when absent."""
        secret = await self._call(self.core.read_namespaced_secret, name, namespace)
        raw = (secret.get("data") or {}).get(key)
        if raw is None:
            raise KeyError(key)
        return base64.b64decode(raw).decode().strip()

    async def secret_has_key(self, namespace: str, name: str, key: str) -> bool:
        """Whether a Secret holds a non-empty key (admission warnings): the value is neither decoded
        nor returned. NotFound / Forbidden as for any read."""
        secret = await self._call(self.core.read_namespaced_secret, name, namespace)
        return bool((secret.get("data") or {}).get(key))

    async def service_account_may(self, sa_namespace: str, sa_name: str, verb: str, resource: str,
                                  namespace: str, subresource: str = "") -> bool:
        """A SubjectAccessReview: may this ServiceAccount do this (namespace "" = every namespace)?"""
        attrs = {"verb": verb, "resource": resource, "namespace": namespace}
        if subresource:
            attrs["subresource"] = subresource
        body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": {
            "user": f"system:serviceaccount:{sa_namespace}:{sa_name}",
            "groups": ["system:serviceaccounts", f"system:serviceaccounts:{sa_namespace}", "system:authenticated"],
            "resourceAttributes": attrs}}
        answer = await self._call(self.authz.create_subject_access_review, body)
        return bool((answer.get("status") or {}).get("allowed"))

    async def list_statefulsets(self, namespace: str) -> list[dict]:
        return (await self._call(self.apps.list_namespaced_stateful_set, namespace))["items"]

    async def merge_patch_statefulset(self, namespace: str, name: str, patch: dict) -> dict:
        self.check_writable()
        return await self._call(self.apps.patch_namespaced_stateful_set, name, namespace, patch,
                                field_manager=keys.FIELD_MANAGER, _content_type=MERGE_PATCH)

    async def list_deployments(self, namespace: str) -> list[dict]:
        return (await self._call(self.apps.list_namespaced_deployment, namespace))["items"]

    async def list_bindings(self) -> list[dict]:
        return (await self._call(self.custom.list_cluster_custom_object, keys.GROUP, keys.VERSION, keys.PLURAL))["items"]

    async def get_application(self, namespace: str, name: str) -> dict:
        return await self._call(self.custom.get_namespaced_custom_object, ARGO_GROUP, ARGO_VERSION, namespace,
                                ARGO_PLURAL, name)

    async def get_helmrelease(self, namespace: str, name: str) -> dict:
        """A Flux HelmRelease (read only: the FluxHelmRelease target writes the ConfigMap it consumes)."""
        return await self._call(self.custom.get_namespaced_custom_object, FLUX_GROUP, FLUX_VERSION, namespace,
                                FLUX_PLURAL, name)

    async def list_rolebindings(self, label_selector: str) -> list[dict]:
        return (await self._call(self.rbac.list_role_binding_for_all_namespaces, label_selector=label_selector))["items"]

    # ------------------------------------------------------------ writes

    async def patch_binding_status(self, namespace: str, name: str, status_patch: dict) -> dict:
        self.check_writable()
        return await self._call(self.custom.patch_namespaced_custom_object_status, keys.GROUP, keys.VERSION,
                                namespace, keys.PLURAL, name, {"status": status_patch})

    async def replace_configmap(self, namespace: str, name: str, body: dict) -> dict:
        """PUT with the body's resourceVersion as precondition (409 → Conflict, 422 → Invalid)."""
        self.check_writable()
        if self.http is not None:
            return await self.http.put(f"/api/v1/namespaces/{namespace}/configmaps/{name}", body,
                                       params={"fieldManager": keys.FIELD_MANAGER})
        return await self._call(self.core.replace_namespaced_config_map, name, namespace, body,
                                field_manager=keys.FIELD_MANAGER)

    async def create_configmap(self, namespace: str, body: dict) -> dict:
        self.check_writable()
        return await self._call(self.core.create_namespaced_config_map, namespace, body)

    async def delete_configmap(self, namespace: str, name: str) -> None:
        self.check_writable()
        try:
            await self._call(self.core.delete_namespaced_config_map, name, namespace)
        except NotFound:
            pass

    async def merge_patch_deployment(self, namespace: str, name: str, patch: dict) -> dict:
        """JSON merge patch (the generated client would pick json-patch for a dict body)."""
        self.check_writable()
        return await self._call(self.apps.patch_namespaced_deployment, name, namespace, patch,
                                field_manager=keys.FIELD_MANAGER, _content_type=MERGE_PATCH)

    async def merge_patch_application(self, namespace: str, name: str, patch: dict) -> dict:
        """JSON merge patch of an Argo CD Application; metadata.resourceVersion in it is a precondition."""
        self.check_writable()
        return await self._call(self.custom.patch_namespaced_custom_object, ARGO_GROUP, ARGO_VERSION, namespace,
                                ARGO_PLURAL, name, patch, field_manager=keys.FIELD_MANAGER,
                                _content_type=MERGE_PATCH)

    async def create_event(self, namespace: str, body: dict) -> dict:
        self.check_writable()
        return await self._call(self.core.create_namespaced_event, namespace, body)

    async def create_rolebinding(self, namespace: str, body: dict) -> dict:
        self.check_writable()
        return await self._call(self.rbac.create_namespaced_role_binding, namespace, body)

    async def delete_rolebinding(self, namespace: str, name: str) -> None:
        self.check_writable()
        try:
            await self._call(self.rbac.delete_namespaced_role_binding, name, namespace)
        except NotFound:
            pass

    # ------------------------------------------------------------ leases (leader election)

    def _leases(self) -> kubernetes.client.CoordinationV1Api:
        api = self.__dict__.get("_coordination")
        if api is None:
            api = self.__dict__["_coordination"] = kubernetes.client.CoordinationV1Api(self.api_client)
        return api

    async def get_lease(self, namespace: str, name: str) -> dict:
        """A coordination.k8s.io/v1 Lease (404 → NotFound)."""
        return await self._call(self._leases().read_namespaced_lease, name, namespace)

    async def create_lease(self, namespace: str, body: dict) -> dict:
        """409 (already exists) → Conflict."""
        return await self._call(self._leases().create_namespaced_lease, namespace, body)

    async def replace_lease(self, namespace: str, name: str, body: dict) -> dict:
        """PUT with the body's resourceVersion as precondition (409 → Conflict)."""
        return await self._call(self._leases().replace_namespaced_lease, name, namespace, body)
