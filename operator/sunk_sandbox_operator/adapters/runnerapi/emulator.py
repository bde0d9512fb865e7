"""In-memory emulator of the runner management API, for tests, the demo and users' dry runs.

Same contract as the real service (domain.md section 5): Connect unary JSON, bearer auth with
the sandbox_admin role, etag concurrency (`failed_precondition` on a stale etag, nothing
changed), rejection of forbidden `base` fields, `policy: null` for a runner never configured.
Knobs add latency, random or scripted errors, a concurrent "other admin" writer, and declarative
co-writers: per runner, a whole desired policy applied like `terraform apply` on a schedule
(cowriter.py: GET the etag, PUT the policy when it differs), over HTTP against this emulator, so
a client sees the real fight with another owner of the policy.

Requests are read as protojson reads them: each field under its JSON name (lowerCamelCase) or
its proto name (`runner_id`, `managed_runner`, `update_mask`, snake_case inside the policy);
answers use JSON names only (emulator_wire.json_names; map keys such as annotation keys are
data and keep their spelling).

Response shape (Get and Update alike), top level as domain.md shows it:
    {"runnerId": "...", "identity": {...}, "policy": {...} | null, "etag": "..."}
With the `wrap_responses` knob the same object comes wrapped in {"managedRunner": ...}.
Errors: {"code": "...", "message": "..."} with the HTTP status of the code; an unknown path is
a bare 404 (no body), as a Connect server answers it.

Admin endpoints (no bearer, loopback clients only):
    GET  /_emulator/healthz        -> {"ok": true}
    GET  /_emulator/state          -> {"runners", "write_log", "call_log", "knobs"}
    POST /_emulator/knobs          {latency_seconds, error_rates, fail_next, retry_after_seconds,
                                    other_admin, wrap_responses, co_writers} (any subset);
                                    co_writers: {runner id: {"policy": ..., "interval_seconds": N}
                                    (0: apply once) | null (stop it)}
    POST /_emulator/runners/{id}   {"policy": ..., "identity"?: ...}: write as another admin
                                    (creates the runner if needed, new etag, logged)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import signal
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from aiohttp import web

import httpx

from .cowriter import CoWriter
from .emulator_http import create_app  # the HTTP face: the RPC and admin handlers
from .emulator_state import EmulatorState as EmulatorState  # this module's API too
from .emulator_wire import forbidden_fields as forbidden_fields  # ... and so is this
from .errors import CODE_TO_HTTP

log = logging.getLogger(__name__)

# seconds between looks at the co-writers' schedule
CO_WRITER_TICK = 0.05


# ---------------------------------------------------------------- running it


class EmulatorThread:
    """The emulator on a free loopback port, served by its own event loop in a daemon thread."""

    def __init__(self, state: EmulatorState | None = None, host: str = "127.0.0.1", port: int = 0) -> None:
        self.state = state if state is not None else EmulatorState()
        self.host, self._port = host, port
        self.url = ""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> EmulatorThread:
        ready = threading.Event()
        failure: list[BaseException] = []

        def serve() -> None:
            loop = self._loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
            try:
                self._runner = loop.run_until_complete(_start_site(self.state, self.host, self._port))
                self.url = _url(self._runner)
            except BaseException as exc:  # reported to start()'s caller
                failure.append(exc)
                ready.set()
                loop.close()
                return
            ready.set()
            try:
                loop.run_forever()
            finally:
                loop.run_until_complete(self._runner.cleanup())
                loop.close()

        self._thread = threading.Thread(target=serve, name="runner-api-emulator", daemon=True)
        self._thread.start()
        ready.wait()
        if failure:
            raise failure[0]
        return self

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)

    def __enter__(self) -> EmulatorThread:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextmanager
def running_emulator(state: EmulatorState | None = None, host: str = "127.0.0.1", port: int = 0) -> Iterator[EmulatorThread]:
    """`with running_emulator(state) as emu: ... emu.url ...`"""
    with EmulatorThread(state, host, port) as emu:
        yield emu


async def _start_site(state: EmulatorState, host: str, port: int) -> web.AppRunner:
    app = create_app(state)
    tasks: list[asyncio.Task[None]] = []

    async def stop_co_writers(_: web.Application) -> None:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    app.on_cleanup.append(stop_co_writers)  # before setup: the app's signals freeze then
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    tasks.append(asyncio.ensure_future(_run_co_writers(state, _url(runner))))
    return runner


async def _run_co_writers(state: EmulatorState, url: str) -> None:
    """Apply each co-writer's policy when due, over HTTP against this emulator, one at a time."""
    async with httpx.AsyncClient(timeout=10.0) as http:
        while True:
            for runner_id, policy in state.co_writers_due(time.monotonic()):
                try:
                    outcome, detail = await CoWriter(url, state.co_writer_token, runner_id, policy, http).apply()
                except httpx.HTTPError as exc:
                    outcome, detail = "error", type(exc).__name__
                state.co_writer_applied(runner_id, outcome, detail)
            await asyncio.sleep(CO_WRITER_TICK)


def _url(runner: web.AppRunner) -> str:
    host, port = runner.addresses[0][:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


# ---------------------------------------------------------------- CLI


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="sunk-sandbox-operator runner-api-emulator",
        description="Serve an in-memory emulator of the CoreWeave runner management API.",
    )
    p.add_argument("--listen", default="127.0.0.1:8089", help="HOST:PORT (port 0: any free port)")
    p.add_argument("--token", action="append", default=[], help="bearer token with sandbox_admin (repeatable)")
    p.add_argument("--token-file", action="append", default=[], help="file holding an admin token (repeatable)")
    p.add_argument("--readonly-token", action="append", default=[], help="valid token without sandbox_admin")
    p.add_argument("--runner", action="append", default=[], metavar="ID[=policy.json]",
                   help="runner to serve; without a file its policy is null (never configured)")
    p.add_argument("--latency", type=float, default=0.0, help="seconds added to every API call")
    p.add_argument("--error-rate", action="append", default=[], metavar="CODE=P",
                   help="answer this Connect code with probability P (repeatable)")
    p.add_argument("--retry-after", type=float, default=None, help="Retry-After seconds on injected unavailable")
    p.add_argument("--other-admin", action="store_true", help="another admin edits between each read and write")
    p.add_argument("--seed", type=int, default=None, help="random seed for the error knob")
    p.add_argument("--co-writer", action="append", default=[], metavar="ID=policy.json",
                   help="a declarative owner of runner ID's policy (like Terraform): applies this whole policy "
                   "(GET the etag, PUT it when the live policy differs) every --co-writer-interval (repeatable)")
    p.add_argument("--co-writer-interval", type=float, default=60.0,
                   help="seconds between a co-writer's applies (0: apply once, at start)")
    return p.parse_args(argv)


def state_from_args(args: argparse.Namespace) -> EmulatorState:
    tokens = {t.strip() for t in args.token} | {Path(f).read_text().strip() for f in args.token_file}
    if not tokens - {""}:
        raise SystemExit("at least one --token or --token-file is required")
    rates: dict[str, float] = {}
    for item in args.error_rate:
        code, sep, prob = item.partition("=")
        if not sep or code not in CODE_TO_HTTP:
            raise SystemExit(f"--error-rate wants CODE=P with a Connect code, got {item!r}")
        rates[code] = float(prob)
    state = EmulatorState(
        admin_tokens=tokens - {""},
        readonly_tokens={t.strip() for t in args.readonly_token} - {""},
        latency_seconds=args.latency,
        error_rates=rates,
        retry_after_seconds=args.retry_after,
        other_admin=args.other_admin,
        seed=args.seed,
    )
    for item in args.runner:
        runner_id, sep, path = item.partition("=")
        policy = json.loads(Path(path).read_text()) if sep else None
        if policy is not None and not isinstance(policy, dict):
            raise SystemExit(f"{path}: the policy must be a JSON object")
        state.add_runner(runner_id, policy)
    plans: dict[str, dict] = {}
    for item in args.co_writer:
        runner_id, sep, path = item.partition("=")
        policy = json.loads(Path(path).read_text()) if sep else None
        if not runner_id or not sep or not (policy is None or isinstance(policy, dict)):
            raise SystemExit(f"--co-writer wants ID=policy.json holding a JSON object or null, got {item!r}")
        plans[runner_id] = {"policy": policy, "interval_seconds": args.co_writer_interval}
    try:
        state.set_knobs({"co_writers": plans})
    except ValueError as exc:
        raise SystemExit(f"--co-writer-interval: {exc}") from None
    return state


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    state = state_from_args(args)
    host, _, port = args.listen.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"

    async def serve() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        runner = await _start_site(state, host, int(port))
        # Scripts wait for this line to learn the URL (port 0 picks a free one).
        print(f"runner-api emulator listening on {_url(runner)}", flush=True)
        try:
            await stop.wait()
        finally:
            await runner.cleanup()

    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    asyncio.run(serve())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
