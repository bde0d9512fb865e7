"""Typed per-binding state, and the registry of the bindings this process knows.

Each binding has one `BindingState`: its latest body and parsed spec, the `Part` each concern
last reported, and one typed memory per concern (policy, scope, placement). Nothing is passed
between modules through untyped dicts.
"""

from __future__ import annotations

import asyncio
import copy
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Generic, Iterator, TypeVar

from ..adapters.metrics import BindingCounters, BindingSample
from ..adapters.targets import ParseMemo
from ..api.keys import RECONCILE_REQUEST_ANNOTATION
from ..api.reasons import ConditionType
from ..api.spec import BindingSpec, SandboxNamespaces, parse_spec
from ..core.budget import Input
from ..core.compose import Part
from ..core.placement import PlacementTracker
from ..core.slurm.jobs import JobTracker
from ..core.slurm.poll import TokenOutcome
from ..core.scheduler.discovery import Discovery
from ..core.scope.membership import Matcher, compile_matcher
from ..core.scope.grant_loop import GrantState
from ..core.scope.list_loop import ListState
from ..core.scope.roll_loop import RollState
from ..core.scope.slo import PlacementClock
from ..core.selectors import ParsedSelector

if TYPE_CHECKING:
    from ..adapters.runnerapi.client import RunnerClient
    from .coalescer import Coalescer
    from .timers import Timer

Key = tuple[str, str]  # (namespace, name)
T = TypeVar("T")


@dataclass
class PolicyMemory:
    client: "RunnerClient | None" = None
    client_key: tuple[str, str, str] | None = None  # (apiURL, secret name, key) the client was built for
    closing: "asyncio.Future | None" = None         # the previous client being closed
    read_key: tuple | None = None                   # (generation, scheduler name) of the last runner read
    token_digest: str | None = None                 # sha256 of the token the client last sent


@dataclass
class Loop(Generic[T]):
    """One scope loop's shell: its coalescer (signals fold into its next wake), its lock (one wake at a
    time), its retries with backoff, its own timer, and `latest`, the frozen state its latest wake
    decided (core.scope.*_loop), kept as the decision returned it."""

    latest: T
    runs: "Coalescer"
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    failures: int = 0                          # consecutive transient failures (retry backoff)
    retry: "Timer | None" = None
    timer: "Timer | None" = None               # a wake the decision asked for (the roll: the interval's end)

    def close(self) -> None:
        self.runs.cancel()
        for timer in (self.retry, self.timer):
            if timer is not None:
                timer.cancel()
        self.retry = self.timer = None


@dataclass
class ScopeMemory:
    """The scope wing's three loops (controller/scope/), and the facts they share: the target as last
    read or written (a cache of the object, one version) and the namespaces that belong."""

    list_loop: Loop[ListState]
    roll_loop: Loop[RollState]
    grant_loop: Loop[GrantState]
    parsed: ParseMemo = field(default_factory=ParseMemo)  # the target's object and document, one version
    sandbox: set[str] | None = None            # namespaces that belong, kept current by namespace events
    sandbox_for: object = None                 # the matcher `sandbox` was computed with
    pod_signalled: set[str] = field(default_factory=set)  # namespaces a stuck pod named before the watch did
    next_recheck: float = 0.0                  # a pod in a listed namespace may re-read the target after this
    recheck_handle: "Timer | None" = None
    slo: PlacementClock = field(default_factory=PlacementClock)  # new namespaces awaiting placement (the SLO)

    @property
    def loops(self) -> tuple[Loop[ListState], Loop[RollState], Loop[GrantState]]:
        return self.list_loop, self.roll_loop, self.grant_loop


@dataclass(frozen=True)
class PodExpectations:
    """What a sandbox pod of this binding should carry (changes rebuild the tracker)."""

    scheduler_name: str | None
    partition: str | None
    pinned: tuple[tuple[str, str], ...]
    kill_wait: int | None
    names: tuple[str, ...]
    selector: str | None
    job_templates: tuple[str, ...] | None = None  # spec.slurm.restAPI.jobNameTemplates (None: Slurm not read)


@dataclass
class PlacementMemory:
    tracker: PlacementTracker = field(default_factory=PlacementTracker)
    jobs: JobTracker | None = None             # placeholder jobs (spec.slurm.restAPI set)
    expectations: PodExpectations | None = None
    hazard_events: dict[str, float] = field(default_factory=dict)  # kind -> when last posted (monotonic)
    recheck: "Timer | None" = None             # one re-judge at the end of the propagation window
    recheck_for: float | None = None           # the window end (epoch seconds) it was scheduled for


@dataclass
class SlurmMemory:
    """What the binding's own slurmrestd check found (controller/slurm.py), for the shared poller."""

    key: object | None = None        # the slurm_poll.PollerKey the outcome is for
    outcome: TokenOutcome = TokenOutcome.UNCHECKED
    partition_seen: str | None = None  # spec.partition's state at that check ("": not found)
    expiry_warned: int | None = None   # the token `exp` SlurmTokenExpiring was posted for (once per token)


@dataclass
class CostMemory:
    """The reconcile budget's tally (controller/budget.py)."""

    spent: dict[ConditionType, float] = field(default_factory=dict)  # CPU seconds per concern (its condition), this reconcile
    inputs: tuple[Input, ...] = ()                          # the heaviest objects discovery last read
    overruns: int = 0                                       # consecutive reconciles over the budget


@dataclass(frozen=True)
class Admitted:
    """The spec that passed the tenancy check, frozen at that moment. Every step of a reconcile and
    every signalled sync uses it, through every await; the live spec (which each watch event
    replaces) is checked again, and admitted, only by the next reconcile."""

    spec: BindingSpec
    body: dict                 # metadata and spec as checked (conflict checks compare bodies)
    generation: int | None


@dataclass
class BindingState:
    namespace: str
    name: str
    body: dict                                           # the latest body (every watch event replaces it)
    live_spec: BindingSpec | None = None                 # parsed from `body`: not checked yet
    spec_error: str | None = None
    admitted: Admitted | None = None                     # what the last reconcile checked and allowed
    status: dict = field(default_factory=dict)          # as last read from / written to the API
    # The conditions this process last wrote: the previous state a condition event compares with (a
    # late echo of an older write, which `status` may hold for a moment, must not hide a change).
    conditions_written: list[dict] | None = None
    parts: dict[ConditionType, Part] = field(default_factory=dict)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    discovery: Discovery | None = None
    conflict: str | None = None                          # the binding that keeps our runner, if not us
    runner_proof: dict | None = None                     # status.runner as recorded, until written
    claims_warned: frozenset[str] = frozenset()          # unproven bindings naming our runner, told in an event
    conflict_checked: bool = False                       # a reconcile has looked (scope signals wait for it)
    target_conflict: str | None = None                   # an older binding on our scope target disagrees
    reconciled_generation: int | None = None
    handled_request: str | None = None                   # the reconcile-requested-at value last handled
    request_honoured_at: float | None = None             # when (monotonic) a reconcile last handled a new one
    paused: bool = False                                 # the pause as the last reconcile decided it (core/pause.py)
    failures: int = 0                                    # consecutive transient policy failures
    policy: PolicyMemory = field(default_factory=PolicyMemory)
    scope: ScopeMemory | None = None
    placement: PlacementMemory = field(default_factory=PlacementMemory)
    slurm: SlurmMemory = field(default_factory=SlurmMemory)
    cost: CostMemory = field(default_factory=CostMemory)
    flusher: "Coalescer | None" = None
    flush_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    counters: BindingCounters = field(default_factory=BindingCounters)
    deleted: bool = False
    kicks: dict = field(default_factory=dict)            # dependency events not yet acted on: obj -> {rv}
    kick_handle: "Timer | None" = None                   # the pending wake for them (controller/depends.py)
    excluded: Callable[[str], bool] | None = None         # system namespaces: never matched by glob/selector
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)  # one reconcile or finalize at a time
    bound: ParsedSelector | None = None                   # --sandbox-namespace-selector: never matched outside
    _matcher: tuple[BindingSpec, SandboxNamespaces, Matcher] | None = None

    @property
    def key(self) -> Key:
        return (self.namespace, self.name)

    @property
    def generation(self) -> int | None:
        return self.body.get("metadata", {}).get("generation")

    @property
    def reconcile_request(self) -> str | None:
        """The sunksandbox.dev/reconcile-requested-at annotation, when set."""
        value = (self.body.get("metadata", {}).get("annotations") or {}).get(RECONCILE_REQUEST_ANNOTATION)
        return value if isinstance(value, str) and value else None

    @property
    def uid(self) -> str:
        return self.body.get("metadata", {}).get("uid") or ""

    @property
    def spec(self) -> BindingSpec | None:
        """The admitted spec (None until a reconcile allowed one, or after a refusal)."""
        return self.admitted.spec if self.admitted is not None else None

    @property
    def admission(self) -> Admitted:
        """`admitted` where only an admitted binding gets: the reconcile past its tenancy check, the
        scope wakes and timers of an active binding, a deletion past its check (never None there)."""
        assert self.admitted is not None, f"binding {self.ref} has no admitted spec"
        return self.admitted

    @property
    def admitted_spec(self) -> BindingSpec:
        """`spec` where only an admitted binding gets (see `admission`)."""
        return self.admission.spec

    def admit(self, body: dict | None = None, spec: BindingSpec | None = None) -> BindingSpec:
        """Freeze `spec` (parsed from `body`; default: the live ones) as the admitted spec. The caller
        checked exactly this spec, with no await between the check and this call."""
        body = self.body if body is None else body
        spec = self.live_spec if spec is None else spec
        assert spec is not None
        raw = {"metadata": copy.deepcopy(body.get("metadata") or {}), "spec": copy.deepcopy(body.get("spec") or {})}
        self.admitted = Admitted(spec, raw, raw["metadata"].get("generation"))
        return spec

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def matcher(self) -> Matcher | None:
        """spec.sandboxNamespaces compiled, once per value: a reconcile re-reads the spec, and a new
        matcher object would make the next sync rescan every namespace (`mem.sandbox_for`)."""
        spec = self.spec
        if spec is None:
            return None
        m = self._matcher
        if m is not None and m[0] is spec:  # every namespace and pod event asks: identity first
            return m[2]
        if m is None or m[1] != spec.sandbox_namespaces:
            m = (spec, spec.sandbox_namespaces, compile_matcher(spec.sandbox_namespaces, self.excluded,
                                                                bound=self.bound, own=self.namespace))
        self._matcher = (spec, m[1], m[2])
        return m[2]

    @property
    def active(self) -> bool:
        """Reconciled at least once, parsed, not deleted, not paused, and not the younger of two on a runner."""
        return (self.spec is not None and not self.deleted and self.conflict_checked and not self.conflict
                and not self.paused)

    def close(self) -> None:
        """Stop everything pending for this binding: its scope loops and status flushes, and every
        timer (kick, retries, pod re-read, folded roll, placement re-judge). The one teardown: on
        deletion, at shutdown, when leadership is lost, before a Restore."""
        if self.flusher is not None:
            self.flusher.cancel()
        self.close_placement_timer()
        timers = [self.kick_handle]
        if self.scope is not None:
            for loop in self.scope.loops:
                loop.close()
            timers.append(self.scope.recheck_handle)
            self.scope.recheck_handle = None
        self.kick_handle = None
        for timer in timers:
            if timer is not None:
                timer.cancel()

    def close_placement_timer(self) -> None:
        """Cancel the pending propagation-window re-judge, if any."""
        mem = self.placement
        if mem.recheck is not None:
            mem.recheck.cancel()
        mem.recheck, mem.recheck_for = None, None

    def update_body(self, body: dict) -> None:
        self.body = body
        self.status = dict(body.get("status") or {})
        try:
            self.live_spec, self.spec_error = parse_spec(body.get("spec") or {}), None
        except Exception as exc:  # the CRD validates first; this only catches schema drift
            self.live_spec, self.spec_error = None, str(exc)

    def report(self, part: Part) -> None:
        self.parts[part.condition] = part

    def section(self, name: str) -> dict:
        """A status section as last reported: the part in memory (even if its write failed), else status."""
        for part in self.parts.values():
            if part.section == name and part.data is not None:
                return part.data
        return self.status.get(name) or {}


class Registry:
    """All bindings this process knows, by (namespace, name)."""

    def __init__(self, excluded: Callable[[str], bool] | None = None, bound: ParsedSelector | None = None) -> None:
        self._bindings: dict[Key, BindingState] = {}
        self.excluded = excluded  # system namespaces, for every binding's matcher
        self.bound = bound        # the operator's bound on every binding's matcher

    def ensure(self, body: dict) -> BindingState:
        meta = body["metadata"]
        key = (meta["namespace"], meta["name"])
        state = self._bindings.get(key)
        if state is None or state.body.get("metadata", {}).get("uid") != meta.get("uid"):
            state = BindingState(meta["namespace"], meta["name"], body, excluded=self.excluded, bound=self.bound)
            self._bindings[key] = state
        state.update_body(body)
        return state

    def get(self, key: Key) -> BindingState | None:
        return self._bindings.get(key)

    def is_current(self, state: BindingState) -> bool:
        return self._bindings.get(state.key) is state and not state.deleted

    def forget(self, key: Key) -> None:
        state = self._bindings.pop(key, None)
        if state is not None:
            state.deleted = True

    def __iter__(self) -> Iterator[BindingState]:
        return iter(list(self._bindings.values()))

    def __len__(self) -> int:
        return len(self._bindings)

    def samples(self) -> Iterator[BindingSample]:
        """What the metrics collector reads at scrape time."""
        for state in list(self._bindings.values()):
            yield BindingSample(state.ref, state.counters, list(state.status.get("conditions") or []))
