"""The operator's Kubernetes HTTP session: aiohttp, authenticated like the kubernetes client.

Every request the operator makes goes through it: the informers' paginated LISTs and WATCHes and
each read and write of adapters/kube.py. It takes an `Access` (adapters/kubeconfig.py: server, CA,
client certificate, bearer token — read again every few seconds, so a rotated in-cluster token is
picked up) and hands back parsed JSON; API statuses become the typed errors of adapters/kube.py,
a dropped connection an `ApiStatus` 503 (transient, retried by the caller).
"""

from __future__ import annotations

import time
from typing import Any, AsyncIterator, Callable, Mapping

import aiohttp
import orjson  # parses watch events and LIST pages several times faster than json: the pod watch's main cost

from ..core.redact import describe
from . import kube as k
from .kubeconfig import Access


class ApiStatus(k.KubeError):
    """A non-2xx answer: `code` is the HTTP status (410: the resourceVersion is too old)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code, self.message = code, message


# Seconds one Authorization value serves before it is asked again (a token file read; with the
# kubernetes client's loader, its refresh hook, which reloads the whole kubeconfig at every request:
# docs/scale.md). A rotated token is picked up within this; the
# one it replaces stays valid longer (projected tokens are refreshed at 80 % of their lifetime).
AUTH_REUSE_SECONDS = 10.0


class KubeHTTP:
    def __init__(self, access: Access, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.access = access
        self.base = access.server.rstrip("/")
        self._ssl = access.ssl_context()
        self._session: aiohttp.ClientSession | None = None
        self._monotonic = monotonic
        self._auth: tuple[float, str | None] | None = None  # (when read, the Authorization value)

    def _authorization(self) -> str | None:
        now = self._monotonic()
        if self._auth is None or now - self._auth[0] >= AUTH_REUSE_SECONDS:
            self._auth = (now, self.access.authorization())
        return self._auth[1]

    def _headers(self, extra: Mapping[str, str] | None) -> dict[str, str]:
        headers = {"Accept": "application/json", "User-Agent": "sunk-sandbox-operator"}
        if value := self._authorization():
            headers["Authorization"] = value
        headers.update(extra or {})
        return headers

    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            # No pool limit: every watch holds its connection open (HTTP/1.1), one per watched kind and
            # namespace; a limit would make the next watch, and every GET and PUT, wait for ever.
            self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=self._ssl, limit=0))
        return self._session

    async def request(self, method: str, path: str, params: Mapping[str, str] | None = None, body: Any = None,
                      content_type: str = "application/json", headers: Mapping[str, str] | None = None,
                      timeout: float = 60.0, decode: Callable[[bytes], dict] | None = None) -> dict:
        extra = {**(headers or {}), **({"Content-Type": content_type} if body is not None else {})}
        # orjson: json.dumps was a visible part of a RoleBinding create's operator CPU (the same compact bytes).
        data = orjson.dumps(body, option=orjson.OPT_NON_STR_KEYS) if body is not None else None
        try:
            async with self.session().request(method, self.base + path, params=params, data=data,
                                              headers=self._headers(extra),
                                              timeout=aiohttp.ClientTimeout(total=timeout)) as resp:
                answer = await resp.read()
                if resp.status >= 300:
                    raise _error(resp.status, answer)
                return (decode or orjson.loads)(answer) if answer else {}
        except aiohttp.ClientError as exc:  # a dropped or refused connection: transient, like a 503
            raise ApiStatus(503, describe(exc)) from None

    async def get(self, path: str, params: Mapping[str, str], headers: Mapping[str, str] | None = None,
                  timeout: float = 60.0, decode: Callable[[bytes], dict] | None = None) -> dict:
        """`decode`: the answer's bytes to JSON (orjson when None; the pod informer's pages: podwire)."""
        return await self.request("GET", path, params, headers=headers, timeout=timeout, decode=decode)

    async def watch(self, path: str, params: Mapping[str, str], headers: Mapping[str, str] | None = None,
                    timeout: float = 330.0) -> AsyncIterator[dict]:
        """Watch events, one parsed JSON object per line, until the server ends the stream."""
        async with self.session().get(self.base + path, params={**params, "watch": "true"},
                                      headers=self._headers(headers),
                                      timeout=aiohttp.ClientTimeout(total=None, sock_read=timeout)) as resp:
            if resp.status >= 300:
                raise _error(resp.status, await resp.read())
            buffer = b""
            async for chunk in resp.content.iter_any():
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    if line.strip():
                        yield orjson.loads(line)
            if buffer.strip():
                yield orjson.loads(buffer)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()


def _error(status: int, body: bytes) -> Exception:
    try:
        message = orjson.loads(body).get("message") or ""
    except (ValueError, AttributeError):
        message = body[:200].decode(errors="replace")
    typed = {403: k.Forbidden, 404: k.NotFound, 409: k.Conflict, 422: k.Invalid}.get(status)
    return typed(message) if typed else ApiStatus(status, message)


def status_code(event: Any) -> int | None:
    """The HTTP code of a watch ERROR event's Status object."""
    obj = event.get("object") if isinstance(event, dict) else None
    return obj.get("code") if isinstance(obj, dict) else None
