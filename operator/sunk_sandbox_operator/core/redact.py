"""What of an exception, or of a text holding a secret, may leave the process (pure).

Libraries quote what they were handed: h11 refuses a header with `Illegal header value b'<the
token>'`, a YAML error carries a snippet of the document (a kubeconfig's `token:` line), `int()`
quotes its input, an HTTP error may hold the request. So no library exception's `str()` reaches a
status message, an event, a log line or the doctor's output: `describe` says its type and, only
for the few kinds whose text is known to be safe (an OS error's strerror, a JSON or YAML error's
position, a timeout), that text, with any quoted fragment longer than a character or an escape
elided. It needs no secret value to work (a value-based redaction would miss a value it was never
told, or one quoted escaped, split or truncated). The operator's own exceptions (defined under
`sunk_sandbox_operator`) are composed from vetted parts, so their text is kept.

`Redactor` is the second line: the secret values this process read (tokens), so that a text that
still holds one — a log line a future change gets wrong — has it replaced before it leaves. The log
filter (adapters/logsafe.py), the event sink and the doctor's output use it.

Every text out of here is one line (control characters escaped) and bounded.
"""

from __future__ import annotations

import json
import os
import re
from collections import OrderedDict

MESSAGE_MAX = 1024  # the operator's own messages with their fix fit; a library's vetted words are short
# A library message longer than this is not read at all (nothing vetted is this long).
_READ_MAX = 64 * 1024
ELIDED = "…"
REDACTED = "[REDACTED]"
_OURS = "sunk_sandbox_operator."

# A quoted fragment: '…', "…", b'…', `…`, with backslash escapes inside (a repr of a value holding a
# quote escapes it). Each alternative consumes one character or one escape: linear, no backtracking
# blow-up on adversarial text.
_QUOTED = re.compile(r"""b?'(?:[^'\\\n]|\\.)*'|b?"(?:[^"\\\n]|\\.)*"|`[^`\n]*`""")
_SHORT_QUOTE = 3  # '\t', 'x', ':' stay (a position or a character says where; no secret fits)
# C0/C1 controls, DEL, line/paragraph separators and bidirectional overrides: a message is one line
# that reads as it is (no forged log line, no text that displays reversed).
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def clean(text: str, limit: int = MESSAGE_MAX) -> str:
    """One line, control characters escaped (`\\n`, `\\x1b`), at most `limit` characters."""
    if len(text) > 4 * limit:
        text = text[:4 * limit]
    out = _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)
    return out if len(out) <= limit else out[:limit - 1] + ELIDED


def elide_quoted(text: str) -> str:
    """Every quoted fragment longer than a character or an escape becomes '…' (in at most 4 KiB: a
    library's text may quote a tenant's)."""
    text = text[:4 * MESSAGE_MAX]
    def one(m: re.Match[str]) -> str:
        inner = m.group()
        inner = inner[2:-1] if inner.startswith("b") else inner[1:-1]
        return m.group() if len(inner) <= _SHORT_QUOTE else f"'{ELIDED}'"
    return _QUOTED.sub(one, text)


def _names(exc: BaseException) -> list[str]:
    return [f"{c.__module__}.{c.__qualname__}" for c in type(exc).__mro__]


def ours(exc: BaseException) -> bool:
    return type(exc).__module__.startswith(_OURS)


# Library kinds whose own words are said (quoted fragments elided); the first match in the MRO wins.
_FIXED = {
    "builtins.RecursionError": "nested too deeply",
    "builtins.MemoryError": "out of memory",
    "builtins.KeyError": "",  # its text is the key's repr
    "builtins.TimeoutError": "timed out",
    "httpx.TimeoutException": "timed out",
    "aiohttp.client_exceptions.ServerTimeoutError": "timed out",
    "httpx.LocalProtocolError": "refused by the HTTP client before sending (a header value or URL it cannot carry)",
    "h11._util.LocalProtocolError": "refused by the HTTP client before sending (a header value or URL it cannot carry)",
    "httpx.RemoteProtocolError": "the server broke the HTTP protocol",
    "h11._util.RemoteProtocolError": "the server broke the HTTP protocol",
    "aiohttp.client_exceptions.ServerDisconnectedError": "the server closed the connection",
}
_OWN_WORDS = ("httpx.NetworkError", "zlib.error", "msgspec.MsgspecError", "builtins.UnicodeError",
              "builtins.ValueError", "builtins.TypeError", "builtins.ArithmeticError", "builtins.LookupError",
              "builtins.AttributeError", "builtins.RuntimeError", "binascii.Error",
              "kubernetes.config.config_exception.ConfigException")  # the client's loader says which field


def _position(exc: BaseException) -> str:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    line, column = getattr(mark, "line", None), getattr(mark, "column", None)
    return f" (line {line + 1}, column {column + 1})" if isinstance(line, int) and isinstance(column, int) else ""


def _vetted(exc: BaseException) -> str:
    """The words of a library exception that may be said ("" for none)."""
    names = _names(exc)
    if isinstance(exc, json.JSONDecodeError):
        return f"{exc.msg} at line {exc.lineno} column {exc.colno}"
    if isinstance(exc, UnicodeDecodeError):
        return f"{exc.encoding} cannot decode the byte at position {exc.start}: {exc.reason}"
    for name in names:
        if name in _FIXED:
            return _FIXED[name]
        if name == "yaml.error.MarkedYAMLError":
            problem = getattr(exc, "problem", None) or getattr(exc, "context", None)
            return elide_quoted(str(problem)) + _position(exc) if problem else _position(exc).strip(" ()")
        if name == "yaml.error.YAMLError":
            return ""
        if name == "builtins.OSError" and isinstance(exc, OSError):
            if isinstance(exc.strerror, str) and exc.strerror:
                return elide_quoted(exc.strerror)
            return os.strerror(exc.errno) if isinstance(exc.errno, int) else ""
        if name in _OWN_WORDS:
            text = str(exc)
            return elide_quoted(text) if len(text) <= _READ_MAX else ""
    return ""


def describe(exc: BaseException, limit: int = MESSAGE_MAX) -> str:
    """What may be said of `exc` in status, events, logs and the doctor's output: ours as composed;
    a library's as its type name and its vetted words (`_vetted`), never its `str()`. One line,
    bounded."""
    name = type(exc).__name__
    if ours(exc):
        return clean(str(exc) or name, limit)
    words = _vetted(exc)
    return clean(f"{name}: {words}" if words else name, limit)


# ---------------------------------------------------------------- known values


MIN_FRAGMENT = 8   # shorter pieces would match ordinary words; the type-based rule above covers them
MAX_FRAGMENTS = 2048


def fragments(value: str) -> set[str]:
    """The pieces of a secret value a text may hold: the value, each line, the value of each
    `KEY=VALUE` line (an env-file Secret), and the escaped forms a repr or JSON would print."""
    value = value.strip()
    out = {value, json.dumps(value)[1:-1], repr(value)[1:-1]}
    for line in value.splitlines():
        line = line.strip()
        out.add(line)
        key, sep, rest = line.partition("=")
        if sep and key.strip().replace("_", "").isalnum():
            out.add(rest.strip().strip("'\""))
    return {f for f in out if len(f) >= MIN_FRAGMENT}


class Redactor:
    """The secret values this process read (at most MAX_FRAGMENTS pieces, the oldest forgotten
    first), and `redact`, which replaces each in a text."""

    def __init__(self, max_fragments: int = MAX_FRAGMENTS) -> None:
        self._known: OrderedDict[str, None] = OrderedDict()
        self._max = max_fragments
        self._pattern: re.Pattern[str] | None = None

    def remember(self, value: str) -> None:
        new = False
        for f in fragments(value):
            if f in self._known:
                self._known.move_to_end(f)
            else:
                self._known[f] = None
                new = True
        while len(self._known) > self._max:
            self._known.popitem(last=False)
            new = True
        if new:
            self._pattern = None

    def __bool__(self) -> bool:
        return bool(self._known)

    def redact(self, text: str) -> str:
        if not self._known or not text:
            return text
        if self._pattern is None:  # longest first: a line of a value before a shorter piece of it
            self._pattern = re.compile("|".join(re.escape(f) for f in sorted(self._known, key=len, reverse=True)))
        return self._pattern.sub(REDACTED, text)
