"""The Lease keeper: leader election and the health probes in a process of their own.

Why: the operator reconciles every tenant's binding on one asyncio event loop. A tenant's object
that costs CPU in a reconcile (a quadratic parse, a huge expansion) held that loop, and with it
the Lease renewal and /healthz: the leader lost its Lease again and again, and the probe would have
restarted the pod (docs/scale.md: "Hostile tenants"). client-go renews from a goroutine of its own.
In Python a thread is not enough: `re`, `str.replace`, the json and YAML decoders and the cyclic GC
run in C holding the GIL, so no other thread of the process runs meanwhile (a thread ticking every
10 ms does not tick during a long `re.sub`). A forked child process shares no GIL, so nothing a
tenant makes the operator compute can delay the renewal or the probes.

    operator (main process)                       keeper (child, forked at start: its own event
      informers, kopf, reconciles, metrics,        loop and its own HTTP session to the API server)
      the webhook (its own thread)                  LeaderElector on the Lease, /healthz, /readyz
            |--- "standby N": done with term N, may take term N+1 ("standby 0" at start) --->|
            |<-- "leading N": the Lease is held, GATE open ------------------------------------|
            |<-- "lost N": GATE closed, the Lease is lost (renew deadline passed) -------------|
            |--- "release": writing stopped (shutdown): release the Lease, exit -------------->|
            |<-- "released" -------------------------------------------------------------------|

Shared words (an anonymous shared page; each word has one writer and is one native 8-byte,
8-byte-aligned copy, a single load or store on x86-64 and arm64, so a read sees the old or the new
value, never a mix):
    GATE   keeper -> main: the monotonic time (ns) until which the main process may write: the
           start of the last successful acquire/renew + renew_deadline (controller/leader.py); 0: shut
    BEAT   main -> keeper: when the main event loop last turned (the heartbeat task, every 0.5 s)
    READY  main -> keeper: 1 once the caches hold their initial LIST (/readyz)

Invariants:
- The main process writes only while it holds a term (between "leading N" and its handling of
  "lost N") and its monotonic clock (CLOCK_MONOTONIC: one clock for both processes) is before GATE.
  GATE closes by time alone, so a keeper that is frozen, slow or dead never extends a write
  past the renew deadline; the leader still stops writing before any other replica may take over.
- The keeper takes term N+1 only after "standby N": the previous term's writers (kopf's daemons,
  the bindings' tasks) are gone before the gate can open again.
- The main process dies (EOF): the keeper shuts GATE and exits without releasing, as a killed pod
  would (the Lease expires). The keeper dies (EOF in the main process): the main process stops
  kopf and exits 1, so the pod restarts; GATE stays shut by time.
- A main loop stalled by a tenant's reconcile keeps the Lease: the standby would meet the same
  tenant's objects. /healthz says how long the loop has not turned and fails only past
  `SSB_LIVENESS_STALL_SECONDS` (a wedged process, not a slow reconcile: see adapters/health.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import mmap
import multiprocessing
import signal
import socket
import struct
import time
from multiprocessing.process import BaseProcess
from typing import Callable
from urllib.parse import urlparse

from ..adapters import health
from ..adapters.kube import Kube
from ..adapters.kubeconfig import Access
from ..adapters.kubehttp import KubeHTTP
from .config import Config
from .leader import LeaderElector
from .lease import new_identity

log = logging.getLogger("sunk_sandbox_operator")

GATE, BEAT, READY = 0, 8, 16   # byte offsets of the shared words
RELEASE_TIMEOUT = 5.0          # seconds the keeper may take to release the Lease at shutdown
Note = tuple[str, int]         # (kind, term): "leading"/"lost" N, "released"/"gone" 0


class SharedWords:
    """The three words both processes see (an anonymous MAP_SHARED page, inherited by the fork)."""

    def __init__(self) -> None:
        self._page = mmap.mmap(-1, mmap.PAGESIZE)

    def _get(self, offset: int) -> int:
        value: int = struct.unpack_from("q", self._page, offset)[0]
        return value

    def _set(self, offset: int, value: int) -> None:
        struct.pack_into("q", self._page, offset, value)

    # the keeper's
    def open_until(self, until: float) -> None:
        self._set(GATE, max(1, int(until * 1e9)))

    def shut(self) -> None:
        self._set(GATE, 0)

    # the main process's
    def until(self) -> float:
        return self._get(GATE) / 1e9

    def beat(self, now: float, ready: bool) -> None:
        self._set(BEAT, int(now * 1e9))
        self._set(READY, int(ready))

    def last_beat(self) -> float:
        return self._get(BEAT) / 1e9

    def ready(self) -> bool:
        return self._get(READY) == 1


def _parse(line: bytes) -> Note | None:
    kind, _, term = line.decode("ascii", "replace").strip().partition(" ")
    try:
        return kind, int(term or 0)
    except ValueError:
        return None


async def _read_lines(reader: asyncio.StreamReader, into: "asyncio.Queue[Note]", eof: str) -> None:
    """Every line as a Note on `into`; (eof, 0) when the other process closed its end (or died)."""
    try:
        while line := await reader.readline():
            if (note := _parse(line)) is not None:
                into.put_nowait(note)
    except (ConnectionError, OSError):
        pass
    into.put_nowait((eof, 0))


class LeaseKeeper:
    """The keeper's side of the protocol: one term at a time, only when the main process says it stands by."""

    def __init__(self, elector: LeaderElector, words: SharedWords, commands: "asyncio.Queue[Note]",
                 tell: Callable[[str], None]) -> None:
        self.elector, self.words, self.commands, self.tell = elector, words, commands, tell
        self.term = 0
        self._early: Note | None = None  # a command that arrived with the end of an acquire or a hold

    async def run(self) -> None:
        """Until "release" (the Lease released if held, "released" told) or EOF (nothing released)."""
        while True:
            kind, n = await self._command()
            if kind in ("release", "eof"):
                if kind == "release":
                    self.tell("released")
                return
            if kind != "standby" or n != self.term:
                continue  # a stale or unknown line
            if not await self._acquire():
                return
            self.term += 1
            self.tell(f"leading {self.term}")
            if not await self._hold():
                return
            self.tell(f"lost {self.term}")

    async def _acquire(self) -> bool:
        """True once the Lease is ours; False when told to stop first (then done here)."""
        acquiring = asyncio.ensure_future(self.elector.acquire())
        while True:
            command = asyncio.ensure_future(self._command())
            done, _ = await asyncio.wait({acquiring, command}, return_when=asyncio.FIRST_COMPLETED)
            if acquiring in done:
                self._keep_early(command)
                acquiring.result()
                return True
            kind, _ = command.result()
            if kind in ("release", "eof"):
                acquiring.cancel()
                await asyncio.gather(acquiring, return_exceptions=True)
                await self._stop(release=kind == "release")
                return False

    async def _hold(self) -> bool:
        """True when the Lease was lost (GATE shut first); False when told to stop (then done here)."""
        holding = asyncio.ensure_future(self.elector.hold(self.words.shut))
        while True:
            command = asyncio.ensure_future(self._command())
            done, _ = await asyncio.wait({holding, command}, return_when=asyncio.FIRST_COMPLETED)
            if holding in done:
                self._keep_early(command)
                holding.result()
                return True
            kind, _ = command.result()
            if kind in ("release", "eof"):
                self.words.shut()  # first: no write after this, whatever the Lease calls below do
                holding.cancel()
                await asyncio.gather(holding, return_exceptions=True)
                await self._stop(release=kind == "release")
                return False

    async def _command(self) -> Note:
        if self._early is not None:
            early, self._early = self._early, None
            return early
        return await self.commands.get()

    def _keep_early(self, command: "asyncio.Future[Note]") -> None:
        """The wait for a command ends with the other work: a command already taken is kept, not lost."""
        if command.done() and not command.cancelled():
            self._early = command.result()
        else:
            command.cancel()

    async def _stop(self, release: bool) -> None:
        self.words.shut()
        if release:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.elector.release(), RELEASE_TIMEOUT)
            self.tell("released")


class KeeperLink:
    """The main process's side: its write gate, the heartbeat, and the keeper's notes."""

    def __init__(self, words: SharedWords, sock: socket.socket | None, process: "BaseProcess | None" = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.words, self._sock, self.process, self._clock = words, sock, process, clock
        self.notes: asyncio.Queue[Note] = asyncio.Queue()
        self.term: int | None = None  # the term this process writes in (None: standing by)
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task[None] | None = None

    async def connect(self) -> None:
        if self._sock is not None:
            reader, self._writer = await asyncio.open_connection(sock=self._sock)
            self._reader_task = asyncio.create_task(_read_lines(reader, self.notes, "gone"), name="keeper notes")

    def tell(self, line: str) -> None:
        if self._writer is not None and not self._writer.is_closing():
            self._writer.write(line.encode("ascii") + b"\n")

    def writable(self) -> bool:
        """The write gate: a term of ours, and GATE not passed on our clock."""
        return self.term is not None and self._clock() < self.words.until()

    def beat(self, ready: bool) -> None:
        self.words.beat(self._clock(), ready)

    async def release(self, timeout: float = RELEASE_TIMEOUT + 2.0) -> None:
        """Writing has stopped: the keeper releases the Lease (if held) and exits; bounded."""
        self.term = None
        self.tell("release")
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._until("released", "gone"), timeout)
        if self._writer is not None:
            self._writer.close()
        if self._reader_task is not None:
            self._reader_task.cancel()
        if self.process is not None:
            await asyncio.get_running_loop().run_in_executor(None, self.process.join, 2.0)
            if self.process.is_alive():
                self.process.kill()
                self.process.join(2.0)

    async def _until(self, *kinds: str) -> Note:
        while True:
            note = await self.notes.get()
            if note[0] in kinds:
                return note


# ---------------------------------------------------------------- the process


def spawn(config: Config, access: Access, liveness: str | None) -> KeeperLink:
    """Fork the keeper (before any thread or task of the operator starts) and return the main side."""
    words = SharedWords()
    mine, theirs = socket.socketpair()
    context = multiprocessing.get_context("fork")
    process = context.Process(target=_child, args=(config, access, liveness, words, theirs, mine),
                              name="sunk-sandbox-operator lease keeper", daemon=True)
    gc.freeze()  # the child's collections then leave the shared pages alone (no copy of the heap)
    process.start()
    theirs.close()
    return KeeperLink(words, mine, process)


def _child(config: Config, access: Access, liveness: str | None, words: SharedWords, sock: socket.socket,
           theirs: socket.socket) -> None:
    theirs.close()
    # The main process orchestrates the stop; a signal to the process group must not end the
    # keeper before it hears "release" (or EOF).
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    signal.set_wakeup_fd(-1)  # the parent's event loop's, if it had set one
    asyncio.run(_keep(config, access, liveness, words, sock))


async def _keep(config: Config, access: Access, liveness: str | None, words: SharedWords,
                sock: socket.socket) -> None:
    http = KubeHTTP(access)
    elector = LeaderElector(Kube(http), config.operator_namespace, identity=new_identity(),
                            lease_duration=config.lease_duration_seconds, renew_deadline=config.renew_deadline_seconds,
                            retry_period=config.retry_period_seconds, standby_poll=config.standby_poll_seconds,
                            on_renewed=words.open_until)
    commands: asyncio.Queue[Note] = asyncio.Queue()
    reader, writer = await asyncio.open_connection(sock=sock)
    lines = asyncio.create_task(_read_lines(reader, commands, "eof"))
    probes = None
    born = time.monotonic()  # before the first beat, the loop counts as turned when the keeper started
    if liveness:
        url = urlparse(liveness)
        probes = await health.serve(url.hostname or "0.0.0.0", url.port or 8081, ready=words.ready,
                                    leading=elector.is_leader,
                                    stalled=lambda: time.monotonic() - max(born, words.last_beat()),
                                    stall_limit=config.liveness_stall_seconds)
    try:
        tell: Callable[[str], None] = lambda line: writer.write(line.encode("ascii") + b"\n")  # noqa: E731
        await LeaseKeeper(elector, words, commands, tell).run()
        with contextlib.suppress(ConnectionError, OSError):
            await writer.drain()
    finally:
        words.shut()
        lines.cancel()
        if probes is not None:
            await probes.cleanup()
        await http.close()
        writer.close()
