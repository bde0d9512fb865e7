"""kopf wiring only: decorators hand events to the controller; the context lives in kopf's memo.

kopf watches SunkSandboxBindings only (a daemon per binding + a finalizer on the binding).
Namespaces and sandbox Pods are watched by the controller's own informers (started at start-up:
one LIST + WATCH per kind, compact caches, no per-object kopf machinery).
"""

from __future__ import annotations

import kopf

from .api import keys
from .controller import lifecycle

BINDINGS = (keys.GROUP, keys.VERSION, keys.PLURAL)


@kopf.on.startup()
async def startup(settings: kopf.OperatorSettings, memo: kopf.Memo, **_) -> None:
    lifecycle.configure(settings)  # the context (memo.ctx) is built before kopf starts: controller/main.py
    await lifecycle.publish_settings(memo.ctx)  # kopf starts with each leadership term: the leader's


@kopf.on.login()
async def login(memo: kopf.Memo, **_) -> kopf.ConnectionInfo:
    return lifecycle.login(memo.ctx)


@kopf.on.event(*BINDINGS)
async def binding_event(event: kopf.RawEvent, body: kopf.Body, memo: kopf.Memo, **_) -> None:
    lifecycle.binding_event(memo.ctx, event.get("type"), dict(body))


@kopf.daemon(*BINDINGS, cancellation_timeout=30.0, initial_delay=0)
async def binding_loop(body: kopf.Body, stopped: kopf.DaemonStopped, memo: kopf.Memo, **_) -> None:
    await lifecycle.binding_loop(memo.ctx, dict(body), stopped)


@kopf.on.delete(*BINDINGS, optional=False)
async def binding_deleted(body: kopf.Body, retry: int, memo: kopf.Memo, **_) -> None:
    delay = await lifecycle.binding_deleted(memo.ctx, dict(body), retry)
    if delay is not None:
        raise kopf.TemporaryError("restore failed; retrying", delay=delay)
