"""The list loop (I/O): the namespaces that belong → the target's list and its ledger.

A wake gathers the target's list and ledger and the namespaces that belong (and the scheduler's
workloads when `core.scope.list_loop.needs_workloads` says the revert rule asks), calls `decide`
once, and writes the list and the ledger in one request with the read's precondition
(`retry.optimistic`: a lost race gathers and decides again; another writer's change is never
overwritten). It keeps the state `decide` returned, says what changed (events, log, metrics) and,
after a write, wakes the roll and grants loops: they read what was written. A target the spec moved
is left first (our names and ledger entry leave it, as on deletion); the loop then wakes again for
the new one.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from ...adapters import kube as k
from ...adapters import targets
from ...api.events import EventReason
from ...api.reasons import ScopeSynced
from ...core.problems import Problem
from ...core.scope.list_loop import ListObservation, ListStep, decide, decide_restore, needs_workloads
from ...core.scope.plan import ScopeObservation, change_message, names
from ...core.scope.target_ref import TargetRef
from .. import retry
from ..context import Context
from ..state import BindingState, ScopeMemory
from . import facts, slo

log = logging.getLogger("sunk_sandbox_operator")

TRANSIENT = (ScopeSynced.CONFLICT, ScopeSynced.ERROR)  # retried with backoff


async def run(ctx: Context, state: BindingState, *, periodic: bool) -> None:
    """One wake (two when it leaves a moved target first); it keeps and reports the gates."""
    mem = state.scope
    assert mem is not None

    async def body() -> None:
        started = mem.list_loop.runs.take_first_signal()
        for _ in range(2):
            if not await _wake(ctx, state, mem, periodic, started):
                break

    await facts.wake(ctx, state, mem.list_loop, "list", body, TRANSIENT, gates=True)


async def _wake(ctx: Context, state: BindingState, mem: ScopeMemory, periodic: bool, started: float | None) -> bool:
    """Gather → decide → write. True when it left a moved target (the next wake writes the new one)."""
    loop = mem.list_loop
    target = facts.target(ctx, state, mem)

    async def attempt(retried: int) -> tuple[ListObservation, ListStep]:
        obs, read = await _observe(ctx, state, mem, target, periodic, retried)
        step = decide(obs, loop.latest)
        if step.ledger is not None:  # the ledger entry travels in the same request as the list
            rv = await target.write(read, step.values, step.ledger)
            ctx.depends.wrote(*target.ref().writes, rv)
            ctx.failpoints.hit("after-scope-write")
        return obs, step

    obs, step = await retry.optimistic(attempt, lost_race=lambda e: isinstance(e, k.Conflict),
                                       retries=ctx.config.scope_conflict_retries, sleep=ctx.sleep)
    if step.leave is not None:
        await leave(ctx, state, mem, step.leave)
        loop.latest = step.memory
        return True
    loop.latest = step.memory  # at once: namespace events compare with the list
    _tell(ctx, state, obs, step, started)
    if step.decision.error is None and step.memory.known is not None or step.memory.cluster:
        slo.listed(ctx, state, mem, None if step.memory.cluster else step.memory.known)
    if step.ledger is not None and not periodic:  # (a resync runs the other loops next)
        mem.roll_loop.runs.signal()
        mem.grant_loop.runs.signal()
    return False


def _sandbox(ctx: Context, state: BindingState, mem: ScopeMemory, periodic: bool) -> set[str]:
    """The namespaces that belong, and those a stuck pod named before the namespace watch did."""
    sandbox = set(facts.belonging(ctx, state, mem, full=periodic))
    matcher = state.matcher
    assert matcher is not None
    for ns in list(mem.pod_signalled):
        if ns in ctx.namespaces or not matcher(ns, {}):
            mem.pod_signalled.discard(ns)  # the watch decides now
        else:
            sandbox.add(ns)
    return sandbox


async def _observe(ctx: Context, state: BindingState, mem: ScopeMemory, target: targets.ScopeTarget, periodic: bool,
                   retried: int) -> tuple[ListObservation, targets.TargetRead]:
    """The facts the write is decided from: the target's list and ledger, the namespaces that belong,
    and the scheduler's workloads when the revert rule asks for them."""
    spec, d = state.admitted_spec, state.discovery
    assert d is not None
    sandbox = _sandbox(ctx, state, mem, periodic)
    read = await facts.read(ctx, target, fresh=periodic or retried > 0)  # a burst: what the last write returned
    mine = facts.ours(state, read, mem)
    scope = ScopeObservation(
        target=target.describe(), values=read.list.values, scope_type=read.list.scope_type, error=read.list.error,
        error_reason=read.list.reason, sandbox=frozenset(sandbox), always=tuple(spec.scope.always_include),
        preexisting=mine.preexisting, added=mine.added, observe=spec.mode == "Observe",
        others=facts.others(ctx, state, read), own_namespace=d.namespace, target_ref=target.ref().wire())
    rolls = target.kind == "ConfigMap" and target.can_roll  # the list is a ConfigMap key the scheduler reads at start
    obs = ListObservation(scope, target.ref(), state.ref, read.ledger, read.obj.get("metadata"), target.kind,
                          ("data", getattr(target, "key", "")) if rolls else None, spec.scheduler.pod_selector)
    if needs_workloads(obs):
        found, _ = await facts.workloads(ctx, d.namespace)
        obs = replace(obs, workloads=found)
    return obs, read


def _tell(ctx: Context, state: BindingState, obs: ListObservation, step: ListStep, started: float | None) -> None:
    """Events, log lines, counters and the latency metric of a wake (its write is done)."""
    d, target, manager = step.decision, obs.scope.target, step.manager
    if manager is not None and step.warn:  # Helm, Argo CD or Flux rendering a ConfigMap target: said once
        ctx.event(state, EventReason.TARGET_MANAGED_ELSEWHERE, f"{manager.describe()} also writes {target}: "
                  f"{manager.fix}")
    if d.reverted and not obs.scope.observe:
        state.counters.scope_reverts += 1
        log.info("scope of %s: %d namespace(s) the operator added were removed from %s by another writer%s",
                 state.ref, len(d.reverted), target, f" ({manager.describe()})" if manager else "")
    if d.error or d.cluster:
        return
    state.counters.scope_namespaces = len(step.memory.known or ())
    if step.values is not None:
        log.info("scope of %s: %s now lists %d namespace(s) (+%d -%d)", state.ref, target, len(d.final),
                 len(d.diff.added), len(d.diff.removed))
        state.counters.scope_writes += 1
        if started is not None:
            ctx.metrics.scope_sync_latency.observe(ctx.monotonic() - started)
        restored = f" (put back after another writer removed {names(d.reverted)})" if d.reverted else ""
        ctx.event(state, EventReason.SCOPE_UPDATED, change_message(target, d.diff) + restored)


# ---------------------------------------------------------------- leaving a target


async def leave(ctx: Context, state: BindingState, mem: ScopeMemory, old_ref: TargetRef) -> None:
    """The spec (or discovery) moved the list to another target: Restore in the one we kept (our names
    and our ledger entry leave it). A target the binding's namespace may no longer reach is not touched
    (said in an event); the new one starts fresh."""
    old: targets.ScopeTarget | None = None
    try:
        old = targets.build(ctx.kube, old_ref)
        if not ctx.tenancy.may_reach(state.namespace, old.namespace):
            ctx.event(state, EventReason.SCOPE_NOT_RESTORED, f"the scope target moved from {old.describe()}, which "
                      f"bindings in {state.namespace} may not reach: the names added there were left as they are")
        else:
            await restore_target(ctx, state, mem, old)
    except (Problem, targets.TargetFailed) as exc:
        where = old.describe() if old is not None else f"{old_ref.kind} {old_ref.namespace}/{old_ref.name}"
        ctx.event(state, EventReason.SCOPE_NOT_RESTORED, f"the scope target moved from {where}: "
                  f"{facts.problem_of(exc).message}; the names added there were left as they are")
    mem.parsed.clear()


async def restore_target(ctx: Context, state: BindingState, mem: ScopeMemory,
                         target: targets.ScopeTarget) -> list[str] | None:
    """Our names and our ledger entry leave `target` (`core.scope.list_loop.decide_restore`), unless
    another live binding claims them: the list written, or None when it did not change."""
    always = tuple(state.admitted_spec.scope.always_include)

    async def attempt(_: int) -> list[str] | None:
        read = await target.read()
        if read.list.error or read.list.scope_type == "cluster":
            return None
        step = decide_restore(list(read.list.values or []), read.ledger, state.ref, always,
                              facts.ours(state, read, mem), facts.others(ctx, state, read))
        if step is None:
            return None
        rv = await target.write(read, step.values, step.ledger)
        ctx.depends.wrote(*target.ref().writes, rv)
        if step.values is not None:
            ctx.event(state, EventReason.SCOPE_RESTORED, f"{target.describe()}: removed {names(step.plan.diff.removed)}")
        return step.values

    return await retry.optimistic(attempt, lost_race=lambda e: isinstance(e, k.Conflict),
                                  retries=ctx.config.scope_conflict_retries, sleep=ctx.sleep)
