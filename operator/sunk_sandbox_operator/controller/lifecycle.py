"""Operator lifecycle: kopf settings, building the context at start-up, the per-binding loop and deletion.

The handlers module calls these; they hold what kopf decorators must not: the loop's timing,
the restore retry budget, and the start-up order (namespaces listed before any reconcile).
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import socket

import kopf

from ..adapters.informer import Informer, Resource
from .. import __version__
from ..adapters import kubeconfig, logfields, logsafe, settings
from ..adapters.kube import Kube
from ..adapters.kubehttp import KubeHTTP
from ..adapters.ownership import OwnershipStore
from ..adapters.podwire import PodPageDecoder
from ..api import keys
from ..api.events import EventReason
from ..core import pause
from ..core import resync as resync_core
from ..core.redact import describe
from . import budget, process, reconcile, watch
from .config import Config, load
from .caches import GrantCache
from .context import Context
from .depends import Dependencies
from .failpoints import Failpoints
from .state import BindingState

log = logging.getLogger("sunk_sandbox_operator")


def configure(settings: kopf.OperatorSettings) -> None:
    settings.persistence.finalizer = keys.FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=keys.GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix=keys.GROUP, key="last-handled")
    settings.posting.level = logging.WARNING  # events are posted explicitly, not from kopf's log lines
    settings.watching.server_timeout = 300
    settings.execution.max_workers = 16


async def publish_settings(ctx: Context) -> None:
    """The leader's tenancy settings, where `doctor` reads them (adapters/settings.py); at the start of
    each leadership term. A failure is said and changes nothing else: the doctor then says it has none."""
    by = os.environ.get("POD_NAME") or socket.gethostname()
    try:
        await settings.publish(ctx.kube, ctx.config.operator_namespace,
                               ctx.config.published(ctx.now_iso(), by, __version__))
    except Exception as exc:  # noqa: BLE001 - best effort, like events
        log.warning("settings not published in ConfigMap %s/%s (doctor will not see them): %s",
                    ctx.config.operator_namespace, settings.NAME, describe(exc))


def login(ctx: Context) -> kopf.ConnectionInfo:
    """kopf's credentials: the operator session's own (one source; kopf asks again after a 401)."""
    if ctx.http is None:
        raise kopf.LoginError("the operator's session is not started (lifecycle.start)")
    access = ctx.http.access
    scheme, _, token = (access.authorization() or "").partition(" ")
    return kopf.ConnectionInfo(
        server=access.server, ca_path=access.ca_file, ca_data=access.ca_data, insecure=access.insecure,
        scheme=scheme or None, token=token or None, certificate_path=access.cert_file,
        private_key_path=access.key_file, certificate_data=access.cert_data, private_key_data=access.key_data)


async def start(logger: logging.Logger, config: Config | None = None) -> Context:
    """Build the context and start the Namespace and sandbox-Pod informers (our own LIST + WATCH:
    kopf keeps only the bindings, so no per-object kopf machinery runs for 50,000 pods)."""
    config = config or load()
    http = KubeHTTP(kubeconfig.load())  # one session for every request the operator makes (and kopf's login)
    kube = Kube(http)
    ctx = Context(config=config, kube=kube, failpoints=Failpoints(config.failpoints),
                  ownership=OwnershipStore(kube, config.operator_namespace))
    ctx.depends = Dependencies(ctx)
    logsafe.install(ctx.redactor)  # every record through the root handlers kopf configured (core/redact.py)
    if config.metrics_port:
        await ctx.metrics.serve(config.metrics_port, config.metrics_address)
        logger.info("metrics on %s:%d/metrics", config.metrics_address, config.metrics_port)
    ctx.pod_informer = Informer(http, Resource("/api/v1/pods", label_selector=keys.SANDBOX_ID_LABEL,
                                               page_decoder=PodPageDecoder()),
                                lambda kind, body: watch.on_pod(ctx, kind, body), ctx.pods.keys,
                                page_size=config.list_page_size, name="sandbox pod informer")
    ctx.informers = [
        Informer(http, Resource("/api/v1/namespaces", metadata_only=True),
                 lambda kind, body: watch.on_namespace(ctx, kind, body), ctx.namespaces.keys,
                 page_size=config.list_page_size, name="namespace informer"),
        ctx.pod_informer,
    ]
    grants = ctx.grants = GrantCache()
    # Our grant RoleBindings (label-selected): a resync plans from them instead of a cluster-wide LIST.
    informer = Informer(http, Resource("/apis/rbac.authorization.k8s.io/v1/rolebindings",
                                       label_selector=keys.BINDING_LABEL),
                        grants.apply, grants.keys, page_size=config.list_page_size, name="grant RoleBinding informer")
    grants.listed = informer.ready.is_set
    ctx.informers.append(informer)
    # Every binding (runner conflicts, the webhook's facts), in every replica: a reconcile or a review
    # reads the few it needs there instead of listing them all.
    informer = Informer(http, Resource(f"/apis/{keys.GROUP}/{keys.VERSION}/{keys.PLURAL}"), ctx.binding_cache.apply,
                        ctx.binding_cache.keys, page_size=config.list_page_size, name="binding informer")
    ctx.binding_cache.listed = informer.ready.is_set
    ctx.informers.append(informer)
    process.pause_gc()  # until the initial LISTs are in (process.resume_gc_after: why, and the bound)
    ctx.tasks = [asyncio.create_task(i.run(), name=i.name) for i in ctx.informers]
    ctx.tasks.append(asyncio.create_task(process.resume_gc_after([i.ready for i in ctx.informers], ctx.sleep),
                                         name="GC after the initial LISTs"))
    ctx.http = http
    return ctx


async def stop(ctx: Context) -> None:
    tasks = [*ctx.tasks, *ctx.depends.stop()]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await reconcile.shutdown(ctx)
    if ctx.slurm is not None:
        await ctx.slurm.close()
    if ctx.http is not None:
        await ctx.http.close()


def binding_event(ctx: Context, event_type: str | None, body: dict) -> None:
    if event_type == "DELETED":
        # The binding is gone (its finalizer done): a binding it kept out of its runner takes over now.
        runner = ((body.get("spec") or {}).get("runner") or {}).get("id")
        if isinstance(runner, str):
            meta = body.get("metadata") or {}
            ctx.runner_changed(runner, f"{meta.get('namespace')}/{meta.get('name')}")
        return
    state = ctx.bindings.ensure(body)
    # Our own status patches come back as events too: only a spec change (generation), a reconcile
    # request (the annotation's new value), a pause or resume, or a deletion wakes the loop early.
    if state.generation != state.reconciled_generation or body.get("metadata", {}).get("deletionTimestamp") \
            or state.reconcile_request != state.handled_request or pause.paused(body.get("metadata")) != state.paused:
        state.wake.set()


async def binding_loop(ctx: Context, body: dict, stopped: kopf.DaemonStopped) -> None:
    """Reconcile now, then every resyncInterval (jittered) or as soon as something wakes us."""
    state = ctx.bindings.ensure(body)
    logfields.bind(binding=state.ref, namespace=state.namespace)  # this task's lines (and its children's)
    resync = True  # the first reconcile reads everything
    while not stopped:
        state.wake.clear()
        ctx.metrics.reconciles.labels(handler="binding").inc()
        meter = budget.Meter(ctx.cpu)
        budget.begin(state)
        started = ctx.monotonic()
        try:
            await meter.run(reconcile.reconcile(ctx, state, resync=resync))
        except Exception:
            ctx.metrics.reconcile_errors.labels(handler="binding").inc()
            log.exception("reconcile of %s failed", state.ref)
        ctx.metrics.reconcile_duration.labels(handler="binding").observe(ctx.monotonic() - started)
        backoff = await budget.judge(ctx, state, meter)
        if backoff is not None:  # over the CPU budget: nothing wakes it early (controller/budget.py)
            log.warning("reconcile of %s used %.1f CPU-s, over the budget; next in %.0f s", state.ref, meter.seconds,
                        backoff)
            await budget.wait_out(ctx, backoff, stopped.wait())
            resync = True
            continue
        interval = reconcile.resync_seconds(state, ctx.config.min_resync_seconds)
        interval *= 1 + random.uniform(-ctx.config.resync_jitter, ctx.config.resync_jitter)
        woken = await _sleep_or_wake(state.wake, stopped, interval)
        if woken and state.reconcile_request != state.handled_request:
            await _fold_requests(ctx, state, stopped)
        # A reconcile request reads everything again, like a resync (its point is "check now").
        resync = not woken or state.reconcile_request != state.handled_request


def _only_requested(state: BindingState) -> bool:
    """Nothing but a reconcile request (or a dependency event) is pending: no spec change, no deletion."""
    return state.generation == state.reconciled_generation and not state.body.get("metadata", {}).get(
        "deletionTimestamp")


async def _fold_requests(ctx: Context, state: BindingState, stopped: kopf.DaemonStopped) -> None:
    """A reconcile request sooner than SSB_RECONCILE_REQUEST_INTERVAL_SECONDS after the last one honoured waits
    for the interval's end; every request (and dependency event) arriving meanwhile folds into that one
    reconcile. A spec change or a deletion ends the wait at once."""
    while not stopped and _only_requested(state):
        left = resync_core.request_wait(state.request_honoured_at, ctx.monotonic(),
                                        ctx.config.reconcile_request_interval_seconds)
        if left <= 0:
            return
        state.wake.clear()
        waiters = [asyncio.ensure_future(state.wake.wait()), asyncio.ensure_future(stopped.wait()),
                   asyncio.ensure_future(ctx.sleep(left))]
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waiters:
                w.cancel()


async def _sleep_or_wake(wake: asyncio.Event, stopped: kopf.DaemonStopped, timeout: float) -> bool:
    """Until woken (True) or the timeout (False: a resync)."""
    waiters = [asyncio.ensure_future(wake.wait()), asyncio.ensure_future(stopped.wait())]
    try:
        await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        return wake.is_set()
    finally:
        for w in waiters:
            w.cancel()


async def binding_deleted(ctx: Context, body: dict, attempt: int) -> float | None:
    """Finalize; a delay when the restore failed and should be retried, None when done."""
    state: BindingState = ctx.bindings.ensure(body)
    token = logfields.bind(binding=state.ref, namespace=state.namespace)
    try:
        return await _finalize(ctx, state, attempt)
    finally:
        logfields.reset(token)


async def _finalize(ctx: Context, state: BindingState, attempt: int) -> float | None:
    ctx.metrics.reconciles.labels(handler="delete").inc()
    started = ctx.monotonic()
    try:
        await reconcile.finalize(ctx, state)
    except Exception as exc:
        ctx.metrics.reconcile_errors.labels(handler="delete").inc()
        ctx.metrics.reconcile_duration.labels(handler="delete").observe(ctx.monotonic() - started)
        if attempt + 1 < ctx.config.restore_retries:
            log.warning("restore of %s failed (attempt %d): %s", state.ref, attempt + 1, describe(exc))
            return ctx.config.restore_retry_delay_seconds
        # Give up rather than block the deletion (and its namespace) forever; say what is left.
        ctx.event(state, EventReason.RESTORE_ABANDONED,
                  f"could not put back what the operator changed after {attempt + 1} attempts ({describe(exc)}); the "
                  "binding is released: check the runner policy (status.policy.owned) and the scope list by hand")
        log.warning("restore of %s abandoned after %d attempts: %s", state.ref, attempt + 1, describe(exc))
    else:
        ctx.metrics.reconcile_duration.labels(handler="delete").observe(ctx.monotonic() - started)
    reconcile.forget(ctx, state)
    return None
