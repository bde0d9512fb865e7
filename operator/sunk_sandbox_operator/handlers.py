"""kopf wiring only: decorators hand events to the runtime and the reconcile pipeline.

Watches, one per kind: SunkSandboxBindings (daemon per binding + finalizer on the binding only),
Namespaces (`on.event`, nothing written to them) and sandbox Pods (`on.event`, server-side label
selector on `sandbox.coreweave.com/sandbox-id`; no annotations or finalizers on pods).
"""

from __future__ import annotations

import asyncio
import logging
import random

import kopf

from . import config as cfg
from . import metrics
from . import model as m
from . import reconcile
from .runtime import Registry

log = logging.getLogger("sunk_sandbox_operator")

CONFIG = cfg.load()
REGISTRY = Registry(CONFIG)
BINDINGS = (m.GROUP, m.VERSION, m.PLURAL)
FINALIZER = f"{m.GROUP}/finalizer"


@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, logger: logging.Logger, **_) -> None:
    settings.persistence.finalizer = FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=m.GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix=m.GROUP, key="last-handled")
    settings.posting.level = logging.WARNING  # events are posted explicitly, not from kopf's log lines
    settings.watching.label_selectors["v1", "pods"] = m.SANDBOX_ID_LABEL  # server-side: sandbox pods only
    settings.watching.server_timeout = 300
    # Per-object workers hold their slot for idle_timeout after an object's last event: with the
    # 5 s default, 64 slots let only ~13 new pods/s through under churn. Short idle, more slots.
    settings.queueing.worker_limit = 512
    settings.queueing.idle_timeout = 0.5
    settings.execution.max_workers = 16
    if CONFIG.metrics_port:
        await metrics.serve(CONFIG.metrics_port)
        logger.info("metrics on :%d/metrics", CONFIG.metrics_port)
    await reconcile.startup(REGISTRY)


@kopf.on.cleanup()
async def cleanup(**_) -> None:
    await reconcile.shutdown(REGISTRY)


# ---------------------------------------------------------------- bindings


@kopf.on.event(*BINDINGS)
async def binding_event(event: dict, body: kopf.Body, **_) -> None:
    if event.get("type") == "DELETED":
        return
    state = REGISTRY.ensure(dict(body))
    # Our own status patches come back as events too: only a spec change (generation) or a
    # deletion wakes the loop early; everything else waits for the resync.
    if state.generation != state.extras.get("reconciled_generation") or body.meta.get("deletionTimestamp"):
        state.wake.set()


@kopf.daemon(*BINDINGS, cancellation_timeout=30.0, initial_delay=0)
async def binding_loop(body: kopf.Body, stopped: kopf.DaemonStopped, **_) -> None:
    """Reconcile now, then every resyncInterval (jittered) or as soon as something wakes us."""
    state = REGISTRY.ensure(dict(body))
    while not stopped:
        state.wake.clear()
        metrics.RECONCILES.inc(handler="binding")
        try:
            await reconcile.reconcile(REGISTRY, state)
        except Exception:
            metrics.RECONCILE_ERRORS.inc(handler="binding")
            log.exception("reconcile of %s failed", state.ref)
        interval = reconcile.resync_seconds(state)
        interval *= 1 + random.uniform(-CONFIG.resync_jitter, CONFIG.resync_jitter)
        await _sleep_or_wake(state.wake, stopped, interval)


async def _sleep_or_wake(wake: asyncio.Event, stopped: kopf.DaemonStopped, timeout: float) -> None:
    waiters = [asyncio.ensure_future(wake.wait()), asyncio.ensure_future(stopped.wait())]
    try:
        await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waiters:
            w.cancel()


@kopf.on.delete(*BINDINGS, optional=False)
async def binding_deleted(body: kopf.Body, retry: int, **_) -> None:
    state = REGISTRY.ensure(dict(body))
    metrics.RECONCILES.inc(handler="delete")
    try:
        await reconcile.finalize(REGISTRY, state)
    except Exception as exc:
        metrics.RECONCILE_ERRORS.inc(handler="delete")
        if retry + 1 < CONFIG.restore_retries:
            raise kopf.TemporaryError(f"restore failed: {exc}", delay=CONFIG.restore_retry_delay_seconds) from None
        # Give up rather than block the deletion (and its namespace) forever; say what is left.
        REGISTRY.event(state, "Warning", "RestoreAbandoned",
                       f"could not put back what the operator changed after {retry + 1} attempts ({exc}); the "
                       "binding is released: check the runner policy (status.policy.owned) and the scope list by hand")
        log.warning("restore of %s abandoned after %d attempts: %s", state.ref, retry + 1, exc)
    REGISTRY.forget(state.key)


# ---------------------------------------------------------------- namespaces and pods


@kopf.on.event("v1", "namespaces")
async def namespace_event(event: dict, body: kopf.Body, **_) -> None:
    reconcile.on_namespace(REGISTRY, event.get("type"), dict(body))


@kopf.on.event("v1", "pods", labels={m.SANDBOX_ID_LABEL: kopf.PRESENT})
async def sandbox_pod_event(event: dict, body: kopf.Body, **_) -> None:
    metrics.POD_EVENTS.inc()
    reconcile.on_pod(REGISTRY, event.get("type"), dict(body))
