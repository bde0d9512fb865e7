"""Every parser of tenant-written text (core/tenant_text.py PARSERS) costs time linear in its input on
adversarial shapes: 4x the input may take at most 8x the time (best of several runs, measured where
the constant no longer dominates). Bounds are lifted where the shape would be refused unread, so the
algorithm itself is measured too, not only its refusal. And the registry covers every parse: each
regex, JSON, YAML, shlex, glob, base64 or zlib call in core/, adapters/ and controller/ belongs to a
registered parser or is listed, with why, in NOT_TENANT_TEXT."""

from __future__ import annotations

import ast
import base64
import fnmatch
import gc
import importlib
import json
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sunk_sandbox_operator.api.spec import SandboxNamespaces
from sunk_sandbox_operator.core import pods, selectors, tenancy, tenant_text, units, untrusted
from sunk_sandbox_operator.core.scheduler import argv
from sunk_sandbox_operator.core.scheduler import conf as scheduler_conf
from sunk_sandbox_operator.core.scheduler import slurm_conf
from sunk_sandbox_operator.core.slurm import facts as slurm

from sunk_sandbox_operator.core.scope import ledger, membership  # noqa: E402

PACKAGE = Path(tenant_text.__file__).resolve().parents[1]

Shape = tuple[str, Callable[[Any], object], Callable[[int], Any], int, dict[str, int]]


def _b64(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def _pod(args: list[str], env: list[dict[str, str]] | None = None) -> dict[str, Any]:
    return {"spec": {"containers": [{"name": "scheduler", "args": args, "env": env or []}]}}


def _conf(inner: str) -> str:
    return "scheduler:\n" + inner


LIFTED = 1 << 30
_matcher = membership.compile_matcher(SandboxNamespaces.model_construct(names=["a*a*a*a*b", "*" + "a" * 60 + "*"],
                                                                  selector=None))
_slurm_conf = slurm_conf._parse_slurm_conf.__wrapped__     # the memo would time a dict lookup
_scheduler_conf = scheduler_conf._parse_text.__wrapped__
_quantity = units._parse.__wrapped__

# name in the registry -> (shape, function, input of size n, n, bounds lifted {module.CONSTANT: value})
SHAPES: dict[str, list[Shape]] = {
    "scheduler.slurm_conf.slurm_kill_wait": [
        ("a run of spaces without = on a KillWait line", _slurm_conf, lambda n: "KillWait" + " " * n + "x", 60_000,
         {"scheduler.slurm_conf.MAX_SLURM_CONF_LINE": LIFTED, "scheduler.slurm_conf.MAX_SLURM_CONF_CHARS": LIFTED}),
        ("the same past the bound (refused)", slurm_conf.slurm_kill_wait,
         lambda n: "KillWait" + " " * n + "x", 70_000, {}),
        ("KillWait = 60 on many lines", _slurm_conf, lambda n: "KillWait = 60\n" * n, 3_000, {}),
        ("runs of ' = '", _slurm_conf, lambda n: "KillWait" + " = " * n, 20_000,
         {"scheduler.slurm_conf.MAX_SLURM_CONF_LINE": LIFTED, "scheduler.slurm_conf.MAX_SLURM_CONF_CHARS": LIFTED}),
        ("digits and a bad unit as the value", _slurm_conf, lambda n: "KillWait=" + "1" * n + "x", 60_000,
         {"scheduler.slurm_conf.MAX_SLURM_CONF_LINE": LIFTED, "scheduler.slurm_conf.MAX_SLURM_CONF_CHARS": LIFTED}),
    ],
    "scheduler.conf.parse_scheduler_args": [
        ("$(X) repeated, X of 20,000", scheduler_conf.parse_scheduler_args,
         lambda n: _pod(["--verbose=" + "$(X)" * n], [{"name": "X", "value": "A" * 20_000}]), 2_500, {}),
        ("--slurm-kill-wait= digits x", scheduler_conf.parse_scheduler_args,
         lambda n: _pod([f"--slurm-kill-wait={'1' * n}x"]), 20_000, {}),
        ("many short args", scheduler_conf.parse_scheduler_args,
         lambda n: _pod(["--a=b"] * n + ["--scheduler-name=s"]), 2_000, {}),
        ("an sh -c script", scheduler_conf.parse_scheduler_args,
         lambda n: _pod(["sh", "-c", "exec sched " + "--x='y z' " * n]), 2_000, {}),
    ],
    "scheduler.conf.parse_scheduler_conf": [
        ("a long scheduler.name", _scheduler_conf, lambda n: _conf(f"  name: {'a' * n}\n"), 50_000, {}),
        ("a long kill-wait string", _scheduler_conf, lambda n: _conf(f"  killWait: '{'1' * n}x'\n"), 50_000, {}),
        ("many namespaces", _scheduler_conf,
         lambda n: _conf("  name: s\n  scope:\n    namespaces:\n" + "    - ns\n" * n), 1_000, {}),
    ],
    "units.parse_go_duration": [
        ("digits and a bad unit", units.parse_go_duration, lambda n: "1" * n + "x", 50_000,
         {"units.MAX_DURATION_CHARS": LIFTED}),
        ("digits, a dot, digits and a unit", units.parse_go_duration, lambda n: "1" * n + "." + "1" * n + "s",
         25_000, {"units.MAX_DURATION_CHARS": LIFTED}),
        ("many parts", units.parse_go_duration, lambda n: "1m" * n, 5_000, {"units.MAX_DURATION_CHARS": LIFTED}),
        ("at the bound (refused)", units.parse_go_duration, lambda n: "1" * n + "x", 50_000, {}),
    ],
    "scheduler.argv.expand": [
        ("$(X) repeated", lambda t: argv.expand(t, {"X": "ab"}, LIFTED), lambda n: "$(X)" * n, 10_000, {}),
        ("$( repeated, never closed", lambda t: argv.expand(t, {}, LIFTED), lambda n: "$(" * n, 10_000, {}),
        ("$(X repeated, one ) at the end", lambda t: argv.expand(t, {}, LIFTED), lambda n: "$(X" * n + ")",
         20_000, {}),
        ("$$ repeated", lambda t: argv.expand(t, {}, LIFTED), lambda n: "$$" * n, 10_000, {}),
        ("$(X) with a huge X, budgeted", lambda t: argv.expand(t, {"X": "A" * 20_000}, argv.MAX_ARG_CHARS),
         lambda n: "$(X)" * n, 10_000, {}),
    ],
    "scheduler.argv.shell_words": [
        ("plain words", argv.shell_words, lambda n: "ab " * n, 20_000, {}),
        ("quoted words", argv.shell_words, lambda n: "'a b' \"c\\\"d\" e\\ f " * n, 1_000, {}),
        ("an unclosed quote", argv.shell_words, lambda n: "'" + "a " * n, 20_000, {}),
        ("an unclosed double quote of escapes", argv.shell_words, lambda n: '"' + "\\a" * n, 20_000, {}),
    ],
    "untrusted.load": [
        ("a long plain scalar with spaces", untrusted.load, lambda n: "a: " + "b " * n + "\n", 30_000, {}),
        ("a flow list", untrusted.load, lambda n: "a: [" + "x, " * n + "]\n", 2_000, {}),
        ("deep nesting (refused)", untrusted.load, lambda n: "a: " + "[" * n, 20_000, {}),
    ],
    "tenant_text.dns_subdomain_problem": [
        ("one long label", tenant_text.dns_subdomain_problem, lambda n: "a" * n + "A", 60_000,
         {"tenant_text.MAX_DNS_SUBDOMAIN": LIFTED}),
        ("many labels", tenant_text.dns_subdomain_problem, lambda n: "a." * n + "-", 20_000,
         {"tenant_text.MAX_DNS_SUBDOMAIN": LIFTED}),
    ],
    "scope.ledger.decode": [
        ("JSON nesting", ledger.decode, lambda n: "[" * n, 20_000, {}),
        ("a zlib JSON nesting bomb", ledger.decode,
         lambda n: "zlib:" + base64.b64encode(zlib.compress(b"[" * n, 9)).decode(), 200_000, {}),
        ("many names", ledger.decode,
         lambda n: json.dumps({"bindings": {"ns/b": {"added": ["x"] * n}}}), 5_000, {}),
        ("a zlib bomb", ledger.decode,
         lambda n: "zlib:" + base64.b64encode(zlib.compress(b" " * n, 9)).decode(), 500_000, {}),
    ],
    "slurm.facts.token_problem": [
        ("a long claim", lambda t: slurm.token_problem(t, "u", 0.0),
         lambda n: "a." + _b64(json.dumps({"sun": "x" * n})) + ".b", 30_000, {"slurm.facts.TOKEN_MAX": LIFTED}),
        ("nested claims", lambda t: slurm.token_problem(t, "u", 0.0), lambda n: "a." + _b64("[" * n) + ".b",
         20_000, {"slurm.facts.TOKEN_MAX": LIFTED}),
    ],
    "pods.parse_time": [
        ("digits", pods.parse_time, lambda n: "2" * n, 60_000, {"pods.MAX_TIME_CHARS": LIFTED}),
        ("a timestamp and digits", pods.parse_time, lambda n: "2024-01-01T00:00:00." + "0" * n + "Z", 60_000,
         {"pods.MAX_TIME_CHARS": LIFTED}),
    ],
    "units.parse_quantity": [
        ("digits and a bad suffix", _quantity, lambda n: "1" * n + "x", 60_000, {}),
        ("a fraction and a bad exponent", _quantity, lambda n: "." + "1" * n + "e", 60_000, {}),
        ("at the bound (refused)", units.parse_quantity, lambda n: "1" * n + "x", 60_000, {}),
    ],
    "scope.membership.compile_matcher": [
        ("a five-star glob on a long name", lambda name: _matcher(name, None), lambda n: "a" * n, 60_000, {}),
    ],
    "tenancy.url_problem": [
        ("../ repeated", tenancy.url_problem, lambda n: "https://h.example.com/" + "../" * n, 10_000, {}),
        ("a/ repeated", tenancy.url_problem, lambda n: "https://h.example.com/" + "a/" * n, 10_000, {}),
        ("a long host", tenancy.url_problem, lambda n: "https://" + "a" * n + "!/", 60_000, {}),
    ],
    "selectors.to_label_selector_string": [
        ("a long value with a bad character", selectors.to_label_selector_string,
         lambda n: {"matchLabels": {"k": "a" * n + "!"}}, 60_000, {}),
        ("many values", selectors.to_label_selector_string,
         lambda n: {"matchExpressions": [{"key": "k", "operator": "In", "values": ["v"] * n}]}, 5_000, {}),
    ],
    "selectors.parse_selector_string": [
        ("empty values and blanks, never closed", selectors.parse_selector_string,
         lambda n: "a in (" + ",   " * n + "x", 5_000, {}),
        ("many values", selectors.parse_selector_string, lambda n: "a in (" + "b, " * n + "b)", 5_000, {}),
        ("many requirements", selectors.parse_selector_string, lambda n: ",".join(["a=b"] * n), 2_000, {}),
    ],
}


# Below this the constant dominates (a refusal before reading): timing noise, not the algorithm.
FLOOR = 200e-6


def _once(fn: Callable[[Any], object], arg: Any) -> float:
    """CPU seconds of one call (the thread's own clock: another process's load does not count)."""
    gc.disable()
    start = time.thread_time()
    try:
        fn(arg)
    except Exception:  # noqa: BLE001 - Refused, invalid, a YAML error: the cost is what is measured
        pass
    finally:
        spent = time.thread_time() - start
        gc.enable()
    return spent


def _best(fn: Callable[[Any], object], small: Any, large: Any, reps: int) -> tuple[float, float]:
    """Best of `reps` for each input, the two interleaved so that a burst of load hits both."""
    t1 = t4 = float("inf")
    for _ in range(reps):
        t1 = min(t1, _once(fn, small))
        t4 = min(t4, _once(fn, large))
    return t1, t4


def _lift(monkeypatch: pytest.MonkeyPatch, bounds: dict[str, int]) -> None:
    for where, value in bounds.items():
        module, name = where.rsplit(".", 1)
        monkeypatch.setattr(importlib.import_module(f"sunk_sandbox_operator.core.{module}"), name, value)


CASES = [(name, shape) for name, shapes in SHAPES.items() for shape in shapes]


@pytest.mark.parametrize(("parser", "shape"), CASES, ids=[f"{n}: {s[0]}" for n, s in CASES])
def test_four_times_the_input_costs_at_most_eight_times_the_time(parser: str, shape: Shape,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    label, fn, make, n, bounds = shape
    _lift(monkeypatch, bounds)
    small, large = make(n), make(4 * n)
    _once(fn, small)  # warm up (imports, caches of compiled patterns)
    ratios = []
    for reps in (5, 9, 15):  # a burst of load on a shared machine passes with more repetitions; a quadratic never
        t1, t4 = _best(fn, small, large, reps)
        ratios.append(t4 / t1)
        if t4 <= 8 * max(t1, FLOOR):
            return
    pytest.fail(f"{parser} on {label}: 4x the input took {min(ratios):.1f}x the time ({t1 * 1e3:.2f} ms -> "
                f"{t4 * 1e3:.2f} ms at {n:,} -> {4 * n:,})")


# ---------------------------------------------------------------- the registry covers every parse


def test_every_registered_parser_exists_and_has_shapes_and_a_bound() -> None:
    assert set(SHAPES) == {p.function for p in tenant_text.PARSERS}
    for p in tenant_text.PARSERS:
        module, name = p.function.rsplit(".", 1)
        assert callable(getattr(importlib.import_module(f"sunk_sandbox_operator.core.{module}"), name)), p.function
        assert p.reads and p.bound and p.refusal, p.function


# Calls that read text: the module, and the functions of it that do (None: all of them).
_READERS: dict[str, set[str] | None] = {
    "re": None, "fnmatch": None, "msgspec": None,
    "json": {"loads", "load", "JSONDecoder"}, "orjson": {"loads"}, "shlex": {"split", "shlex"},
    "yaml": {"load", "safe_load", "load_all", "safe_load_all", "compose", "compose_all", "parse", "scan"},
    "base64": {"b64decode", "urlsafe_b64decode", "standard_b64decode", "b32decode", "b16decode", "decodebytes"},
    "zlib": {"decompress", "decompressobj"},
}


def _enclosing(top: ast.stmt, node: ast.AST) -> str:
    if isinstance(top, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return top.name
    if isinstance(top, ast.ClassDef):
        method = next((f.name for f in top.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                       and any(n is node for n in ast.walk(f))), None)
        return f"{top.name}.{method}" if method else top.name
    targets = top.targets if isinstance(top, ast.Assign) else [getattr(top, "target", None)]
    return next((t.id for t in targets if isinstance(t, ast.Name)), "<module>")


def parse_sites() -> set[str]:
    """`module.name` of every top-level function, method or constant that calls a text reader."""
    found = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).with_suffix("").as_posix()
        if not rel.startswith(("core/", "adapters/", "controller/")):
            continue
        # core's modules by their import path below core (scope.ledger), the shells' by their file
        module = rel.removeprefix("core/").replace("/", ".") if rel.startswith("core/") else rel
        for top in ast.parse(path.read_text()).body:
            for node in ast.walk(top):
                if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
                    continue
                root: ast.AST = node.func.value
                while isinstance(root, ast.Attribute):
                    root = root.value
                readers = _READERS.get(root.id, set()) if isinstance(root, ast.Name) else set()
                if node.func.attr == "fromisoformat" or (
                        node.func.attr not in ("escape", "quote") and (readers is None or node.func.attr in readers)):
                    found.add(f"{module}.{_enclosing(top, node)}")
    return found


def test_every_parse_of_text_is_registered_or_says_why_it_needs_no_bound() -> None:
    sites = parse_sites()
    assert "scheduler.conf._SPACE" in sites and "scope.ledger.decode" in sites  # the scan sees what it should
    covered = {p.function: p.sites for p in tenant_text.PARSERS}
    patterns = [f for f, extra in covered.items() for f in (f, *extra)] + list(tenant_text.NOT_TENANT_TEXT)
    unexplained = sorted(s for s in sites if not any(fnmatch.fnmatchcase(s, p) for p in patterns))
    assert not unexplained, ("parses text without a registry entry (core/tenant_text.py PARSERS, with a bound and "
                             f"shapes in this file, or NOT_TENANT_TEXT with why): {unexplained}")
    stale = [p for extra in covered.values() for p in extra] + list(tenant_text.NOT_TENANT_TEXT)
    assert not [p for p in stale if not any(fnmatch.fnmatchcase(s, p) for s in sites)]


# ---------------------------------------------------------------- what reaches status


@pytest.mark.parametrize(("value", "shown"), [
    ("slurm-scheduler", "'slurm-scheduler'"),
    ("\x1b[31mred\x1b[0m", "'\\x1b[31mred\\x1b[0m'"),
    ("evil\u202egnp.exe", "'evil\\u202egnp.exe'"),
    ("line\nbreak", "'line\\nbreak'"),
    ("x" * 100, "'" + "x" * 64 + "'… (100 characters)"),
    (7, "7"), (None, "None"), (["a", ["b"]], "a list"), ({"a": 1}, "a dict"),
])
def test_printable_escapes_and_cuts(value: object, shown: str) -> None:
    assert tenant_text.printable(value) == shown


def test_shown_keeps_a_plain_word_and_escapes_anything_else() -> None:
    assert tenant_text.shown("namespace") == "namespace"
    assert tenant_text.shown("clu\x1bster") == "'clu\\x1bster'"
    assert tenant_text.shown("a" * 65).startswith("'aaaa") and "65 characters" in tenant_text.shown("a" * 65)
    assert tenant_text.shown(3) == "3"


@pytest.mark.parametrize("name", ["slurm-scheduler", "a", "a.b-c.d0", "0" * 63, ".".join(["a" * 63] * 3) + ".b"])
def test_dns_subdomains_pass(name: str) -> None:
    assert tenant_text.dns_subdomain_problem(name) is None


@pytest.mark.parametrize("name", ["", "Slurm", "a_b", "-a", "a-", "a..b", ".a", "a.", "sched\x1b[2J", "é",
                                  "a" * 254, "a b"])
def test_anything_else_is_not_a_scheduler_name(name: str) -> None:
    assert tenant_text.dns_subdomain_problem(name)


def test_json_nesting_is_a_value_error_and_size_a_refusal() -> None:
    with pytest.raises(ValueError, match="nested deeper"):
        tenant_text.load_json("[" * 100_000, 1 << 20)
    with pytest.raises(tenant_text.Refused):
        tenant_text.load_json("[]" * 10, 5)
    assert tenant_text.load_json('{"a": [1]}', 100) == {"a": [1]}
