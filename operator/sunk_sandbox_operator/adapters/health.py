"""Liveness and readiness endpoints, served by the Lease keeper (controller/keeper.py), leader or standby.

They are answered from the keeper's own process and event loop, so a tenant's reconcile that
keeps the operator's main loop busy never delays them.

`/healthz` (liveness): 200 while the keeper answers and the main loop has turned within
`stall_limit` seconds; the body says whether this replica leads and how long the main loop has not
turned (`mainLoopStalledSeconds`). The choice follows client-go and cert-manager: liveness restarts
a process that cannot make progress at all (their leader-election health check fails only when the
renewal itself is stuck), never one that is merely busy, since the new process, or the standby,
would meet the same objects. A tenant's slow reconcile is bounded and backed off by the
reconcile budget (controller/budget.py) and reported on its binding; only a main loop that has not
turned for `stall_limit` (default 300 s, far beyond any budget; 0: never) is called dead.

`/readyz` (readiness): the caches hold their initial LIST (a standby is ready to take over), as
the main process last said. kopf's own liveness endpoint runs only while kopf runs, i.e. on the
leader, so it cannot serve a standby's probes.
"""

from __future__ import annotations

from typing import Any, Callable

from aiohttp import web


def liveness(stalled: float, limit: float, leading: bool) -> tuple[int, dict[str, Any]]:
    """(HTTP status, body) of /healthz: dead only when the main loop has not turned for `limit` seconds."""
    alive = limit <= 0 or stalled < limit
    body: dict[str, Any] = {"ok": alive, "leader": leading, "mainLoopStalledSeconds": round(max(0.0, stalled), 1)}
    if not alive:
        body["error"] = (f"the operator's main event loop has not turned for {stalled:.0f} s "
                         f"(SSB_LIVENESS_STALL_SECONDS: {limit:g})")
    return (200 if alive else 503), body


async def serve(host: str, port: int, ready: Callable[[], bool], leading: Callable[[], bool],
                stalled: Callable[[], float] = lambda: 0.0, stall_limit: float = 0.0) -> web.AppRunner:
    async def healthz(_: web.Request) -> web.Response:
        status, body = liveness(stalled(), stall_limit, leading())
        return web.json_response(body, status=status)

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
