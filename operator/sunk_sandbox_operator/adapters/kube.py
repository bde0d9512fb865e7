"""Kubernetes access: raw camelCase dicts in and out, typed errors, nothing decided here.

Every call is one REST request on the event loop through the operator's HTTP session
(adapters/kubehttp.py: aiohttp, authenticated from adapters/kubeconfig.py's `Access`), so
the core sees exactly what the API server sent (camelCase), as in tests and fixtures. The
generated API classes are not used: instantiating the six the operator needed imported hundreds
of model modules (docs/scale.md). One `Kube` is built at start-up and handed around in the
controller context (no module-level client).
"""

from __future__ import annotations

import base64
from typing import Any, Callable, Mapping, Protocol

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


class HTTP(Protocol):
    """What Kube needs of the session (adapters/kubehttp.KubeHTTP; a recorder in unit tests)."""

    async def request(self, method: str, path: str, params: Mapping[str, str] | None = None,
                      body: Any = None, content_type: str = "application/json") -> dict: ...


class KubeAPI(Protocol):
    """What the controller (through `Context.kube`) and the adapters use of `Kube`: every read and
    write, and the write gate. `Kube` is the one implementation; tests/unit/fakes.FakeKube stands in
    for it in unit tests and must satisfy this too (tests/unit/test_types.py has mypy check both)."""

    writable: Callable[[], bool]

    def check_writable(self) -> None: ...

    # reads
    async def list_pods(self, namespace: str, label_selector: str | None, each: Callable[[dict[str, Any]], Any] | None = None,
                        page_size: int = ...) -> list[Any]: ...
    async def list_configmaps(self, namespace: str, each: Callable[[dict[str, Any]], Any] | None = None,
                              page_size: int = ...) -> list[Any]: ...
    async def get_configmap(self, namespace: str, name: str) -> dict[str, Any]: ...
    async def read_secret_key(self, namespace: str, name: str, key: str) -> str: ...
    async def secret_has_key(self, namespace: str, name: str, key: str) -> bool: ...
    async def service_account_may(self, sa_namespace: str, sa_name: str, verb: str, resource: str,
                                  namespace: str, subresource: str = "") -> bool: ...
    async def list_statefulsets(self, namespace: str) -> list[dict[str, Any]]: ...
    async def list_deployments(self, namespace: str) -> list[dict[str, Any]]: ...
    async def get_application(self, namespace: str, name: str) -> dict[str, Any]: ...
    async def get_helmrelease(self, namespace: str, name: str) -> dict[str, Any]: ...
    async def list_rolebindings(self, label_selector: str) -> list[dict[str, Any]]: ...
    async def get_clusterrole(self, name: str) -> dict[str, Any]: ...
    async def get_binding(self, namespace: str, name: str) -> dict[str, Any]: ...
    async def list_bindings(self) -> list[dict[str, Any]]: ...
    async def list_namespaces(self) -> list[dict[str, Any]]: ...
    async def get_node(self, name: str) -> dict[str, Any]: ...
    async def get_namespace(self, name: str) -> dict[str, Any]: ...
    async def get_pod(self, namespace: str, name: str) -> dict[str, Any]: ...
    async def list_pods_everywhere(self, label_selector: str | None = None, field_selector: str | None = None,
                                   each: Callable[[dict[str, Any]], Any] | None = None) -> list[Any]: ...

    # writes (each behind the write gate)
    async def patch_binding_status(self, namespace: str, name: str, status_patch: dict[str, Any]) -> dict[str, Any]: ...
    async def replace_configmap(self, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]: ...
    async def create_configmap(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]: ...
    async def delete_configmap(self, namespace: str, name: str) -> None: ...
    async def merge_patch_deployment(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]: ...
    async def merge_patch_statefulset(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]: ...
    async def merge_patch_application(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]: ...
    async def create_event(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]: ...
    async def merge_patch_event(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]: ...
    async def create_rolebinding(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]: ...
    async def delete_rolebinding(self, namespace: str, name: str, uid: str | None = None) -> None: ...

    # leases (leader election: not behind the gate)
    async def get_lease(self, namespace: str, name: str) -> dict[str, Any]: ...
    async def create_lease(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]: ...
    async def replace_lease(self, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]: ...


def ns_path(namespace: str, plural: str, name: str = "", group: str = "", version: str = "v1") -> str:
    """The API path of a namespaced collection, or of one object in it."""
    base = f"/apis/{group}/{version}" if group else "/api/v1"
    return f"{base}/namespaces/{namespace}/{plural}" + (f"/{name}" if name else "")


# (group, version, plural) of the Kubernetes kinds the operator reads by kind (TargetRef.reads, the
# dependency watches): the one table of their API paths.
KINDS: dict[str, tuple[str, str, str]] = {
    "ConfigMap": ("", "v1", "configmaps"),
    "Pod": ("", "v1", "pods"),
    "Application": (ARGO_GROUP, ARGO_VERSION, ARGO_PLURAL),
    "HelmRelease": (FLUX_GROUP, FLUX_VERSION, FLUX_PLURAL),
}


def kind_path(kind: str, namespace: str, name: str = "") -> str:
    """The API path of a namespaced collection of one of KINDS (KeyError for others), or of one object in it."""
    group, version, plural = KINDS[kind]
    return ns_path(namespace, plural, name, group, version)


OURS = {"fieldManager": keys.FIELD_MANAGER}
PAGE_SIZE = 500  # items per page of a paginated LIST
WORKLOAD_PAGE_SIZE = 50  # Deployments / StatefulSets of a tenant's namespace (each may be large)
RBAC = "rbac.authorization.k8s.io"


class Kube:
    """The reads and writes the operator makes, as coroutines."""

    def __init__(self, http: HTTP) -> None:
        self.http = http
        # The write gate: leader election opens it while this replica leads. Every write below
        # checks it first, so a replica that lost its Lease writes nothing, whatever is in flight.
        self.writable: Callable[[], bool] = lambda: True

    def check_writable(self) -> None:
        if not self.writable():
            raise NotLeader("this replica is not the leader: nothing is written")

    async def _get(self, path: str, params: Mapping[str, str] | None = None) -> dict:
        return await self.http.request("GET", path, params)

    async def _items(self, path: str, params: Mapping[str, str] | None = None) -> list[dict]:
        return (await self._get(path, params)).get("items") or []

    async def _pages(self, path: str, params: Mapping[str, str], each: Callable[[dict], Any] | None = None,
                     page_size: int = PAGE_SIZE) -> list[Any]:
        """Every item of a LIST, `page_size` at a time (limit / continue): no one answer is unbounded.
        `each` maps an item as its page arrives, so only what it returns is kept (50,000 pods; the
        few fields discovery reads of a tenant's ConfigMaps)."""
        out: list[Any] = []
        token = ""
        while True:
            page = await self._get(path, {**params, "limit": str(page_size), **({"continue": token} if token else {})})
            items = page.get("items") or []
            out.extend(map(each, items) if each is not None else items)
            token = (page.get("metadata") or {}).get("continue") or ""
            if not token:
                return out

    async def _write(self, method: str, path: str, body: Any, *, content_type: str = "application/json",
                     params: Mapping[str, str] | None = None) -> dict:
        self.check_writable()
        return await self.http.request(method, path, params, body, content_type)

    async def _delete(self, path: str, uid: str | None = None) -> None:
        """DELETE (404 is done); with `uid`, only that object (a 409 if the name now holds another)."""
        self.check_writable()
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": uid}} if uid else None
        try:
            await self.http.request("DELETE", path, None, body)
        except NotFound:
            pass

    # ------------------------------------------------------------ reads

    async def list_pods(self, namespace: str, label_selector: str | None, each: Callable[[dict], Any] | None = None,
                        page_size: int = PAGE_SIZE) -> list[Any]:
        """The namespace's pods (by label selector), paginated; `each(pod)` instead of the pod when given."""
        params = {"labelSelector": label_selector} if label_selector else {}
        return await self._pages(kind_path("Pod", namespace), params, each, page_size)

    async def list_configmaps(self, namespace: str, each: Callable[[dict], Any] | None = None,
                              page_size: int = PAGE_SIZE) -> list[Any]:
        """The namespace's ConfigMaps, paginated; `each(configmap)` instead of it when given (a page of
        `page_size` is what is held at once: each may be 1 MiB)."""
        return await self._pages(kind_path("ConfigMap", namespace), {}, each, page_size)

    async def get_configmap(self, namespace: str, name: str) -> dict:
        return await self._get(kind_path("ConfigMap", namespace, name))

    async def read_secret_key(self, namespace: str, name: str, key: str) -> str:
        """The decoded value of one Secret key (never logged by callers). KeyError when absent."""
        secret = await self._get(ns_path(namespace, "secrets", name))
        raw = (secret.get("data") or {}).get(key)
        if raw is None:
            raise KeyError(key)
        return base64.b64decode(raw).decode().strip()

    async def secret_has_key(self, namespace: str, name: str, key: str) -> bool:
        """Whether a Secret holds a non-empty key (admission warnings): the value is neither decoded
        nor returned. NotFound / Forbidden as for any read."""
        secret = await self._get(ns_path(namespace, "secrets", name))
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
        # A review writes nothing (the API server answers and forgets it): a standby may ask too.
        answer = await self.http.request("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", None, body)
        return bool((answer.get("status") or {}).get("allowed"))

    async def list_statefulsets(self, namespace: str) -> list[dict]:
        """Paginated (a tenant's namespace: no one answer is unbounded)."""
        return await self._pages(ns_path(namespace, "statefulsets", group="apps"), {}, page_size=WORKLOAD_PAGE_SIZE)

    async def list_deployments(self, namespace: str) -> list[dict]:
        return await self._pages(ns_path(namespace, "deployments", group="apps"), {}, page_size=WORKLOAD_PAGE_SIZE)

    async def get_application(self, namespace: str, name: str) -> dict:
        return await self._get(kind_path("Application", namespace, name))

    async def get_helmrelease(self, namespace: str, name: str) -> dict:
        """A Flux HelmRelease (read only: the FluxHelmRelease target writes the ConfigMap it consumes)."""
        return await self._get(kind_path("HelmRelease", namespace, name))

    async def list_rolebindings(self, label_selector: str) -> list[dict]:
        return await self._items(f"/apis/{RBAC}/v1/rolebindings", {"labelSelector": label_selector})

    async def get_clusterrole(self, name: str) -> dict:
        """A ClusterRole bindings may grant (the operator may read only those: `get` with resourceNames)."""
        return await self._get(f"/apis/{RBAC}/v1/clusterroles/{name}")

    async def list_bindings(self) -> list[dict]:
        """Every binding, a page at a time: `kubectl ssb why`'s one read (the operator reads its binding
        cache, never this)."""
        return await self._pages(f"/apis/{keys.GROUP}/{keys.VERSION}/{keys.PLURAL}", {})

    async def get_binding(self, namespace: str, name: str) -> dict:
        return await self._get(ns_path(namespace, keys.PLURAL, name, keys.GROUP, keys.VERSION))

    async def list_namespaces(self) -> list[dict]:
        return await self._pages("/api/v1/namespaces", {})

    async def get_node(self, name: str) -> dict:
        return await self._get(f"/api/v1/nodes/{name}")

    async def get_namespace(self, name: str) -> dict:
        return await self._get(f"/api/v1/namespaces/{name}")

    async def get_pod(self, namespace: str, name: str) -> dict:
        return await self._get(kind_path("Pod", namespace, name))

    async def list_pods_everywhere(self, label_selector: str | None = None, field_selector: str | None = None,
                                   each: Callable[[dict], Any] | None = None) -> list[Any]:
        """Pods of every namespace by label and/or field selector (`spec.nodeName=N`), paginated;
        `each(pod)` instead of the pod when given."""
        params = {k: v for k, v in (("labelSelector", label_selector), ("fieldSelector", field_selector)) if v}
        return await self._pages("/api/v1/pods", params, each)

    # ------------------------------------------------------------ writes

    async def patch_binding_status(self, namespace: str, name: str, status_patch: dict) -> dict:
        path = ns_path(namespace, keys.PLURAL, name, keys.GROUP, keys.VERSION) + "/status"
        return await self._write("PATCH", path, {"status": status_patch}, content_type=MERGE_PATCH, params=OURS)

    async def replace_configmap(self, namespace: str, name: str, body: dict) -> dict:
        """PUT with the body's resourceVersion as precondition (409 → Conflict, 422 → Invalid)."""
        return await self._write("PUT", kind_path("ConfigMap", namespace, name), body, params=OURS)

    async def create_configmap(self, namespace: str, body: dict) -> dict:
        return await self._write("POST", kind_path("ConfigMap", namespace), body, params=OURS)

    async def delete_configmap(self, namespace: str, name: str) -> None:
        await self._delete(kind_path("ConfigMap", namespace, name))

    async def merge_patch_deployment(self, namespace: str, name: str, patch: dict) -> dict:
        return await self._write("PATCH", ns_path(namespace, "deployments", name, "apps"), patch,
                                 content_type=MERGE_PATCH, params=OURS)

    async def merge_patch_statefulset(self, namespace: str, name: str, patch: dict) -> dict:
        return await self._write("PATCH", ns_path(namespace, "statefulsets", name, "apps"), patch,
                                 content_type=MERGE_PATCH, params=OURS)

    async def merge_patch_application(self, namespace: str, name: str, patch: dict) -> dict:
        """JSON merge patch of an Argo CD Application; metadata.resourceVersion in it is a precondition."""
        return await self._write("PATCH", kind_path("Application", namespace, name), patch,
                                 content_type=MERGE_PATCH, params=OURS)

    async def create_event(self, namespace: str, body: dict) -> dict:
        return await self._write("POST", ns_path(namespace, "events"), body)

    async def merge_patch_event(self, namespace: str, name: str, patch: dict) -> dict:
        """Amend an event the operator posted (adapters/events.py: a roll said in its scope write's event)."""
        return await self._write("PATCH", ns_path(namespace, "events", name), patch, content_type=MERGE_PATCH)

    async def create_rolebinding(self, namespace: str, body: dict) -> dict:
        return await self._write("POST", ns_path(namespace, "rolebindings", group=RBAC), body, params=OURS)

    async def delete_rolebinding(self, namespace: str, name: str, uid: str | None = None) -> None:
        await self._delete(ns_path(namespace, "rolebindings", name, RBAC), uid)

    # ------------------------------------------------------------ leases (leader election)
    # Not behind the write gate: taking and renewing the Lease is how a replica becomes the writer.

    async def get_lease(self, namespace: str, name: str) -> dict:
        """A coordination.k8s.io/v1 Lease (404 → NotFound)."""
        return await self._get(ns_path(namespace, "leases", name, "coordination.k8s.io"))

    async def create_lease(self, namespace: str, body: dict) -> dict:
        """409 (already exists) → Conflict."""
        return await self.http.request("POST", ns_path(namespace, "leases", group="coordination.k8s.io"), None, body)

    async def replace_lease(self, namespace: str, name: str, body: dict) -> dict:
        """PUT with the body's resourceVersion as precondition (409 → Conflict)."""
        return await self.http.request("PUT", ns_path(namespace, "leases", name, "coordination.k8s.io"), None, body)
