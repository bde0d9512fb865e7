"""core/untrusted: every tenant-written YAML document is parsed at a cost its size warrants.

The "billion laughs" of issue 19 (556 bytes that the list edit expanded to 1 GiB) is refused at its
first alias, without building anything; so is every alias at or around the list. Big but legal
documents pass, through the cheap bounds when they can (no exact scan), and those bounds are upper
bounds (hypothesis): a text they clear is within the limits.
"""

from __future__ import annotations

import tracemalloc

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sunk_sandbox_operator.core import untrusted
from sunk_sandbox_operator.core.untrusted import MAX_BYTES, MAX_DEPTH, MAX_INT_CHARS, MAX_NODES, Refused
from tests.integration.attacks import alias_bomb
from tests.unit import yaml_corpus as corpus


# A scheduler.conf with nine levels of nine aliases of the level below: 387 million strings if expanded.
BOMB = "scheduler:\n  name: s\n  scope:\n    type: namespace\n    namespaces: [a]\n" + alias_bomb(9)


def refusal(text: str) -> str:
    with pytest.raises(Refused) as info:
        untrusted.check(text)
    return str(info.value)


def test_the_556_byte_bomb_is_refused_at_its_first_alias_without_building_anything() -> None:
    assert len(BOMB.encode()) == 556
    tracemalloc.start()
    try:
        for parse in (untrusted.check, untrusted.load, untrusted.compose):
            with pytest.raises(Refused, match=r"YAML alias \(`\*l0` at line 7, column 10\)"):
                parse(BOMB)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 256 * 1024  # nothing was expanded (that would be gigabytes)
    assert "write it without anchors and aliases" in refusal(BOMB)


@pytest.mark.parametrize("doc, alias", [
    ("ns: &ns [a, b]\nscheduler:\n  scope:\n    namespaces: *ns\n", "ns"),                    # the list itself
    ("a: &a x\nscheduler:\n  scope:\n    namespaces: [*a, b]\n", "a"),                        # an item
    ("a: &a x\nscheduler:\n  scope:\n    namespaces:\n    - b\n    - *a\n", "a"),              # a block item
    ("s: &s\n  namespaces: [a]\nscheduler:\n  scope: *s\n", "s"),                            # the list's mapping
    ("d: &d {type: namespace}\nscheduler:\n  scope:\n    <<: *d\n    namespaces: [a]\n", "d"),  # a merge key
    ("k: &k namespaces\nscheduler:\n  scope:\n    *k : [a]\n", "k"),                          # the key
    ("scheduler:\n  scope:\n    namespaces: [a]\nimage: &i x\nsidecar: *i\n", "i"),          # elsewhere
    ("scheduler: {scope: {namespaces: &n [a]}, mirror: *n}\n", "n"),                          # in flow style
])
def test_every_alias_is_refused_wherever_it_is(doc: str, alias: str) -> None:
    assert f"YAML alias (`*{alias}` at line" in refusal(doc)


@pytest.mark.parametrize("doc", [
    "scheduler:\n  scope:\n    namespaces: &ns [a, b]\n",       # an anchor no alias uses expands nothing
    "a: '*x'\nb: \"*y\"\nc: a*b\nd: [x*, '*']\n",             # stars in scalars are not aliases
    "# * a comment\nscheduler: {scope: {namespaces: [a]}}\n",
    "glob: '*.example.com'\ncron: '*/5 * * * *'\n",
])
def test_stars_and_anchors_that_expand_nothing_pass(doc: str) -> None:
    untrusted.check(doc)
    assert untrusted.load(doc) == yaml.safe_load(doc)


def test_the_bounds_hold_exactly_at_their_limits() -> None:
    nodes = "x:\n" + "- a\n" * (MAX_NODES - 3)  # mapping, key, list and its items
    untrusted.check(nodes)
    assert f"more than {MAX_NODES:,} YAML nodes" in refusal(nodes + "- a\n")
    deep = "x: " + "[" * (MAX_DEPTH - 1) + "]" * (MAX_DEPTH - 1) + "\n"
    untrusted.check(deep)
    assert f"nests more than {MAX_DEPTH} levels deep" in refusal("x: " + "[" * MAX_DEPTH + "]" * MAX_DEPTH + "\n")
    big = "# " + "x" * (MAX_BYTES - 3) + "\n"
    untrusted.check(big)
    assert f"more than the {MAX_BYTES:,} the operator parses" in refusal(big + "\n")
    wide = "# " + "é" * ((MAX_BYTES - 3) // 2) + "\n"   # bytes, not characters: é is two in UTF-8
    untrusted.check(wide)
    assert "bytes, more than" in refusal(wide + "é")


def test_a_base_60_integer_is_bounded_while_constructing() -> None:
    # 1:59:59:… is a YAML 1.1 integer whose construction is quadratic in its length.
    long = "x: 1" + ":59" * MAX_INT_CHARS + "\n"
    with pytest.raises(Refused, match=rf"an integer of {len(long) - 4:,} characters at line 1, column 4"):
        untrusted.load(long)
    assert untrusted.load("x: '" + long[3:-1] + "'\n")["x"].startswith("1:59")   # quoted: a string
    assert untrusted.load("x: " + "7" * MAX_INT_CHARS + "\n")["x"] > 0


def test_the_reason_and_the_readme_state_these_bounds() -> None:
    from pathlib import Path

    from sunk_sandbox_operator.api.reasons import ScopeSynced

    threat = (Path(__file__).resolve().parents[2] / "docs" / "threat-model.md").read_text()
    assert threat.startswith("# Threat model\n")
    assert MAX_BYTES == 1 << 20
    for text in (ScopeSynced.DOCUMENT_REFUSED.fix, threat):
        assert "1 MiB" in text and f"{MAX_NODES:,} nodes" in text and f"{MAX_DEPTH} levels" in text


def test_malformed_yaml_raises_the_parsers_own_error_not_a_refusal() -> None:
    for doc in ("scheduler: [\n", "scheduler: ['*', \n"):  # on the cheap path and through the scan
        with pytest.raises(yaml.YAMLError) as info:
            untrusted.load(doc)
        assert not isinstance(info.value, Refused)


# ---------------------------------------------------------------- the common path stays cheap


@pytest.fixture
def scans(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the exact scans (libyaml's event stream) that `check` makes."""
    seen: list[int] = []
    scan = untrusted._scan
    monkeypatch.setattr(untrusted, "_scan", lambda text: (seen.append(len(text)), scan(text))[1])
    return seen


def test_a_10000_name_list_passes_on_the_bounds_alone(scans: list[int]) -> None:
    for case in corpus.CASES:
        text = case.build(10_000)
        assert untrusted.load(text) == yaml.load(text, Loader=untrusted.FAST_LOADER)
    assert scans == []


def test_a_star_or_a_deep_line_costs_one_exact_scan_and_passes(scans: list[int]) -> None:
    block = corpus.doc_block(10_000)
    untrusted.check("# one * in a comment\n" + block)
    untrusted.check(block + "deep:\n" + "".join(" " * (2 * i) + f"k{i}:\n" for i in range(20)) + " " * 40 + "v\n")
    assert len(scans) == 2


# ---------------------------------------------------------------- the bounds are bounds


def _actual(text: str) -> tuple[int, int]:
    """Nodes and depth of the text's first document, from libyaml's events."""
    nodes = depth = deepest = 0
    for event in yaml.parse(text, Loader=untrusted.FAST_LOADER):
        if isinstance(event, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
            depth += 1
            deepest = max(deepest, depth)
        elif isinstance(event, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
            depth -= 1
            continue
        elif isinstance(event, yaml.DocumentEndEvent):
            break
        elif not isinstance(event, yaml.ScalarEvent):
            continue
        nodes += 1
    return nodes, deepest


KEY = st.text("ab-?:, []{}*&#", min_size=0, max_size=4)
SCALAR = st.one_of(st.none(), st.booleans(), st.integers(), st.text("ab -?:,[]{}'\"#\n", max_size=6))
VALUE = st.recursive(SCALAR, lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(KEY, inner, max_size=4)),
                     max_leaves=40)


def _bounds_hold(text: str) -> None:
    nodes, depth = _actual(text)
    assert untrusted.node_bound(text) >= nodes
    for prefix in range(1, 12):  # the block estimate is tight for small prefixes: test it there
        bound = untrusted.depth_bound(text, prefix)
        assert bound is None or bound >= depth, (prefix, bound, depth)
    assert any(untrusted.depth_bound(text, p) is not None for p in range(1, 200))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=VALUE, flow=st.sampled_from([False, None, True]), indent=st.sampled_from([2, 4, 7]),
       width=st.sampled_from([20, 80]), explicit=st.booleans())
def test_the_cheap_bounds_are_upper_bounds(value, flow, indent: int, width: int, explicit: bool) -> None:
    _bounds_hold(yaml.safe_dump(value, default_flow_style=flow, indent=indent, width=width, explicit_start=explicit))


@pytest.mark.parametrize("text", [
    "- - - - - a\n", "? - - a\n: b\n", "- ? a\n  : - b\n", "- &x a:\n    b: c\n", "- !!map a: b\n",
    "{a, b, c}\n", "[a: b, ? c]\n", "[? a, ? b]\n", "a:\n- b\n- c: d\n  e:\n  - f\n", "\ufeff- - - a\n",
    "a: |\n" + " " * 60 + "x\n", "--- a\n...\n--- b\n", "a:\r  - - b\r", "- - a\n  - - b\n    - - c\n",
])
def test_the_cheap_bounds_hold_for_compact_and_odd_layouts(text: str) -> None:
    _bounds_hold(text)


@pytest.mark.parametrize("case", corpus.CASES, ids=lambda c: c.name)
def test_the_cheap_bounds_hold_over_the_corpus(case: corpus.Case) -> None:
    _bounds_hold(case.build(30))
