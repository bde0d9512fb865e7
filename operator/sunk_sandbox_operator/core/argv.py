"""The argv a container runs, read from its spec (pure): `$(VAR)` expansion and shell words, bounded.

A tenant's Pod decides both the text and how far it expands: a few pages of `$(X)` references to
a long variable are hundreds of megabytes. So expansion counts what it would write and stops at a
budget, before building it: MAX_ARG_CHARS for one argument or env value (Linux's MAX_ARG_STRLEN:
execve refuses a longer one, so no container that runs has one), MAX_CONTAINER_CHARS for all that
one container's references expand to (text without a `$` is the pod's own, already read: it is
not counted). What passes a budget is refused (`Refused`, naming the budget); the caller skips
that argument and names it.

`expand` follows the kubelet (k8s.io/kubernetes third_party/forked/golang/expansion): `$(VAR)`
becomes VAR's value when VAR is defined, `$$` is one `$` (so `$$(VAR)` stays `$(VAR)`), and an
undefined or unclosed reference stays as written. Env values expand against the variables defined
before them, in order; a `valueFrom` variable's value is not known here, so references to it stay.

`shell_words` is `shlex.split` (POSIX, no comments), for the `sh -c "... --flag=v ..."` strings a
chart may use, read by one regex over the pieces of a word (shlex reads a character at a time in
Python, far slower on long text).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from .untrusted import Refused

MAX_ARG_CHARS = 128 * 1024
MAX_CONTAINER_CHARS = 256 * 1024


class Budget:
    """Characters one container's expansions may still write."""

    def __init__(self, chars: int | None = None) -> None:
        self.left = MAX_CONTAINER_CHARS if chars is None else chars

    def take(self, text: str, env: Mapping[str, str]) -> str:
        """`text` expanded within MAX_ARG_CHARS and what is left; Refused (nothing spent) past either."""
        if "$" not in text:
            return text
        out = expand(text, env, min(MAX_ARG_CHARS, self.left))
        self.left -= len(out)
        return out


def _refused(limit: int) -> Refused:
    if limit < MAX_ARG_CHARS:
        why = f"the {MAX_CONTAINER_CHARS:,} the operator expands for one container's command, args and env"
    else:
        why = f"the {MAX_ARG_CHARS:,} Linux allows one argument (MAX_ARG_STRLEN: the container could not start)"
    return Refused(f"refused as untrusted input: it expands past {why}: shorten it or its $(VAR) references")


def expand(text: str, env: Mapping[str, str], limit: int) -> str:
    """`text` with its `$(VAR)` references expanded as the kubelet does (module docstring); Refused as
    soon as the result would pass `limit` characters. One pass: each character is read once (the
    search for a reference's `)` starts where the last one ended)."""
    out: list[str] = []
    size, start, n = 0, 0, len(text)
    no_close = False  # no `)` is left: every later `$(` is unclosed too (not searched for again)
    i = text.find("$")
    while 0 <= i < n - 1:
        nxt = text[i + 1]
        end = i + 2
        if nxt == "$":
            piece = "$"
        elif nxt == "(":
            close = -1 if no_close else text.find(")", i + 2)
            if close < 0:
                no_close = True
                piece = "$("
            else:
                name = text[i + 2:close]
                value = env.get(name)
                piece = value if value is not None else text[i:close + 1]
                end = close + 1
        else:
            piece = "$" + nxt
        literal = i - start
        size += literal + len(piece)
        if size > limit:
            raise _refused(limit)
        out.append(text[start:i])
        out.append(piece)
        start = end
        i = text.find("$", end)
    size += n - start
    if size > limit:
        raise _refused(limit)
    out.append(text[start:])
    return "".join(out)


def container_env(container: Mapping[str, Any], budget: Budget) -> tuple[dict[str, str], list[str]]:
    """The variables `$(VAR)` may name in the container's command and args, and the env entries refused
    (`env[i] (NAME): why`). A refused or `valueFrom` variable is unknown: references to it stay."""
    raw = container.get("env")
    env: dict[str, str] = {}
    refused: list[str] = []
    for i, e in enumerate(raw if isinstance(raw, list) else []):
        if not isinstance(e, Mapping) or not isinstance(e.get("name"), str):
            continue
        name, value = e["name"], e.get("value")
        if value is None and e.get("valueFrom") is None:
            value = ""  # an empty `value` is omitted from the object
        if not isinstance(value, str):
            env.pop(name, None)
            continue
        try:
            env[name] = budget.take(value, env)
        except Refused as exc:
            env.pop(name, None)
            refused.append(f"env[{i}] ({name[:64]}): {exc}")
    return env, refused


# The pieces of a POSIX shell word: a run of blanks (shlex's four), a single-quoted string, a
# double-quoted one (backslash escapes; possessive, so an unclosed one is never gone back over), an
# escaped character, a run of anything else. No match: an unclosed quote or a trailing backslash.
_PIECE = re.compile(r"""[ \t\r\n]+|'[^']*'|"[^"\\]*+(?:\\.[^"\\]*+)*+"|\\.|[^ \t\r\n'"\\]+""", re.S)
_BLANKS = re.compile(r"[ \t\r\n]+")
# Inside double quotes a backslash escapes only `"` and itself; before anything else it stays.
_DQ_ESCAPE = re.compile(r"\\(.)", re.S)


def _dq(m: re.Match[str]) -> str:
    return m.group(1) if m.group(1) in '"\\' else m.group(0)


def shell_words(text: str) -> list[str]:
    """shlex.split(text) (POSIX mode, no comments): ValueError where shlex raises one."""
    if not any(c in text for c in "'\"\\"):
        return [w for w in _BLANKS.split(text) if w]
    words: list[str] = []
    word: list[str] | None = None
    pos, n = 0, len(text)
    while pos < n:
        m = _PIECE.match(text, pos)
        if m is None:
            raise ValueError("No closing quotation" if text[pos] in "'\"" else "No escaped character")
        piece, pos = m.group(), m.end()
        first = piece[0]
        if first in " \t\r\n":
            if word is not None:
                words.append("".join(word))
                word = None
            continue
        if word is None:
            word = []
        if first == "'":
            word.append(piece[1:-1])
        elif first == '"':
            word.append(_DQ_ESCAPE.sub(_dq, piece[1:-1]))
        elif first == "\\":
            word.append(piece[1])
        else:
            word.append(piece)
    if word is not None:
        words.append("".join(word))
    return words
