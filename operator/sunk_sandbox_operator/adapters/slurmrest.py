"""slurmrestd over HTTP (JWT auth): the few reads the operator needs, with typed errors.

httpx against the OpenAPI paths (no maintained async client exists). Headers `X-SLURM-USER-NAME`
and `X-SLURM-USER-TOKEN` (Slurm 22.05 requires both; `Authorization: Bearer` is refused there). The
token comes from a callable awaited right before each request (read from the Secret at use, so a
rotation is picked up); a value that cannot go into a header is refused before any request, and
the token appears in no message, log line or exception. Redirects are not followed (the token goes
only to the allowed URL); bodies are read up to a bound.

The OpenAPI version is the spec's, or negotiated (core/slurm_versions.py): `GET ping` from the
newest version the operator knows down, the first not answered 404 kept until a request of it is
answered 404 (slurmrestd restarted with other versions: negotiated again, once per request).

How slurmrestd answers what goes wrong (measured: shared/reference/slurm.md, slurm-versions.md):
- no or partial headers: 401 `Authentication failure` (plain text);
- a token slurmctld refuses: 22.05 HTTP 500 with error -1 (`slurmctld config is unable to load`,
  `Unspecified error`), at once; 24.11 and 26.05 HTTP 511 (`Protocol authentication error`, 1007);
- slurmctld down behind a running slurmrestd: 22.05's -1, but only after slurmrestd's own connect
  retries (9 s here): a -1 that slow is reported as unreachable, not as a refused token;
- a missing partition: 22.05 HTTP 500 with `errno` 2000; 24.11 422 `Unable to find partition`;
  26.05 HTTP 200 with `partitions: null` and that text as a warning;
- a path (a version) it does not serve: 404, plain text (a missing object, e.g. a job, is a JSON 404);
- a 200 may carry `errors`: a list it leaves empty with errors is an error, never an empty list;
- `?update_time=<epoch>`, nothing changed since (inclusive, seconds): 22.05 304 with an empty body;
  24.11+ (v0.0.42+) a 200 whose `jobs` is empty, `last_update` 0, with the warning `No job changes
  since` (/partitions still 304); 24.11's v0.0.40/41 refuse the parameter (422 or 500, error 9202):
  that client reads full lists from then on.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

import httpx

from ..core.redact import describe
from ..core import slurm_versions as versions
from ..core.slurm import header_problem

TokenSource = Callable[[], Awaitable[str]]

MAX_BODY_BYTES = 64 * 1024 * 1024   # ~25,000 jobs at 2.6 KB (22.05), ~13,000 at 5 KB (24.11+)
SLOW_REFUSAL_SECONDS = 3.0          # a -1 slower than this is slurmctld not answering slurmrestd
NOT_FOUND_ERRNOS = {2000}           # ESLURM_INVALID_PARTITION_NAME
MESSAGE_MAX = 300


class SlurmError(Exception):
    """A slurmrestd request failed; the message says how (never with the token)."""


class SlurmUnreachable(SlurmError):
    """No answer: connection, timeout, 502/503/504, or slurmctld not answering slurmrestd."""


class SlurmAuthFailed(SlurmError):
    """The token was refused (401, 511, or Slurm 22.05's 500 with error -1)."""


class SlurmTokenUnusable(SlurmError):
    """The token cannot go into an HTTP header (nothing was sent; the message never quotes it)."""


class SlurmNotFound(SlurmError):
    """The thing asked for does not exist (a partition)."""


class SlurmVersionNotServed(SlurmError):
    """The spec's apiVersion is answered 404, or slurmrestd serves none of the versions we know."""


class SlurmAPIError(SlurmError):
    """Anything else unexpected: a body that is not the documented JSON, an error not listed above."""


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
        words = [str(e[k])[:MESSAGE_MAX] for k in ("description", "error") if isinstance(e.get(k), str) and e[k]]
        number = next((e[k] for k in ("error_number", "errno") if isinstance(e.get(k), int)), None)
        texts.append(" / ".join(dict.fromkeys(words)) + (f" (error {number})" if number is not None else ""))
    return "; ".join(texts)[:MESSAGE_MAX] or "no error text"


def kind(error: SlurmError) -> str:
    """The SlurmObservation error kind of a typed error (core/slurm.py ready_condition reads it)."""
    for cls, name in ((SlurmNotFound, "not_found"), (SlurmAuthFailed, "auth"), (SlurmUnreachable, "unreachable"),
                      (SlurmTokenUnusable, "token"), (SlurmVersionNotServed, "version")):
        if isinstance(error, cls):
            return name
    return "api"


def classify(status: int, body: Any, text: str, seconds: float) -> SlurmError | None:
    """The typed error of an answer (None: a success). Pure: the unit tests feed it the shapes
    slurm.md and slurm-versions.md recorded."""
    if status in (200, 304):
        return None
    errors = _errors(body)
    numbers = _errnos(errors)
    said = _describe(errors) if errors else (text.strip()[:MESSAGE_MAX] or "empty body")
    if status in (401, 403):
        return SlurmAuthFailed(f"HTTP {status}: {said}")
    if status == 511:
        return SlurmAuthFailed(f"HTTP 511: {said} (slurmctld refused the token)")
    if status in (502, 503, 504):
        return SlurmUnreachable(f"HTTP {status}: {said}")
    if status == 404:
        return SlurmAPIError(f"HTTP 404 (the path is not served): {said}")
    if numbers & NOT_FOUND_ERRNOS or (status == 422 and "Unable to find" in said):
        return SlurmNotFound(f"HTTP {status}: {said}")
    if status == 500 and -1 in numbers:
        if seconds >= SLOW_REFUSAL_SECONDS:
            return SlurmUnreachable(f"HTTP 500 after {seconds:.1f} s ({said}): slurmrestd answers, slurmctld does "
                                    "not answer it")
        return SlurmAuthFailed(f"HTTP 500: {said} (Slurm 22.05's answer when slurmctld refuses the token)")
    return SlurmAPIError(f"HTTP {status}: {said}")


class _UpdateTimeRefused(Exception):
    """24.11's v0.0.40/41 refused `update_time` (internal: the client reads full lists instead)."""


class SlurmClient:
    """One slurmrestd (base URL) and OpenAPI version: the spec's, or None to negotiate. Everything
    injected: the transport (tests: httpx.MockTransport), the clock, `on_request(endpoint, code)`
    (metrics). Shared by the bindings naming the same URL and version, and by their poller."""

    def __init__(self, base_url: str, api_version: str | None = None, *,
                 transport: httpx.AsyncBaseTransport | None = None, timeout: float = 15.0,
                 max_body: int = MAX_BODY_BYTES, clock: Callable[[], float] = time.monotonic,
                 on_request: Callable[[str, str], None] | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.requested = api_version              # None: negotiate
        self.api_version: str | None = api_version  # in use (None: not negotiated yet)
        self.release: str | None = None           # what the last answer's meta said ("24.11.5")
        self.full_lists_only = False              # this server refuses `update_time` at this version
        self._http = httpx.AsyncClient(base_url=self.base_url, transport=transport, timeout=timeout,
                                       follow_redirects=False)
        self._max_body = max_body
        self._clock = clock
        self._on_request = on_request or (lambda endpoint, code: None)
        self._negotiating = asyncio.Lock()

    @property
    def negotiated(self) -> bool:
        return self.requested is None

    async def _send(self, endpoint: str, path: str, user: str, token: TokenSource,
                    params: dict | None) -> tuple[int, Any, str, int, float]:
        """One GET: (status, decoded body or None, text, size, seconds); transport failures typed."""
        value = await token()
        problem = header_problem(value)
        if problem is not None:
            self._on_request(endpoint, "token")
            raise SlurmTokenUnusable(f"the Slurm token cannot be sent: {problem}")
        headers = {"X-SLURM-USER-NAME": user, "X-SLURM-USER-TOKEN": value, "Accept": "application/json"}
        started = self._clock()
        try:
            async with self._http.stream("GET", path, params=params, headers=headers) as resp:
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
        except httpx.LocalProtocolError:  # our own request was refused by the HTTP stack: its text quotes it
            self._on_request(endpoint, "error")
            raise SlurmAPIError("the request could not be sent (a header httpx refuses)") from None
        except httpx.TransportError as exc:
            self._on_request(endpoint, "error")
            raise SlurmUnreachable(describe(exc, MESSAGE_MAX)) from None  # h11 quotes a refused header value
        seconds = self._clock() - started
        text = raw.decode("utf-8", errors="replace")
        try:
            body = json.loads(text) if text.strip() and status != 304 else None
        except (ValueError, RecursionError):
            body = None
        # 24.11+'s "nothing changed" 200 is counted as such (22.05 says it with a 304)
        quiet = status == 200 and bool(params) and endpoint == "jobs" and versions.unchanged(body)
        self._on_request(endpoint, "unchanged" if quiet else str(status))
        return status, body, text, len(raw), seconds

    async def _version(self, user: str, token: TokenSource) -> str:
        """The version in use: the spec's, or negotiated once (probes under a lock: one walk at a time)."""
        if self.api_version is not None:
            return self.api_version
        async with self._negotiating:
            answered: list[tuple[str, int]] = []
            while self.api_version is None:
                step = versions.probe(answered)
                if step.chosen is not None:
                    self.api_version = step.chosen
                elif step.ask is None:
                    raise SlurmVersionNotServed(
                        f"slurmrestd serves none of the OpenAPI versions this operator knows "
                        f"({versions.spans(versions.KNOWN)}: each answered 404): {versions.RELEASES}. Is "
                        "this slurmrestd, and does its `-s` option load the slurmctld plugin?")
                else:
                    status, body, text, _, seconds = await self._send("ping", f"/slurm/{step.ask}/ping", user,
                                                                      token, None)
                    error = classify(status, body, text, seconds)
                    if error is not None and not (status == 404 and body is None):
                        raise error  # not a version question: the token, the network, slurmctld
                    answered.append((step.ask, status))
            return self.api_version

    async def served(self, user: str, token: TokenSource) -> list[str]:
        """Every known version slurmrestd serves (one ping each): what an explicit apiVersion's
        refusal lists."""
        out = []
        for v in versions.KNOWN:
            status, body, text, _, seconds = await self._send("ping", f"/slurm/{v}/ping", user, token, None)
            if not (status == 404 and body is None):
                error = classify(status, body, text, seconds)
                if error is not None:
                    raise error
                out.append(v)
        return out

    async def _get(self, endpoint: str, tail: str, user: str, token: TokenSource,
                   params: dict | None = None) -> Page | None:
        """GET; the Page of a 200, None for a 304, else the typed error. A 404 of a negotiated
        version negotiates again (once); of the spec's, says which versions are served."""
        for again in (False, True):
            version = await self._version(user, token)
            status, body, text, size, seconds = await self._send(endpoint, f"/slurm/{version}/{tail}", user, token,
                                                                 params)
            not_served = status == 404 and body is None  # a path it lacks: plain text (a missing job is JSON)
            if not_served and self.negotiated and not again:
                self.api_version = None  # slurmrestd was restarted with other versions
                continue
            if not_served and not self.negotiated:
                served = await self.served(user, token)
                raise SlurmVersionNotServed(
                    f"spec.slurm.restAPI.apiVersion {version} is not served by slurmrestd (HTTP 404); of the "
                    f"versions this operator knows it serves {versions.spans(served) if served else 'none'}")
            break
        if status == 304:
            return None
        if params and "update_time" in params and status in (422, 500) and versions.update_time_refused(body):
            raise _UpdateTimeRefused()
        error = classify(status, body, text, seconds)
        if error is not None:
            raise error
        if not isinstance(body, dict):
            raise SlurmAPIError(f"HTTP {status} with a body that is not a JSON object")
        self.release = versions.release(body) or self.release
        return Page(body, size, seconds)

    async def _list(self, endpoint: str, user: str, token: TokenSource, update_time: int | None) -> Page | None:
        """A whole list since `update_time` (None: unchanged); a server that refuses the parameter
        at this version is read in full from then on."""
        if update_time is not None and not self.full_lists_only:
            try:
                return await self._get(endpoint, endpoint, user, token, {"update_time": str(update_time)})
            except _UpdateTimeRefused:
                self.full_lists_only = True
        return await self._get(endpoint, endpoint, user, token)

    async def ping(self, user: str, token: TokenSource) -> dict:
        """The ping answer. One that says slurmctld does not respond is what 24.11+ also answer a
        refused token with (HTTP 200; 26.05 names the authentication error): then GET diag, whose
        status tells (511: the token; 502: slurmctld not answering slurmrestd)."""
        page = await self._get("ping", "ping", user, token)
        assert page is not None
        if versions.responding(page.body) is False:
            said = versions.ping_status(page.body)
            if "authentication" in said.lower():
                raise SlurmAuthFailed(f"HTTP 200, the ping says {said!r} (slurmctld refused the token)")
            await self._get("diag", "diag", user, token)
        return page.body

    async def partition(self, name: str, user: str, token: TokenSource) -> dict:
        """The partition object; SlurmNotFound when Slurm has none of that name."""
        page = await self._get("partition", f"partition/{name}", user, token)  # a name the spec's pattern allows
        assert page is not None
        parts = [p for p in page.body.get("partitions") or [] if isinstance(p, dict)]
        found = next((p for p in parts if p.get("name") == name), None)
        if found is None:
            errors = _errors(page.body)
            said = "; ".join(filter(None, (_describe(errors) if errors else "", versions.warnings(page.body))))
            raise SlurmNotFound(f"HTTP 200 without partition {name!r}" + (f": {said}" if said else ""))
        return found

    @staticmethod
    def _whole(endpoint: str, page: Page | None) -> Page | None:
        """A 200 list that is empty *and* carries errors is an error, never an empty list (which would
        make every placeholder job missing)."""
        if page is not None and not page.body.get(endpoint) and _errors(page.body):
            raise SlurmAPIError(f"HTTP 200 without {endpoint}, with errors: {_describe(_errors(page.body))}")
        return page

    async def partitions(self, user: str, token: TokenSource, update_time: int | None = None) -> Page | None:
        return self._whole("partitions", await self._list("partitions", user, token, update_time))

    async def jobs(self, user: str, token: TokenSource, update_time: int | None = None) -> Page | None:
        """The whole job list (no name filter exists in any version); None: unchanged since update_time
        (22.05's 304, or 24.11+'s empty 200 that says so: never read as an empty list)."""
        page = await self._list("jobs", user, token, update_time)
        if page is not None and update_time is not None and not self.full_lists_only and versions.unchanged(page.body):
            return None
        return self._whole("jobs", page)

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
