"""The admission webhook, wired: settings -> HTTPS server (adapters/webhook.py), each review
screened and decided by core/admission.py, the cross-object facts read here.

Runs in every replica (see adapters/webhook.py for why not kopf's webhook server): nothing here
writes, so the write gate stays shut on a standby. It runs on a thread and event loop of its own
(adapters/webhook.py `LoopThread`) with its own client, so a tenant's reconcile does not delay it. A
review reads the operator's settings (immutable), the API server, and the bindings on the same
runner or target from the binding cache (controller/binding_cache.py, fed in every replica: no LIST
per review; its lookups copy what they return and tolerate an entry removed meanwhile, as the main
loop's watch applies events while this thread reads). The token Secret is read with the operator's
own client under its RBAC (get, only where an admin bound the secret reader; Forbidden is a fact
too), bounded by FACTS_TIMEOUT, well inside the webhook's timeoutSeconds: one that fails or is late
is Unknown, no warning.
The Secret's value is never decoded or kept (`Kube.secret_has_key`).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Callable

from ..adapters import kube as k
from ..adapters.kubehttp import KubeHTTP
from ..adapters.webhook import LoopThread, WebhookServer
from ..api.spec import BindingSpec
from ..core import admission as adm
from ..core import conflicts
from ..core.scope.target_ref import locate
from ..core.tenancy import TenancyPolicy
from .binding_cache import BindingCache
from .context import Context

log = logging.getLogger("sunk_sandbox_operator")

FACTS_TIMEOUT = 2.0  # seconds per read; the shipped configuration gives the webhook 5


async def _secret(kube: k.KubeAPI, namespace: str, name: str, key: str) -> adm.SecretFact:
    try:
        return adm.SecretFact.PRESENT if await kube.secret_has_key(namespace, name, key) else adm.SecretFact.NO_KEY
    except k.NotFound:
        return adm.SecretFact.MISSING
    except k.Forbidden:
        return adm.SecretFact.FORBIDDEN


def bindings(cache: BindingCache, namespace: str, spec: BindingSpec) -> list[dict] | None:
    """The allowed bindings on the spec's runner or scope target, from the cache (None before its
    first LIST is in: nothing is warned about then)."""
    if not cache.ready:
        return None
    target = locate(spec, namespace).key_tuple
    found = {conflicts.ref(b): b for b in (*cache.on_runner(spec.runner.id), *cache.on_target(target))}
    return list(found.values())


async def gather(kube: k.KubeAPI, cache: BindingCache, namespace: str, spec: BindingSpec,
                 timeout: float = FACTS_TIMEOUT) -> adm.Facts:
    ref = spec.runner.token_secret_ref
    try:
        secret = await asyncio.wait_for(_secret(kube, namespace, ref.name, ref.key), timeout)
    except Exception as exc:  # noqa: BLE001 - any failure is Unknown: no warning
        log.info("admission: reading the token Secret failed (%s); not warned about", type(exc).__name__)
        secret = adm.SecretFact.UNKNOWN
    return adm.Facts(bindings=bindings(cache, namespace, spec), secret=secret)


@dataclass(frozen=True)
class Reviews:
    """What a review reads: the operator's settings, a client of the webhook's own loop, the binding cache."""

    tenancy: TenancyPolicy
    kube: k.KubeAPI
    binding_cache: BindingCache


async def review(ctx: Context | Reviews, body: dict) -> dict:
    """One AdmissionReview answered (ValueError when the body is not one)."""
    req = adm.parse_request(body)
    screened = adm.screen(req, ctx.tenancy)
    if screened.final is not None:
        decision = screened.final
    else:
        assert screened.spec is not None
        facts = await gather(ctx.kube, ctx.binding_cache, req.namespace, screened.spec)
        decision = adm.admitted(req, screened.spec, facts, ctx.tenancy)
    if not decision.allowed:
        log.info("admission: %s %s/%s denied: %s", req.operation, req.namespace, req.name, decision.message)
    elif decision.warnings:
        log.info("admission: %s %s/%s allowed with %d warning(s)", req.operation, req.namespace, req.name,
                 len(decision.warnings))
    return adm.response(req.uid, decision)


async def serve(ctx: Context, client: Callable[[], k.KubeAPI] | None = None) -> LoopThread | None:
    """Start the webhook when configured (--webhook-port) on its own thread; None when off.
    `client` makes its Kubernetes client on that thread's loop (default: a session of its own with
    the operator's credentials)."""
    config = ctx.config
    if not config.webhook_port:
        return None
    if client is None:
        access = ctx.http.access if ctx.http is not None else None
        if access is None:
            raise RuntimeError("the webhook needs the operator's credentials (lifecycle.start)")
        client = lambda: k.Kube(KubeHTTP(access))  # noqa: E731
    tenancy, make, cache = ctx.tenancy, client, ctx.binding_cache

    async def build() -> _Served:
        kube = make()
        server = WebhookServer(lambda body: review(Reviews(tenancy, kube, cache), body), config.webhook_cert_dir,
                               config.webhook_address, config.webhook_port)
        await server.start()
        return _Served(server, kube)

    thread = LoopThread(build, "admission webhook")
    await thread.start()
    log.info("admission webhook on https://%s:%d/validate", config.webhook_address, config.webhook_port)
    return thread


@dataclass
class _Served:
    server: WebhookServer
    kube: k.KubeAPI

    async def stop(self) -> None:
        await self.server.stop()
        http = getattr(self.kube, "http", None)
        if isinstance(http, KubeHTTP):
            await http.close()
