"""The bounded, linear parsers read benign text exactly as the parsers before issue 31 did.

The `_old_*` functions are the previous implementations, kept here as the oracle (they backtrack or
expand without a bound, so the inputs stay small). Where the new ones differ on purpose, the
strategies leave those inputs out and the tests below them say how: `$$(VAR)` is Kubernetes' escape
now, a reference ends at the first `)` as the kubelet reads it, durations take ASCII digits as Go
does, a slurm.conf `KillWait=²` is an error instead of an exception."""

from __future__ import annotations

import re
import shlex
import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sunk_sandbox_operator.core import selectors, tenancy, units
from sunk_sandbox_operator.core.scheduler import argv
from sunk_sandbox_operator.core.scheduler import conf as scheduler_conf
from sunk_sandbox_operator.core.scheduler import slurm_conf
from sunk_sandbox_operator.core.tenant_text import printable

# ---------------------------------------------------------------- the old implementations

_OLD_GO_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_OLD_GO_PART = re.compile(r"(\d+\.?\d*|\.\d+)(ns|us|µs|μs|ms|s|m|h)")


def _old_parse_go_duration(s: Any) -> float:
    if not isinstance(s, str):
        raise ValueError("not a string")
    text = s.strip()
    sign = 1.0
    if text[:1] in ("+", "-"):
        sign = -1.0 if text[0] == "-" else 1.0
        text = text[1:]
    if text == "0":
        return 0.0
    if not text:
        raise ValueError("empty")
    pos, total = 0, 0.0
    while pos < len(text):
        m = _OLD_GO_PART.match(text, pos)
        if not m:
            raise ValueError("junk")
        total += float(m.group(1)) * _OLD_GO_UNITS[m.group(2)]
        pos = m.end()
    return sign * total


def _old_slurm_kill_wait(text: str) -> tuple[int | None, str | None]:
    value, error = None, None
    for lineno, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0]
        for tok in re.sub(r"\s*=\s*", "=", line).split():
            key, sep, raw = tok.partition("=")
            if sep and key.lower() == "killwait":
                if raw.isdigit():
                    value, error = int(raw), None
                else:
                    error = f"slurm.conf line {lineno}: KillWait={printable(raw)} is not whole seconds"  # shown escaped now
    return value, error


def _old_sets_include(text: str) -> bool:
    return any(line.split("#", 1)[0].strip().lower().startswith("include") for line in text.splitlines())


_OLD_ENV_REF = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def _old_words(item: str, env: dict[str, str]) -> list[str]:
    item = _OLD_ENV_REF.sub(lambda m: v if isinstance(v := env.get(m.group(1)), str) else m.group(0), item)
    if any(c.isspace() for c in item.strip()):
        try:
            return shlex.split(item)
        except ValueError:
            return item.split()
    return [item]


_K, _V = r"[A-Za-z0-9][A-Za-z0-9_./-]*", r"[A-Za-z0-9_.-]*"
_OLD_SET = re.compile(rf"({_K})\s+(in|notin)\s*\(\s*({_V}(?:\s*,\s*{_V})*)\s*\)")


def _old_set(part: str) -> tuple[str, str, tuple[str, ...]] | None:
    m = _OLD_SET.fullmatch(part.strip())
    if not m:
        return None
    values = tuple(v.strip() for v in m.group(3).split(","))
    return m.group(1), m.group(2), values


def _old_remove_dot_segments(path: str) -> str:
    out: list[str] = []
    while path:
        if path.startswith("../"):
            path = path[3:]
        elif path.startswith("./"):
            path = path[2:]
        elif path.startswith("/./"):
            path = path[2:]
        elif path == "/.":
            path = "/"
        elif path.startswith("/../"):
            path = path[3:]
            if out:
                out.pop()
        elif path == "/..":
            path = "/"
            if out:
                out.pop()
        elif path in (".", ".."):
            path = ""
        else:
            cut = path.find("/", 1)
            cut = len(path) if cut < 0 else cut
            out.append(path[:cut])
            path = path[cut:]
    return "".join(out)


def _outcome(fn: Any, *args: Any) -> Any:
    try:
        return ("ok", fn(*args))
    except ValueError:
        return ("error", None)


# ---------------------------------------------------------------- durations


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet="0123456789.smhnuµμ+- x", max_size=14))
def test_durations_read_as_before(text: str) -> None:
    assert _outcome(units.parse_go_duration, text) == _outcome(_old_parse_go_duration, text)


@pytest.mark.parametrize("text", ["60", "1m30s", "90s", "1.5m", "  45s ", "0", "-1m", "1h2m3.5s", "500ms"])
def test_kill_wait_values_read_as_before(text: str) -> None:
    new, _ = scheduler_conf._seconds(text, "--slurm-kill-wait")
    old = int(text.strip()) if text.strip().isdigit() else _old_parse_go_duration(text)
    assert new == (int(old) // 1 if old >= 0 else None)


def test_a_unicode_digit_is_no_duration_now() -> None:
    """Go reads ASCII digits only; the old regex's \\d took any."""
    with pytest.raises(ValueError):
        units.parse_go_duration("٦٠s")


# ---------------------------------------------------------------- slurm.conf

_SLURM_PIECES = ["KillWait", "killwait", "KILLWAIT", "=", " = ", " ", "\t", "60", "1x", "007", "#", "\\#", "Include",
                 " include x", "NodeName=a", "\n", "\r\n", "\x0b", "Slurmctld", "KillWait=30"]


@settings(max_examples=500, deadline=None)
@given(st.lists(st.sampled_from(_SLURM_PIECES), max_size=20).map("".join))
def test_slurm_conf_reads_as_before(text: str) -> None:
    conf = slurm_conf.slurm_conf(text)
    assert (conf.kill_wait, conf.error) == _old_slurm_kill_wait(text)
    assert conf.includes == _old_sets_include(text)


@pytest.mark.parametrize("text", ["KillWait = 60", "KillWait=60\nKillWait = 90 # later wins", "SlurmctldPort=6817 KillWait=45",
                                  "killwait\t=\t120", "# KillWait=10\n", "KillWait=x"])
def test_usual_slurm_confs_read_as_before(text: str) -> None:
    assert slurm_conf.slurm_kill_wait(text) == _old_slurm_kill_wait(text)


def test_a_superscript_kill_wait_is_an_error_not_an_exception() -> None:
    with pytest.raises(ValueError):
        _old_slurm_kill_wait("KillWait=²")  # int("²") raised out of discovery
    assert slurm_conf.slurm_kill_wait("KillWait=²") == (None, "slurm.conf line 1: KillWait='²' is not whole seconds")


# ---------------------------------------------------------------- args: expansion and words

_ENV = {"X": "ab", "Y": "--slurm-kill-wait=60s", "EMPTY": "", "SP": "a b"}
_ARG_PIECES = ["--scheduler-name=", "$(X)", "$(Y)", "$(EMPTY)", "$(SP)", "$(UNSET)", "$", "$x", "a", " ", "'", '"', "\\",
               "sched", "=", "\t", "-"]


def _benign(text: str) -> bool:
    """No `$$` (Kubernetes' escape) and every `$(` closed by a name the old regex read."""
    return "$$" not in text and "$(" not in _OLD_ENV_REF.sub("", text)


@settings(max_examples=800, deadline=None)
@given(st.lists(st.sampled_from(_ARG_PIECES), max_size=12).map("".join).filter(_benign))
def test_args_expand_and_split_as_before(item: str) -> None:
    budget = argv.Budget()
    expanded = budget.take(item, _ENV)
    if re.search(r"\s", expanded.strip()):
        try:
            words = argv.shell_words(expanded)
        except ValueError:
            words = expanded.split()
    else:
        words = [expanded]
    assert words == _old_words(item, _ENV)


@settings(max_examples=1000, deadline=None)
@given(st.text(alphabet="ab '\"\\\t\n\r\x0b$é", max_size=16))
def test_shell_words_are_shlex(text: str) -> None:
    assert _outcome(argv.shell_words, text) == _outcome(shlex.split, text)


@pytest.mark.parametrize(("text", "want"), [
    ("$$(X)", "$(X)"), ("$$$(X)", "$ab"), ("$(X", "$(X"), ("$($(X)", "$($(X)"), ("a$", "a$"), ("$(UNSET)", "$(UNSET)"),
    ("$(X)$(X)", "abab"), ("$x$(X)", "$xab"),
])
def test_expansion_is_the_kubelets(text: str, want: str) -> None:
    """k8s.io/kubernetes third_party/forked/golang/expansion: `$$` escapes, a reference ends at the
    first `)`, an unknown or unclosed one stays."""
    assert argv.expand(text, {"X": "ab"}, 1000) == want


def test_env_values_expand_against_the_variables_before_them() -> None:
    env, refused = argv.container_env({"env": [
        {"name": "A", "value": "x"}, {"name": "B", "value": "$(A)y$(C)"}, {"name": "C", "value": "z"},
        {"name": "D", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}, {"name": "E"}]}, argv.Budget())
    assert env == {"A": "x", "B": "xy$(C)", "C": "z", "E": ""} and refused == []


# ---------------------------------------------------------------- selectors, URL paths


@settings(max_examples=500, deadline=None)
@given(st.lists(st.sampled_from(["a", "b", ",", " ", "  ", "-", "."]), max_size=10).map("".join),
       st.sampled_from(["in", "notin"]))
def test_set_requirements_read_as_before(values: str, op: str) -> None:
    text = f"key {op} ({values})"
    old = _old_set(text)
    parsed = selectors.parse_selector_string(text)
    if old is None:
        assert parsed.error
    else:
        key, oper, vals = old
        want = () if vals == ("",) else vals
        assert parsed.error or parsed.requirements[0].values == want
        assert bool(parsed.error) == (want == ())  # an empty set is the only error left


@settings(max_examples=500, deadline=None)
@given(st.lists(st.sampled_from(["/", ".", "..", "a", "b/", "./", "../"]), max_size=12).map("".join))
def test_dot_segments_removed_as_before(path: str) -> None:
    assert tenancy.remove_dot_segments(path) == _old_remove_dot_segments(path)


# ---------------------------------------------------------------- the timing harness can fail


def test_the_old_parses_fail_the_linearity_check() -> None:
    """What tests/unit/test_tenant_text.py checks, on the old parses: 8x the input costs ~64x (more
    than 16x here: a wide margin, so a busy machine's noise on the small input cannot pass it)."""
    def cpu(fn: Any, text: str) -> float:
        best = float("inf")
        for _ in range(3):
            start = time.thread_time()
            _outcome(fn, text)
            best = min(best, time.thread_time() - start)
        return best

    small, large = "KillWait" + " " * 1_000 + "x", "KillWait" + " " * 8_000 + "x"
    assert cpu(_old_slurm_kill_wait, large) > 16 * cpu(_old_slurm_kill_wait, small)
    assert cpu(_old_parse_go_duration, "1" * 4_800 + "x") > 16 * cpu(_old_parse_go_duration, "1" * 600 + "x")
