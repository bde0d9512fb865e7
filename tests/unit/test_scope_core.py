"""Scope core: namespace matching, the format-preserving list edit, and the change plan."""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sunk_sandbox_operator.api import LabelSelector, SandboxNamespaces
from sunk_sandbox_operator.core.scope.membership import NamespaceInfo, is_terminating, namespace_matches, sandbox_namespaces
from sunk_sandbox_operator.core.scope.plan import diff_lists, missing_summary, plan
from sunk_sandbox_operator.core.scope.template import scope_hash
from sunk_sandbox_operator.core.scope.doc import ListRead, read_list, read_list_obj, set_path_patch, write_list

P = "scheduler.scope.namespaces"

# ---------------------------------------------------------------- matching


def _spec(**kw: Any) -> SandboxNamespaces:
    return SandboxNamespaces.model_validate(kw)


def test_glob_matches_by_name_only() -> None:
    spec = _spec(names=["ds-*", "team-[ab]"])
    assert namespace_matches(spec, "ds-alice", {})
    assert namespace_matches(spec, "team-a", {})
    assert not namespace_matches(spec, "team-c", {})
    assert not namespace_matches(spec, "xds-alice", {})
    assert not namespace_matches(spec, "DS-alice", {})  # case-sensitive, as namespace names are


def test_selector_or_glob_either_is_enough() -> None:
    spec = _spec(selector={"matchLabels": {"sandbox": "true"}}, names=["ds-*"])
    assert namespace_matches(spec, "anything", {"sandbox": "true"})
    assert namespace_matches(spec, "ds-bob", {"sandbox": "false"})
    assert not namespace_matches(spec, "other", {"sandbox": "false"})
    assert not namespace_matches(spec, "other", {})


def test_selector_expressions() -> None:
    spec = _spec(selector={"matchExpressions": [{"key": "tier", "operator": "In", "values": ["sbx", "dev"]},
                                                {"key": "frozen", "operator": "DoesNotExist"}]})
    assert namespace_matches(spec, "a", {"tier": "dev"})
    assert not namespace_matches(spec, "a", {"tier": "prod"})
    assert not namespace_matches(spec, "a", {"tier": "dev", "frozen": ""})
    assert not namespace_matches(spec, "a", None)


def test_no_selector_and_no_names_matches_nothing() -> None:
    spec = SandboxNamespaces.model_construct(selector=None, names=[])  # CEL forbids it; stay safe anyway
    assert not namespace_matches(spec, "ds-a", {"x": "y"})


@pytest.mark.parametrize(
    "ns, expected",
    [
        ({"metadata": {"name": "a"}, "status": {"phase": "Active"}}, False),
        ({"metadata": {"name": "a", "deletionTimestamp": "2024-01-01T00:00:00Z"}, "status": {"phase": "Active"}}, True),
        ({"metadata": {"name": "a"}, "status": {"phase": "Terminating"}}, True),
        ({"metadata": {"name": "a", "deletionTimestamp": None}}, False),
        ({}, False),
        ({"metadata": None, "status": None}, False),
    ],
)
def test_is_terminating(ns: dict, expected: bool) -> None:
    assert is_terminating(ns) is expected


def test_namespace_info_from_object() -> None:
    info = NamespaceInfo.from_object({"metadata": {"name": "ds-a", "labels": None, "deletionTimestamp": "t"}})
    assert info == NamespaceInfo("ds-a", {}, True)


def test_sandbox_namespaces_excludes_terminating_and_non_matching() -> None:
    spec = _spec(selector=LabelSelector(match_labels={"sbx": "1"}).wire(), names=["ds-*"])
    got = sandbox_namespaces(spec, [
        NamespaceInfo("ds-a", {}),
        NamespaceInfo("ds-gone", {}, terminating=True),
        NamespaceInfo("labelled", {"sbx": "1"}),
        NamespaceInfo("labelled-gone", {"sbx": "1"}, terminating=True),
        NamespaceInfo("kube-system", {"sbx": "0"}),
    ])
    assert got == {"ds-a", "labelled"}




# ---------------------------------------------------------------- reading


@pytest.mark.parametrize(
    "doc, values, style, stype",
    [
        ("scheduler:\n  scope:\n    type: namespace\n    namespaces: [a, b]\n", ["a", "b"], "list", "namespace"),
        ("scheduler:\n  scope:\n    namespaces:\n    - a\n", ["a"], "list", None),
        ("scheduler:\n  scope:\n    namespaces: 'a,b, c,, '\n", ["a", "b", "c"], "string", None),
        ("scheduler:\n  scope:\n    type: cluster\n", [], "missing", "cluster"),
        ("scheduler:\n  scope:\n    namespaces:\n", [], "missing", None),
        ("scheduler:\n  scope:\n    namespaces: null\n", [], "missing", None),
        ("scheduler:\n  scope:\n    namespaces: '  '\n", [], "missing", None),
        ("scheduler:\n  scope:\n", [], "missing", None),
        ("scheduler: {}\n", [], "missing", None),
        ("other: 1\n", [], "missing", None),
        ("", [], "missing", None),
        ("# only a comment\n", [], "missing", None),
    ],
)
def test_read_list_shapes(doc: str, values: list[str], style: str, stype: str | None) -> None:
    assert read_list(doc, P) == ListRead(values, style, stype, None)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "doc, fragment",
    [
        ("scheduler: [\n", "malformed YAML at line"),
        ("- a\n- b\n", "is a list, not a mapping"),
        ("just text\n", "is a string, not a mapping"),
        ("scheduler: 3\n", "scheduler is an integer, not a mapping"),
        ("scheduler:\n  scope: [x]\n", "scheduler.scope is a list, not a mapping"),
        ("scheduler:\n  scope:\n    namespaces: 5\n", "scheduler.scope.namespaces is an integer"),
        ("scheduler:\n  scope:\n    namespaces: {a: 1}\n", "scheduler.scope.namespaces is a mapping"),
        ("scheduler:\n  scope:\n    namespaces: [a, 7]\n", "scheduler.scope.namespaces[1] is an integer"),
        ("a: 1\n---\nb: 2\n", "malformed YAML"),
        ("d: 2024-13-45\n", "malformed YAML"),  # looks like a date; PyYAML raises ValueError
    ],
)
def test_read_list_reports_malformed_input(doc: str, fragment: str) -> None:
    got = read_list(doc, P)
    assert got.values is None
    assert got.error is not None and fragment in got.error
    with pytest.raises(ValueError, match=re.escape(fragment)):
        write_list(doc, P, ["x"], "list")


def test_read_list_rejects_bad_path() -> None:
    assert read_list("a: 1\n", "a..b").error is not None
    assert read_list_obj({}, "").error is not None


def test_read_list_obj_shapes() -> None:
    assert read_list_obj(None, P) == ListRead([], "missing")
    assert read_list_obj({"scheduler": {"scope": {"type": "namespace", "namespaces": "a, b"}}}, P) == ListRead(
        ["a", "b"], "string", "namespace")
    assert read_list_obj({"scheduler": {"scope": {"namespaces": ["x"]}}}, P).values == ["x"]
    from types import MappingProxyType  # kopf hands out read-only Mapping views
    assert read_list_obj(MappingProxyType({"scheduler": MappingProxyType({"scope": {"namespaces": ["v"]}})}), P).values == ["v"]
    bad = read_list_obj({"scheduler": "nope"}, P)
    assert bad.values is None and "valuesObject: scheduler is a string" in (bad.error or "")


# ---------------------------------------------------------------- writing YAML text

COMMENTED = """\
# Scheduler config (managed by Helm)
scheduler:
  name: slurm-scheduler   # keep me
  scope:
    type: namespace       # namespace | cluster
    namespaces:           # watched namespaces
      - slurm
      - ds-alice  # first user
    # trailing comment in scope
  other: 1
"""


def test_block_list_stays_block_list_and_comments_survive() -> None:
    out = write_list(COMMENTED, P, ["ds-alice", "ds-bob", "slurm"], "list")
    assert out == COMMENTED.replace(
        "      - slurm\n      - ds-alice  # first user\n",
        "      - ds-alice\n      - ds-bob\n      - slurm  # first user\n",
    )


def test_indentless_block_list_keeps_its_indentation() -> None:
    doc = "scheduler:\n  scope:\n    namespaces:\n    - a\n  x: 1\n"
    assert write_list(doc, P, ["a", "b"], "list") == "scheduler:\n  scope:\n    namespaces:\n    - a\n    - b\n  x: 1\n"


def test_flow_list_stays_flow_list() -> None:
    doc = "scheduler:\n  scope: {type: namespace, namespaces: [a]}  # c\n"
    assert write_list(doc, P, ["a", "b"], "list") == "scheduler:\n  scope: {type: namespace, namespaces: [a, b]}  # c\n"


@pytest.mark.parametrize(
    "doc, expected",
    [
        ("s:\n  namespaces: a,b  # c\n", "s:\n  namespaces: a,b,c  # c\n"),
        ("s:\n  namespaces: 'a, b'\n", "s:\n  namespaces: 'a,b,c'\n"),
        ('s:\n  namespaces: "a"\n', 's:\n  namespaces: "a,b,c"\n'),
        ("s:\n  namespaces: |\n    a,b\nt: 1\n", 's:\n  namespaces: "a,b,c"\nt: 1\n'),
    ],
)
def test_comma_string_stays_string_with_its_quotes(doc: str, expected: str) -> None:
    assert read_list(doc, "s.namespaces").style == "string"
    out = write_list(doc, "s.namespaces", ["a", "b", "c"], "string")
    assert out == expected
    assert yaml.safe_load(out)["s"]["namespaces"] == "a,b,c"


@pytest.mark.parametrize(
    "doc",
    [
        "scheduler:\n  scope:\n    type: cluster\n",
        "scheduler:\n  scope:\n    type: cluster\n    namespaces:\n",
        "scheduler:\n  scope:\n    namespaces: null  # c\nz: 1\n",
        "scheduler:\n  scope:\n    namespaces: ''\n",
        "scheduler:\n  scope:\n",
        "scheduler:\n  name: x\n",
        "scheduler: {}\n",
        "scheduler:\n  scope: {type: namespace}\n",
        "other: {a: 1}  # c\n",
        "",
        "# only a comment\n",
        "a: |\n  block\n",
        "a:\r\n  b: 1\r\n",
    ],
)
def test_missing_is_created_as_a_list(doc: str) -> None:
    before = yaml.safe_load(doc) or {}
    out = write_list(doc, P, ["ds-a", "slurm"], read_list(doc, P).style)
    assert yaml.safe_load(out) == _replaced(before, ["ds-a", "slurm"])
    for line in doc.splitlines():  # every original line (with its comment) is still there
        if "namespaces" not in line and "scope" not in line and "scheduler" not in line:
            assert line in out


def test_new_entries_are_quoted_when_yaml_would_mistype_them() -> None:
    names = ["123", "yes", "null", "true", "2024-01-01", "1e3", "0x1f", "a b", "", "ds-a"]
    for doc, style in (("s:\n  ns:\n  - x\n", "list"), ("s: {ns: [x]}\n", "list"), ("s: {}\n", "missing")):
        out = write_list(doc, "s.ns", names, style)
        assert yaml.safe_load(out)["s"]["ns"] == names


def test_empty_list_writes() -> None:
    assert write_list("s:\n  ns:\n    - a  # c\n", "s.ns", [], "list") == "s:\n  ns: []  # c\n"
    assert yaml.safe_load(write_list("s:\n  ns: a,b\n", "s.ns", [], "string")) == {"s": {"ns": ""}}
    for doc in ("s:\n  ns:\n", "s: {}\n", "", "s:\n  ns: ''\n"):
        assert write_list(doc, "s.ns", [], "missing") == doc  # already reads as empty: no write


def test_merged_value_falls_back_to_reemit_and_changes_only_the_path() -> None:
    # The list comes in through a merge key: a splice beside it would drop the merged `type`.
    doc = "scheduler:\n  <<: {scope: {type: namespace, namespaces: [a]}}\n  name: s\n"
    out = write_list(doc, P, ["a", "z"], "list")
    assert yaml.safe_load(out) == {"scheduler": {"scope": {"type": "namespace", "namespaces": ["a", "z"]},
                                                 "name": "s"}}
    assert write_list(out, P, ["a", "z"], read_list(out, P).style) == out


def test_reemit_keeps_strings_pyyaml_dumps_lossily() -> None:
    # The merge key forces the re-emit; "\N  " (NEL + spaces) does not survive PyYAML's unicode dump.
    doc = 'scheduler:\n  <<: {scope: {type: namespace, namespaces: [a]}}\nx: "\\N  "\n'
    out = write_list(doc, P, ["q"], "list")
    assert yaml.safe_load(out) == {"scheduler": {"scope": {"type": "namespace", "namespaces": ["q"]}}, "x": "\x85  "}


# ---------------------------------------------------------------- hypothesis: other keys untouched

KEY = st.text("abcdefghijklmnopqrstuvwxyz_-", min_size=1, max_size=8).filter(lambda k: k not in {"y", "n"})
SCALAR = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6), st.text(max_size=12),
                   st.floats(allow_nan=False, allow_infinity=False))
VALUE = st.recursive(SCALAR, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                      st.dictionaries(KEY, inner, max_size=3)), max_leaves=8)
EXTRA = st.dictionaries(KEY, VALUE, max_size=4)
NAME = st.text(min_size=0, max_size=12)
SAFE_NAME = st.from_regex(r"[a-z0-9][a-z0-9-]{0,10}", fullmatch=True)


@st.composite
def documents(draw: st.DrawFn) -> tuple[str, dict]:
    """A values document with random neighbours at every level and a random shape at the path."""
    root = draw(EXTRA)
    sched = draw(EXTRA)
    scope = draw(EXTRA)
    shape = draw(st.sampled_from(["list", "string", "absent", "null", "blank", "no-scope"]))
    scope.pop("namespaces", None)
    if shape == "list":
        scope["namespaces"] = draw(st.lists(NAME, max_size=4))
    elif shape == "string":
        scope["namespaces"] = ", ".join(draw(st.lists(SAFE_NAME, min_size=1, max_size=4)))
    elif shape == "null":
        scope["namespaces"] = None
    elif shape == "blank":
        scope["namespaces"] = ""
    if draw(st.booleans()):
        scope["type"] = draw(st.sampled_from(["namespace", "cluster"]))
    if shape != "no-scope":
        sched["scope"] = scope
    else:
        sched.pop("scope", None)
    root["scheduler"] = sched
    root = json.loads(json.dumps(root))  # no shared objects, so the dump has no anchors
    text = yaml.safe_dump(root, sort_keys=False, default_flow_style=draw(st.sampled_from([False, None, True])),
                          indent=draw(st.sampled_from([2, 4])), allow_unicode=draw(st.booleans()))
    return "# header comment\n" + text, root


def _replaced(data: dict, value: Any) -> dict:
    out = json.loads(json.dumps(data))
    out.setdefault("scheduler", {}).setdefault("scope", {})
    if out["scheduler"]["scope"] is None:
        out["scheduler"]["scope"] = {}
    out["scheduler"]["scope"]["namespaces"] = value
    return out


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=documents(), values=st.lists(NAME, min_size=1, max_size=5), safe=st.lists(SAFE_NAME, min_size=1, max_size=5))
def test_write_changes_only_the_path_keeps_comments_and_is_idempotent(
    doc: tuple[str, dict], values: list[str], safe: list[str]
) -> None:
    text, _ = doc
    data = yaml.safe_load(text)  # the baseline is what the text says (PyYAML's dump is not always exact)
    found = read_list(text, P)
    assert found.error is None
    new = safe if found.style == "string" else values  # a comma string cannot carry commas/blanks
    out = write_list(text, P, new, found.style)
    expected_value = ",".join(new) if found.style == "string" else new
    assert yaml.safe_load(out) == _replaced(data, expected_value)
    assert list(yaml.safe_load(out)) == list(data)  # key order kept
    assert out.startswith("# header comment\n")  # spliced, not re-emitted
    again = read_list(out, P)
    assert again.values == new
    assert again.style == ("list" if found.style == "missing" else found.style)
    assert write_list(out, P, new, again.style) == out


# ---------------------------------------------------------------- plain dict (Argo CD valuesObject)


def _merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386, to show what the API server makes of the fragment."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = _merge_patch(out.get(k), v)
    return out


def test_set_path_patch_sets_only_the_path() -> None:
    assert set_path_patch(P, ["a", "b"], "list") == {"scheduler": {"scope": {"namespaces": ["a", "b"]}}}
    assert set_path_patch(P, ["a", "b"], "string") == {"scheduler": {"scope": {"namespaces": "a,b"}}}
    assert set_path_patch("x", [], "missing") == {"x": []}
    values = {"scheduler": {"image": "i", "scope": {"type": "namespace", "namespaces": ["old", "x"]}}, "other": [1]}
    patched = _merge_patch(values, set_path_patch(P, ["a"], read_list_obj(values, P).style))
    assert patched == {"scheduler": {"image": "i", "scope": {"type": "namespace", "namespaces": ["a"]}}, "other": [1]}
    with pytest.raises(ValueError):
        set_path_patch("a..b", ["x"], "list")


# ---------------------------------------------------------------- plan

NS = st.sampled_from([f"ns{i}" for i in range(12)])
NSLIST = st.lists(NS, max_size=10)


def test_plan_adds_sandboxes_and_removes_only_our_stale_entries() -> None:
    current = ["admin-ns", "ds-gone", "ds-keep", "old-pre", "slurm"]
    got = plan(current, {"ds-keep", "ds-new"}, ["slurm"], ["old-pre"], ["ds-gone", "ds-keep"])
    assert got.new_list == ["admin-ns", "ds-keep", "ds-new", "old-pre", "slurm"]
    assert (got.diff.added, got.diff.removed) == (["ds-new"], ["ds-gone"])
    assert got.added_by_us == ["ds-keep", "ds-new"]
    assert got.changed


def test_plan_unchanged_set_returns_current_as_is() -> None:
    current = ["b", "a", "b"]
    got = plan(current, {"a"}, ["b"], None, ["a"])
    assert got.new_list == ["b", "a", "b"] and got.diff.empty and not got.changed
    assert got.added_by_us == ["a"]


def test_plan_with_no_sandboxes_is_the_restore_plan() -> None:
    got = plan(["ds-a", "slurm", "admin"], set(), ["slurm"], ["admin"], ["ds-a", "slurm"])
    assert got.new_list == ["admin", "slurm"]
    assert got.added_by_us == ["slurm"]  # ours, but protected while it is in alwaysInclude


def test_plan_readds_always_include_but_not_removed_preexisting() -> None:
    got = plan(["x"], set(), ["slurm"], ["gone-by-admin"], [])
    assert got.new_list == ["slurm", "x"] and got.added_by_us == ["slurm"]


@settings(max_examples=400, deadline=None)
@given(current=NSLIST, desired=st.sets(NS), always=NSLIST, pre=NSLIST, managed=NSLIST)
def test_plan_invariants(current: list[str], desired: set[str], always: list[str], pre: list[str],
                         managed: list[str]) -> None:
    got = plan(current, desired, always, pre, managed)
    new = set(got.new_list)
    assert set(always) <= new and desired <= new
    assert set(pre) & set(current) <= new  # preexisting never removed
    assert set(current) - set(managed) <= new  # entries we did not add are never removed
    for gone in set(current) - new:  # whatever is removed was ours and is no longer wanted
        assert gone in managed and gone not in desired and gone not in always and gone not in pre
    for stale in set(managed) & set(current):
        if stale not in desired and stale not in always and stale not in pre:
            assert stale not in new
    assert new <= set(current) | set(always) | desired
    if new == set(current):
        assert got.new_list == current and got.diff.empty
    else:
        assert got.new_list == sorted(new) and not got.diff.empty
        assert got.diff == diff_lists(current, got.new_list)
    assert set(got.added_by_us) <= new and not set(got.added_by_us) & set(pre)
    assert got.added_by_us == sorted(set(got.added_by_us))
    # Deterministic: the order of the inputs does not matter (beyond the unchanged case).
    again = plan(list(reversed(current)), set(desired), list(reversed(always)), list(reversed(pre)),
                 list(reversed(managed)))
    assert set(again.new_list) == new and again.added_by_us == got.added_by_us and again.diff == got.diff


def test_diff_lists_ignores_order_and_duplicates() -> None:
    d = diff_lists(["b", "a", "a"], ["a", "c", "b"])
    assert (d.added, d.removed) == (["c"], [])
    assert diff_lists(["x", "y"], ["y", "x"]).empty


# ---------------------------------------------------------------- hash and summary


def test_scope_hash() -> None:
    h = scope_hash(["b", "a"])
    assert re.fullmatch(r"[0-9a-f]{16}", h)
    assert h == scope_hash(["a", "b"]) == scope_hash(["a", "b", "a"])
    assert h != scope_hash(["a", "b", "c"]) and h != scope_hash(["ab"]) and scope_hash([]) != scope_hash([""])
    # Pinned: changing the recipe would roll every scheduler once on upgrade.
    assert h == hashlib.sha256(b'["a","b"]').hexdigest()[:16]


def test_missing_summary() -> None:
    assert missing_summary({"d", "a", "c", "b", "z", "y", "x"}, ["a", "q"], limit=3) == (6, ["b", "c", "d"])
    assert missing_summary({"a"}, ["a"]) == (0, [])
    assert missing_summary({"a", "b"}, [], limit=0) == (2, [])
