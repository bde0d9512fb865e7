"""The operator context: built once at start-up and handed to every handler through kopf's memo.

It holds what used to be module globals: settings, the Kubernetes client, the caches, the
binding registry, the event sink, metrics, the clocks and the sleep that goes with them (every
wait the shell computes from `monotonic` is slept with `sleep`; `cpu` is what the reconcile
budget measures). Tests build one with fakes.
"""

from __future__ import annotations

import asyncio
import ctypes
import datetime as dt
import gc
import time
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

from ..adapters import events
from ..adapters.informer import Informer
from ..adapters.kube import KubeAPI
from ..adapters.kubehttp import KubeHTTP
from ..adapters.metrics import Metrics
from ..adapters.ownership import OwnershipStore
from ..api.events import EventReason
from .caches import GrantCache, NamespaceCache, PodCache
from .failpoints import Failpoints
from .config import Config
from ..core.redact import Redactor
from ..core.tenancy import TenancyPolicy
from .depends import Dependencies
from .timers import Timers
from .state import BindingState, Registry


M_ARENA_MAX = -8  # glibc mallopt parameter


def limit_malloc_arenas(arenas: int = 2) -> None:
    """glibc gives each thread (the Kubernetes client's pool, kopf's executor) its own malloc arena,
    each keeping freed memory as RSS; two arenas are plenty for one event loop. Call before any
    thread starts; a no-op where glibc is absent."""
    try:
        ctypes.CDLL("libc.so.6").mallopt(M_ARENA_MAX, arenas)
    except (OSError, AttributeError):
        pass


LIST_GC_PAUSE_LIMIT = 120.0  # seconds the cyclic GC may stay paused for the initial LISTs


def _return_free_memory() -> None:
    """Hand the heap the initial LISTs left free back to the OS (glibc only; elsewhere a no-op)."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def utc_now_iso() -> str:
    return dt.datetime.now(dt.timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


@dataclass
class Context:
    config: Config
    kube: KubeAPI
    bindings: Registry = field(default_factory=Registry)
    namespaces: NamespaceCache = field(default_factory=NamespaceCache)
    pods: PodCache = field(default_factory=PodCache)
    grants: GrantCache | None = None  # our RoleBindings, when their informer runs (else a grant plan lists them)
    event_sink: events.EventSink | None = None  # default: core/v1 Events via kube
    metrics: Metrics = None  # type: ignore[assignment]  # default: over this registry (built below)
    monotonic: Callable[[], float] = time.monotonic
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    now_iso: Callable[[], str] = utc_now_iso
    wall: Callable[[], float] = time.time  # epoch seconds (the placement SLO: creationTimestamp is its start)
    cpu: Callable[[], float] = time.thread_time  # the main thread's CPU seconds (the reconcile budget)

    failpoints: Failpoints = field(default_factory=Failpoints)
    tenancy: TenancyPolicy = field(init=False)  # what bindings may ask (from config, below)
    ownership: OwnershipStore | None = None          # policy ownership records (None: status only)
    informers: list[Informer] = field(default_factory=list)  # one per watched kind
    pod_informer: Informer | None = None            # the sandbox pods' (one of `informers`)
    tasks: list[asyncio.Task[None]] = field(default_factory=list)  # their running tasks
    http: KubeHTTP | None = None                    # the session the informers share
    listed_bindings: frozenset[str] | None = None   # namespace/name of every allowed binding, as last listed
    admissions: dict[tuple[str, int | None], bool] = field(default_factory=dict)  # (uid, generation) -> allowed
    depends: Dependencies = None  # type: ignore[assignment]  # scheduler objects and scope targets (built below)
    timers: Timers = field(init=False)  # delayed actions on the injected clock (built below)
    # controller.slurm_poll.Pollers: the shared slurmrestd pollers, made on first use (slurm_poll.pollers);
    # not imported here (it reaches the placement wing, which needs this module).
    slurm: Any = None
    # The token values read (controller/credentials.py): the log filter and the event sink replace any
    # that still reaches a text (core/redact.py; the type-based `describe` is the first line).
    redactor: Redactor = field(default_factory=Redactor)

    def __post_init__(self) -> None:
        if self.event_sink is None:
            self.event_sink = events.KubeEventSink(self.kube, self.now_iso)
        self._post = events.safe(self.event_sink, self.redactor.redact)
        if self.metrics is None:
            self.metrics = Metrics(lambda: self.bindings.samples())
        if self.depends is None:
            self.depends = Dependencies(self)
        self.timers = Timers(self.monotonic, self.sleep)
        self.tenancy = self.config.tenancy()
        self.bindings.excluded = self.tenancy.system
        self.bindings.bound = self.tenancy.namespace_bound

    def reset_bindings(self) -> None:
        """Forget every binding (leadership lost): the next leader term starts from the API's state."""
        for state in self.bindings:
            state.close()
        self.bindings = Registry(self.bindings.excluded, self.bindings.bound)
        self.depends.refresh()  # no bindings: every dependency watch stops
        if self.slurm is not None:
            self.slurm.refresh()  # ... and every Slurm poller

    async def synced(self) -> None:
        """Until every informer has its initial LIST in the caches (a first reconcile waits for this:
        writing the policy and the scope while 50,000 pods are listed was at most 0.8 s sooner on 2
        busy cores, with 5,000 grants, and its allocations among the pods' raised the peak by 6-11 MiB)."""
        for informer in self.informers:
            await informer.ready.wait()
        self.namespaces.ready = True

    async def collect_after_lists(self, limit: float = LIST_GC_PAUSE_LIMIT) -> None:
        """The cyclic GC is paused (`lifecycle.start`) until the initial LISTs are in, at most
        `limit` seconds: the LIST pages' objects survive young collections, so each page made a
        full collection walk every record cached so far (measured at 50,000 pods and 5,000 grants:
        operator CPU to the first reconcile 9.6-11.0 s with the GC on, 7.2-7.3 s paused).
        Then the records, which live as long as the process, are frozen out of the GC's full
        collections (pauses of hundreds of ms at 50,000 pods) and the freed heap goes back to the OS."""
        listed = asyncio.ensure_future(asyncio.gather(*(i.ready.wait() for i in self.informers)))
        bound = asyncio.ensure_future(self.sleep(limit))  # a LIST that cannot finish does not keep the GC off
        try:
            await asyncio.wait((listed, bound), return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiting in (listed, bound):
                waiting.cancel()
            gc.freeze()
            gc.enable()
            _return_free_memory()

    def pods_listed(self) -> bool:
        """The sandbox pods' initial LIST is in the cache (always, with no informer: unit tests)."""
        return self.pod_informer is None or self.pod_informer.ready.is_set()

    def event(self, state: BindingState, reason: EventReason, message: str) -> None:
        """An event on the binding; its type comes with the reason (api/events.py)."""
        self._post(state.body, reason.type, reason.value, message)

    def transition(self, state: BindingState, kind: str, reason: str, message: str) -> None:
        """A condition's transition, posted with the condition's own reason (the status writer's)."""
        self._post(state.body, kind, reason, message)
