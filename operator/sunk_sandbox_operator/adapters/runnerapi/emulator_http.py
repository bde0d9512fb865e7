"""The runner API emulator's HTTP face: the Connect RPCs and the loopback-only admin endpoints, as
aiohttp handlers over an `EmulatorState` (the contract, the knobs and running it: `emulator.py`).
"""

from __future__ import annotations

import asyncio
import ipaddress
import time
from typing import Any

from aiohttp import web

from .emulator_state import EmulatorState, _public
from .emulator_wire import SERVICE, ApiError, validate_get, validate_update
from .errors import CODE_TO_HTTP


STATE_KEY: web.AppKey[EmulatorState] = web.AppKey("state", EmulatorState)


def _error_response(code: str, message: str, retry_after: float | None = None) -> web.Response:
    headers = {"Retry-After": f"{retry_after:g}"} if retry_after is not None else None
    return web.json_response({"code": code, "message": message}, status=CODE_TO_HTTP[code], headers=headers)


def _bearer(request: web.Request) -> str | None:
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


def _is_loopback(request: web.Request) -> bool:
    try:
        return ipaddress.ip_address((request.remote or "").split("%")[0]).is_loopback
    except ValueError:
        return False


async def _rpc(request: web.Request) -> web.StreamResponse:
    state = request.app[STATE_KEY]
    method = request.match_info["method"]
    if method not in ("GetManagedRunner", "UpdateManagedRunner"):
        return web.Response(status=404)  # unknown procedure: bare 404, as Connect servers do
    if state.latency_seconds > 0:
        await asyncio.sleep(state.latency_seconds)
    runner_id: str | None = None
    who = "client"
    try:
        if request.content_type != "application/json":
            return web.Response(status=415)
        if request.headers.get("Connect-Protocol-Version") != "1":
            raise ApiError("invalid_argument", "missing or unsupported Connect-Protocol-Version header")
        token = _bearer(request)
        admin, readonly, who = state.caller(token)
        if token is None or not (admin or readonly):
            raise ApiError("unauthenticated", "missing or invalid bearer token")
        if not admin:
            raise ApiError("permission_denied", "the token lacks the sandbox_admin role")
        try:
            body = await request.json()
        except (ValueError, UnicodeDecodeError):
            raise ApiError("invalid_argument", "request body is not valid JSON") from None
        with state.lock:
            injected = state.injected_error()
            wrap = state.wrap_responses
        if injected:
            retry_after = state.retry_after_seconds if injected in ("unavailable", "resource_exhausted") else None
            _log_call(state, method, injected, None, who)
            return _error_response(injected, "injected by the emulator's error knob", retry_after)
        if method == "GetManagedRunner":
            runner_id = validate_get(body)
            with state.lock:
                runner = state.get(runner_id)
        else:
            runner_id, _identity, policy, etag = validate_update(body)
            with state.lock:
                runner = state.update(runner_id, policy, etag, who)
    except ApiError as err:
        _log_call(state, method, err.code, runner_id, who)
        return _error_response(err.code, err.message)
    _log_call(state, method, "ok", runner_id, who)
    return web.json_response(_public(runner_id, runner, wrap))


def _log_call(state: EmulatorState, method: str, code: str, runner_id: str | None, who: str = "client") -> None:
    with state.lock:
        state.call_log.append({"time": time.time(), "method": method, "code": code, "runner_id": runner_id,
                               "who": who})


@web.middleware
async def _admin_loopback_only(request: web.Request, handler: Any) -> web.StreamResponse:
    if request.path.startswith("/_emulator/") and not _is_loopback(request):
        return web.json_response({"code": "permission_denied", "message": "admin endpoints are loopback only"}, status=403)
    return await handler(request)


async def _healthz(request: web.Request) -> web.Response:
    return web.json_response({"ok": True})


async def _state(request: web.Request) -> web.Response:
    return web.json_response(request.app[STATE_KEY].snapshot())


async def _knobs(request: web.Request) -> web.Response:
    state = request.app[STATE_KEY]
    try:
        knobs = await request.json()
        if not isinstance(knobs, dict):
            raise ValueError("knobs must be a JSON object")
        state.set_knobs(knobs)
    except (ValueError, TypeError) as exc:
        return web.json_response({"code": "invalid_argument", "message": str(exc)}, status=400)
    return web.json_response(state.knobs())


async def _admin_write(request: web.Request) -> web.Response:
    state = request.app[STATE_KEY]
    try:
        body = await request.json()
    except ValueError:
        body = None
    if not isinstance(body, dict) or "policy" not in body or not (body["policy"] is None or isinstance(body["policy"], dict)):
        return web.json_response({"code": "invalid_argument", "message": 'body must be {"policy": object|null}'}, status=400)
    runner_id = request.match_info["runner_id"]
    try:
        runner = state.write(runner_id, body["policy"], "other-admin", identity=body.get("identity"))
    except ApiError as err:  # a field given under both of its names
        return web.json_response({"code": err.code, "message": err.message}, status=400)
    return web.json_response(_public(runner_id, runner, False))


async def _not_found(request: web.Request) -> web.Response:
    return web.Response(status=404)


def create_app(state: EmulatorState) -> web.Application:
    app = web.Application(middlewares=[_admin_loopback_only])
    app[STATE_KEY] = state
    app.router.add_get("/_emulator/healthz", _healthz)
    app.router.add_get("/_emulator/state", _state)
    app.router.add_post("/_emulator/knobs", _knobs)
    app.router.add_post("/_emulator/runners/{runner_id}", _admin_write)
    app.router.add_post(f"/{SERVICE}/{{method}}", _rpc)
    app.router.add_route("*", "/{tail:.*}", _not_found)  # wrong path: bare 404, no JSON
    return app
