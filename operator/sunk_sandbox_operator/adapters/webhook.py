"""The admission webhook's HTTPS server: `POST /validate` answers AdmissionReview v1, in every replica.

Why not kopf's `@kopf.on.validate` served by `kopf.WebhookServer`: kopf runs only on the replica
that holds the leader Lease (controller/main.py starts kopf after acquiring it and stops it when the
Lease is lost), so a kopf-served webhook would listen on the leader alone, while the webhook
Service routes the API server's calls to every Ready replica: the standby's share would fail
(and, with failurePolicy Ignore, pass unchecked), and each leadership change would move the
endpoint. This server starts next to /healthz and /metrics in every replica, leader or standby:
answering needs no leadership, since it only reads. AdmissionReview is small JSON, answered by
hand (core/admission.py builds the answer; this module only carries it).

TLS: `tls.crt` and `tls.key` from one directory, as a cert-manager Certificate's Secret is mounted.
A renewed certificate is loaded for new connections without a restart (the files are checked every
`reload_seconds`; a half-written pair keeps the old one until the next check).
"""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
from pathlib import Path
from typing import Awaitable, Callable

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
