"""The admission webhook's HTTPS server: `POST /validate` answers AdmissionReview v1, in every replica.

Why not kopf's `@kopf.on.validate` served by `kopf.WebhookServer`: kopf runs only on the replica
that holds the leader Lease (controller/main.py starts kopf after acquiring it and stops it when the
Lease is lost), so a kopf-served webhook would listen on the leader alone, while the webhook
Service routes the API server's calls to every Ready replica: the standby's share would fail
(and, with failurePolicy Ignore, pass unchecked), and each leadership change would move the
endpoint. This server starts next to /healthz and /metrics in every replica, leader or standby:
answering needs no leadership, since it only reads. AdmissionReview is small JSON, answered by
hand (core/admission.py builds the answer; this module only carries it).

Thread: the server runs on an event loop of its own, in a thread of its own (`LoopThread`), with
its own HTTP session to the API server, so a tenant's reconcile that keeps the operator's main
loop busy does not delay reviews (Python-level work yields the GIL every few milliseconds; a long
C call such as a regex still holds it, and then the API server's call times out and
`failurePolicy: Ignore` lets it through: the controller stays the authority). What it reads from
the main process must be immutable (the tenancy settings) or a snapshot swapped by one assignment.

TLS: `tls.crt` and `tls.key` from one directory, as a cert-manager Certificate's Secret is mounted.
A renewed certificate is loaded for new connections without a restart (the files are checked every
`reload_seconds`; a half-written pair keeps the old one until the next check).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import ssl
import threading
from pathlib import Path
from typing import Awaitable, Callable, Protocol

from aiohttp import web

from ..core.redact import describe

log = logging.getLogger("sunk_sandbox_operator")

PATH = "/validate"
MAX_BODY = 4 * 1024 * 1024  # object + oldObject, each at most etcd's 1.5 MiB


class CertFiles:
    """A server SSLContext loaded from `<dir>/tls.crt` and `<dir>/tls.key`, reloadable in place
    (OpenSSL hands the context's current certificate to each new connection)."""

    def __init__(self, cert_dir: Path | str) -> None:
        self.cert = Path(cert_dir) / "tls.crt"
        self.key = Path(cert_dir) / "tls.key"
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.minimum_version = ssl.TLSVersion.TLSv1_2
        self._stamp: tuple | None = None
        if not self.reload_if_changed():
            raise FileNotFoundError(f"no certificate in {cert_dir} (tls.crt, tls.key)")

    def _read_stamp(self) -> tuple | None:
        try:  # stat follows the ..data symlinks of a Secret volume: a new pair is a new inode
            return tuple((s.st_ino, s.st_mtime_ns, s.st_size) for s in (os.stat(self.cert), os.stat(self.key)))
        except OSError:
            return None

    def reload_if_changed(self) -> bool:
        """Load the pair if it changed since the last load; True when loaded now."""
        stamp = self._read_stamp()
        if stamp is None or stamp == self._stamp:
            return False
        try:
            self.context.load_cert_chain(self.cert, self.key)
        except (ssl.SSLError, OSError) as exc:  # mid-rotation: keep serving the old pair
            log.warning("webhook certificate in %s not loaded (%s); keeping the previous one", self.cert.parent, exc)
            return False
        self._stamp = stamp
        return True


Review = Callable[[dict], Awaitable[dict]]  # AdmissionReview in, AdmissionReview out; ValueError: bad request


class WebhookServer:
    def __init__(self, review: Review, cert_dir: Path | str, host: str, port: int,
                 reload_seconds: float = 60.0) -> None:
        self.review = review
        self.certs = CertFiles(cert_dir)
        self.host, self.port = host, port
        self.reload_seconds = reload_seconds
        self._runner: web.AppRunner | None = None
        self._reloader: asyncio.Task | None = None

    async def _validate(self, request: web.Request) -> web.Response:
        try:
            body = await request.json()
            answer = await self.review(body)
        except ValueError as exc:  # not JSON, or not an AdmissionReview
            return web.json_response({"error": describe(exc)}, status=400)
        except Exception:  # noqa: BLE001 - the API server treats it per failurePolicy (Ignore: allowed)
            log.exception("admission review failed")
            return web.json_response({"error": "internal error"}, status=500)
        return web.json_response(answer)

    async def start(self) -> None:
        app = web.Application(client_max_size=MAX_BODY)
        app.router.add_post(PATH, self._validate)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, self.host, self.port, ssl_context=self.certs.context).start()
        self._reloader = asyncio.create_task(self._reload(), name="webhook certificate reload")

    async def _reload(self) -> None:
        while True:
            await asyncio.sleep(self.reload_seconds)
            if self.certs.reload_if_changed():
                log.info("webhook certificate reloaded from %s", self.certs.cert.parent)

    async def stop(self) -> None:
        if self._reloader is not None:
            self._reloader.cancel()
            await asyncio.gather(self._reloader, return_exceptions=True)
        if self._runner is not None:
            await self._runner.cleanup()


class Stoppable(Protocol):
    async def stop(self) -> None: ...


class LoopThread:
    """A server built and run on a new event loop in a daemon thread; `stop` ends both from any loop."""

    def __init__(self, build: Callable[[], Awaitable[Stoppable]], name: str) -> None:
        self._build, self.name = build, name
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: Stoppable | None = None
        self._started: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def _run(self) -> None:
        loop = self._loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        try:
            self._server = loop.run_until_complete(self._build())
        except BaseException as exc:  # noqa: BLE001 - handed to start()'s caller
            self._started.set_exception(exc)
            loop.close()
            return
        self._started.set_result(None)
        try:
            loop.run_forever()
        finally:
            try:
                loop.run_until_complete(self._server.stop())
                loop.run_until_complete(loop.shutdown_asyncgens())
            finally:
                loop.close()

    async def start(self) -> None:
        """Once the server listens (its build's error raised here)."""
        self._thread.start()
        await asyncio.wrap_future(self._started)

    async def stop(self) -> None:
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(loop.stop)
        await asyncio.get_running_loop().run_in_executor(None, self._thread.join, 10.0)
