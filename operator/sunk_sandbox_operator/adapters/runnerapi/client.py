"""Client of the CoreWeave runner management API (Connect protocol, unary JSON over HTTP).

Two calls: GetManagedRunner and UpdateManagedRunner (domain.md section 5). The client retries,
with exponential backoff and full jitter, only the codes where retrying is safe and useful
(unavailable, deadline_exceeded, resource_exhausted); a stale etag is the caller's to handle
(re-read, re-merge, resend). Every HTTP attempt first takes a token from a rate limiter
shared by the whole process, so many bindings cannot hammer the API together.

The bearer token is fetched at each call (rotation works), stripped, sent only in the
Authorization header, and scrubbed from every error message; it is never logged.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import random
import ssl
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Mapping

import httpx

from ...core.redact import describe

from .errors import (  # re-exported: callers import everything from here
    ERROR_CLASSES,
    Aborted,
    AlreadyExists,
    Canceled,
    DataLoss,
    DeadlineExceeded,
    FailedPrecondition,
    Internal,
    InvalidArgument,
    NotFound,
    OutOfRange,
    PermissionDenied,
    ResourceExhausted,
    RunnerAPIError,
    Unauthenticated,
    Unavailable,
    Unimplemented,
    Unknown,
    code_for_bare_http_status,
    error_for,
    is_stale_etag,
)

__all__ = [
    "DEFAULT_LIMITER",
    "ERROR_CLASSES",
    "ManagedRunner",
    "RateLimiter",
    "RunnerAPIError",
    "RunnerClient",
    "SERVICE",
    "error_for",
    "is_stale_etag",
    "parse_managed_runner",
    "parse_error",
    "parse_retry_after",
    *(cls.__name__ for cls in ERROR_CLASSES.values()),
]

log = logging.getLogger(__name__)

SERVICE = "coreweave.sandbox.v1.RunnerManagementService"
GET = "GetManagedRunner"
UPDATE = "UpdateManagedRunner"

# Longest Retry-After we honour; beyond that the reconcile loop's own requeue is better.
RETRY_AFTER_MAX = 60.0

TokenSource = Callable[[], Awaitable[str]] | str


# ---------------------------------------------------------------- pure core


@dataclass(frozen=True)
class ManagedRunner:
    """A runner as the API returned it. `policy` None means never configured (distinct from {})."""

    runner_id: str
    identity: Any
    policy: dict | None
    etag: str
    raw: dict = field(repr=False)


def _camel(key: str) -> str:
    head, *rest = key.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def _envelope(obj: Mapping[str, Any]) -> dict[str, Any]:
    """Envelope keys in camelCase. Only the envelope: policy contents keep their own keys."""
    return {_camel(k): v for k, v in obj.items()}


def parse_managed_runner(runner_id: str, body: Any) -> ManagedRunner:
    """A ManagedRunner from a response body, wrapped in `managedRunner` or not, camel or snake case.

    A missing `policy` is null: protobuf JSON omits unset message fields.
    """
    if not isinstance(body, Mapping):
        raise Internal(f"response body is not a JSON object but {type(body).__name__}")
    top = _envelope(body)
    inner = top.get("managedRunner")
    obj = _envelope(inner) if isinstance(inner, Mapping) else top
    policy = obj.get("policy")
    if policy is not None and not isinstance(policy, dict):
        raise Internal(f"policy in response is not an object but {type(policy).__name__}")
    etag = obj.get("etag")
    return ManagedRunner(
        runner_id=str(obj.get("runnerId") or top.get("runnerId") or runner_id),
        identity=obj.get("identity"),
        policy=policy,
        etag="" if etag is None else str(etag),
        raw=dict(body),
    )


def parse_retry_after(value: str | None) -> float | None:
    """Retry-After in seconds (the HTTP-date form is not used by Connect servers: ignored)."""
    if not value:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        return None
    return min(max(seconds, 0.0), RETRY_AFTER_MAX)


def parse_error(status: int, content_type: str, content: bytes, retry_after: float | None) -> RunnerAPIError:
    """The typed error for a non-200 response: the Connect JSON body, else the HTTP status."""
    if "json" in content_type.lower():
        try:
            body = httpx.Response(200, content=content).json()
        except ValueError:
            body = None
        if isinstance(body, dict) and isinstance(body.get("code"), str):
            details = body.get("details")
            return error_for(
                body["code"],
                str(body.get("message") or ""),
                status,
                details if isinstance(details, list) else [],
                retry_after=retry_after,
            )
    code = code_for_bare_http_status(status)
    return error_for(code, f"HTTP {status} without a Connect error body", status, [], retry_after=retry_after)


def backoff_delay(attempt: int, base: float, cap: float, rng: random.Random, retry_after: float | None) -> float:
    """Full-jitter exponential backoff; the server's Retry-After, when given, is a floor."""
    jitter = rng.uniform(0.0, min(cap, base * (2**attempt)))
    return max(jitter, retry_after) if retry_after is not None else jitter


def _redact(text: str, secret: str) -> str:
    return text.replace(secret, "[REDACTED]") if secret else text


# ---------------------------------------------------------------- rate limiter


class RateLimiter:
    """Token bucket: `rate` requests per second on average, bursts up to `burst`.

    Reservation-based (each caller books the next free slot under a thread lock, then sleeps
    outside it), so one instance can be shared by every event loop and thread of the process.
    """

    def __init__(
        self,
        rate: float = 10.0,
        burst: int = 20,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
    ) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError("rate must be > 0 and burst >= 1")
        self.rate = float(rate)
        self.burst = int(burst)
        self._clock = clock
        self._sleep = sleep
        self._tokens = float(burst)
        self._last = clock()
        self._lock = threading.Lock()

    def reserve(self) -> float:
        """Book one token; return how long to wait before using it."""
        with self._lock:
            now = self._clock()
            self._tokens = min(float(self.burst), self._tokens + (now - self._last) * self.rate)
            self._last = now
            self._tokens -= 1.0
            return 0.0 if self._tokens >= 0 else -self._tokens / self.rate

    async def acquire(self) -> None:
        wait = self.reserve()
        if wait > 0:
            await self._sleep(wait)

    def __repr__(self) -> str:
        return f"RateLimiter(rate={self.rate}, burst={self.burst})"


# Process-wide: all clients share the API's budget unless told otherwise.
DEFAULT_LIMITER = RateLimiter(rate=10.0, burst=20)


# ---------------------------------------------------------------- imperative shell


@functools.cache
def _tls_context() -> ssl.SSLContext:
    # Loading the CA bundle costs ~0.1-0.3 s; build it once for every client of the process.
    return httpx.create_ssl_context()


class RunnerClient:
    """Async client for one API base URL. Create one per URL; `aclose()` when done."""

    def __init__(
        self,
        base_url: str,
        token: TokenSource,
        *,
        timeout: float = 10.0,
        max_retries: int = 4,
        backoff_base: float = 0.2,
        backoff_max: float = 5.0,
        limiter: RateLimiter | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        on_call: Callable[[str, str], None] | None = None,
        sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
        rng: random.Random | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._token = token
        self.max_retries = max(0, int(max_retries))
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.limiter = limiter if limiter is not None else DEFAULT_LIMITER
        self._on_call = on_call
        self._sleep = sleep
        self._rng = rng or random.Random()
        self._http = httpx.AsyncClient(timeout=httpx.Timeout(timeout), transport=transport, verify=_tls_context())

    def __repr__(self) -> str:
        return f"RunnerClient(base_url={self.base_url!r})"

    async def __aenter__(self) -> RunnerClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def get_managed_runner(self, runner_id: str) -> ManagedRunner:
        body = await self._call(GET, runner_id, {"runnerId": runner_id})
        return parse_managed_runner(runner_id, body)

    async def update_managed_runner(
        self, runner_id: str, *, identity: Any, policy: dict | None, etag: str
    ) -> ManagedRunner:
        """Replace the runner's whole policy, guarded by `etag`.

        Raises FailedPrecondition/Aborted (see `is_stale_etag`) when someone wrote in between.
        A retried attempt whose first try did land also ends there: the etag moved on.
        """
        if not etag:
            raise InvalidArgument("etag is required: read the runner first")
        request = {
            "runnerId": runner_id,
            "managedRunner": {"identity": identity, "policy": policy, "etag": etag},
            "updateMask": "policy",
        }
        body = await self._call(UPDATE, runner_id, request)
        runner = parse_managed_runner(runner_id, body)
        if not runner.etag:
            # The service did not echo the new state: read it, the caller needs the new etag.
            return await self.get_managed_runner(runner_id)
        return runner

    # -- internals

    async def _fetch_token(self) -> str:
        raw = self._token if isinstance(self._token, str) else self._token()
        token: str | bytes = await raw if inspect.isawaitable(raw) else raw
        if isinstance(token, bytes):
            token = token.decode("utf-8", "replace")
        # Secrets made from files often end with a newline; a header cannot carry it.
        token = (token or "").strip()
        if not token:
            raise Unauthenticated("no API token available (empty Secret value?)")
        # Checked here because the HTTP stack's own error would quote the header, token and all.
        if not all(33 <= ord(ch) <= 126 for ch in token):
            raise Unauthenticated("the API token contains characters not allowed in an HTTP header")
        return token

    def _record(self, method: str, code: str) -> None:
        if self._on_call is None:
            return
        try:
            self._on_call(method, code)
        except Exception:  # a broken metrics hook must not break API calls
            log.exception("runner API on_call hook failed")

    async def _call(self, method: str, runner_id: str, payload: dict) -> Any:
        url = f"{self.base_url}/{SERVICE}/{method}"
        attempt = 0
        while True:
            token = await self._fetch_token()
            await self.limiter.acquire()
            try:
                body = await self._attempt(url, token, payload)
            except RunnerAPIError as err:
                self._record(method, err.code)
                if not err.retryable or attempt >= self.max_retries:
                    raise
                delay = backoff_delay(attempt, self.backoff_base, self.backoff_max, self._rng, err.retry_after)
                log.warning(
                    "runner API %s for runner %s failed (%s), retry %d/%d in %.2fs",
                    method, runner_id, err.code, attempt + 1, self.max_retries, delay,
                )
                attempt += 1
                await self._sleep(delay)
                continue
            self._record(method, "ok")
            return body

    async def _attempt(self, url: str, token: str, payload: dict) -> Any:
        headers = {
            "Authorization": f"Bearer {token}",
            "Content-Type": "application/json",
            "Connect-Protocol-Version": "1",
        }
        try:
            response = await self._http.post(url, json=payload, headers=headers)
        except httpx.TimeoutException as exc:
            # `from None`: the chained httpx exception holds the request, headers included.
            raise DeadlineExceeded(_redact(f"calling {url}: {describe(exc)}", token)) from None
        except httpx.TransportError as exc:
            raise Unavailable(_redact(f"calling {url}: {describe(exc)}", token)) from None
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            raise Unknown(_redact(f"calling {url}: {describe(exc)}", token)) from None
        if response.status_code != 200:
            err = parse_error(
                response.status_code,
                response.headers.get("content-type", ""),
                response.content,
                parse_retry_after(response.headers.get("retry-after")),
            )
            err.message = _redact(err.message, token)
            err.args = (err.message,)
            raise err
        try:
            return response.json()
        except ValueError:
            raise Internal(f"HTTP 200 from {url} with a body that is not JSON", http_status=200) from None
