"""Benchmark: the namespace-list edit, text splice (scope_doc.write_list) vs a ruamel.yaml round trip.

    .venv/bin/python -m tests.bench.yaml_edit [--sizes 1000,10000] [--min-time 0.3]

Runs over the corpus of scheduler.conf-like documents in tests/unit/yaml_corpus.py (block, flow
and wrapped-flow lists, flow mapping, comma strings, comments around and inside the list, quoted
items, anchors and merge keys elsewhere (aliases are refused), a missing key, CRLF, nested keys after the list).
The edit adds one name and removes one (or creates the list when the key is missing). For each
document and method it prints: ms per edit (median), the re-parse oracle, lines outside the
edited value that changed, lines inside it that changed, and the `# c:` comments kept. ruamel.yaml is not a project
dependency: without it the bench says so and exits 0 (`.venv/bin/pip install ruamel.yaml`).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any, Callable

from sunk_sandbox_operator.core.scope.doc import read_list, write_list
from tests.unit import yaml_corpus as corpus


def ruamel_write(text: str, path: str, values: list[str], style: str) -> str:
    """The same edit as a ruamel.yaml round trip, as well as ruamel allows.

    Indentation is guessed (ruamel's load_yaml_guess_indent), quotes preserved, CRLF kept
    (edited as LF), no line wrapping. A list is edited in place (del/insert keep the other items'
    comments and the flow/block style); a string keeps its quote style.
    """
    from io import StringIO

    from ruamel.yaml import YAML
    from ruamel.yaml.comments import CommentedMap, CommentedSeq
    from ruamel.yaml.scalarstring import DoubleQuotedScalarString, SingleQuotedScalarString
    from ruamel.yaml.util import load_yaml_guess_indent

    y = YAML()  # round trip
    y.preserve_quotes = True
    y.width = 1 << 30
    crlf = "\r\n" in text
    if crlf:  # ruamel keeps the CR inside comments and then doubles it: edit as LF, convert back
        text = text.replace("\r\n", "\n")
    data, ind, bsi = load_yaml_guess_indent(text, yaml=y)  # block-sequence indents
    mapping = _mapping_indent(text)  # ruamel's guess gives no separate mapping indent
    y.indent(mapping=mapping, sequence=ind if ind is not None else mapping + (bsi or 0), offset=bsi or 0)
    *parents, last = path.split(".")
    cur = data
    for k in parents:
        if not isinstance(cur.get(k), dict):
            cur[k] = CommentedMap()
        cur = cur[k]
    old = cur.get(last)
    if style == "string":
        new: Any = ",".join(values)
        if isinstance(old, (SingleQuotedScalarString, DoubleQuotedScalarString)):
            new = type(old)(new)
        cur[last] = new
    elif isinstance(old, CommentedSeq):
        want = set(values)
        for i in range(len(old) - 1, -1, -1):
            if old[i] not in want:
                del old[i]
        have = set(old)
        for i, v in enumerate(values):
            if v not in have:
                old.insert(i, v)
        if list(old) != values:  # order differs: rebuild (item comments are lost)
            seq = CommentedSeq(values)
            if old.fa.flow_style():
                seq.fa.set_flow_style()
            cur[last] = seq
    else:
        cur[last] = CommentedSeq(values)
    buf = StringIO()
    y.dump(data, buf)
    out = buf.getvalue()
    return out.replace("\n", "\r\n") if crlf else out


def _mapping_indent(text: str) -> int:
    """Smallest indentation step of a nested key line (2 if there is none)."""
    steps = []
    for line in text.splitlines():
        body = line.lstrip(" ")
        if body and not body.startswith(("#", "-")) and len(line) > len(body):
            steps.append(len(line) - len(body))
    return min(steps, default=2)


def splice_write(text: str, path: str, values: list[str], style: str) -> str:
    return write_list(text, path, values, style)


def ms_per_edit(fn: Callable[[], str], min_time: float, min_runs: int = 3, max_runs: int = 25) -> float:
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < min_runs or (time.perf_counter() - start < min_time and len(times) < max_runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1000


def run(sizes: list[int], min_time: float) -> None:
    methods = [("splice", splice_write), ("ruamel", ruamel_write)]
    print(f"{'document':<22} {'names':>6} {'method':<7} {'ms/edit':>9} {'oracle':>6} {'unrel.':>6} {'value':>6} "
          f"{'comments':>8} {'style':>5}  lost comments")
    for n in sizes:
        for case in corpus.CASES:
            text = case.build(n)
            found = read_list(text, corpus.PATH)
            assert found.error is None and found.style == case.style, (case.name, found)
            values = corpus.edit_values(n, found.style)
            value = corpus.new_value(values, found.style)
            for label, fn in methods:
                try:
                    out = fn(text, corpus.PATH, values, found.style)
                except Exception as exc:  # noqa: BLE001 - report, don't stop the bench
                    print(f"{case.name:<22} {n:>6} {label:<7} failed: {type(exc).__name__}: {exc}"[:160])
                    continue
                ms = ms_per_edit(lambda: fn(text, corpus.PATH, values, found.style), min_time)
                ok = corpus.oracle_ok(text, out, value)
                unrelated = corpus.unrelated_lines_changed(text, out) if ok else -1
                churn = corpus.value_lines_changed(text, out) if ok else -1
                kept, lost = corpus.comments_kept(text, out)
                style_ok = corpus.value_shape(out) == case.shape
                print(f"{case.name:<22} {n:>6} {label:<7} {ms:>9.1f} {'ok' if ok else 'FAIL':>6} {unrelated:>6} {churn:>6} "
                      f"{len(kept):>4}/{len(kept) + len(lost):<3} {'ok' if style_ok else 'NO':>5}  {' '.join(lost)}")
            sys.stdout.flush()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,10000", help="comma-separated list sizes (names)")
    ap.add_argument("--min-time", type=float, default=0.3, help="seconds of runs per measurement (>= 3 runs)")
    args = ap.parse_args(argv)
    try:
        import ruamel.yaml  # noqa: F401
    except ImportError:
        print("ruamel.yaml is not installed (it is not a project dependency); to run this bench:\n"
              "  .venv/bin/pip install ruamel.yaml")
        return 0
    run([int(s) for s in args.sizes.split(",") if s], args.min_time)
    return 0


if __name__ == "__main__":
    sys.exit(main())
