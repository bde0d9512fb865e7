"""The operator process: caches and health always, kopf and every write only while leading.

    start (informers warm the caches; /healthz, /readyz, /metrics and the admission webhook served)
    loop: acquire the Lease -> open the write gate -> run kopf (bindings) -> hold the Lease
          lost (renew deadline passed): the gate closes first, then kopf stops and the
          bindings' tasks are dropped; back to acquire as a standby, caches still warm
    SIGTERM: stop kopf, close the gate, release the Lease (a standby takes over at once)

A standby watches and warms its caches but writes nothing: kopf (the only source of binding
work) is not running, and the Kube adapter refuses writes while the gate is closed.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from urllib.parse import urlparse

import kopf

from ..adapters import health
from . import admission, lifecycle, reconcile
from .config import Config, load
from .context import Context
from .leader import LeaderElector, new_identity

log = logging.getLogger("sunk_sandbox_operator")

STOP_TIMEOUT = 35.0  # kopf's daemon cancellation timeout is 30 s


async def run(liveness: str | None, config: Config | None = None) -> int:
    """The process's life; its exit code: 1 when kopf failed (a start-up activity, say), so that
    the pod shows a crash, not a clean exit; else 0."""
    config = config or load()
    failed = False
    loop = asyncio.get_running_loop()
    shutdown = asyncio.Event()

    def on_signals() -> None:  # kopf installs its own while it runs; ours are back after it stops
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, shutdown.set)

    on_signals()
    ctx = await lifecycle.start(log, config)
    leading = False
    ctx.kube.writable = lambda: leading
    if liveness:
        url = urlparse(liveness)
        await health.serve(url.hostname or "0.0.0.0", url.port or 8081,
                           ready=lambda: all(i.ready.is_set() for i in ctx.informers), leading=lambda: leading)
    webhook = await admission.serve(ctx)  # every replica answers admission reviews (reads only, no Lease)
    elector = LeaderElector(ctx.kube, config.operator_namespace, identity=new_identity(),
                            lease_duration=config.lease_duration_seconds, renew_deadline=config.renew_deadline_seconds,
                            retry_period=config.retry_period_seconds, standby_poll=config.standby_poll_seconds,
                            on_change=lambda now: _leadership(ctx, now))
    try:
        while not shutdown.is_set():
            if not await _first(elector.acquire(), shutdown.wait()):
                break  # shutdown while standing by

            def close_gate() -> None:
                nonlocal leading
                leading = False

            leading = True
            stop = asyncio.Event()
            operator = asyncio.create_task(kopf.operator(clusterwide=True, standalone=True, stop_flag=stop,
                                                         memo=kopf.Memo(ctx=ctx)), name="kopf")
            holder = asyncio.create_task(elector.hold(close_gate), name="lease holder")
            waiter = asyncio.create_task(shutdown.wait())
            done, _ = await asyncio.wait({operator, holder, waiter}, return_when=asyncio.FIRST_COMPLETED)
            if operator in done:  # kopf stopped on a signal (it took SIGTERM) or failed
                shutdown.set()
                failed = not operator.cancelled() and operator.exception() is not None
            if holder not in done:
                holder.cancel()  # cancelling does not count as lost: we release below
            stop.set()
            try:
                await asyncio.wait_for(asyncio.shield(operator), STOP_TIMEOUT)
            except Exception:  # noqa: BLE001 - kopf's own error was logged by kopf
                log.warning("kopf did not stop cleanly", exc_info=True)
            on_signals()
            close_gate()
            await reconcile.shutdown(ctx)
            ctx.reset_bindings()  # a new leadership starts from the API's state, not stale memory
            waiter.cancel()
    finally:
        leading = False
        await elector.release()
        if webhook is not None:
            await webhook.stop()
        await lifecycle.stop(ctx)
    return 1 if failed else 0


def _leadership(ctx: Context, leading: bool) -> None:
    ctx.metrics.leader.set(1 if leading else 0)
    log.info("leadership %s", "acquired" if leading else "lost")


async def _first(work, stop) -> bool:
    """True when `work` finished first, False when `stop` did (then `work` is cancelled)."""
    w, s = asyncio.ensure_future(work), asyncio.ensure_future(stop)
    done, _ = await asyncio.wait({w, s}, return_when=asyncio.FIRST_COMPLETED)
    for t in (w, s):
        if t not in done:
            t.cancel()
    return w in done and not w.cancelled()
