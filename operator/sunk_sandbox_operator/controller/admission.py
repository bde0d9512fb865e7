"""The admission webhook, wired: settings -> HTTPS server (adapters/webhook.py), each review
screened and decided by core/admission.py, the cross-object facts read here.

Runs in every replica (see adapters/webhook.py for why not kopf's webhook server): nothing here
writes, so the write gate stays shut on a standby. The facts are read with the operator's own
client under its RBAC: every binding (list, cluster-wide) and the token Secret (get, only where an
admin bound the secret reader; Forbidden is a fact too). Each read is bounded by FACTS_TIMEOUT, well
inside the webhook's timeoutSeconds, and one that fails or is late is Unknown: no warning.
The Secret's value is never decoded or kept (`Kube.secret_has_key`).
"""

from __future__ import annotations

import asyncio
import logging

from ..adapters import kube as k
from ..adapters.webhook import WebhookServer
from ..api.spec import BindingSpec
from ..core import admission as adm
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


async def gather(kube: k.KubeAPI, namespace: str, spec: BindingSpec, timeout: float = FACTS_TIMEOUT) -> adm.Facts:
    ref = spec.runner.token_secret_ref
    bindings, secret = await asyncio.gather(asyncio.wait_for(kube.list_bindings(), timeout),
                                            asyncio.wait_for(_secret(kube, namespace, ref.name, ref.key), timeout),
                                            return_exceptions=True)
    for what, got in (("listing bindings", bindings), ("reading the token Secret", secret)):
        if isinstance(got, BaseException):
            log.info("admission: %s failed (%s); not warned about", what, type(got).__name__)
    return adm.Facts(bindings=None if isinstance(bindings, BaseException) else bindings,
                     secret=secret if isinstance(secret, adm.SecretFact) else adm.SecretFact.UNKNOWN)


async def review(ctx: Context, body: dict) -> dict:
    """One AdmissionReview answered (ValueError when the body is not one)."""
    req = adm.parse_request(body)
    screened = adm.screen(req, ctx.tenancy)
    if screened.final is not None:
        decision = screened.final
    else:
        assert screened.spec is not None
        decision = adm.admitted(req, screened.spec, await gather(ctx.kube, req.namespace, screened.spec), ctx.tenancy)
    if not decision.allowed:
        log.info("admission: %s %s/%s denied: %s", req.operation, req.namespace, req.name, decision.message)
    elif decision.warnings:
        log.info("admission: %s %s/%s allowed with %d warning(s)", req.operation, req.namespace, req.name,
                 len(decision.warnings))
    return adm.response(req.uid, decision)


async def serve(ctx: Context) -> WebhookServer | None:
    """Start the webhook when configured (--webhook-port); None when off."""
    config = ctx.config
    if not config.webhook_port:
        return None
    server = WebhookServer(lambda body: review(ctx, body), config.webhook_cert_dir, config.webhook_address,
                           config.webhook_port)
    await server.start()
    log.info("admission webhook on https://%s:%d/validate", config.webhook_address, config.webhook_port)
    return server
