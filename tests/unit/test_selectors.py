"""Label-selector matching and rendering."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sunk_sandbox_operator.api import LabelSelector
from sunk_sandbox_operator.core.selectors import matches, selector_error, to_label_selector_string

# ------------------------------------------------------------------ examples


def test_empty_selector_matches_everything() -> None:
    assert matches({}, {})
    assert matches({}, {"a": "b"})
    assert matches(LabelSelector(), {"x": "y"})
    assert to_label_selector_string({}) == ""


def test_match_labels_all_required() -> None:
    sel = {"matchLabels": {"team": "ml", "tier": "sandbox"}}
    assert matches(sel, {"team": "ml", "tier": "sandbox", "extra": "1"})
    assert not matches(sel, {"team": "ml"})
    assert not matches(sel, {"team": "ml", "tier": "prod"})
    assert not matches(sel, None)


@pytest.mark.parametrize(
    ("expr", "labels", "expected"),
    [
        ({"key": "env", "operator": "In", "values": ["a", "b"]}, {"env": "a"}, True),
        ({"key": "env", "operator": "In", "values": ["a", "b"]}, {"env": "c"}, False),
        ({"key": "env", "operator": "In", "values": ["a"]}, {}, False),
        ({"key": "env", "operator": "NotIn", "values": ["a"]}, {"env": "b"}, True),
        ({"key": "env", "operator": "NotIn", "values": ["a"]}, {"env": "a"}, False),
        ({"key": "env", "operator": "NotIn", "values": ["a"]}, {}, True),  # absent key satisfies NotIn
        ({"key": "env", "operator": "Exists"}, {"env": ""}, True),
        ({"key": "env", "operator": "Exists"}, {}, False),
        ({"key": "env", "operator": "DoesNotExist"}, {}, True),
        ({"key": "env", "operator": "DoesNotExist"}, {"env": "x"}, False),
    ],
)
def test_expressions(expr: dict, labels: dict, expected: bool) -> None:
    assert matches({"matchExpressions": [expr]}, labels) is expected


def test_model_and_raw_dict_agree() -> None:
    raw = {
        "matchLabels": {"a": "1"},
        "matchExpressions": [{"key": "b", "operator": "NotIn", "values": ["x"]}],
    }
    model = LabelSelector.model_validate(raw)
    for labels in ({"a": "1"}, {"a": "1", "b": "x"}, {"a": "2"}, {"a": "1", "b": "y"}):
        assert matches(model, labels) == matches(raw, labels)
    assert to_label_selector_string(model) == to_label_selector_string(raw) == "a=1,b notin (x)"


@pytest.mark.parametrize(
    "bad",
    [
        {"matchExpressions": [{"key": "a", "operator": "Equals", "values": ["x"]}]},
        {"matchExpressions": [{"key": "a", "operator": "In", "values": []}]},
        {"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]},
        {"matchExpressions": [{"key": "", "operator": "Exists"}]},
        {"matchExpressions": "a=b"},
        {"matchExpressions": [["a"]]},
        {"matchLabels": ["a", "b"]},
        {"matchLabels": {"a": 1}},
        "app=x",
        42,
    ],
)
def test_malformed_selector_matches_nothing_and_is_reported(bad: object) -> None:
    assert selector_error(bad) is not None  # type: ignore[arg-type]
    assert matches(bad, {"a": "x", "b": "y"}) is False  # type: ignore[arg-type]
    assert to_label_selector_string(bad) is None  # type: ignore[arg-type]


def test_render_all_operators() -> None:
    sel = {
        "matchLabels": {"app.kubernetes.io/name": "sunk-scheduler"},
        "matchExpressions": [
            {"key": "tier", "operator": "In", "values": ["b", "a"]},
            {"key": "env", "operator": "NotIn", "values": ["prod"]},
            {"key": "owned", "operator": "Exists"},
            {"key": "legacy", "operator": "DoesNotExist"},
        ],
    }
    assert (
        to_label_selector_string(sel)
        == "app.kubernetes.io/name=sunk-scheduler,tier in (a,b),env notin (prod),owned,!legacy"
    )


def test_render_refuses_unrepresentable_values() -> None:
    assert to_label_selector_string({"matchLabels": {"a": "has space"}}) is None
    assert to_label_selector_string({"matchLabels": {"a": "x,y"}}) is None
    assert to_label_selector_string({"matchExpressions": [{"key": "a", "operator": "In", "values": ["", "x"]}]}) is None
    assert to_label_selector_string({"matchLabels": {"a": ""}}) == "a="


# ------------------------------------------------------------------ properties

_keys = st.sampled_from(["a", "b", "c", "example.com/d"])
_vals = st.sampled_from(["", "x", "y", "z-1"])
_labels = st.dictionaries(_keys, _vals, max_size=4)
_expr = st.one_of(
    st.fixed_dictionaries(
        {"key": _keys, "operator": st.sampled_from(["In", "NotIn"]), "values": st.lists(_vals, min_size=1, max_size=3)}
    ),
    st.fixed_dictionaries({"key": _keys, "operator": st.sampled_from(["Exists", "DoesNotExist"])}),
)
_selector = st.fixed_dictionaries(
    {"matchLabels": st.dictionaries(_keys, _vals, max_size=3), "matchExpressions": st.lists(_expr, max_size=3)}
)


def _reference(sel: dict, labels: dict) -> bool:
    """Straight from the Kubernetes docs, written independently of the module."""
    for k, v in sel["matchLabels"].items():
        if labels.get(k) != v:
            return False
    for e in sel["matchExpressions"]:
        k, op = e["key"], e["operator"]
        if op == "In" and not (k in labels and labels[k] in e["values"]):
            return False
        if op == "NotIn" and k in labels and labels[k] in e["values"]:
            return False
        if op == "Exists" and k not in labels:
            return False
        if op == "DoesNotExist" and k in labels:
            return False
    return True


def _eval_rendered(text: str, labels: dict) -> bool:
    """A minimal evaluator of the server-side selector grammar, to check rendering keeps meaning."""
    if not text:
        return True
    for part in re.findall(r"[^,(]+(?:\([^)]*\))?", text):
        part = part.strip()
        if m := re.fullmatch(r"(\S+) (in|notin) \((.*)\)", part):
            key, op, vals = m.group(1), m.group(2), m.group(3).split(",")
            ok = (key in labels and labels[key] in vals) if op == "in" else not (key in labels and labels[key] in vals)
        elif part.startswith("!"):
            ok = part[1:] not in labels
        elif "=" in part:
            key, _, val = part.partition("=")
            ok = labels.get(key) == val
        else:
            ok = part in labels
        if not ok:
            return False
    return True


@settings(max_examples=400, deadline=None)
@given(_selector, _labels)
def test_matches_agrees_with_reference(sel: dict, labels: dict) -> None:
    assert matches(sel, labels) == _reference(sel, labels)
    assert matches(LabelSelector.model_validate(sel), labels) == _reference(sel, labels)


@settings(max_examples=400, deadline=None)
@given(_selector, _labels)
def test_rendered_string_means_the_same(sel: dict, labels: dict) -> None:
    text = to_label_selector_string(sel)
    if text is None:  # only sets holding an empty value are unrenderable here
        assert any(e.get("values") and "" in e["values"] and len(e["values"]) > 1 or
                   (e["operator"] == "NotIn" and "" in e.get("values", [])) for e in sel["matchExpressions"])
        return
    assert _eval_rendered(text, labels) == _reference(sel, labels)


def test_the_label_selector_string_grammar_is_parsed_as_apimachinery_does() -> None:
    from sunk_sandbox_operator.core.selectors import Requirement, parse_selector, parse_selector_string

    got = parse_selector_string("a=b, c==d,e!=f, g in (x, y), h notin (z),i,!j")
    assert got.error is None and got.requirements == (
        Requirement("a", "In", ("b",)), Requirement("c", "In", ("d",)), Requirement("e", "NotIn", ("f",)),
        Requirement("g", "In", ("x", "y")), Requirement("h", "NotIn", ("z",)), Requirement("i", "Exists", ()),
        Requirement("j", "DoesNotExist", ()))
    assert parse_selector_string("sunk.coreweave.com/sandbox=true").requirements == (
        Requirement("sunk.coreweave.com/sandbox", "In", ("true",)),)
    assert parse_selector_string("").requirements == () and parse_selector_string("").error is None
    for bad in ("a>1", "a=b=c", "a in ()", "a,,b", "a in (x", "(a)"):
        assert parse_selector_string(bad).error, bad
    # The string rendering reads back as the same selector.
    sel = {"matchLabels": {"a": "b"}, "matchExpressions": [{"key": "c", "operator": "NotIn", "values": ["x", "y"]},
                                                           {"key": "d", "operator": "DoesNotExist"}]}
    assert parse_selector_string(to_label_selector_string(sel)) == parse_selector(sel)
