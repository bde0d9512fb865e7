"""Operator lifecycle: kopf settings, building the context at start-up, the per-binding loop and deletion.

The handlers module calls these; they hold what kopf decorators must not: the loop's timing,
the restore retry budget, and the start-up order (namespaces listed before any reconcile).
"""

from __future__ import annotations

import asyncio
import logging
import random

import kopf

from ..adapters.kube import Kube, load_api_client
from ..api import keys
from . import reconcile
from .config import Config, load
from .context import Context
from .state import BindingState

log = logging.getLogger("sunk_sandbox_operator")


def configure(settings: kopf.OperatorSettings) -> None:
    settings.persistence.finalizer = keys.FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=keys.GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix=keys.GROUP, key="last-handled")
    settings.posting.level = logging.WARNING  # events are posted explicitly, not from kopf's log lines
    settings.watching.label_selectors["v1", "pods"] = keys.SANDBOX_ID_LABEL  # server-side: sandbox pods only
    settings.watching.server_timeout = 300
    # Per-object workers hold their slot for idle_timeout after an object's last event: with the
    # 5 s default, 64 slots let only ~13 new pods/s through under churn. Short idle, more slots.
    settings.queueing.worker_limit = 512
    settings.queueing.idle_timeout = 0.5
    settings.execution.max_workers = 16


async def start(logger: logging.Logger, config: Config | None = None) -> Context:
    config = config or load()
    ctx = Context(config=config, kube=Kube(load_api_client()))
    if config.metrics_port:
        await ctx.metrics.serve(config.metrics_port)
        logger.info("metrics on :%d/metrics", config.metrics_port)
    ctx.namespaces.load(await ctx.kube.list_namespaces())
    return ctx


async def stop(ctx: Context) -> None:
    await reconcile.shutdown(ctx)


def binding_event(ctx: Context, event_type: str | None, body: dict) -> None:
    if event_type == "DELETED":
        return
    state = ctx.bindings.ensure(body)
    # Our own status patches come back as events too: only a spec change (generation) or a
    # deletion wakes the loop early; everything else waits for the resync.
    if state.generation != state.reconciled_generation or body.get("metadata", {}).get("deletionTimestamp"):
        state.wake.set()


async def binding_loop(ctx: Context, body: dict, stopped: kopf.DaemonStopped) -> None:
    """Reconcile now, then every resyncInterval (jittered) or as soon as something wakes us."""
    state = ctx.bindings.ensure(body)
    while not stopped:
        state.wake.clear()
        ctx.metrics.reconciles.labels(handler="binding").inc()
        try:
            await reconcile.reconcile(ctx, state)
        except Exception:
            ctx.metrics.reconcile_errors.labels(handler="binding").inc()
            log.exception("reconcile of %s failed", state.ref)
        interval = reconcile.resync_seconds(state)
        interval *= 1 + random.uniform(-ctx.config.resync_jitter, ctx.config.resync_jitter)
        await _sleep_or_wake(state.wake, stopped, interval)


async def _sleep_or_wake(wake: asyncio.Event, stopped: kopf.DaemonStopped, timeout: float) -> None:
    waiters = [asyncio.ensure_future(wake.wait()), asyncio.ensure_future(stopped.wait())]
    try:
        await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waiters:
            w.cancel()


async def binding_deleted(ctx: Context, body: dict, attempt: int) -> float | None:
    """Finalize; a delay when the restore failed and should be retried, None when done."""
    state: BindingState = ctx.bindings.ensure(body)
    ctx.metrics.reconciles.labels(handler="delete").inc()
    try:
        await reconcile.finalize(ctx, state)
    except Exception as exc:
        ctx.metrics.reconcile_errors.labels(handler="delete").inc()
        if attempt + 1 < ctx.config.restore_retries:
            log.warning("restore of %s failed (attempt %d): %s", state.ref, attempt + 1, exc)
            return ctx.config.restore_retry_delay_seconds
        # Give up rather than block the deletion (and its namespace) forever; say what is left.
        ctx.event(state, "Warning", "RestoreAbandoned",
                  f"could not put back what the operator changed after {attempt + 1} attempts ({exc}); the "
                  "binding is released: check the runner policy (status.policy.owned) and the scope list by hand")
        log.warning("restore of %s abandoned after %d attempts: %s", state.ref, attempt + 1, exc)
    reconcile.forget(ctx, state)
    return None
