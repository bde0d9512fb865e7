"""Scope sync: keep the scheduler's watched-namespace list equal to the sandbox namespaces.

Imperative shell around `scope_core` (which decides everything): it reads the target (the
scheduler's ConfigMap or an Argo CD Application's Helm values), asks `scope_core.plan` what the
list should become, writes it with optimistic concurrency, rolls the scheduler, keeps the
RoleBindings of `spec.scope.grantClusterRole`, and reports `ScopeSynced` plus `status.scope`.

Signals, per binding, go through one coalescing `Syncer`:
- namespace watch events (`on_namespace`) schedule a sync after `scope_window_seconds`, so a
  burst of new namespaces becomes a few writes;
- a Pending sandbox pod naming our scheduler in a matching namespace that is not in the list
  (`on_sandbox_pod`) syncs at once: that pod is stuck until the scheduler watches its namespace;
- the binding's reconcile loop calls `sync` at every resync (drift correction).
One sync is in flight per binding (a lock); signals arriving during a sync cause one more after it.

What we added and what was there before our first write live in `status.scope` (`added`,
`preexisting`), mirrored in memory so event-driven syncs never wait for a status round trip.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import random
import time
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

from . import kube, metrics, scope_core, selectors
from . import model as m
from .namespaces import NAMESPACES
from .runtime import BindingState, Registry, now_iso
from .status import Part

log = logging.getLogger("sunk_sandbox_operator")

COND = "ScopeSynced"
HASH_ANNOTATION = f"{m.GROUP}/scope-hash"
BINDING_LABEL = f"{m.GROUP}/binding"
CONFLICT_RETRIES = 5
GRANT_CONCURRENCY = 16
MISSING_LIMIT = 5
EVENT_NAMES_LIMIT = 10
POD_RECHECK_SECONDS = 2.0


# ---------------------------------------------------------------- coalescing


class Syncer:
    """Coalesces signals into runs of `run`: at most one at a time, one more if signalled meanwhile.

    A signal starts a window of `window()` seconds (fixed from the first signal, so latency is
    bounded during a long burst); everything signalled inside it is handled by one run. An urgent
    signal cuts the window short. Signals during a run cause one more run (after a new window).
    """

    def __init__(self, run: Callable[[], Awaitable[None]], window: Callable[[], float]) -> None:
        self._run = run
        self._window = window
        self.task: asyncio.Task | None = None
        self.urgent = asyncio.Event()
        self.pending = False
        self.first_event: float | None = None
        self.runs = 0

    def signal(self, urgent: bool = False, at: float | None = None) -> None:
        at = time.monotonic() if at is None else at
        if self.first_event is None or at < self.first_event:
            self.first_event = at
        self.pending = True
        if urgent:
            self.urgent.set()
        if self.task is None or self.task.done():
            self.task = asyncio.get_running_loop().create_task(self._loop())

    def take_first_event(self) -> float | None:
        """The earliest signal not yet folded into a sync (the caller folds it now)."""
        first, self.first_event = self.first_event, None
        return first

    async def _loop(self) -> None:
        while self.pending:
            if not self.urgent.is_set():
                try:
                    await asyncio.wait_for(self.urgent.wait(), max(0.0, self._window()))
                except asyncio.TimeoutError:
                    pass
            self.urgent.clear()
            self.pending = False
            self.runs += 1
            try:
                await self._run()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("scope sync failed")

    def cancel(self) -> None:
        self.pending = False
        if self.task is not None and not self.task.done():
            self.task.cancel()


@dataclass
class Memory:
    """Per-binding scope state (in BindingState.extras["scope"])."""

    preexisting: list[str] | None
    added: list[str]
    syncer: Syncer
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    known_list: frozenset[str] | None = None  # the target's list as last read or written (a set: looked up per event)
    cluster: bool = False                     # the target said scope type cluster: every namespace is watched
    grants: set[str] | None = None            # namespaces holding our RoleBinding (None: not listed yet)
    pod_signalled: set[str] = field(default_factory=set)  # namespaces a stuck pod named before the watch did
    next_recheck: float = 0.0                 # a pod in a listed namespace may re-read the target after this
    recheck_handle: asyncio.TimerHandle | None = None
    failures: int = 0                          # consecutive Conflict/Error syncs (retry backoff)


def memory(registry: Registry, state: BindingState) -> Memory:
    mem = state.extras.get("scope")
    if mem is None:
        section = state.status.get("scope") or {}
        pre = section.get("preexisting")
        mem = Memory(
            preexisting=sorted(pre) if isinstance(pre, list) else None,
            added=sorted(a for a in section.get("added") or [] if isinstance(a, str)),
            syncer=Syncer(lambda: _signalled_sync(registry, state),
                          lambda: registry.config.scope_window_seconds),
        )
        state.extras["scope"] = mem
    return mem


# ---------------------------------------------------------------- lifecycle


async def startup(registry: Registry) -> None:
    NAMESPACES.load(await kube.list_namespaces())


async def shutdown(registry: Registry) -> None:
    for state in list(registry.bindings.values()):
        mem = state.extras.get("scope")
        if mem is not None:
            mem.syncer.cancel()
            if mem.recheck_handle is not None:
                mem.recheck_handle.cancel()


# ---------------------------------------------------------------- signals


def _member(spec: m.BindingSpec, info: scope_core.NamespaceInfo | None) -> tuple[bool, bool]:
    """(matches sandboxNamespaces, belongs: matches and not terminating)."""
    if info is None:
        return False, False
    match = scope_core.namespace_matches(spec.sandbox_namespaces, info.name, info.labels)
    return match, match and not info.terminating


def on_namespace(registry: Registry, event_type: str | None, body: dict) -> None:
    at = time.monotonic()
    before, after = NAMESPACES.apply(event_type, body)
    name = (after or before).name if (after or before) else ((body.get("metadata") or {}).get("name") or "")
    for state in list(registry.bindings.values()):
        spec = state.spec
        if spec is None or state.deleted:
            continue
        matched_before, was = _member(spec, before)
        matched_now, now = _member(spec, after)
        mem = state.extras.get("scope")
        if mem is not None:
            mem.pod_signalled.discard(name)  # the watch knows it now (or it is gone)
        if not (matched_before or matched_now):
            continue
        mem = mem or memory(registry, state)
        known = mem.known_list
        if was != now or known is None or (now and name not in known) or (not now and name in mem.added):
            mem.syncer.signal(at=at)


def on_sandbox_pod(registry: Registry, state: BindingState, body: dict) -> None:
    """A Pending pod for our scheduler in a matching namespace outside the list: sync at once."""
    spec = state.spec
    if spec is None or state.deleted:
        return
    d = state.extras.get("discovery")
    scheduler_name = getattr(d, "name", None)
    pod_spec = body.get("spec") or {}
    if not scheduler_name or pod_spec.get("schedulerName") != scheduler_name or pod_spec.get("nodeName"):
        return
    if (body.get("status") or {}).get("phase", "Pending") != "Pending":
        return
    namespace = (body.get("metadata") or {}).get("namespace") or ""
    info = NAMESPACES.infos.get(namespace)
    if info is not None and info.terminating:
        return
    if not scope_core.namespace_matches(spec.sandbox_namespaces, namespace, info.labels if info else {}):
        return
    mem = memory(registry, state)
    if mem.cluster or (mem.known_list is not None and namespace in mem.known_list):
        # Watched as far as we know; but the target is not watched (someone may have reverted it):
        # re-read it, at most once per POD_RECHECK_SECONDS per binding (later ones are deferred).
        _recheck(mem)
        return
    if info is None:
        mem.pod_signalled.add(namespace)
    mem.syncer.signal(urgent=True)


def _recheck(mem: Memory) -> None:
    now = time.monotonic()
    if now >= mem.next_recheck:
        mem.next_recheck = now + POD_RECHECK_SECONDS
        mem.syncer.signal()
    elif mem.recheck_handle is None:
        def later() -> None:
            mem.recheck_handle = None
            _recheck(mem)
        mem.recheck_handle = asyncio.get_running_loop().call_later(mem.next_recheck - now, later)


async def _signalled_sync(registry: Registry, state: BindingState) -> None:
    if state.deleted or state.spec is None or registry.bindings.get(state.key) is not state:
        return
    d = state.extras.get("discovery")
    if d is None or "conflict" not in state.extras or state.extras["conflict"]:
        return  # not reconciled yet (the first reconcile syncs), or the younger of two bindings
    mem = memory(registry, state)
    async with mem.lock:
        part = await _sync(registry, state, d, mem, periodic=False)
    if state.deleted:
        return
    state.report(part)
    registry.request_flush(state)
    _retry_later(part, mem)


def _retry_later(part: Part, mem: Memory) -> None:
    """Conflict (someone kept writing) and unclassified errors are transient: try again soon
    (1-2 s, doubling per consecutive failure up to a minute)."""
    if part.reason not in ("Conflict", "Error"):
        mem.failures = 0
        return
    delay = min(60.0, 2.0 ** mem.failures) * random.uniform(1.0, 2.0)
    mem.failures += 1
    asyncio.get_running_loop().call_later(delay, mem.syncer.signal)


# ---------------------------------------------------------------- the target


class _Problem(Exception):
    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason, self.message = reason, message


@dataclass
class Target:
    kind: str          # ConfigMap | Application
    namespace: str
    name: str
    path: str
    key: str = ""

    def describe(self) -> str:
        if self.kind == "ConfigMap":
            return f"ConfigMap {self.namespace}/{self.name} key {self.key} at {self.path}"
        return f"Application {self.namespace}/{self.name} at spec.source.helm.valuesObject.{self.path}"


def resolve_target(spec: m.BindingSpec, d: Any) -> Target:
    t = spec.scope.target
    if t.kind == "ArgoCDApplication":
        return Target("Application", t.application.namespace, t.application.name, t.application.path)
    ns = getattr(d, "namespace", None) or ""
    name = t.config_map.name or getattr(d, "configmap_name", None)
    if not name:
        key, value = m.SCHEDULER_CONFIGMAP_LABEL
        raise _Problem("TargetNotFound",
                       f"no ConfigMap labelled {key}={value} with key {t.config_map.key} in {ns}: set "
                       "spec.scope.target.configMap.name, or use target kind ArgoCDApplication when the "
                       "list lives in the Slurm chart's Helm values")
    return Target("ConfigMap", ns, name, t.config_map.path, t.config_map.key)


async def _read(t: Target) -> tuple[scope_core.ListRead, dict]:
    try:
        if t.kind == "ConfigMap":
            obj = await kube.get_configmap(t.namespace, t.name)
            data = obj.get("data") or {}
            if t.key not in data:
                raise _Problem("TargetNotFound", f"ConfigMap {t.namespace}/{t.name} has no key {t.key}: fix "
                               "spec.scope.target.configMap.key")
            return scope_core.read_list(data[t.key], t.path), obj
        obj = await kube.get_application(t.namespace, t.name)
    except kube.NotFound:
        what = "ConfigMap" if t.kind == "ConfigMap" else "Argo CD Application"
        raise _Problem("TargetNotFound", f"{what} {t.namespace}/{t.name} not found: create it or fix "
                       "spec.scope.target") from None
    except kube.Forbidden as exc:
        raise _Problem("Forbidden", f"the operator may not read {t.describe()}: {exc}") from None
    spec = obj.get("spec") or {}
    source = spec.get("source")
    if not isinstance(source, dict):
        if spec.get("sources"):
            raise _Problem("InvalidConfig", f"Application {t.namespace}/{t.name} uses spec.sources (multi-source), "
                           "which is not supported: point spec.scope.target at a single-source Application")
        raise _Problem("InvalidConfig", f"Application {t.namespace}/{t.name} has no spec.source")
    helm = source.get("helm") if isinstance(source.get("helm"), dict) else {}
    return scope_core.read_list_obj(helm.get("valuesObject"), t.path), obj


async def _write(t: Target, obj: dict, read: scope_core.ListRead, values: list[str]) -> None:
    """Write with the read resourceVersion as precondition; kube.Conflict when it changed."""
    try:
        if t.kind == "ConfigMap":
            try:
                text = scope_core.write_list(obj["data"][t.key], t.path, values, read.style)
            except ValueError as exc:
                raise _Problem("InvalidConfig", f"{t.describe()}: {exc}") from None
            body = dict(obj)
            body["data"] = {**obj["data"], t.key: text}
            await kube.replace_configmap_checked(t.namespace, t.name, body)
        else:
            patch = {"metadata": {"resourceVersion": obj["metadata"]["resourceVersion"]},
                     "spec": {"source": {"helm": {"valuesObject": scope_core.set_path_patch(t.path, values, read.style)}}}}
            await kube.merge_patch_application(t.namespace, t.name, patch)
    except kube.Forbidden as exc:
        raise _Problem("Forbidden", f"the operator may not write {t.describe()}: {exc}") from None
    except kube.NotFound:
        raise _Problem("TargetNotFound", f"{t.describe()} disappeared while being written") from None
    except kube.Invalid as exc:
        raise _Problem("InvalidConfig", f"the API server refused the write to {t.describe()}: {exc}") from None


# ---------------------------------------------------------------- one sync


def _sandbox_set(spec: m.BindingSpec, mem: Memory) -> set[str]:
    sandbox = scope_core.sandbox_namespaces(spec.sandbox_namespaces, NAMESPACES.values())
    for ns in list(mem.pod_signalled):
        if ns in NAMESPACES.infos or not scope_core.namespace_matches(spec.sandbox_namespaces, ns, {}):
            mem.pod_signalled.discard(ns)  # the watch decides now
        else:
            sandbox.add(ns)
    return sandbox


def _names(items: list[str]) -> str:
    shown = ", ".join(items[:EVENT_NAMES_LIMIT])
    return shown + (f" (+{len(items) - EVENT_NAMES_LIMIT} more)" if len(items) > EVENT_NAMES_LIMIT else "")


def _section(state: BindingState, mem: Memory, *, error: bool = False, scope_type: str | None = None,
             count: int | None = None, missing: list[str] | None = None, wrote: bool = False) -> dict:
    """status.scope. lastSyncTime moves when the list was written or what we report changed, not at
    every confirming resync (a status write per resync would be churn)."""
    prev_part = state.parts.get(COND)
    prev = (prev_part.data if prev_part and prev_part.data else None) or state.status.get("scope") or {}
    if error:  # keep what was last known about the list
        new: dict[str, Any] = {k: prev[k] for k in ("type", "namespaceCount", "missing") if k in prev}
    else:
        new = {"type": scope_type} if scope_type else {}
        if count is not None:
            new["namespaceCount"] = count
        new["missing"] = list(missing or [])
    if mem.preexisting is not None:
        new["preexisting"] = list(mem.preexisting)
    new["added"] = list(mem.added)
    unchanged = {k: v for k, v in prev.items() if k != "lastSyncTime"} == new
    if not error and (wrote or not unchanged or not prev.get("lastSyncTime")):
        new["lastSyncTime"] = now_iso()
    elif prev.get("lastSyncTime"):
        new["lastSyncTime"] = prev["lastSyncTime"]
    return new


async def sync(registry: Registry, state: BindingState, discovery) -> Part:
    """One full sync from the binding's reconcile loop (also corrects drift in grants and the roll hash)."""
    mem = memory(registry, state)
    async with mem.lock:
        part = await _sync(registry, state, discovery, mem, periodic=True)
    _retry_later(part, mem)
    return part


async def _sync(registry: Registry, state: BindingState, d: Any, mem: Memory, *, periodic: bool) -> Part:
    started = mem.syncer.take_first_event()
    try:
        return await _sync_inner(registry, state, d, mem, periodic, started)
    except _Problem as p:
        return Part(COND, "False", p.reason, p.message, "scope", _section(state, mem, error=True))
    except Exception as exc:  # an API error we do not classify: report, retry at the next signal or resync
        log.exception("scope sync of %s failed", state.ref)
        return Part(COND, "Unknown", "Error", f"scope sync failed: {exc}; retrying",
                    "scope", _section(state, mem, error=True))


async def _sync_inner(registry: Registry, state: BindingState, d: Any, mem: Memory, periodic: bool,
                      started: float | None) -> Part:
    spec = state.spec
    if not NAMESPACES.ready:
        return Part(COND, "Unknown", "NamespacesNotLoaded", "namespaces are not listed yet",
                    "scope", _section(state, mem, error=True))
    target = resolve_target(spec, d)
    always = set(spec.scope.always_include)
    observe = spec.mode == "Observe"
    wrote = False
    for attempt in range(CONFLICT_RETRIES + 1):
        sandbox = _sandbox_set(spec, mem)
        read, obj = await _read(target)
        if read.error:
            raise _Problem("InvalidConfig", f"{target.describe()}: {read.error}; it was left untouched: fix it by hand")
        mem.cluster = read.scope_type == "cluster"
        if mem.cluster:
            mem.known_list = None
            return Part(COND, "True", "ClusterScope",
                        f"the scheduler watches all namespaces (scope type cluster in {target.describe()}); "
                        "nothing to write", "scope", _section(state, mem, scope_type="cluster", missing=[]))
        current = list(read.values or [])
        if mem.preexisting is None:
            mem.preexisting = sorted(set(current))
        p = scope_core.plan(current, sandbox, always, mem.preexisting, mem.added)
        if not p.changed or observe:
            if not observe:
                mem.added = p.added_by_us
            final = current
            break
        try:
            await _write(target, obj, read, p.new_list)
        except kube.Conflict:
            if attempt < CONFLICT_RETRIES:
                await asyncio.sleep(random.uniform(0.0, 0.02 * (2 ** attempt)))
                continue
            return Part(COND, "False", "Conflict",
                        f"{target.describe()} changed under us {CONFLICT_RETRIES + 1} times in a row (someone else "
                        "is editing it); nothing was overwritten, retrying at the next change or resync",
                        "scope", _section(state, mem, error=True))
        wrote = True
        log.info("scope of %s: %s now lists %d namespace(s) (+%d -%d, attempt %d)", state.ref, target.describe(),
                 len(p.new_list), len(p.diff.added), len(p.diff.removed), attempt + 1)
        final = p.new_list
        mem.added = p.added_by_us
        metrics.SCOPE_WRITES.inc(binding=state.ref)
        if started is not None:
            metrics.SCOPE_SYNC_LATENCY.observe(time.monotonic() - started, binding=state.ref)
        registry.event(state, "Normal", "ScopeUpdated", f"{target.describe()}: "
                       + "; ".join(x for x in (f"added {_names(p.diff.added)}" if p.diff.added else "",
                                               f"removed {_names(p.diff.removed)}" if p.diff.removed else "") if x))
        break
    mem.known_list = frozenset(final)
    metrics.SCOPE_NAMESPACES.set(len(set(final)), binding=state.ref)
    count, missing = scope_core.missing_summary(sandbox | always, final, MISSING_LIMIT)
    scope_type = read.scope_type or "namespace"

    notes: list[str] = []
    problem: _Problem | None = None
    if not observe:
        if target.kind == "ConfigMap" and spec.scope.restart_scheduler and (wrote or periodic):
            try:
                note = await _roll_scheduler(registry, state, d, final, only_if_present=not wrote)
                if note:
                    notes.append(note)
            except _Problem as exc:
                problem = exc
        try:
            note = await _sync_grants(registry, state, d, mem, final, refresh=periodic or mem.grants is None)
            if note:
                notes.append(note)
        except _Problem as exc:
            problem = problem or exc

    section = _section(state, mem, scope_type=scope_type, count=len(set(final)), missing=missing, wrote=wrote)
    extra = (" " + " ".join(notes)) if notes else ""
    if problem is not None:
        return Part(COND, "False", problem.reason, problem.message + extra, "scope", section)
    if count:
        why = ("Observe mode: nothing is written" if observe else "not written yet")
        return Part(COND, "False", "Pending",
                    f"{count} sandbox namespace(s) missing from {target.describe()} ({why}): "
                    f"{', '.join(missing)}{' …' if count > len(missing) else ''}.{extra}", "scope", section)
    return Part(COND, "True", "Synced",
                f"{target.describe()} lists {len(set(final))} namespace(s), every sandbox namespace included.{extra}",
                "scope", section)


# ---------------------------------------------------------------- rolling the scheduler


def _scheduler_deployment(spec: m.BindingSpec, deployments: list[dict]) -> dict | None:
    found = [dep for dep in deployments
             if selectors.matches(spec.scheduler.pod_selector,
                                  (((dep.get("spec") or {}).get("template") or {}).get("metadata") or {}).get("labels"))]
    return sorted(found, key=lambda dep: dep["metadata"]["name"])[0] if found else None


async def _roll_scheduler(registry: Registry, state: BindingState, d: Any, values: list[str],
                          only_if_present: bool) -> str | None:
    """Set the scheduler Deployment's pod-template scope hash when it differs (rolls the scheduler)."""
    ns = d.namespace
    try:
        dep = _scheduler_deployment(state.spec, await kube.list_deployments(ns))
    except kube.Forbidden as exc:
        raise _Problem("Forbidden", f"the operator may not list Deployments in {ns}: {exc}") from None
    if dep is None:
        return (f"No Deployment in {ns} has pod template labels matching spec.scheduler.podSelector, so the "
                "scheduler was not restarted; restart it by hand if it reads its config only at start.")
    annotations = ((dep["spec"].get("template") or {}).get("metadata") or {}).get("annotations") or {}
    want = scope_core.scope_hash(values)
    have = annotations.get(HASH_ANNOTATION)
    if have == want or (only_if_present and have is None):
        return None
    patch = {"spec": {"template": {"metadata": {"annotations": {HASH_ANNOTATION: want}}}}}
    name = dep["metadata"]["name"]
    try:
        await kube.merge_patch_deployment(ns, name, patch)
    except kube.Forbidden as exc:
        raise _Problem("Forbidden", f"the operator may not patch Deployment {ns}/{name}: {exc}") from None
    except kube.NotFound:
        return None
    registry.event(state, "Normal", "SchedulerRestarted",
                   f"Deployment {ns}/{name}: pod-template {HASH_ANNOTATION}={want} (the watched list changed)")
    return None


# ---------------------------------------------------------------- RBAC grants


def binding_label(state: BindingState) -> str:
    """Label value naming the binding (≤ 63 characters: hashed when longer)."""
    value = f"{state.namespace}.{state.name}"
    if len(value) <= 63:
        return value
    digest = hashlib.sha256(value.encode()).hexdigest()[:10]
    return f"{value[:52].rstrip('.-_')}-{digest}"


def rolebinding_name(state: BindingState) -> str:
    name = f"sunk-scheduler-{state.namespace}-{state.name}"
    if len(name) <= 253:
        return name
    digest = hashlib.sha256(f"{state.namespace}/{state.name}".encode()).hexdigest()[:10]
    return f"{name[:242].rstrip('.-')}-{digest}"


def _rolebinding(state: BindingState, d: Any, namespace: str, cluster_role: str) -> dict:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": rolebinding_name(state), "namespace": namespace,
                     "labels": {BINDING_LABEL: binding_label(state), "app.kubernetes.io/managed-by": "sunk-sandbox-operator"}},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": cluster_role},
        "subjects": [{"kind": "ServiceAccount", "name": d.service_account, "namespace": d.namespace}],
    }


def _is_current(rb: dict, want: dict) -> bool:
    return (rb["metadata"].get("name") == want["metadata"]["name"] and rb.get("roleRef") == want["roleRef"]
            and rb.get("subjects") == want["subjects"])


async def _bounded(coros: list[Awaitable[Any]]) -> list[Any]:
    sem = asyncio.Semaphore(GRANT_CONCURRENCY)

    async def one(c: Awaitable[Any]) -> Any:
        async with sem:
            return await c

    return await asyncio.gather(*(one(c) for c in coros), return_exceptions=True)


async def _sync_grants(registry: Registry, state: BindingState, d: Any, mem: Memory, listed: list[str],
                       refresh: bool) -> str | None:
    """A RoleBinding to grantClusterRole in every listed (existing, not terminating) namespace; others removed."""
    role = state.spec.scope.grant_cluster_role
    want: set[str] = set()
    if role:
        want = {ns for ns in listed if (info := NAMESPACES.infos.get(ns)) is not None and not info.terminating}
    if not role and mem.grants == set() and not refresh:
        return None
    to_delete: list[tuple[str, str]] = []
    if refresh or mem.grants is None:
        try:
            found = await kube.list_rolebindings(f"{BINDING_LABEL}={binding_label(state)}")
        except kube.Forbidden as exc:
            raise _Problem("Forbidden", f"the operator may not list RoleBindings: {exc}") from None
        have: set[str] = set()
        for rb in found:
            ns = rb["metadata"]["namespace"]
            if role and ns in want and _is_current(rb, _rolebinding(state, d, ns, role)):
                have.add(ns)
            else:
                to_delete.append((ns, rb["metadata"]["name"]))
        mem.grants = have
    else:
        to_delete = [(ns, rolebinding_name(state)) for ns in sorted(mem.grants - want)]
    to_create = sorted(want - mem.grants)
    if not to_create and not to_delete:
        return None
    results = await _bounded([kube.delete_rolebinding(ns, name) for ns, name in to_delete])
    errors: list[str] = []
    for (ns, _), res in zip(to_delete, results):
        if isinstance(res, Exception):
            errors.append(f"delete in {ns}: {res}")
        else:
            mem.grants.discard(ns)
    results = await _bounded([kube.create_rolebinding(ns, _rolebinding(state, d, ns, role)) for ns in to_create])
    created: list[str] = []
    forbidden = False
    for ns, res in zip(to_create, results):
        if isinstance(res, kube.Conflict) or not isinstance(res, Exception):
            mem.grants.add(ns)
            if not isinstance(res, Exception):
                created.append(ns)
        else:
            forbidden = forbidden or isinstance(res, kube.Forbidden)
            errors.append(f"create in {ns}: {res}")
    removed = [ns for ns, _ in to_delete if ns not in mem.grants]
    if created or removed:
        registry.event(state, "Normal", "ScopeGrantsUpdated", f"RoleBinding {rolebinding_name(state)} to ClusterRole "
                       f"{role or '-'}: " + "; ".join(x for x in (f"created in {_names(created)}" if created else "",
                                                              f"removed from {_names(removed)}" if removed else "") if x))
    if errors:
        fix = (f" The operator needs `bind` on ClusterRole {role} (add it to resourceNames in manifests/rbac.yaml)."
               if forbidden else "")
        raise _Problem("Forbidden" if forbidden else "GrantFailed",
                       f"RoleBindings for the scheduler's ServiceAccount: {len(errors)} failed ({'; '.join(errors[:3])})."
                       + fix)
    return None


# ---------------------------------------------------------------- deletion


async def restore(registry: Registry, state: BindingState) -> None:
    """deletionPolicy Restore: remove the namespaces we added (not alwaysInclude/preexisting) and our RoleBindings."""
    mem = memory(registry, state)
    mem.syncer.cancel()
    if mem.recheck_handle is not None:
        mem.recheck_handle.cancel()
        mem.recheck_handle = None
    async with mem.lock:
        spec = state.spec
        if spec is None:
            return
        d = state.extras.get("discovery")
        if d is None:
            from . import reconcile  # late: reconcile imports this module
            d = await reconcile.discover(state)
        try:
            await _restore_target(registry, state, d, mem)
        except _Problem as p:
            registry.event(state, "Warning", "ScopeNotRestored", f"{p.message}; the list was left as is")
        try:
            for rb in await kube.list_rolebindings(f"{BINDING_LABEL}={binding_label(state)}"):
                await kube.delete_rolebinding(rb["metadata"]["namespace"], rb["metadata"]["name"])
        except kube.Forbidden as exc:
            registry.event(state, "Warning", "ScopeNotRestored", f"RoleBindings not removed: {exc}")
        mem.grants = set()


async def _restore_target(registry: Registry, state: BindingState, d: Any, mem: Memory) -> None:
    spec = state.spec
    target = resolve_target(spec, d)
    for attempt in range(CONFLICT_RETRIES + 1):
        read, obj = await _read(target)
        if read.error or read.scope_type == "cluster":
            return
        current = list(read.values or [])
        keep = [a for a in spec.scope.always_include if a in current]  # kept, never re-added on the way out
        p = scope_core.plan(current, set(), keep, mem.preexisting or (), mem.added)
        if not p.changed:
            return
        try:
            await _write(target, obj, read, p.new_list)
        except kube.Conflict:
            await asyncio.sleep(random.uniform(0.0, 0.02 * (2 ** attempt)))
            continue
        mem.added, mem.known_list = [], frozenset(p.new_list)
        registry.event(state, "Normal", "ScopeRestored", f"{target.describe()}: removed {_names(p.diff.removed)}")
        if target.kind == "ConfigMap" and spec.scope.restart_scheduler:
            await _roll_scheduler(registry, state, d, p.new_list, only_if_present=True)
        return
    raise RuntimeError(f"scope restore: {target.describe()} kept changing under us")
