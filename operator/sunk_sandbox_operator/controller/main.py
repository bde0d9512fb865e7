"""The operator process: caches always, kopf and every write only while the keeper holds the Lease.

    start: fork the Lease keeper (controller/keeper.py: leader election, /healthz and /readyz in a
           process of their own), warm the caches (informers), serve /metrics on this loop and the
           admission webhook on a thread of its own
    loop:  tell the keeper "standby N" -> it says "leading N+1" (the write gate opens) -> run kopf
           (bindings) -> "lost N+1" (renew deadline passed: the gate was shut first, by time
           and by the keeper) -> kopf stops, the bindings' tasks are dropped -> standby again,
           caches still warm
    SIGTERM: stop kopf, close the gate, the keeper releases the Lease (a standby takes over at once)
    the keeper dies: stop kopf, exit 1 (the pod restarts; the gate had shut by time)

A standby watches and warms its caches but writes nothing: kopf (the only source of binding
work) is not running, and the Kube adapter refuses writes while the gate is closed. The
heartbeat task tells the keeper every BEAT_SECONDS that this loop turns (and whether the caches
are listed), for /healthz and /readyz; `ssb_event_loop_lag_seconds` records how late it was.
Metrics stay on this loop: the per-binding series are read from the live binding state at scrape
time, which only this loop may read; a scrape during a stall is late, which is the signal.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from typing import Callable

import kopf

from ..adapters import kubeconfig
from . import admission, keeper as keeper_mod, lifecycle, reconcile
from .config import Config, load
from .context import Context
from .keeper import KeeperLink

log = logging.getLogger("sunk_sandbox_operator")

STOP_TIMEOUT = 35.0  # kopf's daemon cancellation timeout is 30 s
BEAT_SECONDS = 0.5   # the main loop tells the keeper it turns this often


async def run(liveness: str | None, config: Config | None = None, keeper: KeeperLink | None = None) -> int:
    """The process's life; its exit code: 1 when kopf failed (a start-up activity, say) or the keeper
    died, so that the pod shows a crash, not a clean exit; else 0."""
    config = config or load()
    if keeper is None:  # forked first: no thread, task or connection of ours exists yet
        keeper = keeper_mod.spawn(config, kubeconfig.load(), liveness)
    await keeper.connect()
    failed = False
    loop = asyncio.get_running_loop()
    shutdown = asyncio.Event()

    def on_signals() -> None:  # kopf installs its own while it runs; ours are back after it stops
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, shutdown.set)

    on_signals()
    ctx: Context | None = None
    heart: asyncio.Task[None] | None = None
    webhook = None
    try:
        ctx = await lifecycle.start(log, config)
        ctx.kube.writable = keeper.writable
        heart = asyncio.create_task(_heartbeat(ctx, keeper), name="heartbeat to the keeper")
        webhook = await admission.serve(ctx)  # every replica answers admission reviews (reads only, no Lease)
        term = 0
        keeper.tell(f"standby {term}")
        while not shutdown.is_set():
            note = await _first(keeper.notes.get(), shutdown.wait())
            if note is None:
                break  # shutdown while standing by
            if note[0] == "gone":
                failed = True
                log.error("the Lease keeper process ended; stopping (the pod restarts)")
                break
            if note[0] != "leading":
                continue  # the "lost" of a term already ended
            term = note[1]
            failed, gone = await _lead(ctx, keeper, term, shutdown, on_signals)
            if gone:
                log.error("the Lease keeper process ended; stopping (the pod restarts)")
                break
            if not shutdown.is_set():
                keeper.tell(f"standby {term}")
    finally:
        keeper.term = None
        await keeper.release()
        if heart is not None:
            heart.cancel()
        if webhook is not None:
            await webhook.stop()
        if ctx is not None:
            await lifecycle.stop(ctx)
    return 1 if failed else 0


async def _lead(ctx: Context, keeper: KeeperLink, term: int, shutdown: asyncio.Event,
                on_signals: Callable[[], None]) -> tuple[bool, bool]:
    """One term: kopf runs until it ends, the term is lost or the process stops; then everything of
    the term is stopped and forgotten. (kopf failed, the keeper is gone)."""
    keeper.term = term
    _leadership(ctx, True)
    stop = asyncio.Event()
    operator = asyncio.create_task(kopf.operator(clusterwide=True, standalone=True, stop_flag=stop,
                                                 memo=kopf.Memo(ctx=ctx)), name="kopf")
    ended = asyncio.create_task(_term_ends(keeper, term), name="term end")
    waiter = asyncio.create_task(shutdown.wait())
    done, _ = await asyncio.wait({operator, ended, waiter}, return_when=asyncio.FIRST_COMPLETED)
    failed = False
    if operator in done:  # kopf stopped on a signal (it took SIGTERM) or failed
        shutdown.set()
        failed = not operator.cancelled() and operator.exception() is not None
    gone = ended in done and ended.result() == "gone"
    if ended in done:  # lost (the keeper shut the gate first) or the keeper gone: no write from here
        keeper.term = None
    ended.cancel()
    stop.set()
    try:
        await asyncio.wait_for(asyncio.shield(operator), STOP_TIMEOUT)
    except Exception:  # noqa: BLE001 - kopf's own error was logged by kopf
        log.warning("kopf did not stop cleanly", exc_info=True)
    on_signals()
    keeper.term = None
    _leadership(ctx, False)
    await reconcile.shutdown(ctx)
    ctx.reset_bindings()  # a new leadership starts from the API's state, not stale memory
    waiter.cancel()
    return failed or gone, gone


async def _term_ends(keeper: KeeperLink, term: int) -> str:
    """"lost" when the keeper says this term is lost, "gone" when the keeper process ended."""
    while True:
        kind, n = await keeper.notes.get()
        if kind == "gone" or (kind == "lost" and n == term):
            return kind


async def _heartbeat(ctx: Context, keeper: KeeperLink, every: float = BEAT_SECONDS) -> None:
    while True:
        keeper.beat(ready=all(i.ready.is_set() for i in ctx.informers))
        began = ctx.monotonic()
        await ctx.sleep(every)
        ctx.metrics.loop_lag.observe(max(0.0, ctx.monotonic() - began - every))


def _leadership(ctx: Context, leading: bool) -> None:
    ctx.metrics.leader.set(1 if leading else 0)
    log.info("leadership %s", "acquired: writing" if leading else "ended: writing stopped")


async def _first(work, stop):
    """`work`'s result when it finished first, None when `stop` did (then `work` is cancelled)."""
    w, s = asyncio.ensure_future(work), asyncio.ensure_future(stop)
    done, _ = await asyncio.wait({w, s}, return_when=asyncio.FIRST_COMPLETED)
    for t in (w, s):
        if t not in done:
            t.cancel()
    return w.result() if w in done and not w.cancelled() else None
