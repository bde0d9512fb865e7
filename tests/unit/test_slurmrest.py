"""adapters/slurmrest.py over httpx.MockTransport: headers, read-at-use token, 304, and one typed
error per answer shape slurm.md recorded. The token never appears in an error."""

from __future__ import annotations

import httpx
import pytest

from sunk_sandbox_operator.adapters import slurmrest as sr

from tests.unit.fake_slurm import REFUSED
from tests.unit.fakes import FakeClock

TOKEN = "eyJhbGciOiJIUzI1NiJ9.eyJzdW4iOiJrOHNvcCJ9.secret-signature-zzz"


def client(handler, clock=None, **kw) -> sr.SlurmClient:
    return sr.SlurmClient("https://slurm.example.com:6820/", "v0.0.38", transport=httpx.MockTransport(handler),
                          clock=clock or FakeClock(), **kw)


async def token() -> str:
    return TOKEN


async def test_both_headers_no_bearer_and_the_token_read_at_each_request() -> None:
    seen, tokens = [], iter(["t1", "t2"])

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"pings": [{"ping": "UP"}], "errors": []})

    async def rotating() -> str:
        return next(tokens)

    c = client(handler)
    await c.ping("k8sop", rotating)
    await c.ping("k8sop", rotating)
    assert [r.headers["X-SLURM-USER-TOKEN"] for r in seen] == ["t1", "t2"]  # a rotation is picked up
    assert all(r.headers["X-SLURM-USER-NAME"] == "k8sop" and "authorization" not in r.headers for r in seen)
    assert str(seen[0].url) == "https://slurm.example.com:6820/slurm/v0.0.38/ping"
    await c.aclose()


async def test_update_time_and_304() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.params.get("update_time") == "100":
            return httpx.Response(304)
        return httpx.Response(200, json={"jobs": [{"job_id": 1, "name": "ns/p"}]})

    c = client(handler)
    assert await c.jobs("k8sop", token, update_time=100) is None
    page = await c.jobs("k8sop", token)
    assert page.body["jobs"][0]["name"] == "ns/p" and page.size > 0
    assert await c.partitions("k8sop", token, update_time=100) is None


async def test_a_partition_and_the_server_time() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/diag"):
            return httpx.Response(200, json={"statistics": {"req_time": 1796165665}})
        name = request.url.path.rsplit("/", 1)[1]
        return httpx.Response(200, json={"partitions": [{"name": name, "state": "UP"}]})

    c = client(handler)
    assert (await c.partition("hpc-prod", "k8sop", token))["state"] == "UP"
    assert await c.server_time("k8sop", token) == 1796165665


def _answer(status: int, body=None, text: str | None = None, delay: float = 0.0, clock: FakeClock | None = None):
    def handler(request: httpx.Request) -> httpx.Response:
        if clock is not None:
            clock.now += delay  # slurmrestd's own retries towards a slurmctld that does not answer
        if text is not None:
            return httpx.Response(status, text=text)
        return httpx.Response(status, json=body)
    return handler


@pytest.mark.parametrize(("status", "body", "text", "delay", "error", "says"), [
    (401, None, "Authentication failure", 0, sr.SlurmAuthFailed, "Authentication failure"),
    (500, REFUSED, None, 0.01, sr.SlurmAuthFailed, "slurmctld config is unable to load"),
    (500, {"errors": [{"error": "Unspecified error", "errno": -1}], "partitions": []}, None, 0, sr.SlurmAuthFailed,
     "Unspecified error"),
    (500, REFUSED, None, 9.0, sr.SlurmUnreachable, "slurmctld does not answer"),
    (500, {"partitions": [], "errors": [{"error": "Invalid partition name specified", "errno": 2000}]}, None, 0,
     sr.SlurmNotFound, "Invalid partition name"),
    (422, {"errors": [{"description": "Unable to find partition", "error_number": 9}]}, None, 0, sr.SlurmNotFound,
     "Unable to find"),
    (404, None, "Unable find requested URL. Please view /openapi/v3 for API reference.", 0, sr.SlurmAPIError,
     "apiVersion"),
    (503, None, "busy", 0, sr.SlurmUnreachable, "503"),
    (500, None, "<html>oops</html>", 0, sr.SlurmAPIError, "oops"),
    (200, None, "not json", 0, sr.SlurmAPIError, "not a JSON object"),
    (302, None, "", 0, sr.SlurmAPIError, "302"),          # a redirect is not followed: the token stays here
])
async def test_each_answer_is_its_typed_error(status, body, text, delay, error, says) -> None:
    clock = FakeClock()
    c = client(_answer(status, body, text, delay, clock), clock)
    with pytest.raises(error) as exc:
        await c.partition("hpc", "k8sop", token)
    assert says in str(exc.value) and TOKEN not in str(exc.value) and "secret-signature" not in repr(exc.value)
    assert sr.kind(exc.value) == {sr.SlurmNotFound: "not_found", sr.SlurmAuthFailed: "auth",
                                  sr.SlurmUnreachable: "unreachable", sr.SlurmAPIError: "api"}[error]


async def test_no_answer_is_unreachable() -> None:
    def refused(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("All connection attempts failed", request=request)

    def slow(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("timed out", request=request)

    for handler in (refused, slow):
        with pytest.raises(sr.SlurmUnreachable) as exc:
            await client(handler).jobs("k8sop", token)
        assert TOKEN not in str(exc.value)


async def test_a_body_past_the_bound_is_refused_unread() -> None:
    c = client(lambda request: httpx.Response(200, content=b"[" + b"1," * 100_000 + b"1]"), max_body=10_000)
    with pytest.raises(sr.SlurmAPIError, match="larger than 10000 bytes"):
        await c.jobs("k8sop", token)


async def test_requests_are_counted_by_endpoint_and_code() -> None:
    counted = []
    c = client(lambda request: httpx.Response(304), on_request=lambda endpoint, code: counted.append((endpoint, code)))
    await c.jobs("k8sop", token, 5)
    await c.partitions("k8sop", token, 5)
    assert counted == [("jobs", "304"), ("partitions", "304")]
