"""core/redact.py and adapters/logsafe.py: one sanitiser between every library exception and what
leaves the process. A secret handed to a library comes back quoted in its exception (h11's
`Illegal header value b'...'`, a YAML snippet, `int()`'s input): each boundary — status, events,
logs, the doctor's output — is fed such an exception here and must not show the value.

The secret is finding 6's shape: an env-file Secret (`SLURM_JWT=…` and a second line) used whole as a
token."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import zlib

import httpx
import h11
import pytest
import yaml

from sunk_sandbox_operator.adapters import doctor as gather
from sunk_sandbox_operator.adapters import events, logsafe
from sunk_sandbox_operator.adapters import slurmrest as sr
from sunk_sandbox_operator.adapters.kubeconfig import ConfigError, load
from sunk_sandbox_operator.adapters.runnerapi import client as rc
from sunk_sandbox_operator.controller import reconcile
from sunk_sandbox_operator.controller.slurm_poll import Pollers
from sunk_sandbox_operator.core.doctor import checks as doctor
from sunk_sandbox_operator.core.redact import REDACTED, Redactor, clean, describe, elide_quoted, fragments
from sunk_sandbox_operator.core.tenancy import TenancyPolicy
from sunk_sandbox_operator.doctor import _line

from tests.unit.fakes import FakeClock, harness_fixture  # noqa: F401
from tests.unit.test_doctor_gather import NS, SLURM, Runners, with_slurm
from tests.unit.test_slurm_controller import binding, conditions, cond, jwt, secret, setup

PASSWORD = "hunter2-db-password-9f3a"
JWT = jwt()
ENV_FILE = f"SLURM_JWT={JWT}\nDB_PASSWORD={PASSWORD}"
PIECES = (ENV_FILE, JWT, PASSWORD, JWT.split(".")[2])


def leaked(text: str) -> list[str]:
    """Every piece of the secret found in `text`, raw or escaped as a repr or JSON would print it."""
    forms = {p for piece in PIECES for p in (piece, repr(piece)[1:-1], json.dumps(piece)[1:-1])}
    return [p for p in forms if p in text]


def h11_refusal(value: str) -> httpx.LocalProtocolError:
    """What httpx's transport raises when h11 refuses a header value (the same words)."""
    try:
        h11.Request(method="GET", target="/", headers=[("Host", "x"), ("X-SLURM-USER-TOKEN", value)])
    except h11.LocalProtocolError as exc:
        return httpx.LocalProtocolError(str(exc))
    raise AssertionError("h11 accepted the value")


def refusing_transport(request: httpx.Request) -> httpx.Response:
    """A transport that does what httpx's real one does with a header value h11 cannot send."""
    for _, value in request.headers.raw:
        if any(c in value for c in (b"\n", b"\r", b"\0")):
            raise h11_refusal(value.decode())
    raise AssertionError("a request with a sendable header reached the fake")


# ---------------------------------------------------------------- describe: the library kinds


def test_the_h11_refusal_quotes_the_secret_and_describe_does_not() -> None:
    exc = h11_refusal(ENV_FILE)
    assert leaked(str(exc))  # the premise: the library quotes it (escaped: a raw search misses it)
    text = describe(exc)
    assert not leaked(text) and text.startswith("LocalProtocolError: refused by the HTTP client before sending")


@pytest.mark.parametrize("make, says", [
    (lambda: int(PASSWORD), "ValueError: invalid literal for int() with base 10: '…'"),
    (lambda: yaml.safe_load(f"users:\n- user: {{token: {PASSWORD}\n  x: [\n"), "line"),
    (lambda: json.loads("{\"token\": " + PASSWORD + "}"), "JSONDecodeError: Expecting value at line 1 column 11"),
    (lambda: zlib.decompress(PASSWORD.encode()), "error: Error -3 while decompressing data"),
    (lambda: (PASSWORD.encode() + b"\xff").decode(), "UnicodeDecodeError: utf-8 cannot decode the byte at position 24"),
    (lambda: {"k": 1}[PASSWORD], "KeyError"),
    (lambda: base64.b64decode(PASSWORD + "!", validate=True), "Error"),
])
def test_library_exceptions_are_said_without_what_they_quote(make, says) -> None:
    with pytest.raises(Exception) as info:
        make()
    text = describe(info.value)
    assert PASSWORD not in text and says in text, text


def test_os_errors_timeouts_and_nesting_say_fixed_words() -> None:
    assert describe(ConnectionRefusedError(111, "Connection refused")) == "ConnectionRefusedError: Connection refused"
    assert describe(asyncio.TimeoutError()) == "TimeoutError: timed out"
    assert describe(httpx.ReadTimeout("read timed out " + PASSWORD)) == "ReadTimeout: timed out"
    assert describe(RecursionError("maximum recursion depth exceeded")) == "RecursionError: nested too deeply"
    assert describe(httpx.ConnectError("All connection attempts failed")) == \
        "ConnectError: All connection attempts failed"


def test_an_unknown_library_exception_is_its_type_name_only() -> None:
    class Odd(Exception):
        pass
    Odd.__module__ = "somelib.errors"
    assert describe(Odd(f"request headers: {{'Authorization': 'Bearer {PASSWORD}'}}")) == "Odd"
    assert describe(httpx.InvalidURL(f"bad url http://u:{PASSWORD}@x")) == "InvalidURL"


def test_our_own_messages_are_kept_one_line_and_bounded() -> None:
    exc = sr.SlurmAPIError("HTTP 404 (the path is not served)\n\x1b[31mforged line")
    assert describe(exc) == "HTTP 404 (the path is not served)\\n\\x1b[31mforged line"
    assert len(describe(sr.SlurmAPIError("x" * 5000))) == 1024
    assert clean("a\u202eb\u2028c") == "a\\u202eb\\u2028c"


def test_quoted_fragments_are_elided_in_linear_time() -> None:
    assert elide_quoted("value b'abcdef' and 'x' and \"it's long\" and `path.to`") == \
        "value '…' and 'x' and '…' and '…'"
    assert elide_quoted(r"'ab\'cd' rest") == "'…' rest"  # an escaped quote does not end the fragment
    hostile = ("'" + "\\" * 50_000 + "a") * 4  # unterminated quotes, runs of escapes
    assert PASSWORD not in elide_quoted(hostile + PASSWORD[:0])


# ---------------------------------------------------------------- known values


def test_fragments_of_an_env_file_secret_cover_each_piece_and_escaped_forms() -> None:
    pieces = fragments(ENV_FILE)
    assert {ENV_FILE, JWT, PASSWORD, f"DB_PASSWORD={PASSWORD}", repr(ENV_FILE)[1:-1]} <= pieces
    assert all(len(p) >= 8 for p in pieces)
    r = Redactor()
    r.remember(ENV_FILE)
    for text in (f"x {ENV_FILE} y", f"{ENV_FILE!r}", json.dumps({"v": ENV_FILE}), f"pw={PASSWORD}", JWT):
        assert not leaked(r.redact(text)) and REDACTED in r.redact(text), text
    assert r.redact("nothing secret here") == "nothing secret here"


def test_the_redactor_forgets_the_oldest_values_past_its_bound() -> None:
    r = Redactor(max_fragments=4)
    r.remember("first-secret-value")
    for i in range(4):
        r.remember(f"later-secret-{i:04d}")
    assert r.redact("first-secret-value") == "first-secret-value" and r.redact("later-secret-0003") == REDACTED


# ---------------------------------------------------------------- boundary: logs


def logged(redactor: Redactor, emit) -> str:
    """What a handler on a logger prints once SafeRecords is installed there (as on the root's)."""
    lines: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(self.format(record))
    logger = logging.getLogger(f"test-redact-{id(lines)}")
    logger.propagate, logger.handlers = False, [Keep()]
    logger.setLevel(logging.DEBUG)
    logger.handlers[0].setFormatter(logging.Formatter("%(message)s"))
    logsafe.install(redactor, logger)
    emit(logger)
    return "\n".join(lines)


def test_log_records_lose_what_a_library_quoted_tracebacks_included() -> None:
    def emit(log: logging.Logger) -> None:
        try:
            try:
                raise h11_refusal(ENV_FILE)
            except httpx.LocalProtocolError as inner:
                raise RuntimeError("sending failed") from inner
        except RuntimeError:
            log.exception("scope sync of %s failed", "ns/b")
        log.warning("restore failed: %s", h11_refusal(ENV_FILE))
        log.error(h11_refusal(ENV_FILE))
    text = logged(Redactor(), emit)
    assert not leaked(text), text
    assert "Traceback (most recent call last)" in text and "test_redact.py" in text  # frames are kept
    assert "httpx.LocalProtocolError: LocalProtocolError: refused by the HTTP client" in text
    assert "The above exception was the direct cause of the following exception" in text
    assert text.count("refused by the HTTP client before sending") == 3


def test_a_known_value_in_a_log_line_is_replaced() -> None:
    r = Redactor()
    r.remember(ENV_FILE)
    text = logged(r, lambda log: log.info("token was %r, password %s", ENV_FILE, PASSWORD))
    assert not leaked(text) and REDACTED in text


# ---------------------------------------------------------------- boundary: events


def test_events_are_one_line_and_lose_known_values() -> None:
    posted: list[str] = []
    r = Redactor()
    r.remember(ENV_FILE)
    post = events.safe(lambda body, kind, reason, message: posted.append(message), r.redact)
    post({}, "Warning", "X", f"it said {ENV_FILE}\nforged")
    assert not leaked(posted[0]) and "\n" not in posted[0]


# ---------------------------------------------------------------- boundary: status (and the events of it)


async def test_a_header_the_http_client_refuses_never_reaches_status_events_or_logs(harness, caplog) -> None:
    h, _ = setup(harness)
    h.ctx.slurm = Pollers(h.ctx, client_factory=lambda url, v: sr.SlurmClient(
        url, v, transport=httpx.MockTransport(refusing_transport), clock=h.clock))
    secret(h, ENV_FILE)
    state = binding(h)
    with caplog.at_level(logging.DEBUG):
        await reconcile.reconcile(h.ctx, state)
        await h.run_until_idle()
    assert conditions(h)["SlurmReady"][1] in ("SlurmUnreachable", "SlurmAuthFailed", "CredentialsMissing")
    shown = json.dumps([h.kube.get("bindings", NS, "b"), h.events]) + caplog.text
    assert not leaked(shown), cond(h, "SlurmReady")
    await h.close()


async def test_the_runner_client_and_the_kubeconfig_loader_quote_nothing(tmp_path) -> None:
    async def token() -> str:
        return "a-sendable-token"

    def quoting(request: httpx.Request) -> httpx.Response:  # whatever the library quotes, from wherever
        raise h11_refusal(ENV_FILE)
    client = rc.RunnerClient("https://api.coreweave.com", token, transport=httpx.MockTransport(quoting),
                             max_retries=0)
    with pytest.raises(rc.RunnerAPIError) as info:
        await client.get_managed_runner("r")
    await client.aclose()
    assert not leaked(info.value.message) and "LocalProtocolError" in info.value.message
    bad = tmp_path / "config"
    bad.write_text(f"users:\n- name: u\n  user: {{token: {PASSWORD}\n    x: [\n")
    with pytest.raises(ConfigError) as cfg:
        load({"KUBECONFIG": str(bad)})
    assert PASSWORD not in str(cfg.value) and "is not YAML" in str(cfg.value)


# ---------------------------------------------------------------- boundary: the doctor's output


async def test_the_doctor_prints_no_quoted_secret() -> None:
    kube, target = with_slurm(token=ENV_FILE)
    obs = await gather.gather(kube, target, TenancyPolicy(allowed_slurm_urls=(SLURM,)), make_runner=Runners(),
                              make_slurm=lambda url, v: sr.SlurmClient(
                                  url, v, transport=httpx.MockTransport(refusing_transport), clock=FakeClock()))
    lines = "\n".join(_line(r) for r in doctor.evaluate(obs))
    assert "partition exists in Slurm" in lines and not leaked(lines), lines
    assert not leaked(repr(obs))


# ---------------------------------------------------------------- the class, not the example


def test_no_exception_text_is_formatted_except_through_describe() -> None:
    """Every `except ... as e` whose types are not all the operator's own (their text is composed from
    vetted parts) formats `e` only through `describe`: no `{e}`, `str(e)`, `repr(e)`, `e!r`. Exempt:
    the sanitiser itself; render-policy and the emulator, local tools over the user's own files."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "operator" / "sunk_sandbox_operator"
    exempt = {"core/redact.py", "render.py", "adapters/runnerapi/emulator.py", "adapters/runnerapi/emulator_http.py",
              "controller/config.py",   # the operator's own settings, said at start to whoever set them
              "controller/state.py",    # pydantic's errors about the spec (InvalidSpec), no secret there
              "core/scope/app_values.py"}  # core.scope.doc's errors about the tenant's own document
    trees = {str(p.relative_to(root)): ast.parse(p.read_text()) for p in root.rglob("*.py")}
    ours = {n.name for t in trees.values() for n in ast.walk(t) if isinstance(n, ast.ClassDef)}

    def type_names(node: ast.expr | None) -> list[str]:
        items = node.elts if isinstance(node, ast.Tuple) else [node] if node is not None else []
        return [i.attr if isinstance(i, ast.Attribute) else getattr(i, "id", "?") for i in items]

    offences = []
    for path, tree in trees.items():
        if path in exempt:
            continue
        for handler in (n for n in ast.walk(tree) if isinstance(n, ast.ExceptHandler) and n.name):
            names = type_names(handler.type)
            if names and all(n in ours for n in names):
                continue
            for node in (x for stmt in handler.body for x in ast.walk(stmt)):
                bad = (isinstance(node, ast.FormattedValue) and isinstance(node.value, ast.Name)
                       and node.value.id == handler.name) or \
                      (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("str", "repr")
                       and any(isinstance(a, ast.Name) and a.id == handler.name for a in node.args))
                if bad:
                    offences.append(f"{path}:{node.lineno} ({', '.join(names)})")
    assert not offences, offences
