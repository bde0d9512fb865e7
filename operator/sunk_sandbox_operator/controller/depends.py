"""Watches of what a binding reads besides Namespaces and sandbox Pods, mapped back to the bindings.

controller-runtime's `Watches` + map function is the model. Each binding depends on:
- the ConfigMaps in its scheduler's namespace (scheduler.conf: name, kill-wait, the scope list;
  slurm.conf: KillWait), and on its scope target (a ConfigMap there, or an Argo CD Application,
  or a Flux HelmRelease and the values ConfigMap it consumes, both in the HelmRelease's namespace);
- its scheduler's pods (`spec.scheduler.podSelector`: health, args, a restart).
One LIST + WATCH per (kind, namespace[, selector]) that some binding needs, filtered server-side,
so 10,000 ConfigMaps elsewhere in the cluster cost nothing; started and stopped as bindings come,
go and move. Applications and HelmReleases are watched as metadata only; ConfigMaps and Pods in
full, each reduced as it arrives to what discovery reads (`Digest`, core/scheduler/objects.py:
bounded per object and per namespace), so a reconcile reads the scheduler's objects from memory
instead of listing the namespace (a tenant's 10,000 ConfigMaps cost one LIST when the watch starts,
then one event per change). An event wakes the bindings it concerns (a full reconcile, coalesced
over `KICK_SECONDS`); the echo of the operator's own write (same object, same resourceVersion)
wakes nobody. Secrets are never watched (get-only): CredentialsMissing retries with backoff.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import logging
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from ..adapters import kube as k
from ..adapters import scheduler as sched
from ..adapters.informer import Informer, Resource
from ..api.keys import SCHEDULER_CONFIGMAP_LABEL
from ..api.spec import LabelSelector
from ..core.scheduler import objects as so
from ..core.scheduler.slurm_conf import SLURM_CONF_SUFFIX
from ..core import selectors
from ..core.scope.target_ref import TargetRef, locate
from .state import BindingState

# The controller Context (bindings, http, config, metrics, depends). Not imported: the context
# builds a Dependencies, and importing it back would make a cycle.
Context = Any

log = logging.getLogger("sunk_sandbox_operator")

# Events closer together than this make one reconcile (a Helm upgrade touches several objects).
KICK_SECONDS = 0.2
# What a LIST page of ConfigMaps or Pods in full should hold (8 of 1 MiB, or hundreds of small ones).
PAGE_BYTES = 4 * 1024 * 1024
# A binding's first reconcile waits this long at most for the scheduler namespace's watches to list.
FIRST_LIST_WAIT_SECONDS = 30.0
OWN_WRITES_KEPT = 64  # per object: more than the writes of one burst whose echoes are still on the way

ObjKey = tuple[str, str, str]  # (kind, namespace, name)


@dataclass(frozen=True)
class Watched:
    kind: str                   # ConfigMap | Pod | Application | HelmRelease
    namespace: str
    selector: str | None = None  # pods: the scheduler's podSelector as a label selector string

    @property
    def digested(self) -> bool:
        """Watched in full and reduced to what discovery reads (ConfigMaps, Pods), not as metadata."""
        return self.kind in ("ConfigMap", "Pod")

    def resource(self, max_page_size: int = 500) -> Resource:
        """Objects in full are listed a few a page to start with (a tenant's ConfigMap may be 1 MiB, and a
        page is held at once), then as many as fit in PAGE_BYTES."""
        return Resource(k.kind_path(self.kind, self.namespace), label_selector=self.selector,
                        metadata_only=not self.digested, page_bytes=PAGE_BYTES if self.digested else None,
                        max_page_size=max_page_size)

    def page_size(self, default: int) -> int:
        """Objects in its first LIST page."""
        return {"ConfigMap": sched.CONFIGMAP_PAGE_SIZE, "Pod": sched.POD_PAGE_SIZE}.get(self.kind, default)


class Digest:
    """What a ConfigMap or Pod watch keeps of each object discovery reads, by name: core/scheduler/objects.py's
    reduction (or Skipped, when what discovery reads of it is over the cap); the others are not kept."""

    def __init__(self, kind: str, cap: int) -> None:
        self.kind, self.cap = kind, cap
        self.records: dict[str, dict | so.Skipped] = {}

    def apply(self, event_type: str, body: dict) -> None:
        name = (body.get("metadata") or {}).get("name") or ""
        reduced = None if event_type == "DELETED" else (
            so.reduce_configmap(body, self.cap) if self.kind == "ConfigMap" else so.reduce_pod(body, self.cap))
        if reduced is not None and so.relevant(reduced):
            self.records[name] = reduced
        else:  # deleted, or nothing discovery reads (any longer): not kept
            self.records.pop(name, None)


def scheduler_namespace(state: BindingState) -> str | None:
    if state.spec is None:
        return None
    return state.discovery.namespace if state.discovery else state.spec.scheduler_namespace(state.namespace)


def target_of(state: BindingState) -> TargetRef:
    """The binding's scope target (core.scope.target_ref: the one place that knows each kind's objects)."""
    return locate(state.admitted_spec, state.namespace, state.discovery.configmap_name if state.discovery else None)


def wanted(state: BindingState) -> set[Watched]:
    """What this binding depends on, as watches (none for a deleted or unparsable binding): the
    scheduler namespace's ConfigMaps and scheduler pods, and every object its target reads."""
    ns = scheduler_namespace(state)
    if ns is None or state.deleted:
        return set()
    out = {Watched("ConfigMap", ns),
           Watched("Pod", ns, selectors.to_label_selector_string(state.admitted_spec.scheduler.pod_selector) or None)}
    target = target_of(state)
    out |= {Watched(kind, namespace) for kind, namespace, name in target.reads_beyond_scheduler_configmaps if name}
    return out


def reads_configmap(state: BindingState, name: str, labels: dict | None, keys: Iterable[str] = ()) -> bool:
    """Is this ConfigMap in the scheduler's namespace one the binding reads? The scope target and
    scheduler.conf (by name, or any carrying the discovery label: a new one may take over), and any
    with a `*slurm.conf` key (discovery reads every one: a new one may set KillWait, or be refused).
    Any other ConfigMap there wakes nothing: a tenant editing its own ConfigMaps cannot buy
    reconciles (and runner API calls) with them."""
    d = state.discovery
    if d is None:
        return True  # not discovered yet: anything may be what it reads
    key, value = SCHEDULER_CONFIGMAP_LABEL
    return (name == d.configmap_name or name in d.slurm_configmaps or (labels or {}).get(key) == value
            or name == target_of(state).name or any(k.endswith(SLURM_CONF_SUFFIX) for k in keys))


def concerns(state: BindingState, watched: Watched, name: str, labels: dict | None,
             keys: Iterable[str] = ()) -> bool:
    """Does an event on this object concern this binding? `keys`: a ConfigMap's data keys."""
    if state.spec is None or state.deleted or (ns := scheduler_namespace(state)) is None:
        return False
    if watched.kind == "Pod":
        return watched.namespace == ns and selectors.matches(state.spec.scheduler.pod_selector, labels or {})
    if watched.kind == "ConfigMap" and watched.namespace == ns and reads_configmap(state, name, labels, keys):
        return True
    return (watched.kind, watched.namespace, name) in target_of(state).reads


class Dependencies:
    """The running dependency watches; `refresh` after bindings change keeps exactly the needed ones."""

    def __init__(self, ctx: Context, start: Callable[[Informer], asyncio.Task] | None = None) -> None:
        self.ctx = ctx
        self._start = start
        self._running: dict[Watched, tuple[Informer, asyncio.Task, dict[str, str], Digest | None]] = {}
        self._started: dict[Watched, float] = {}  # when each running watch was started (ctx.monotonic)
        ctx.metrics.dependency_watches.set_function(lambda: len(self._running))
        ctx.metrics.dependency_objects.set_function(self.objects)
        # The resourceVersions of the operator's recent writes to each object: their echoes wake
        # nobody. Several, not the last only: during a burst the watch delivers the echo of one
        # write after the next one has been answered.
        self.own_writes: dict[ObjKey, collections.deque[str]] = {}

    @property
    def watches(self) -> list[Watched]:
        return sorted(self._running, key=lambda w: (w.kind, w.namespace, w.selector or ""))

    def objects(self) -> int:
        return sum(len(seen) for _, _, seen, _ in self._running.values())

    def wrote(self, kind: str, namespace: str, name: str, resource_version: str | None) -> None:
        if resource_version:
            self.own_writes.setdefault((kind, namespace, name), collections.deque(maxlen=OWN_WRITES_KEPT)) \
                .append(resource_version)

    def ours(self, obj: ObjKey, resource_version: str) -> bool:
        return resource_version in self.own_writes.get(obj, ())

    def unchanged_since(self, obj: ObjKey, resource_version: str | None) -> bool:
        """Has nobody written the object since our write at `resource_version`, as far as its watch
        knows? True when the latest version the watch delivered is that write, or one of our earlier
        writes (its echo still on the way); False when there is no such watch, or it saw anything else."""
        kind, namespace, name = obj
        running = self._running.get(Watched(kind, namespace))
        writes = list(self.own_writes.get(obj, ()))
        if running is None or not running[0].ready.is_set() or resource_version not in writes:
            return False
        seen = running[2].get(f"{namespace}/{name}")
        return seen in writes and writes.index(seen) <= writes.index(resource_version)

    def seen(self, obj: ObjKey) -> str | None:
        """The resourceVersion the object's watch delivered last (None: no such watch, not listed yet,
        or the object not seen): an object read at that version has not changed since, as far as it knows."""
        kind, namespace, name = obj
        running = self._running.get(Watched(kind, namespace))
        if running is None or not running[0].ready.is_set():
            return None
        return running[2].get(f"{namespace}/{name}")

    def refresh(self) -> None:
        want: set[Watched] = set()
        for state in self.ctx.bindings:
            want |= wanted(state)
        for w in list(self._running):
            if w not in want:
                self._running.pop(w)[1].cancel()
                self._started.pop(w, None)
        if self.ctx.http is None:
            return  # unit tests: no API connection; `event` is called directly
        for w in want - self._running.keys():
            seen: dict[str, str] = {}
            pages = self.ctx.config.list_page_size
            informer = Informer(self.ctx.http, w.resource(pages), functools.partial(self.event, w),
                                seen.keys, page_size=w.page_size(pages),
                                name=f"{w.kind} watch in {w.namespace}")
            start: Callable[[Informer], asyncio.Task] = self._start or (
                lambda i: asyncio.create_task(self._run(w, i), name=i.name))
            digest = Digest(w.kind, self.ctx.config.max_object_bytes) if w.digested else None
            self._running[w] = (informer, start(informer), seen, digest)
            self._started[w] = self.ctx.monotonic()

    async def _run(self, watched: Watched, informer: Informer) -> None:
        """Run the informer; once its first LIST is in, wake the bindings that need it: a change made
        between their last read and the start of this watch is in that LIST, not in any event."""
        listed = asyncio.ensure_future(informer.ready.wait())
        run = asyncio.ensure_future(informer.run())
        try:
            await asyncio.wait([listed, run], return_when=asyncio.FIRST_COMPLETED)
            if listed.done():
                for state in self.ctx.bindings:
                    if watched in wanted(state):
                        kick(self.ctx, state, (watched.kind, watched.namespace, ""), "listed")
            await run
        finally:
            listed.cancel()
            run.cancel()

    def event(self, watched: Watched, kind: str, body: dict) -> None:
        meta = body.get("metadata") or {}
        name, rv = meta.get("name") or "", meta.get("resourceVersion") or ""
        running = self._running.get(watched)
        if running is not None:
            informer, _, seen, digest = running
            if kind == "DELETED":
                seen.pop(f"{watched.namespace}/{name}", None)
            else:
                seen[f"{watched.namespace}/{name}"] = rv
            if digest is not None:
                digest.apply(kind, body)
            if not informer.ready.is_set():
                return  # the initial LIST: what is already there was read by the reconcile itself
        data = body.get("data")
        keys = [k for k in data if isinstance(k, str)] if isinstance(data, dict) and watched.kind == "ConfigMap" else []
        for state in self.ctx.bindings:
            if concerns(state, watched, name, meta.get("labels"), keys):
                kick(self.ctx, state, (watched.kind, watched.namespace, name), rv)

    async def listed_scheduler_objects(self, namespace: str, pod_selector: LabelSelector,
                                       wait: float) -> sched.SchedulerObjects | None:
        """`scheduler_objects`, the watches started first if none runs yet. Watches started less than
        `wait` seconds ago are waited for (a binding's first reconcile reads what they list rather than
        list the namespace a second time), unless one failed (refused, unreachable): then, as for an older
        one that has not listed, discovery reads the namespace itself and says why."""
        self.refresh()
        keys = (Watched("Pod", namespace, selectors.to_label_selector_string(pod_selector) or None),
                Watched("ConfigMap", namespace))
        running = [r for r in map(self._running.get, keys) if r is not None]
        unlisted = [r[0] for r in running if not r[0].ready.is_set()]
        left = max((self._started.get(w, 0.0) for w in keys), default=0.0) + wait - self.ctx.monotonic()
        if len(running) == len(keys) and unlisted and left > 0 and not any(i.failed.is_set() for i in unlisted):
            listed = asyncio.ensure_future(asyncio.gather(*(i.ready.wait() for i in unlisted)))
            stops = [asyncio.ensure_future(self.ctx.sleep(left)), listed,
                     *(asyncio.ensure_future(i.failed.wait()) for i in unlisted)]
            try:
                await asyncio.wait(stops, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for stop in stops:
                    stop.cancel()
        return self.scheduler_objects(namespace, pod_selector)

    def scheduler_objects(self, namespace: str, pod_selector: LabelSelector) -> sched.SchedulerObjects | None:
        """The scheduler namespace's Pods (by the selector) and ConfigMaps as their watches hold them
        (None until both have their first LIST in: discovery then lists them itself, once)."""
        selector = selectors.to_label_selector_string(pod_selector)
        pods, cms = (self._running.get(w) for w in (Watched("Pod", namespace, selector or None),
                                                     Watched("ConfigMap", namespace)))
        if pods is None or cms is None or not (pods[0].ready.is_set() and cms[0].ready.is_set()):
            return None
        assert pods[3] is not None and cms[3] is not None
        cap = self.ctx.config.max_object_bytes
        pod_records = [r for r in pods[3].records.values() if selector is not None or isinstance(r, so.Skipped)
                       or selectors.matches(pod_selector, r["metadata"]["labels"])]
        out = sched.SchedulerObjects(namespace, selector or "")
        out.pods, skipped_pods = so.split(pod_records, cap)
        out.configmaps, skipped_cms = so.split(list(cms[3].records.values()), cap)
        out.skipped = skipped_pods + skipped_cms
        return out

    def stop(self) -> Iterable[asyncio.Task]:
        tasks = [t for _, t, _, _ in self._running.values()]
        for t in tasks:
            t.cancel()
        self._running.clear()
        self._started.clear()
        return tasks


def kick(ctx: Context, state: BindingState, obj: ObjKey, resource_version: str) -> None:
    """Wake the binding's reconcile soon; events within KICK_SECONDS make one reconcile. Checked when
    the timer fires, so the answer to our own write has arrived before its echo is judged."""
    state.kicks.setdefault(obj, set()).add(resource_version)
    if state.kick_handle is not None:
        return

    def fire() -> None:
        state.kick_handle = None
        pending, state.kicks = state.kicks, {}
        foreign = [o for o, rvs in pending.items() if any(not ctx.depends.ours(o, rv) for rv in rvs)]
        if foreign and ctx.bindings.is_current(state):
            ctx.metrics.dependency_wakes.inc()
            state.wake.set()

    state.kick_handle = ctx.timers.later(KICK_SECONDS, fire, "dependency kick")
