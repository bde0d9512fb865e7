"""The span shortcut of `scope_doc.edit`: editing the text our last edit produced, given its span,
gives byte for byte what the checked splice gives (and the same data), for every document of the
corpus and for any sequence of lists, tricky names included."""

from __future__ import annotations

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from sunk_sandbox_operator.core.scope import doc as scope_doc, yaml_splice
from sunk_sandbox_operator.core.scope.doc import Span, edit, read_list
from tests.unit import yaml_corpus as corpus

PATH = corpus.PATH
LIST_CASES = [pytest.param(c, id=c.name) for c in corpus.CASES if c.style in ("list", "missing")]
JSON_LIST = "scheduler:\n  name: s\n  scope:\n    type: namespace\n    namespaces: [\"slurm\"]  # c\n  x: 1\n"
# Names that must not be written plain (or that a careless splice would break): the shortcut must
# leave every one of them to the checked splice.
TRICKY = ["true", "No", "null", "123", "1e3", "0x1f", "2024-01-01", "a b", "x: y", "#c", "- z", "'q'", "", "ü-ns"]


def slow(text: str, values: list[str], path: str = "s.ns") -> scope_doc.Edit:
    found = read_list(text, path)
    return edit(text, path, values, found.style)


def chain(text: str, lists: list[list[str]]) -> None:
    """Edit after edit, each with the previous edit's span; compare every step with a full edit."""
    found = read_list(text, PATH)
    e = edit(text, PATH, lists[0], found.style)
    for values in lists[1:]:
        style = read_list(e.text, PATH).style
        fast = edit(e.text, PATH, values, style, e.data, e.span)
        full = edit(e.text, PATH, values, style)
        assert fast.text == full.text
        assert fast.data == full.data == yaml.safe_load(fast.text)
        assert (fast.span is None) == (full.span is None)
        e = fast


@pytest.mark.parametrize("case", LIST_CASES)
def test_a_burst_of_edits_with_the_span_is_the_checked_splice(case: corpus.Case) -> None:
    names = corpus.names(50)
    chain(case.build(50), [names, names + ["ds-zz-a"], names + ["ds-zz-a", "ds-zz-b"], names[:10],
                           names[:10] + ["true"], names[:3], [], names])


def test_a_json_style_list_as_charts_render_it_gets_a_span_after_the_first_write() -> None:
    names = corpus.names(20)
    e = slow(JSON_LIST, names, PATH)
    assert e.span is not None and e.span.flow
    chain(JSON_LIST, [names, names + ["ds-zz-a"], ["a"], ["yes"], names])


def test_the_span_is_given_only_for_a_list_of_plain_names() -> None:
    block = "s:\n  ns:\n  - a\n  - b\n  other: 1\n"
    e = slow(block, ["a", "b", "c"])
    assert e.span == Span(11, 11 + len("- a\n  - b\n  - c"), "\n  ", len(e.text))
    assert slow(block, ["a", "true"]).span is None       # quoted: the next edit needs the full splice
    flow = slow("s: {ns: [a, b]}  # c\n", ["a", "c", "d"])
    assert flow.span == Span(8, 8 + len("[a, c, d]"), ", ", len(flow.text), flow=True)
    assert slow("s:\n  ns: [a]\n", ["a", "1"]).span is None  # quoted in a flow list too
    assert slow("s:\n  ns: a,b\n", ["a", "c"]).span is None      # comma string


def test_a_span_for_another_text_is_not_used() -> None:
    e = slow("s:\n  ns:\n  - a\n  - b\n", ["a", "b", "c"])
    other = "s:\n  ns:\n  - a\n  - bb\n"  # not the text the span describes
    out = edit(other, "s.ns", ["a", "d"], "list", yaml.safe_load(other), e.span)
    assert out.text == "s:\n  ns:\n  - a\n  - d\n"


def test_the_span_shortcut_does_not_compose_or_parse(monkeypatch: pytest.MonkeyPatch) -> None:
    text = corpus.doc_block(2000)
    found = read_list(text, PATH)
    e = edit(text, PATH, found.values + ["ds-zz-a"], found.style)

    def refuse(*_a, **_k):
        raise AssertionError("parsed")
    monkeypatch.setattr(scope_doc.yaml, "compose", refuse)
    monkeypatch.setattr(scope_doc, "_load", refuse)
    monkeypatch.setattr(scope_doc.yaml_splice, "load", refuse)
    nxt = edit(e.text, PATH, found.values + ["ds-zz-a", "ds-zz-b"], "list", e.data, e.span)
    assert nxt.span is not None
    assert yaml.safe_load(nxt.text) == nxt.data and nxt.data["scheduler"]["scope"]["namespaces"][-1] == "ds-zz-b"


names_st = st.lists(st.one_of(st.from_regex(r"[a-z][a-z0-9-]{0,8}", fullmatch=True), st.sampled_from(TRICKY)),
                    max_size=12)


@settings(max_examples=150, deadline=None)
@given(case=st.sampled_from([c for c in corpus.CASES if c.style in ("list", "missing") and c.splices]),
       lists=st.lists(names_st, min_size=2, max_size=6))
def test_any_sequence_of_lists_edits_as_the_checked_splice(case: corpus.Case, lists: list[list[str]]) -> None:
    chain(case.build(5), lists)


@settings(max_examples=300, deadline=None)
@given(values=st.lists(st.one_of(st.text(max_size=5), st.sampled_from(TRICKY + ["a\n", "a\nb", "ok"]),
                                 st.from_regex(r"[a-z][a-z0-9.-]{0,6}", fullmatch=True)), max_size=6))
def test_all_plain_is_plain_name_for_every_value(values: list[str]) -> None:
    assert yaml_splice.all_plain(values) == (bool(values) and all(map(yaml_splice.plain_name, values)))


def test_a_name_with_a_trailing_line_break_is_not_plain() -> None:
    assert not yaml_splice.plain_name("ds-a\n") and not yaml_splice.all_plain(["ds-a\n"])
    assert yaml_splice.scalar("ds-a\n", False) != "ds-a\n"  # quoted, so it re-parses as itself
