"""In-memory fakes for unit tests of the controller: a clock, a Kubernetes API, a runner API.

- `FakeClock`: `monotonic` and `sleep` for the Context, the Coalescer and `retry.optimistic`;
  time moves only when a test calls `advance`.
- `FakeKube`: the async methods of `adapters.kube.Kube`, objects kept in dicts, with the API
  server's behaviour where the operator depends on it: resourceVersion preconditions (409 →
  `Conflict`), missing objects (`NotFound`), denied verbs (`Forbidden`), immutable ConfigMaps
  (422 → `Invalid`), JSON merge patches, label selectors. Objects go in and out as copies.
- `FakeRunner`: GetManagedRunner/UpdateManagedRunner with etags (a stale etag is
  `FailedPrecondition`, as the runner API answers), and hooks for another admin writing.
- `Harness`: a Context built from these, with the events it posted.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import datetime as dt
import re
from dataclasses import dataclass, field
from typing import Any, Callable

import pytest

from sunk_sandbox_operator.adapters import kube as k
from sunk_sandbox_operator.api.reasons import CONDITION_TYPES
from sunk_sandbox_operator.core.compose import Part
from sunk_sandbox_operator.adapters.runnerapi import client as rc
from sunk_sandbox_operator.adapters.runnerapi import errors as rerr
from sunk_sandbox_operator.controller.config import Config
from sunk_sandbox_operator.controller import placement
from sunk_sandbox_operator.controller.context import Context
from sunk_sandbox_operator.controller.depends import Dependencies
from sunk_sandbox_operator.controller.state import BindingState
from sunk_sandbox_operator.core.scheduler.discovery import Discovery

SETTLE_STEPS = 50


async def settle() -> None:
    """Let every task that can run without time passing run (a bounded number of loop turns)."""
    for _ in range(SETTLE_STEPS):
        await asyncio.sleep(0)


# ---------------------------------------------------------------- time


class FakeClock:
    """A monotonic clock and its sleep; `advance` wakes sleepers in deadline order."""

    EPSILON = 1e-9

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start
        self.slept: list[float] = []                     # every delay asked for, in order
        self._sleepers: list[tuple[float, asyncio.Future]] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, delay: float) -> None:
        self.slept.append(delay)
        if delay <= 0:
            await asyncio.sleep(0)
            return
        entry = (self.now + delay, asyncio.get_running_loop().create_future())
        self._sleepers.append(entry)
        try:
            await entry[1]
        finally:
            if entry in self._sleepers:
                self._sleepers.remove(entry)

    def next_deadline(self) -> float | None:
        return min((when for when, f in self._sleepers if not f.done()), default=None)

    async def advance(self, seconds: float) -> None:
        """Move time forward; each sleeper wakes at its own deadline, the loop settling after each."""
        target = self.now + seconds
        await settle()
        while True:  # deadlines within EPSILON of the target are due (float sums are not exact)
            due = [when for when, f in self._sleepers if not f.done() and when <= target + self.EPSILON]
            if not due:
                break
            self.now = max(self.now, min(due))
            for when, f in list(self._sleepers):
                if when <= self.now + self.EPSILON and not f.done():
                    f.set_result(None)
            await settle()
        self.now = max(self.now, target)
        await settle()

    def iso(self) -> str:
        """Wall-clock time following this clock (for `now_iso`)."""
        base = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
        return (base + dt.timedelta(seconds=self.now)).replace(microsecond=0).isoformat().replace("+00:00", "Z")


# ---------------------------------------------------------------- label selectors (the string form)

_SET_TERM = re.compile(r"^\s*([^\s!=]+)\s+(in|notin)\s+\(([^)]*)\)\s*$")


def _terms(selector: str) -> list[str]:
    out, depth, cur = [], 0, ""
    for ch in selector:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur)
    return out


def selector_matches(selector: str | None, labels: dict | None) -> bool:
    """The `labelSelector=` grammar the API server accepts (equality, set and existence terms)."""
    labels = labels or {}
    for term in _terms(selector or ""):
        term = term.strip()
        if m := _SET_TERM.match(term):
            key, op, values = m.group(1), m.group(2), {v.strip() for v in m.group(3).split(",")}
            ok = (labels.get(key) in values) if op == "in" else (labels.get(key) not in values)
        elif "!=" in term:
            key, value = (s.strip() for s in term.split("!=", 1))
            ok = labels.get(key) != value
        elif "=" in term:
            key, value = (s.strip() for s in term.replace("==", "=").split("=", 1))
            ok = labels.get(key) == value
        elif term.startswith("!"):
            ok = term[1:].strip() not in labels
        else:
            ok = term in labels
        if not ok:
            return False
    return True


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386, as the API server applies `application/merge-patch+json`."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


# ---------------------------------------------------------------- Kubernetes


KINDS = ("namespaces", "pods", "configmaps", "secrets", "deployments", "statefulsets", "applications", "rolebindings", "bindings",
         "events", "leases", "helmreleases", "nodes", "clusterroles")


class FakeKube:
    """`adapters.kube.Kube`'s async methods over dicts, with the API server's preconditions. It is a
    `KubeAPI` (the type of `Context.kube`): tests/unit/test_types.py has mypy check the Harness."""

    def __init__(self) -> None:
        self.store: dict[str, dict[tuple[str, str], dict]] = {kind: {} for kind in KINDS}
        self.calls: list[tuple] = []                   # (method, *args) of every call, in order
        self._denied: set[tuple[str, str | None]] = set()
        self.access: Callable[[str, str, str, str], bool] = lambda sa, verb, resource, ns: True
        self._before: dict[str, list[Callable[[], None]]] = {}
        self._rv = 100
        self._uid = 0
        self.watchers: dict[str, list[Callable[[str, dict], None]]] = {}  # kind -> sinks of its watch events

    writable: Callable[[], bool] = staticmethod(lambda: True)

    def check_writable(self) -> None:
        if not self.writable():
            raise k.NotLeader("this replica is not the leader: nothing is written")

    # ------------------------------------------------------------ test setup

    def watch(self, kind: str, sink: Callable[[str, dict], None]) -> None:
        """Every later change of an object of `kind` goes to `sink` (ADDED, MODIFIED, DELETED), as a watch."""
        self.watchers.setdefault(kind, []).append(sink)

    def _notify(self, kind: str, event: str, obj: dict) -> None:
        for sink in self.watchers.get(kind, ()):
            sink(event, copy.deepcopy(obj))

    def remove(self, kind: str, namespace: str, name: str) -> None:
        """Delete an object as an admin would (its watchers see DELETED)."""
        obj = self.store[kind].pop((namespace, name), None)
        if obj is not None:
            self._notify(kind, "DELETED", obj)

    def add(self, kind: str, obj: dict) -> dict:
        """Create or overwrite an object as an admin would (a new resourceVersion)."""
        obj = copy.deepcopy(obj)
        meta = obj.setdefault("metadata", {})
        key = (meta.get("namespace", ""), meta["name"])
        old = self.store[kind].get(key)
        self._uid += 1
        meta.setdefault("uid", old["metadata"]["uid"] if old else f"uid-{self._uid}")
        meta.setdefault("generation", 1)
        meta["resourceVersion"] = self._next_rv()
        self.store[kind][key] = obj
        self._notify(kind, "MODIFIED" if old else "ADDED", obj)
        return copy.deepcopy(obj)

    def get(self, kind: str, namespace: str, name: str) -> dict:
        return copy.deepcopy(self.store[kind][(namespace, name)])

    def edit(self, kind: str, namespace: str, name: str, change: Callable[[dict], None]) -> None:
        """Another writer changes the object in place (a new resourceVersion)."""
        obj = self.store[kind][(namespace, name)]
        change(obj)
        obj["metadata"]["resourceVersion"] = self._next_rv()
        self._notify(kind, "MODIFIED", obj)

    def deny(self, method: str, namespace: str | None = None) -> None:
        """`method` answers 403 (in `namespace`, or everywhere)."""
        self._denied.add((method, namespace))

    def allow(self, method: str, namespace: str | None = None) -> None:
        """Undo `deny`."""
        self._denied.discard((method, namespace))

    def before(self, method: str, action: Callable[[], None], times: int = 1) -> None:
        """Run `action` just before the next `times` calls of `method` (another writer, an error)."""
        self._before.setdefault(method, []).extend([action] * times)

    def count(self, method: str) -> int:
        return sum(1 for c in self.calls if c[0] == method)

    # ------------------------------------------------------------ plumbing

    def _next_rv(self) -> str:
        self._rv += 1
        return str(self._rv)

    def _enter(self, method: str, *args: Any, namespace: str | None = None) -> None:
        self.calls.append((method, *args))
        hooks = self._before.get(method)
        if hooks:
            hooks.pop(0)()
        if (method, None) in self._denied or (method, namespace) in self._denied:
            raise k.Forbidden(f"{method} is forbidden for the operator's ServiceAccount")

    def _find(self, kind: str, namespace: str, name: str) -> dict:
        obj = self.store[kind].get((namespace, name))
        if obj is None:
            raise k.NotFound(f'{kind} "{name}" not found')
        return obj

    def _items(self, kind: str, namespace: str | None = None, selector: str | None = None) -> list[dict]:
        return [copy.deepcopy(o) for (ns, _), o in sorted(self.store[kind].items())
                if (namespace is None or ns == namespace) and selector_matches(selector, o["metadata"].get("labels"))]

    @staticmethod
    def _precondition(obj: dict, rv: str | None) -> None:
        if rv is not None and rv != obj["metadata"]["resourceVersion"]:
            raise k.Conflict("the object has been modified; please apply your changes to the latest version "
                             "and try again")

    def _patched(self, kind: str, namespace: str, name: str, patch: dict) -> dict:
        obj = self._find(kind, namespace, name)
        self._precondition(obj, (patch.get("metadata") or {}).get("resourceVersion"))
        new = merge_patch(obj, patch)
        if new.get("spec") != obj.get("spec"):
            new["metadata"]["generation"] = obj["metadata"].get("generation", 1) + 1
        new["metadata"]["resourceVersion"] = self._next_rv()
        self.store[kind][(namespace, name)] = new
        self._notify(kind, "MODIFIED", new)
        return copy.deepcopy(new)

    # ------------------------------------------------------------ reads

    async def list_pods(self, namespace: str, label_selector: str | None, each: Callable[[dict], Any] | None = None,
                        page_size: int = k.PAGE_SIZE) -> list[Any]:
        self._enter("list_pods", namespace, label_selector, namespace=namespace)
        pods = self._items("pods", namespace, label_selector)
        return [each(p) for p in pods] if each is not None else pods

    async def list_configmaps(self, namespace: str, each: Callable[[dict], Any] | None = None,
                              page_size: int = k.PAGE_SIZE) -> list[Any]:
        self._enter("list_configmaps", namespace, namespace=namespace)
        cms = self._items("configmaps", namespace)
        return [each(c) for c in cms] if each is not None else cms

    async def get_configmap(self, namespace: str, name: str) -> dict:
        self._enter("get_configmap", namespace, name, namespace=namespace)
        return copy.deepcopy(self._find("configmaps", namespace, name))

    async def read_secret_key(self, namespace: str, name: str, key: str) -> str:
        self._enter("read_secret_key", namespace, name, key, namespace=namespace)
        raw = (self._find("secrets", namespace, name).get("data") or {}).get(key)
        if raw is None:
            raise KeyError(key)
        return base64.b64decode(raw).decode().strip()

    async def secret_has_key(self, namespace: str, name: str, key: str) -> bool:
        self._enter("secret_has_key", namespace, name, key, namespace=namespace)
        return bool((self._find("secrets", namespace, name).get("data") or {}).get(key))

    async def list_deployments(self, namespace: str) -> list[dict]:
        self._enter("list_deployments", namespace, namespace=namespace)
        return self._items("deployments", namespace)

    async def list_statefulsets(self, namespace: str) -> list[dict]:
        self._enter("list_statefulsets", namespace, namespace=namespace)
        return self._items("statefulsets", namespace)

    async def merge_patch_statefulset(self, namespace: str, name: str, patch: dict) -> dict:
        self._enter("merge_patch_statefulset", namespace, name, copy.deepcopy(patch), namespace=namespace)
        return self._patched("statefulsets", namespace, name, patch)

    async def get_binding(self, namespace: str, name: str) -> dict:
        self._enter("get_binding", namespace, name, namespace=namespace)
        return copy.deepcopy(self._find("bindings", namespace, name))

    async def list_namespaces(self) -> list[dict]:
        self._enter("list_namespaces")
        return self._items("namespaces")

    async def get_node(self, name: str) -> dict:
        self._enter("get_node", name)
        return copy.deepcopy(self._find("nodes", "", name))

    async def get_namespace(self, name: str) -> dict:
        self._enter("get_namespace", name)
        return copy.deepcopy(self._find("namespaces", "", name))

    async def get_pod(self, namespace: str, name: str) -> dict:
        self._enter("get_pod", namespace, name, namespace=namespace)
        return copy.deepcopy(self._find("pods", namespace, name))

    async def list_pods_everywhere(self, label_selector: str | None = None, field_selector: str | None = None,
                                   each: Callable[[dict], Any] | None = None) -> list[Any]:
        """Only the field selector the callers use: `spec.nodeName=NAME`."""
        self._enter("list_pods_everywhere", label_selector, field_selector)
        node = field_selector.removeprefix("spec.nodeName=") if field_selector else None
        pods = [p for p in self._items("pods", None, label_selector)
                if node is None or (p.get("spec") or {}).get("nodeName") == node]
        return [each(p) for p in pods] if each is not None else pods

    async def get_application(self, namespace: str, name: str) -> dict:
        self._enter("get_application", namespace, name, namespace=namespace)
        return copy.deepcopy(self._find("applications", namespace, name))

    async def get_helmrelease(self, namespace: str, name: str) -> dict:
        self._enter("get_helmrelease", namespace, name, namespace=namespace)
        return copy.deepcopy(self._find("helmreleases", namespace, name))

    async def list_bindings(self) -> list[dict]:
        self._enter("list_bindings")
        return self._items("bindings")

    async def list_rolebindings(self, label_selector: str) -> list[dict]:
        self._enter("list_rolebindings", label_selector)
        return self._items("rolebindings", None, label_selector)

    async def get_clusterrole(self, name: str) -> dict:
        self._enter("get_clusterrole", name)
        return copy.deepcopy(self._find("clusterroles", "", name))

    # ------------------------------------------------------------ writes

    async def patch_binding_status(self, namespace: str, name: str, status_patch: dict) -> dict:
        self._enter("patch_binding_status", namespace, name, copy.deepcopy(status_patch), namespace=namespace)
        obj = self._find("bindings", namespace, name)
        new = merge_patch(obj, {"status": status_patch})
        new["metadata"]["resourceVersion"] = self._next_rv()  # the status subresource: no generation bump
        self.store["bindings"][(namespace, name)] = new
        self._notify("bindings", "MODIFIED", new)
        return copy.deepcopy(new)

    async def replace_configmap(self, namespace: str, name: str, body: dict) -> dict:
        self._enter("replace_configmap", namespace, name, copy.deepcopy(body), namespace=namespace)
        obj = self._find("configmaps", namespace, name)
        self._precondition(obj, (body.get("metadata") or {}).get("resourceVersion"))
        if obj.get("immutable"):
            raise k.Invalid(f'ConfigMap "{name}" is invalid: data: Forbidden: field is immutable when `immutable` '
                            "is set")
        new = copy.deepcopy(body)  # a PUT replaces labels and annotations too; the server keeps its own fields
        server = {k: obj["metadata"][k] for k in ("uid", "generation", "creationTimestamp") if k in obj["metadata"]}
        new["metadata"] = {**new.get("metadata", {}), **server, "namespace": namespace, "name": name,
                           "resourceVersion": self._next_rv()}
        self.store["configmaps"][(namespace, name)] = new
        return copy.deepcopy(new)

    async def create_configmap(self, namespace: str, body: dict) -> dict:
        self._enter("create_configmap", namespace, body["metadata"]["name"], namespace=namespace)
        if (namespace, body["metadata"]["name"]) in self.store["configmaps"]:
            raise k.Conflict(f'configmaps "{body["metadata"]["name"]}" already exists')
        return self.add("configmaps", {**copy.deepcopy(body), "metadata": {**body["metadata"], "namespace": namespace}})

    async def delete_configmap(self, namespace: str, name: str) -> None:
        self._enter("delete_configmap", namespace, name, namespace=namespace)
        self.store["configmaps"].pop((namespace, name), None)  # Kube swallows 404 too

    async def get_lease(self, namespace: str, name: str) -> dict:
        self._enter("get_lease", namespace, name, namespace=namespace)
        return copy.deepcopy(self._find("leases", namespace, name))

    async def create_lease(self, namespace: str, body: dict) -> dict:
        self._enter("create_lease", namespace, body["metadata"]["name"], namespace=namespace)
        if (namespace, body["metadata"]["name"]) in self.store["leases"]:
            raise k.Conflict(f'leases "{body["metadata"]["name"]}" already exists')
        return self.add("leases", {**copy.deepcopy(body), "metadata": {**body["metadata"], "namespace": namespace}})

    async def replace_lease(self, namespace: str, name: str, body: dict) -> dict:
        self._enter("replace_lease", namespace, name, namespace=namespace)
        obj = self._find("leases", namespace, name)
        self._precondition(obj, (body.get("metadata") or {}).get("resourceVersion"))
        new = copy.deepcopy(body)
        new["metadata"] = {**new.get("metadata", {}), "namespace": namespace, "name": name,
                           "resourceVersion": self._next_rv()}
        self.store["leases"][(namespace, name)] = new
        return copy.deepcopy(new)

    async def merge_patch_deployment(self, namespace: str, name: str, patch: dict) -> dict:
        self._enter("merge_patch_deployment", namespace, name, copy.deepcopy(patch), namespace=namespace)
        return self._patched("deployments", namespace, name, patch)

    async def merge_patch_application(self, namespace: str, name: str, patch: dict) -> dict:
        self._enter("merge_patch_application", namespace, name, copy.deepcopy(patch), namespace=namespace)
        return self._patched("applications", namespace, name, patch)

    async def create_event(self, namespace: str, body: dict) -> dict:
        self._enter("create_event", namespace, body.get("reason"), namespace=namespace)
        obj = copy.deepcopy(body)
        obj["metadata"] = {**obj.get("metadata", {}), "name": f"event-{self._next_rv()}", "namespace": namespace}
        return self.add("events", obj)

    async def merge_patch_event(self, namespace: str, name: str, patch: dict) -> dict:
        self._enter("merge_patch_event", namespace, name, copy.deepcopy(patch), namespace=namespace)
        return self._patched("events", namespace, name, patch)

    async def service_account_may(self, sa_namespace: str, sa_name: str, verb: str, resource: str,
                                  namespace: str, subresource: str = "") -> bool:
        """A SubjectAccessReview; `self.access(sa, verb, resource/subresource, namespace)` answers
        (default: allowed everywhere, as with a cluster-wide grant)."""
        self._enter("service_account_may", namespace, verb, resource, subresource)
        return self.access(f"{sa_namespace}/{sa_name}", verb, f"{resource}/{subresource}".rstrip("/"), namespace)

    async def create_rolebinding(self, namespace: str, body: dict) -> dict:
        self._enter("create_rolebinding", namespace, body["metadata"]["name"], namespace=namespace)
        key = (namespace, body["metadata"]["name"])
        if key in self.store["rolebindings"]:
            raise k.Conflict(f'rolebindings "{key[1]}" already exists')
        obj = copy.deepcopy(body)
        obj["metadata"]["namespace"] = namespace
        return self.add("rolebindings", obj)

    async def delete_rolebinding(self, namespace: str, name: str, uid: str | None = None) -> None:
        self._enter("delete_rolebinding", namespace, name, namespace=namespace)
        found = self.store["rolebindings"].get((namespace, name))
        if found is not None and uid is not None and found["metadata"].get("uid") != uid:
            raise k.Conflict(f"Precondition failed: UID in precondition: {uid}, UID in object meta: "
                             f"{found['metadata'].get('uid')}")
        self.store["rolebindings"].pop((namespace, name), None)  # Kube swallows 404 too


# ---------------------------------------------------------------- the runner API


class FakeRunner:
    """A runner client (what `state.policy.client` holds): one runner, its policy and etag."""

    def __init__(self, policy: dict | None, runner_id: str = "r") -> None:
        self.runner_id = runner_id
        self.policy = copy.deepcopy(policy)
        self.etag = 1
        self.gets = 0
        self.updates = 0
        self.stale = 0                    # updates refused for a stale etag
        self.exists = True
        self.closed = False
        self.error: rerr.RunnerAPIError | None = None      # raised by every call while set
        self.on_call: Callable[[str, str], None] | None = None  # what the client reports of each answer
        self._before_update: list[Callable[["FakeRunner"], None]] = []

    def _runner(self) -> rc.ManagedRunner:
        return rc.ManagedRunner(self.runner_id, {"name": self.runner_id}, copy.deepcopy(self.policy), str(self.etag), {})

    def admin_write(self, change: Callable[[dict], None]) -> None:
        """Someone else writes the policy (a new etag)."""
        self.policy = copy.deepcopy(self.policy) if self.policy is not None else {}
        change(self.policy)
        self.etag += 1

    def before_update(self, action: Callable[["FakeRunner"], None], times: int = 1) -> None:
        """Run `action` between our read and our next `times` writes (another admin wins the race)."""
        self._before_update.extend([action] * times)

    def _answered(self, method: str, code: str) -> None:
        if self.on_call is not None:
            self.on_call(method, code)

    async def get_managed_runner(self, runner_id: str) -> rc.ManagedRunner:
        assert runner_id == self.runner_id
        self.gets += 1
        if self.error is not None:
            self._answered("GetManagedRunner", self.error.code)
            raise self.error
        if not self.exists:
            self._answered("GetManagedRunner", "not_found")
            raise rerr.NotFound(f"runner {runner_id} not found")
        self._answered("GetManagedRunner", "ok")
        return self._runner()

    async def update_managed_runner(self, runner_id: str, *, identity: Any, policy: Any, etag: str) -> rc.ManagedRunner:
        assert runner_id == self.runner_id and identity == {"name": runner_id}
        if self._before_update:
            self._before_update.pop(0)(self)
        if self.error is not None:
            self._answered("UpdateManagedRunner", self.error.code)
            raise self.error
        if etag != str(self.etag):
            self.stale += 1
            self._answered("UpdateManagedRunner", "failed_precondition")
            raise rerr.FailedPrecondition("etag mismatch: the runner was modified")
        self.policy, self.etag, self.updates = copy.deepcopy(policy), self.etag + 1, self.updates + 1
        self._answered("UpdateManagedRunner", "ok")
        return self._runner()

    async def aclose(self) -> None:
        self.closed = True


def install_runner(state: BindingState, runner: FakeRunner, ctx: Context | None = None) -> None:
    """Make `controller.policy.client` hand out `runner` for this binding's credentials; with `ctx`, its
    answers are reported as the real client's are (metrics, the runner proof)."""
    spec = state.spec or state.live_spec  # admitted, or what the first reconcile will admit
    assert spec is not None, "install a runner for a binding whose spec parses"
    ref = spec.runner.token_secret_ref
    if ctx is not None:
        from sunk_sandbox_operator.controller import policy

        runner.on_call = policy.on_call(ctx, state)
    state.policy.client = runner  # type: ignore[assignment]  # duck-typed: the three RunnerClient calls policy makes
    state.policy.client_key = (spec.runner.api_url, ref.name, ref.key)


# ---------------------------------------------------------------- bodies and the harness


def binding_body(name: str = "b", namespace: str = "slurm", *, uid: str = "u1", generation: int = 1,
                 created: str = "2026-01-01T00:00:00Z", **spec: Any) -> dict:
    base = {"runner": {"id": "r", "tokenSecretRef": {"name": "s"}}, "sandboxNamespaces": {"names": ["ds-*"]}}
    return {"apiVersion": "sunksandbox.dev/v1alpha1", "kind": "SunkSandboxBinding",
            "metadata": {"namespace": namespace, "name": name, "uid": uid, "generation": generation,
                         "creationTimestamp": created},
            "spec": {**base, **spec}}


def namespace(name: str, labels: dict | None = None, terminating: bool = False) -> dict:
    meta: dict[str, Any] = {"name": name, "labels": dict(labels or {})}
    if terminating:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": meta}


def discovery(namespace: str = "slurm", name: str = "slurm-scheduler", configmap: str | None = "cm",
              service_account: str = "sa", kill_wait: int | None = 60) -> Discovery:
    return Discovery(namespace=namespace, selector="app.kubernetes.io/name=sunk-scheduler", name=name,
                     configmap_name=configmap, service_account=service_account, kill_wait_seconds=kill_wait)


def coalescers(state: BindingState) -> list:
    """The binding's status flusher and its three scope loops' coalescers (None: not made yet)."""
    return [state.flusher, *(loop.runs for loop in state.scope.loops)] if state.scope else [state.flusher]


# The harness' operator lets every binding grant anywhere (as tests/conftest.py's TEST_ENV does): the
# grant bound itself is tested with `allowed_grants` set otherwise (test_tenancy_holes.py).
HARNESS_SETTINGS: dict[str, Any] = {"allowed_grants": {"*": ("*",)}}


@dataclass
class Harness:
    """A Context over the fakes; `events` are (kind, reason, message) as posted."""

    config: Config = field(default_factory=lambda: Config(**HARNESS_SETTINGS))
    kube: FakeKube = field(default_factory=FakeKube)
    clock: FakeClock = field(default_factory=FakeClock)
    events: list[tuple[str, str, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.ctx = Context(config=self.config, kube=self.kube,
                           event_sink=lambda body, kind, reason, message: self.events.append((kind, reason, message)),
                           monotonic=self.clock, sleep=self.clock.sleep, now_iso=self.clock.iso)
        self.ctx.depends = Dependencies(self.ctx)  # as lifecycle.start attaches it
        # The binding cache as its informer feeds it: every binding the fake API server holds, as it changes.
        self.kube.watch("bindings", self.ctx.binding_cache.apply)
        self.ctx.binding_cache.listed = lambda: True

    def reasons(self) -> list[str]:
        return [reason for _, reason, _ in self.events]

    def binding(self, body: dict | None = None, *, stored: bool = True, active: bool = True,
                discovered: Discovery | None = None, observed: bool = True, admitted: bool = True,
                judged: bool = False) -> BindingState:
        """A binding the registry knows (and the API server holds), reconciled once unless `active=False`;
        its spec admitted (as a reconcile's tenancy check does) unless `admitted=False` or it does not parse.

        `observed`: every concern has reported a part (Unknown, NotReconciled), as after a first
        reconcile; the status writer composes nothing before that. `judged`: its pods are judged
        (placement's expectations set) without the rest of a reconcile, as after one whose
        discovery failed; an active binding's always are."""
        body = body or binding_body()
        if stored:
            body = self.kube.add("bindings", body)
        state = self.ctx.bindings.ensure(body)
        if admitted and state.live_spec is not None:
            state.admit()  # as a reconcile's tenancy check would (the harness' bindings are allowed)
        if observed:
            for ctype in CONDITION_TYPES[1:]:
                state.report(Part(ctype, "Unknown", "NotReconciled", "not reconciled yet"))
        if active:
            state.conflict_checked = True
            state.discovery = discovered or discovery()
        if state.admitted is not None and (active or judged):  # a reconcile judges its pods from here on
            placement.set_expectations(self.ctx, state, state.discovery or Discovery(namespace=state.namespace, selector=""))
        return state

    def load_namespaces(self, *bodies: dict) -> None:
        for body in bodies:
            self.kube.add("namespaces", body)
        self.ctx.namespaces.load(bodies)

    def busy(self) -> list:
        """The scope syncs and status flushes with something pending or in flight."""
        return [c for state in self.ctx.bindings for c in coalescers(state)
                if c is not None and c.task is not None and not c.task.done()]

    async def run_until_idle(self, horizon: float = 600.0) -> None:
        """Drive the clock, deadline by deadline, until no scope sync or status flush is busy."""
        limit = self.clock.now + horizon
        while True:
            await settle()
            busy = self.busy()
            if not busy:
                return
            due = self.clock.next_deadline()
            if due is None or due > limit:
                raise AssertionError(f"still busy and no sleeper due within {horizon}s: {[c.name for c in busy]}")
            await self.clock.advance(due - self.clock.now)

    async def drive(self, awaitable: Any, horizon: float = 600.0) -> Any:
        """Await `awaitable`, moving the clock to each sleeper's deadline while it waits (retry backoff)."""
        task = asyncio.ensure_future(awaitable)
        limit = self.clock.now + horizon
        while True:
            await settle()
            if task.done():
                return task.result()
            due = self.clock.next_deadline()
            if due is None or due > limit:
                task.cancel()
                raise AssertionError(f"stuck: waiting for something else than the clock, or past {horizon}s")
            await self.clock.advance(due - self.clock.now)

    async def close(self) -> None:
        """Stop every coalescer and timer the test left behind (as the binding's deletion does)."""
        from sunk_sandbox_operator.controller import reconcile

        for state in list(self.ctx.bindings):
            reconcile.forget(self.ctx, state)
            for c in coalescers(state):
                if c is not None:
                    await c.wait_idle()


@pytest.fixture(name="harness")
async def harness_fixture():
    """`harness(**config)` builds a Harness; all of them are closed after the test."""
    made: list[Harness] = []

    def make(**config: Any) -> Harness:
        h = Harness(config=Config(**{**HARNESS_SETTINGS, **config}))
        made.append(h)
        return h

    yield make
    for h in made:
        await h.close()
