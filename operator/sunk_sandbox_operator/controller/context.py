"""The operator context: built once at start-up and handed to every handler through kopf's memo.

It holds what used to be module globals: settings, the Kubernetes client, the caches, the
binding registry, the event sink, metrics, the clocks and the sleep that goes with them (every
wait the shell computes from `monotonic` is slept with `sleep`; `cpu` is what the reconcile
budget measures). Tests build one with fakes.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Awaitable, Callable

from ..adapters import events
from ..adapters.informer import Informer
from ..adapters.kube import KubeAPI
from ..adapters.kubehttp import KubeHTTP
from ..adapters.metrics import Metrics
from ..adapters.ownership import OwnershipStore
from ..adapters.runnerapi.limiter import Budget
from ..adapters.runnerapi.client import DEFAULT_LIMITER
from ..api.events import EventReason
from .binding_cache import BindingCache
from .caches import GrantCache, NamespaceCache, PodCache
from .failpoints import Failpoints
from .config import Config
from ..core.redact import Redactor
from ..core.tenancy import TenancyPolicy
from .timers import Timers
from .state import BindingState, Registry

if TYPE_CHECKING:  # built by whoever builds the context (lifecycle.start; the tests' Harness), not here
    from .depends import Dependencies

log = logging.getLogger("sunk_sandbox_operator")

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
    binding_cache: BindingCache = field(init=False)  # every binding, by runner and target (built below)
    # The scheduler objects' and scope targets' watches: `Dependencies(ctx)` needs the finished context,
    # so its builder attaches it (lifecycle.start); the context itself only asks it to refresh.
    depends: Dependencies = None  # type: ignore[assignment]
    timers: Timers = field(init=False)  # delayed actions on the injected clock (built below)
    # controller.slurm_poll.Pollers: the shared slurmrestd pollers, made on first use (slurm_poll.pollers);
    # not imported here (it reaches the placement wing, which needs this module).
    slurm: Any = None
    # The token values read (controller/credentials.py): the log filter and the event sink replace any
    # that still reaches a text (core/redact.py; the type-based `describe` is the first line).
    redactor: Redactor = field(default_factory=Redactor)
    runner_budget: Budget = field(init=False)  # each binding's share of the runner API's calls (built below)

    def __post_init__(self) -> None:
        if self.event_sink is None:
            self.event_sink = events.KubeEventSink(self.kube, self.now_iso, self.monotonic)
        self._post = events.safe(self.event_sink, self.redactor.redact)
        if self.metrics is None:
            self.metrics = Metrics(lambda: self.bindings.samples())
        self.timers = Timers(self.monotonic, self.sleep)
        self.runner_budget = Budget(DEFAULT_LIMITER, self.config.runner_api_binding_rate,
                                    self.config.runner_api_binding_burst, self.config.runner_api_max_wait_seconds,
                                    clock=self.monotonic, sleep=self.sleep)
        self.tenancy = self.config.tenancy()
        self.binding_cache = BindingCache(self.tenancy, self.runner_changed)
        self.bindings.excluded = self.tenancy.system
        self.bindings.bound = self.tenancy.namespace_bound

    def runner_changed(self, runner: str, changed: str) -> None:
        """The bindings naming a runner, or their proofs, changed (`changed`: which one): a binding that
        another one kept out of the runner looks again (it may keep it now), and so does one that has not
        proved it may manage the runner (it tries now, rather than keep another waiting until its resync)."""
        for state in self.bindings:
            if state.ref == changed or state.spec is None or state.spec.runner.id != runner:
                continue
            proof = state.runner_proof or state.status.get("runner") or {}
            if state.conflict or not proof.get("provenTime"):
                state.wake.set()

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
        writing the policy and the scope while the pods are still listed gained little time on busy
        cores, and its allocations among the pods' raised the memory peak: docs/scale.md)."""
        for informer in self.informers:
            await informer.ready.wait()
        self.namespaces.ready = True

    def pods_listed(self) -> bool:
        """The sandbox pods' initial LIST is in the cache (always, with no informer: unit tests)."""
        return self.pod_informer is None or self.pod_informer.ready.is_set()

    def event(self, state: BindingState, reason: EventReason, message: str, *, pod: str | None = None) -> None:
        """An event on the binding; its type comes with the reason (api/events.py). Logged too, with
        the binding, its namespace, the reason (and the pod it is about) as fields."""
        self._post(state.body, reason.type, reason.value, message)
        self._log(state, reason.type, reason.value, message, pod)

    def transition(self, state: BindingState, kind: str, reason: str, message: str) -> None:
        """A condition's transition, posted with the condition's own reason (the status writer's)."""
        self._post(state.body, kind, reason, message)
        self._log(state, kind, reason, message, None)

    @staticmethod
    def _log(state: BindingState, kind: str, reason: str, message: str, pod: str | None) -> None:
        fields = {"binding": state.ref, "namespace": state.namespace, "reason": reason, **({"pod": pod} if pod else {})}
        log.log(logging.WARNING if kind == "Warning" else logging.INFO, "%s: %s %s: %s", state.ref, kind, reason,
                message, extra=fields)
