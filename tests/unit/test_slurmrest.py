"""adapters/slurmrest.py over httpx.MockTransport: headers, read-at-use token, 304, one typed error
per answer shape slurm.md and slurm-versions.md recorded, the version negotiation, and the answers
that differ by release (against tests/unit/fake_slurm.py's 22.05, 24.11 and 26.05). The token never
appears in an error."""

from __future__ import annotations

import httpx
import pytest

from sunk_sandbox_operator.adapters import slurmrest as sr

from tests.unit.fake_slurm import NEWEST, RELEASES, REFUSED, REFUSED_511, FakeSlurm
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
    (404, None, "Unable find requested URL. Please view /openapi/v3 for API reference.", 0, sr.SlurmVersionNotServed,
     "apiVersion v0.0.38 is not served"),
    (511, REFUSED_511, None, 0, sr.SlurmAuthFailed, "Protocol authentication error"),
    (404, {"jobs": [], "errors": [{"description": "Unable to query JobId=9", "error_number": 2017}]}, None, 0,
     sr.SlurmAPIError, "Unable to query JobId"),   # a JSON 404 is about the object, not the version
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
                                  sr.SlurmUnreachable: "unreachable", sr.SlurmAPIError: "api",
                                  sr.SlurmVersionNotServed: "version"}[error]


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


# ---------------------------------------------------------------- the versions and the releases


def fake_client(release: str, api_version: str | None = None, **kw) -> tuple[FakeSlurm, sr.SlurmClient]:
    fake = FakeSlurm(FakeClock(), release, tokens={TOKEN: "k8sop"}, **kw)
    return fake, fake.client_factory()(fake.url, api_version)


@pytest.mark.parametrize("release", list(RELEASES))
async def test_negotiation_picks_the_newest_served_version_probing_down(release) -> None:
    fake, c = fake_client(release)
    assert c.api_version is None and c.negotiated
    part = await c.partition("sandboxes", "k8sop", token)
    assert c.api_version == NEWEST[release] == {"22.05": "v0.0.38", "24.11": "v0.0.42", "26.05": "v0.0.45"}[release]
    probes = [p for p, _, _ in fake.log if p.endswith("/ping")]
    newest_first = ["v0.0.45", "v0.0.44", "v0.0.43", "v0.0.42", "v0.0.41", "v0.0.40", "v0.0.38"]
    assert probes == [f"/slurm/{v}/ping" for v in newest_first[:newest_first.index(NEWEST[release]) + 1]]
    assert c.release == RELEASES[release].full  # meta.slurm.version as integers, or strings (26.05)
    from sunk_sandbox_operator.core.slurm import partition_state
    assert partition_state(part) == "UP"
    fake.log.clear()
    await c.partition("sandboxes", "k8sop", token)
    assert [p for p, _, _ in fake.log] == [f"/slurm/{NEWEST[release]}/partition/sandboxes"]  # negotiated once


async def test_a_negotiated_version_gone_is_negotiated_again_once() -> None:
    fake, c = fake_client("26.05")
    await c.ping("k8sop", token)
    assert c.api_version == "v0.0.45"
    fake.release = "24.11"   # slurmrestd restarted: v0.0.45 is gone
    await c.ping("k8sop", token)
    assert c.api_version == "v0.0.42"


async def test_nothing_known_served_and_an_explicit_version_not_served_say_what_is() -> None:
    c = client(lambda request: httpx.Response(404, text="no such path"))
    c.requested = c.api_version = None
    with pytest.raises(sr.SlurmVersionNotServed, match="serves none of the OpenAPI versions this operator knows"):
        await c.ping("k8sop", token)
    fake, c = fake_client("24.11", "v0.0.38")
    with pytest.raises(sr.SlurmVersionNotServed) as exc:
        await c.partition("sandboxes", "k8sop", token)
    assert "apiVersion v0.0.38 is not served" in str(exc.value) and "v0.0.40–v0.0.42" in str(exc.value)
    assert sr.kind(exc.value) == "version"


@pytest.mark.parametrize("release", list(RELEASES))
async def test_a_missing_partition_in_each_release_shape(release) -> None:
    _, c = fake_client(release)
    with pytest.raises(sr.SlurmNotFound) as exc:
        await c.partition("nosuch", "k8sop", token)
    said = {"22.05": "HTTP 500: Invalid partition name specified (error 2000)",
            "24.11": "HTTP 422: Unable to find partition nosuch", "26.05": "HTTP 200 without partition 'nosuch': "
            "Unable to find partition nosuch"}[release]
    assert said in str(exc.value)


@pytest.mark.parametrize("release", list(RELEASES))
async def test_a_refused_token_is_auth_failed_in_each_release(release) -> None:
    fake, c = fake_client(release)
    fake.tokens.clear()
    with pytest.raises(sr.SlurmAuthFailed) as exc:
        await c.partition("sandboxes", "k8sop", token)
    assert ("HTTP 500" if release == "22.05" else "HTTP 511") in str(exc.value)
    # 24.11+ answer the ping itself with a 200 whose slurmctld "does not respond": not unreachable
    with pytest.raises(sr.SlurmAuthFailed) as exc:
        await c.ping("k8sop", token)
    assert {"22.05": "HTTP 500", "24.11": "HTTP 511", "26.05": "the ping says 'Protocol authentication error'"}[
        release] in str(exc.value)


@pytest.mark.parametrize("release", list(RELEASES))
async def test_an_unchanged_job_list_is_unchanged_never_empty(release) -> None:
    """22.05 answers 304; 24.11 and 26.05 a 200 with `jobs: []`, `last_update` 0 and a warning."""
    fake, c = fake_client(release)
    fake.submit("ns/p")
    page = await c.jobs("k8sop", token)
    assert [j["name"] for j in page.body["jobs"]] == ["ns/p"]
    since = int(fake.epoch()) + 1
    assert await c.jobs("k8sop", token, since) is None
    assert await c.partitions("k8sop", token, since) is None
    assert fake.unchanged("jobs") == 1 and fake.unchanged("partitions") == 1
    fake.clock.now += 5
    fake.submit("ns/q")
    page = await c.jobs("k8sop", token, since)
    assert sorted(j["name"] for j in page.body["jobs"]) == ["ns/p", "ns/q"]


@pytest.mark.parametrize("version", ["v0.0.40", "v0.0.41"])
async def test_24_11_refusing_update_time_falls_back_to_full_lists(version) -> None:
    fake, c = fake_client("24.11", version)
    fake.submit("ns/p")
    since = int(fake.epoch()) + 1
    for _ in range(2):
        page = await c.jobs("k8sop", token, since)
        assert [j["name"] for j in page.body["jobs"]] == ["ns/p"]  # the full list, not "unreachable"
        assert (await c.partitions("k8sop", token, since)).body["partitions"]
    assert c.full_lists_only
    refused = [(p, s) for p, q, s in fake.log if "update_time" in q]
    assert refused == [(f"/slurm/{version}/jobs", 422)]   # once: then full lists for that server


@pytest.mark.parametrize("value", ["SLURM_JWT=eyJ.eyJ.sig\nDB_PASSWORD=hunter2", "eyJ.eyJ.sig\r\nX-Evil: 1",
                                   "eyJ.eyJ.sig\x00", "tok en", "jwt-ü"])
async def test_a_value_no_header_can_carry_is_refused_before_any_request_and_never_quoted(value) -> None:
    sent = []
    c = client(lambda request: sent.append(request) or httpx.Response(200, json={}))

    async def bad() -> str:
        return value
    with pytest.raises(sr.SlurmTokenUnusable) as exc:
        await c.partition("hpc", "k8sop", bad)
    assert sent == [] and "offset" in str(exc.value)
    assert "hunter2" not in str(exc.value) and "DB_PASSWORD" not in str(exc.value) and "sig" not in str(exc.value)


async def test_an_http_stack_refusal_is_never_quoted() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.LocalProtocolError(f"Illegal header value b'{TOKEN}'")

    with pytest.raises(sr.SlurmAPIError) as exc:
        await client(refuse).ping("k8sop", token)
    assert TOKEN not in str(exc.value) and "Illegal header" not in str(exc.value)


async def test_a_ping_that_says_slurmctld_does_not_respond_asks_diag_whose_status_tells() -> None:
    """Measured on 24.11 and 26.05 with slurmctld stopped: the ping is a 200 saying "not responding",
    any other request a 502 (error 1800) after slurmrestd's own retries."""
    down = {"errors": [{"description": "Unable to query diag", "error_number": 1800,
                        "error": "Unable to contact slurm controller (connect failure)"}]}
    for pings in ([{"ping": "DOWN"}], [{"pinged": "DOWN", "responding": False}], [{"responding": False}]):
        def answer(request: httpx.Request, p=pings) -> httpx.Response:
            if request.url.path.endswith("/diag"):
                return httpx.Response(502, json=down)
            return httpx.Response(200, json={"pings": p, "errors": []})
        with pytest.raises(sr.SlurmUnreachable, match="Unable to contact slurm controller"):
            await client(answer).ping("k8sop", token)
    both = client(lambda request: httpx.Response(200, json={"pings": [{"responding": False}], "statistics": {}}))
    assert (await both.ping("k8sop", token))["pings"]  # diag answers: slurmctld does answer this user


async def test_errors_in_a_200_are_read() -> None:
    """slurmrestd may answer 200 with `errors`: an empty list with errors is an error, never an empty
    list; a partition absent from a 200 is missing, with what the errors and warnings said."""
    said = {"errors": [{"description": "Unable to query jobs", "error_number": 1800, "error": "connect failure"}]}
    c = client(lambda request: httpx.Response(200, json={"jobs": [], **said}))
    with pytest.raises(sr.SlurmAPIError, match="HTTP 200 without jobs, with errors: Unable to query jobs"):
        await c.jobs("k8sop", token)
    c = client(lambda request: httpx.Response(200, json={"partitions": None, **said}))
    with pytest.raises(sr.SlurmAPIError, match="without partitions"):
        await c.partitions("k8sop", token)
    c = client(lambda request: httpx.Response(200, json={"partitions": [], "errors": [
        {"error": "Invalid partition name specified", "errno": 2000}]}))
    with pytest.raises(sr.SlurmNotFound, match="without partition 'hpc': Invalid partition name specified"):
        await c.partition("hpc", "k8sop", token)
    c = client(lambda request: httpx.Response(200, json={"jobs": [{"job_id": 1, "name": "a/b"}], **said}))
    assert (await c.jobs("k8sop", token)).body["jobs"]   # jobs with a complaint: the jobs
    c = client(lambda request: httpx.Response(200, json={"jobs": [], "errors": []}))
    assert (await c.jobs("k8sop", token)).body["jobs"] == []   # truly none
