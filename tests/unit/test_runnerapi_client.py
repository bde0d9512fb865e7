"""The runner API client against the emulator over loopback HTTP, plus its pure parsing and limiter."""

from __future__ import annotations

import asyncio
import logging
import random
import socket
import time
import traceback
from typing import Any, AsyncIterator, Iterator

import httpx
import pytest

from sunk_sandbox_operator.adapters.runnerapi import client as client_mod
from sunk_sandbox_operator.adapters.runnerapi.client import (
    DEFAULT_LIMITER,
    DeadlineExceeded,
    FailedPrecondition,
    Internal,
    InvalidArgument,
    ManagedRunner,
    NotFound,
    PermissionDenied,
    RateLimiter,
    ResourceExhausted,
    RunnerAPIError,
    RunnerClient,
    Unauthenticated,
    Unavailable,
    Unimplemented,
    Unknown,
    backoff_delay,
    error_for,
    is_stale_etag,
    parse_error,
    parse_managed_runner,
    parse_retry_after,
)
from sunk_sandbox_operator.adapters.runnerapi.emulator import EmulatorState, EmulatorThread, running_emulator

TOKEN = "tok-SECRET-9f8e7d6c5b4a"  # distinctive: searched for in every error text and log
POLICY = {
    "base": {"metadata": {"annotations": {"a": "1"}}, "spec": {"schedulerName": "default-scheduler"}},
    "constraints": {"network": {"egress": {"allow": ["10.0.0.0/8"]}}},
}
FAST = RateLimiter(rate=10_000, burst=10_000)


@pytest.fixture
def emu() -> Iterator[EmulatorThread]:
    state = EmulatorState(admin_tokens={TOKEN}, readonly_tokens={"readonly-tok"}, seed=7)
    state.add_runner("r-null")
    state.add_runner("r-set", POLICY)
    state.add_runner("r-empty", {})
    with running_emulator(state) as thread:
        yield thread


class Calls:
    """Records the on_call hook."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    def __call__(self, method: str, code: str) -> None:
        self.seen.append((method, code))


def make(url: str, token: Any = TOKEN, **kw: Any) -> RunnerClient:
    kw.setdefault("limiter", FAST)
    kw.setdefault("backoff_base", 0.01)
    kw.setdefault("backoff_max", 0.05)
    return RunnerClient(url, token, **kw)


@pytest.fixture
async def rc(emu: EmulatorThread) -> AsyncIterator[RunnerClient]:
    c = make(emu.url)
    yield c
    await c.aclose()


def assert_no_secret(err: BaseException, secret: str = TOKEN) -> None:
    texts = [str(err), repr(err), *map(str, err.args), "".join(traceback.format_exception(err))]
    for text in texts:
        assert secret not in text


# ---------------------------------------------------------------- happy paths


async def test_get_distinguishes_null_and_empty_policy(rc: RunnerClient) -> None:
    null = await rc.get_managed_runner("r-null")
    empty = await rc.get_managed_runner("r-empty")
    assert null.policy is None and empty.policy == {}
    assert null.etag and empty.etag and null.runner_id == "r-null"
    assert null.identity == {"runnerId": "r-null", "name": "r-null", "cluster": "emulated-cks"}


async def test_update_round_trip_changes_etag_each_write(rc: RunnerClient, emu: EmulatorThread) -> None:
    mr = await rc.get_managed_runner("r-set")
    etags = [mr.etag]
    for n in range(3):
        policy = {**POLICY, "base": {"spec": {"schedulerName": f"s{n}"}}}
        mr = await rc.update_managed_runner("r-set", identity=mr.identity, policy=policy, etag=mr.etag)
        assert mr.policy == policy
        etags.append(mr.etag)
    assert len(set(etags)) == 4
    assert (await rc.get_managed_runner("r-set")) == mr
    assert [w["etag_after"] for w in emu.state.snapshot()["write_log"]] == etags[1:]


async def test_update_can_write_null_and_empty(rc: RunnerClient) -> None:
    mr = await rc.get_managed_runner("r-set")
    mr = await rc.update_managed_runner("r-set", identity=mr.identity, policy={}, etag=mr.etag)
    assert (await rc.get_managed_runner("r-set")).policy == {}
    await rc.update_managed_runner("r-set", identity=mr.identity, policy=None, etag=mr.etag)
    assert (await rc.get_managed_runner("r-set")).policy is None


async def test_client_parses_wrapped_responses(rc: RunnerClient, emu: EmulatorThread) -> None:
    emu.state.set_knobs({"wrap_responses": True})
    mr = await rc.get_managed_runner("r-set")
    assert mr.policy == POLICY and mr.etag and "managedRunner" in mr.raw
    mr2 = await rc.update_managed_runner("r-set", identity=mr.identity, policy={}, etag=mr.etag)
    assert mr2.policy == {} and mr2.etag != mr.etag


# ---------------------------------------------------------------- error paths


async def test_unknown_token_is_unauthenticated(emu: EmulatorThread) -> None:
    async with make(emu.url, "not-a-valid-token") as c:
        with pytest.raises(Unauthenticated) as info:
            await c.get_managed_runner("r-set")
    assert info.value.http_status == 401 and not info.value.retryable


async def test_readonly_token_is_permission_denied(emu: EmulatorThread) -> None:
    calls = Calls()
    async with make(emu.url, "readonly-tok", on_call=calls) as c:
        with pytest.raises(PermissionDenied):
            await c.get_managed_runner("r-set")
        with pytest.raises(PermissionDenied):
            await c.update_managed_runner("r-set", identity=None, policy={}, etag="1-x")
    assert calls.seen == [("GetManagedRunner", "permission_denied"), ("UpdateManagedRunner", "permission_denied")]
    assert emu.state.runners["r-set"]["policy"] == POLICY


async def test_unknown_runner_is_not_found(rc: RunnerClient) -> None:
    with pytest.raises(NotFound) as info:
        await rc.get_managed_runner("ghost")
    assert "ghost" in info.value.message and info.value.http_status == 404


async def test_missing_etag_is_refused_before_any_call(rc: RunnerClient, emu: EmulatorThread) -> None:
    with pytest.raises(InvalidArgument, match="etag is required"):
        await rc.update_managed_runner("r-set", identity=None, policy={}, etag="")
    assert emu.state.snapshot()["call_log"] == []


@pytest.mark.parametrize(
    ("field", "spec"),
    [
        ("base.spec.affinity", {"affinity": {}}),
        ("base.spec.securityContext", {"securityContext": {}}),
        ("base.spec.containers[0].securityContext", {"containers": [{"name": "c", "securityContext": {}}]}),
        ("base.spec.runtimeClassName", {"runtimeClassName": "x"}),
        ("base.spec.initContainers", {"initContainers": []}),
        ("base.spec.terminationGracePeriodSeconds", {"terminationGracePeriodSeconds": 5}),
    ],
)
async def test_forbidden_fields_are_invalid_argument(rc: RunnerClient, emu: EmulatorThread, field: str, spec: dict) -> None:
    mr = await rc.get_managed_runner("r-set")
    with pytest.raises(InvalidArgument) as info:
        await rc.update_managed_runner("r-set", identity=mr.identity, policy={"base": {"spec": spec}}, etag=mr.etag)
    assert field in info.value.message
    assert (await rc.get_managed_runner("r-set")) == mr


async def test_stale_etag_fails_once_without_retry_and_changes_nothing(emu: EmulatorThread) -> None:
    calls = Calls()
    async with make(emu.url, on_call=calls, max_retries=4) as c:
        old = await c.get_managed_runner("r-set")
        new = await c.update_managed_runner("r-set", identity=old.identity, policy={"v": 1}, etag=old.etag)
        with pytest.raises(FailedPrecondition) as info:
            await c.update_managed_runner("r-set", identity=old.identity, policy={"v": 2}, etag=old.etag)
        assert is_stale_etag(info.value) and not info.value.retryable
        assert (await c.get_managed_runner("r-set")) == new
    assert calls.seen.count(("UpdateManagedRunner", "failed_precondition")) == 1


@pytest.mark.parametrize("code", ["failed_precondition", "permission_denied", "internal", "invalid_argument", "aborted"])
async def test_non_retryable_codes_are_not_retried(emu: EmulatorThread, code: str) -> None:
    emu.state.set_knobs({"fail_next": [code, code]})
    calls = Calls()
    async with make(emu.url, on_call=calls) as c:
        with pytest.raises(RunnerAPIError) as info:
            await c.get_managed_runner("r-set")
    assert info.value.code == code
    assert calls.seen == [("GetManagedRunner", code)]


async def test_wrong_path_is_unimplemented(emu: EmulatorThread) -> None:
    async with make(f"{emu.url}/wrong/prefix") as c:
        with pytest.raises(Unimplemented) as info:
            await c.get_managed_runner("r-set")
    assert info.value.http_status == 404


async def test_other_admin_knob_makes_first_update_stale(rc: RunnerClient, emu: EmulatorThread) -> None:
    emu.state.set_knobs({"other_admin": True})
    mr = await rc.get_managed_runner("r-set")
    with pytest.raises(FailedPrecondition):
        await rc.update_managed_runner("r-set", identity=mr.identity, policy=mr.policy, etag=mr.etag)
    fresh = await rc.get_managed_runner("r-set")
    assert fresh.policy is not None and fresh.policy["constraints"]["network"]["egress"]["otherAdminEdits"] == 1
    done = await rc.update_managed_runner("r-set", identity=fresh.identity, policy=fresh.policy, etag=fresh.etag)
    assert done.policy == fresh.policy
    assert [w["who"] for w in emu.state.snapshot()["write_log"]] == ["other-admin", "client"]


# ---------------------------------------------------------------- retries


async def test_unavailable_is_retried_with_backoff_then_succeeds(emu: EmulatorThread) -> None:
    emu.state.set_knobs({"fail_next": ["unavailable", "resource_exhausted", "unavailable"]})
    calls, sleeps = Calls(), []

    async def sleep(seconds: float) -> None:
        sleeps.append(seconds)

    async with make(emu.url, on_call=calls, sleep=sleep, backoff_base=0.1, backoff_max=10, rng=random.Random(3)) as c:
        mr = await c.get_managed_runner("r-set")
    assert mr.policy == POLICY
    assert [code for _, code in calls.seen] == ["unavailable", "resource_exhausted", "unavailable", "ok"]
    assert len(sleeps) == 3
    for attempt, slept in enumerate(sleeps):
        assert 0 <= slept <= 0.1 * 2**attempt  # full jitter under the exponential cap


async def test_retries_give_up_after_max_retries(emu: EmulatorThread) -> None:
    emu.state.set_knobs({"error_rates": {"unavailable": 1.0}})
    calls = Calls()
    async with make(emu.url, on_call=calls, max_retries=2) as c:
        with pytest.raises(Unavailable) as info:
            await c.get_managed_runner("r-set")
    assert info.value.http_status == 503 and info.value.retryable
    assert len(calls.seen) == 3 == len(emu.state.snapshot()["call_log"])


async def test_retry_after_header_is_honoured(emu: EmulatorThread) -> None:
    emu.state.set_knobs({"fail_next": ["unavailable"], "retry_after_seconds": 0.3})
    async with make(emu.url, backoff_base=0.001, backoff_max=0.001) as c:
        start = time.monotonic()
        await c.get_managed_runner("r-set")
        elapsed = time.monotonic() - start
    assert elapsed >= 0.3
    times = [c["time"] for c in emu.state.snapshot()["call_log"]]
    assert times[1] - times[0] >= 0.29


async def test_timeout_is_deadline_exceeded_and_retried(emu: EmulatorThread) -> None:
    emu.state.set_knobs({"latency_seconds": 0.5})
    calls = Calls()
    async with make(emu.url, timeout=0.1, max_retries=1, on_call=calls) as c:
        with pytest.raises(DeadlineExceeded) as info:
            await c.get_managed_runner("r-set")
    assert info.value.retryable
    assert calls.seen == [("GetManagedRunner", "deadline_exceeded")] * 2


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_connection_refused_is_unavailable_and_keeps_the_token_out(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    calls = Calls()
    async with make(f"http://127.0.0.1:{_closed_port()}", max_retries=1, on_call=calls) as c:
        with pytest.raises(Unavailable) as info:
            await c.get_managed_runner("r-set")
    assert "ConnectError" in info.value.message
    assert calls.seen == [("GetManagedRunner", "unavailable")] * 2
    assert_no_secret(info.value)
    assert TOKEN not in caplog.text


# ---------------------------------------------------------------- the token


async def test_token_callable_is_awaited_per_call_so_rotation_works(emu: EmulatorThread) -> None:
    current = {"token": TOKEN}
    fetched = 0

    async def token() -> str:
        nonlocal fetched
        fetched += 1
        return current["token"] + "\n"  # Secret files often end with a newline

    async with make(emu.url, token) as c:
        await c.get_managed_runner("r-set")
        with emu.state.lock:
            emu.state.admin_tokens = {"rotated-token"}
        with pytest.raises(Unauthenticated):
            await c.get_managed_runner("r-set")  # still the old one
        current["token"] = "rotated-token"
        assert (await c.get_managed_runner("r-set")).policy == POLICY
    assert fetched == 3


async def test_empty_token_is_unauthenticated_without_a_call(emu: EmulatorThread) -> None:
    async with make(emu.url, "  \n") as c:
        with pytest.raises(Unauthenticated):
            await c.get_managed_runner("r-set")
    assert emu.state.snapshot()["call_log"] == []


@pytest.mark.parametrize("bad", ["tok-SECRET with space", "tok-SECRET\ninside", "tok-SECRET-é"])
async def test_malformed_token_is_refused_locally_without_quoting_it(emu: EmulatorThread, bad: str) -> None:
    async with make(emu.url, bad) as c:
        with pytest.raises(Unauthenticated) as info:
            await c.get_managed_runner("r-set")
    assert_no_secret(info.value, "tok-SECRET")
    assert emu.state.snapshot()["call_log"] == []


async def test_bytes_token_is_decoded(emu: EmulatorThread) -> None:
    async def token() -> bytes:
        return TOKEN.encode() + b"\n"

    async with make(emu.url, token) as c:
        assert (await c.get_managed_runner("r-set")).policy == POLICY


async def test_token_never_in_errors_or_logs(emu: EmulatorThread, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    errors: list[BaseException] = []

    # 1. server-side errors, with retries logged on the way
    emu.state.set_knobs({"fail_next": ["unavailable", "internal"]})
    async with make(emu.url) as c:
        assert repr(c) == f"RunnerClient(base_url={emu.url!r})"
        with pytest.raises(Internal) as info:
            await c.get_managed_runner("r-set")
        errors.append(info.value)
    emu.state.set_knobs({"latency_seconds": 0.3})
    async with make(emu.url, timeout=0.05, max_retries=0) as c:
        with pytest.raises(DeadlineExceeded) as info2:
            await c.get_managed_runner("r-set")
        errors.append(info2.value)

    # 2. a server that echoes the token back in its error message
    def echo(request: httpx.Request) -> httpx.Response:
        auth = request.headers["authorization"]
        return httpx.Response(403, json={"code": "permission_denied", "message": f"token {auth} lacks a role"})

    async with make("http://api.invalid", transport=httpx.MockTransport(echo)) as c:
        with pytest.raises(PermissionDenied) as info3:
            await c.get_managed_runner("r-set")
        errors.append(info3.value)
    assert "[REDACTED]" in info3.value.message

    # 3. a transport failure whose text names the header value
    def explode(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadError(f"boom while sending {request.headers['authorization']}", request=request)

    async with make("http://api.invalid", transport=httpx.MockTransport(explode), max_retries=1) as c:
        with pytest.raises(Unavailable) as info4:
            await c.get_managed_runner("r-set")
        errors.append(info4.value)

    for err in errors:
        assert_no_secret(err)
        assert err.__cause__ is None  # the httpx request (with headers) is not chained
    assert "retry" in caplog.text  # the retries were logged...
    assert TOKEN not in caplog.text  # ...without the token


# ---------------------------------------------------------------- rate limiter


async def test_rate_limiter_token_bucket_with_fake_clock() -> None:
    now = [100.0]
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    limiter = RateLimiter(rate=10, burst=3, clock=lambda: now[0], sleep=sleep)
    waits = [limiter.reserve() for _ in range(5)]
    assert waits[:3] == [0.0, 0.0, 0.0]
    assert waits[3] == pytest.approx(0.1) and waits[4] == pytest.approx(0.2)
    now[0] += 10.0  # long idle: the bucket refills to `burst`, no more
    assert [limiter.reserve() for _ in range(3)] == [0.0, 0.0, 0.0]
    await limiter.acquire()
    assert slept == [pytest.approx(0.1)]


async def test_rate_limiter_bounds_the_client_call_rate(emu: EmulatorThread) -> None:
    # The limiter's clock stands still and its sleep only records: every call the client sends books a
    # token first, so the waits are exactly the bucket's, whatever the machine's load (timing the real
    # HTTP calls on the wall clock failed under load: a slow connect shifts the first call, not the bucket).
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    limiter = RateLimiter(rate=20, burst=2, clock=lambda: 100.0, sleep=sleep)
    before = len(emu.state.snapshot()["call_log"])
    async with make(emu.url, limiter=limiter) as c:
        await asyncio.gather(*(c.get_managed_runner("r-set") for _ in range(8)))
    # 2 go at once, the other 6 wait 50, 100, ... 300 ms (each booked after the one before)
    assert sorted(slept) == pytest.approx([0.05 * i for i in range(1, 7)])
    assert len(emu.state.snapshot()["call_log"]) - before == 8


def test_default_limiter_is_shared() -> None:
    a = RunnerClient("http://x", "t")
    b = RunnerClient("http://y", "t")
    assert a.limiter is b.limiter is DEFAULT_LIMITER
    assert (DEFAULT_LIMITER.rate, DEFAULT_LIMITER.burst) == (10.0, 20)


# ---------------------------------------------------------------- hooks and fallbacks


async def test_broken_metrics_hook_does_not_break_calls(rc: RunnerClient, emu: EmulatorThread) -> None:
    def hook(method: str, code: str) -> None:
        raise RuntimeError("metrics down")

    async with make(emu.url, on_call=hook) as c:
        assert (await c.get_managed_runner("r-set")).policy == POLICY


async def test_update_without_echoed_etag_rereads() -> None:
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        method = request.url.path.rsplit("/", 1)[1]
        seen.append(method)
        assert request.headers["connect-protocol-version"] == "1"
        assert request.headers["content-type"] == "application/json"
        assert request.headers["authorization"] == f"Bearer {TOKEN}"
        if method == "UpdateManagedRunner":
            return httpx.Response(200, json={})
        return httpx.Response(200, json={"managed_runner": {"identity": "i", "policy": {"p": 1}, "etag": "e2"}})

    async with make("http://api.invalid/", transport=httpx.MockTransport(handler)) as c:
        mr = await c.update_managed_runner("r", identity="i", policy={"p": 1}, etag="e1")
    assert seen == ["UpdateManagedRunner", "GetManagedRunner"]
    assert mr.etag == "e2" and mr.policy == {"p": 1}


async def test_non_json_success_body_is_internal() -> None:
    transport = httpx.MockTransport(lambda r: httpx.Response(200, text="<html>"))
    async with make("http://api.invalid", transport=transport) as c:
        with pytest.raises(Internal):
            await c.get_managed_runner("r")


# ---------------------------------------------------------------- pure parsing


def test_parse_managed_runner_shapes() -> None:
    top = parse_managed_runner("r", {"identity": {"a": 1}, "policy": None, "etag": "e"})
    wrapped = parse_managed_runner("r", {"managedRunner": {"identity": {"a": 1}, "policy": None, "etag": "e"}})
    snake = parse_managed_runner("r", {"managed_runner": {"runner_id": "r2", "identity": {"a": 1}, "etag": "e"}})
    assert (top.identity, top.policy, top.etag) == (wrapped.identity, wrapped.policy, wrapped.etag) == ({"a": 1}, None, "e")
    assert snake.policy is None and snake.runner_id == "r2"
    # policy contents keep their own keys: only the envelope is normalised
    inner = {"constraints": {"metadata": {"denied_annotation_prefixes": ["x/"]}}}
    assert parse_managed_runner("r", {"policy": inner, "etag": "e"}).policy == inner
    with pytest.raises(Internal):
        parse_managed_runner("r", [1])
    with pytest.raises(Internal):
        parse_managed_runner("r", {"policy": "nope"})
    assert isinstance(top, ManagedRunner) and "raw" not in repr(top)


@pytest.mark.parametrize(
    ("status", "ctype", "content", "expected"),
    [
        (404, "text/plain", b"404 page not found", Unimplemented),
        (404, "application/json", b'{"code": "not_found", "message": "m"}', NotFound),
        (400, "application/json", b'{"code": "failed_precondition", "message": "m", "details": [{"t": 1}]}', FailedPrecondition),
        (401, "", b"", Unauthenticated),
        (403, "", b"", PermissionDenied),
        (429, "", b"", Unavailable),
        (429, "application/json", b'{"code": "resource_exhausted"}', ResourceExhausted),
        (502, "text/html", b"<html>bad gateway</html>", Unavailable),
        (504, "", b"", Unavailable),
        (500, "application/json", b"not json", Unknown),
        (500, "application/json", b'{"code": "brand_new_code", "message": "m"}', Unknown),
        (418, "", b"", Unknown),
    ],
)
def test_parse_error(status: int, ctype: str, content: bytes, expected: type) -> None:
    err = parse_error(status, ctype, content, None)
    assert type(err) is expected and err.http_status == status


def test_parse_error_keeps_details_and_unknown_code() -> None:
    err = parse_error(400, "application/json", b'{"code": "failed_precondition", "message": "m", "details": [{"t": 1}]}', 1.5)
    assert err.details == [{"t": 1}] and err.message == "m" and err.retry_after == 1.5
    assert "brand_new_code" in parse_error(500, "application/json", b'{"code": "brand_new_code"}', None).message


def test_error_for_and_is_stale_etag() -> None:
    assert is_stale_etag(error_for("failed_precondition")) and is_stale_etag(error_for("aborted"))
    assert not is_stale_etag(error_for("unavailable")) and not is_stale_etag(ValueError())
    retryable = {code for code, cls in client_mod.ERROR_CLASSES.items() if cls.retryable}
    assert retryable == {"unavailable", "deadline_exceeded", "resource_exhausted"}


def test_parse_retry_after() -> None:
    assert parse_retry_after("2") == 2.0 and parse_retry_after(" 0.5 ") == 0.5
    assert parse_retry_after(None) is None and parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT") is None
    assert parse_retry_after("-3") == 0.0 and parse_retry_after("99999") == client_mod.RETRY_AFTER_MAX


def test_backoff_delay_full_jitter_and_the_retry_after_wins_within_its_bound() -> None:
    rng = random.Random(0)
    for attempt in range(8):
        d = backoff_delay(attempt, 0.2, 5.0, rng, None)
        assert 0 <= d <= min(5.0, 0.2 * 2**attempt)
    assert backoff_delay(0, 0.2, 5.0, rng, 3.0) == 3.0       # longer than the ceiling: the server knows
    assert backoff_delay(6, 0.2, 5.0, rng, 0.1) == 0.1       # shorter too
    assert backoff_delay(0, 0.2, 5.0, rng, 1e9) == client_mod.RETRY_AFTER_MAX
