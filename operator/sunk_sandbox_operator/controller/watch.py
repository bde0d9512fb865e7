"""Namespace and sandbox-Pod watch events → the caches → the bindings they concern.

No kopf machinery per object: each event updates a cache, then only the bindings whose
namespaces it touches are signalled (the scope list loop, placement re-judge, coalesced status flush).
"""

from __future__ import annotations

import logging

from . import placement, scope
from .context import Context
from .status_writer import request_flush

log = logging.getLogger("sunk_sandbox_operator")

SLOW_EVENT_SECONDS = 0.5


def on_namespace(ctx: Context, event_type: str | None, body: dict) -> None:
    at = ctx.monotonic()
    before, after = ctx.namespaces.apply(event_type, body)
    if before is not None and before is after:
        return  # nothing the operator keeps changed (a relist, an annotation edit)
    name = info.name if (info := after or before) else ((body.get("metadata") or {}).get("name") or "")
    scope.on_namespace(ctx, name, before, after, at)
    for state in ctx.bindings:
        if placement.refresh_namespace(ctx, state, name):  # membership may have changed with its labels
            request_flush(ctx, state, before=placement.report)


def on_pod(ctx: Context, event_type: str | None, body: dict) -> None:
    started = ctx.monotonic()
    ctx.metrics.pod_events.inc()
    for kind, pod in ctx.pods.apply(event_type, body):
        for state, facts, new_hazards in placement.observe(ctx, kind, pod):
            for hazard in new_hazards:
                placement.hazard_event(ctx, state, hazard, facts.ref)
            if kind != "DELETED":
                scope.on_sandbox_pod(ctx, state, body)
            # The placement summary (one pass over the binding's pods) is computed by the coalesced
            # flush itself, once per status write, not once per pod event.
            request_flush(ctx, state, before=placement.report)
    if ctx.monotonic() - started > SLOW_EVENT_SECONDS:
        log.warning("slow pod event handling: %.2fs", ctx.monotonic() - started)
