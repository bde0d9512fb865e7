"""Liveness and readiness endpoints, served by the operator itself (leader or standby alike).

`/healthz`: the event loop answers. `/readyz`: the caches have their initial LIST (a standby is
ready to take over). kopf's own liveness endpoint runs only while kopf runs, i.e. on the leader,
so it cannot serve a standby's probes.
"""

from __future__ import annotations

from typing import Callable

from aiohttp import web


async def serve(host: str, port: int, ready: Callable[[], bool], leading: Callable[[], bool]) -> web.AppRunner:
    async def healthz(_: web.Request) -> web.Response:
        return web.json_response({"ok": True, "leader": leading()})

    async def readyz(_: web.Request) -> web.Response:
        ok = ready()
        return web.json_response({"ready": ok, "leader": leading()}, status=200 if ok else 503)

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    return runner
