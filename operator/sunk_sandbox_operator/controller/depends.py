"""Watches of what a binding reads besides Namespaces and sandbox Pods, mapped back to the bindings.

controller-runtime's `Watches` + map function is the model. Each binding depends on:
- the ConfigMaps in its scheduler's namespace (scheduler.conf: name, kill-wait, the scope list;
  slurm.conf: KillWait), and on its scope target (a ConfigMap there, or an Argo CD Application,
  or a Flux HelmRelease and the values ConfigMap it consumes, both in the HelmRelease's namespace);
- its scheduler's pods (`spec.scheduler.podSelector`: health, args, a restart).
One metadata-only LIST + WATCH per (kind, namespace[, selector]) that some binding needs, filtered
server-side, so 10,000 ConfigMaps elsewhere in the cluster cost nothing; started and stopped as
bindings come, go and move. An event wakes the bindings it concerns (a full reconcile, coalesced
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
from ..adapters.informer import Informer, Resource
from ..api.keys import SCHEDULER_CONFIGMAP_LABEL
from ..core import selectors
from ..core.scope.target_ref import TargetRef, locate
from .state import BindingState

# The controller Context (bindings, http, config, metrics, depends). Not imported: the context
# builds a Dependencies, and importing it back would make a cycle.
Context = Any

log = logging.getLogger("sunk_sandbox_operator")

# Events closer together than this make one reconcile (a Helm upgrade touches several objects).
KICK_SECONDS = 0.2
OWN_WRITES_KEPT = 64  # per object: more than the writes of one burst whose echoes are still on the way

ObjKey = tuple[str, str, str]  # (kind, namespace, name)


@dataclass(frozen=True)
class Watched:
    kind: str                   # ConfigMap | Pod | Application | HelmRelease
    namespace: str
    selector: str | None = None  # pods: the scheduler's podSelector as a label selector string

    def resource(self) -> Resource:
        return Resource(k.kind_path(self.kind, self.namespace), label_selector=self.selector, metadata_only=True)


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


def reads_configmap(state: BindingState, name: str, labels: dict | None) -> bool:
    """Is this ConfigMap in the scheduler's namespace one the binding reads? The scope target and
    scheduler.conf (by name, or any carrying the discovery label: a new one may take over) and the
    slurm.conf ones discovery found. Any other ConfigMap there wakes nothing: a tenant editing its
    own ConfigMaps cannot buy reconciles (and runner API calls) with them."""
    d = state.discovery
    if d is None:
        return True  # not discovered yet: anything may be what it reads
    key, value = SCHEDULER_CONFIGMAP_LABEL
    return (name == d.configmap_name or name in d.slurm_configmaps or (labels or {}).get(key) == value
            or name == target_of(state).name)


def concerns(state: BindingState, watched: Watched, name: str, labels: dict | None) -> bool:
    """Does an event on this object concern this binding?"""
    if state.spec is None or state.deleted or (ns := scheduler_namespace(state)) is None:
        return False
    if watched.kind == "Pod":
        return watched.namespace == ns and selectors.matches(state.spec.scheduler.pod_selector, labels or {})
    if watched.kind == "ConfigMap" and watched.namespace == ns and reads_configmap(state, name, labels):
        return True
    return (watched.kind, watched.namespace, name) in target_of(state).reads


class Dependencies:
    """The running dependency watches; `refresh` after bindings change keeps exactly the needed ones."""

    def __init__(self, ctx: Context, start: Callable[[Informer], asyncio.Task] | None = None) -> None:
        self.ctx = ctx
        self._start = start
        self._running: dict[Watched, tuple[Informer, asyncio.Task, dict[str, str]]] = {}
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
        return sum(len(seen) for _, _, seen in self._running.values())

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
        if self.ctx.http is None:
            return  # unit tests: no API connection; `event` is called directly
        for w in want - self._running.keys():
            seen: dict[str, str] = {}
            informer = Informer(self.ctx.http, w.resource(), functools.partial(self.event, w),
                                seen.keys, page_size=self.ctx.config.list_page_size,
                                name=f"{w.kind} watch in {w.namespace}")
            start: Callable[[Informer], asyncio.Task] = self._start or (
                lambda i: asyncio.create_task(self._run(w, i), name=i.name))
            self._running[w] = (informer, start(informer), seen)

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
            informer, _, seen = running
            if kind == "DELETED":
                seen.pop(f"{watched.namespace}/{name}", None)
            else:
                seen[f"{watched.namespace}/{name}"] = rv
            if not informer.ready.is_set():
                return  # the initial LIST: what is already there was read by the reconcile itself
        for state in self.ctx.bindings:
            if concerns(state, watched, name, meta.get("labels")):
                kick(self.ctx, state, (watched.kind, watched.namespace, name), rv)

    def stop(self) -> Iterable[asyncio.Task]:
        tasks = [t for _, t, _ in self._running.values()]
        for t in tasks:
            t.cancel()
        self._running.clear()
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
