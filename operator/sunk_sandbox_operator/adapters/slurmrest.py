"""slurmrestd over HTTP (JWT auth): the few reads the operator needs, with typed errors.

httpx against the OpenAPI paths (no maintained async client exists). Headers `X-SLURM-USER-NAME`
and `X-SLURM-USER-TOKEN` (Slurm 22.05 requires both; `Authorization: Bearer` is refused). The
token comes from a callable awaited right before each request (read from the Secret at use, so a
rotation is picked up), and appears in no message, log line or exception. Redirects are not
followed (the token goes only to the allowed URL); bodies are read up to a bound.

How slurmrestd 22.05 answers what goes wrong (measured, shared/reference/slurm.md):
- no or partial headers: 401 `Authentication failure` (plain text);
- a token slurmctld refuses (bad signature, expired, another user): HTTP 500 with
  `error_number`/`errno` -1 (`slurmctld config is unable to load`, `Unspecified error`), at once;
- slurmctld down behind a running slurmrestd: the same 500, but only after slurmrestd's own connect
  retries (9 s here): a -1 that slow is reported as unreachable, not as a refused token;
- a missing partition: HTTP 500 with `errno` 2000 `Invalid partition name specified` (24.11: 422
  `Unable to find partition`);
- a path it does not serve (wrong apiVersion): 404, plain text;
- `?update_time=<epoch>`: 304 with an empty body when nothing changed since (inclusive, seconds).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

import httpx

from ..core.redact import describe

TokenSource = Callable[[], Awaitable[str]]

MAX_BODY_BYTES = 64 * 1024 * 1024   # ~25,000 jobs at 2.6 KB each
SLOW_REFUSAL_SECONDS = 3.0          # a -1 slower than this is slurmctld not answering slurmrestd
NOT_FOUND_ERRNOS = {2000}           # ESLURM_INVALID_PARTITION_NAME
MESSAGE_MAX = 300


class SlurmError(Exception):
    """A slurmrestd request failed; the message says how (never with the token)."""


class SlurmUnreachable(SlurmError):
    """No answer: connection, timeout, 502/503/504, or slurmctld not answering slurmrestd."""


class SlurmAuthFailed(SlurmError):
    """The token was refused (401, or slurmctld's 500 with error -1)."""


class SlurmNotFound(SlurmError):
    """The thing asked for does not exist (a partition)."""


class SlurmAPIError(SlurmError):
    """Anything else unexpected: 404 (a path not served), a body that is not the documented JSON."""


@dataclass(frozen=True)
class Page:
    """A 200 answer: the decoded body, its size and how long it took."""

    body: dict
    size: int
    seconds: float


def _errors(body: Any) -> list[dict]:
    errors = body.get("errors") if isinstance(body, dict) else None
    return [e for e in errors if isinstance(e, dict)] if isinstance(errors, list) else []


def _errnos(errors: list[dict]) -> set[int]:
    out = set()
    for e in errors:
        for key in ("error_number", "errno", "error_code"):
            if isinstance(e.get(key), int):
                out.add(e[key])
    return out


def _describe(errors: list[dict]) -> str:
    texts = []
    for e in errors:
        words = [str(e[k]) for k in ("description", "error") if isinstance(e.get(k), str) and e[k]]
        number = next((e[k] for k in ("error_number", "errno") if isinstance(e.get(k), int)), None)
        texts.append(" / ".join(dict.fromkeys(words)) + (f" (error {number})" if number is not None else ""))
    return "; ".join(texts)[:MESSAGE_MAX] or "no error text"


def kind(error: SlurmError) -> str:
    """The SlurmObservation error kind of a typed error (core/slurm.py ready_condition reads it)."""
    return ("not_found" if isinstance(error, SlurmNotFound) else "auth" if isinstance(error, SlurmAuthFailed)
            else "unreachable" if isinstance(error, SlurmUnreachable) else "api")


def classify(status: int, body: Any, text: str, seconds: float) -> SlurmError | None:
    """The typed error of an answer (None: a success). Pure: the unit tests feed it the shapes
    slurm.md recorded."""
    if status in (200, 304):
        return None
    errors = _errors(body)
    numbers = _errnos(errors)
    said = _describe(errors) if errors else (text.strip()[:MESSAGE_MAX] or "empty body")
    if status in (401, 403):
        return SlurmAuthFailed(f"HTTP {status}: {said}")
    if status in (502, 503, 504):
        return SlurmUnreachable(f"HTTP {status}: {said}")
    if status == 404:
        return SlurmAPIError(f"HTTP 404 (the path is not served: a wrong apiVersion?): {said}")
    if numbers & NOT_FOUND_ERRNOS or (status == 422 and "Unable to find" in said):
        return SlurmNotFound(f"HTTP {status}: {said}")
    if status == 500 and -1 in numbers:
        if seconds >= SLOW_REFUSAL_SECONDS:
            return SlurmUnreachable(f"HTTP 500 after {seconds:.1f} s ({said}): slurmrestd answers, slurmctld does "
                                    "not answer it")
        return SlurmAuthFailed(f"HTTP 500: {said} (Slurm 22.05's answer when slurmctld refuses the token)")
    return SlurmAPIError(f"HTTP {status}: {said}")


class SlurmClient:
    """One slurmrestd (base URL and OpenAPI version). Everything injected: the transport (tests:
    httpx.MockTransport), the clock, `on_request(endpoint, code)` (metrics)."""

    def __init__(self, base_url: str, api_version: str = "v0.0.38", *, transport: httpx.AsyncBaseTransport | None = None,
                 timeout: float = 15.0, max_body: int = MAX_BODY_BYTES, clock: Callable[[], float] = time.monotonic,
                 on_request: Callable[[str, str], None] | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.api_version = api_version
        self._http = httpx.AsyncClient(base_url=self.base_url, transport=transport, timeout=timeout,
                                       follow_redirects=False)
        self._max_body = max_body
        self._clock = clock
        self._on_request = on_request or (lambda endpoint, code: None)

    def _path(self, tail: str) -> str:
        return f"/slurm/{self.api_version}/{tail}"

    async def _get(self, endpoint: str, tail: str, user: str, token: TokenSource,
                   params: dict | None = None) -> Page | None:
        """GET; the Page of a 200, None for a 304, else the typed error."""
        value = await token()
        headers = {"X-SLURM-USER-NAME": user, "X-SLURM-USER-TOKEN": value, "Accept": "application/json"}
        started = self._clock()
        try:
            async with self._http.stream("GET", self._path(tail), params=params, headers=headers) as resp:
                raw = bytearray()
                async for chunk in resp.aiter_bytes():
                    raw += chunk
                    if len(raw) > self._max_body:
                        self._on_request(endpoint, "too_large")
                        raise SlurmAPIError(f"the {endpoint} answer is larger than {self._max_body} bytes")
                status = resp.status_code
        except httpx.TimeoutException as exc:
            self._on_request(endpoint, "timeout")
            raise SlurmUnreachable(f"no answer within the timeout ({type(exc).__name__})") from None
        except httpx.TransportError as exc:
            self._on_request(endpoint, "error")
            raise SlurmUnreachable(describe(exc, MESSAGE_MAX)) from None  # h11 quotes a refused header value
        seconds = self._clock() - started
        self._on_request(endpoint, str(status))
        if status == 304:
            return None
        text = raw.decode("utf-8", errors="replace")
        try:
            body = json.loads(text) if text.strip() else None
        except ValueError:
            body = None
        error = classify(status, body, text, seconds)
        if error is not None:
            raise error
        if not isinstance(body, dict):
            raise SlurmAPIError(f"HTTP {status} with a body that is not a JSON object")
        return Page(body, len(raw), seconds)

    async def ping(self, user: str, token: TokenSource) -> dict:
        page = await self._get("ping", "ping", user, token)
        assert page is not None
        return page.body

    async def partition(self, name: str, user: str, token: TokenSource) -> dict:
        """The partition object; SlurmNotFound when Slurm has none of that name."""
        page = await self._get("partition", f"partition/{name}", user, token)  # a name the spec's pattern allows
        assert page is not None
        parts = [p for p in page.body.get("partitions") or [] if isinstance(p, dict)]
        found = next((p for p in parts if p.get("name") == name), None)
        if found is None:
            raise SlurmNotFound(f"HTTP 200 without partition {name!r}")
        return found

    async def partitions(self, user: str, token: TokenSource, update_time: int | None = None) -> Page | None:
        params = {"update_time": str(update_time)} if update_time is not None else None
        return await self._get("partitions", "partitions", user, token, params)

    async def jobs(self, user: str, token: TokenSource, update_time: int | None = None) -> Page | None:
        """The whole job list (no name filter exists in any version); None: unchanged since update_time."""
        params = {"update_time": str(update_time)} if update_time is not None else None
        return await self._get("jobs", "jobs", user, token, params)

    async def server_time(self, user: str, token: TokenSource) -> int | None:
        """slurmctld's clock (GET /diag, statistics.req_time): the poller's `update_time` is in its
        seconds, not ours. None when diag does not say."""
        page = await self._get("diag", "diag", user, token)
        stats = page.body.get("statistics") if page is not None else None
        value = stats.get("req_time") if isinstance(stats, dict) else None
        if isinstance(value, dict):  # v0.0.40+: {"set", "number"}
            value = value.get("number")
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    async def aclose(self) -> None:
        await self._http.aclose()
