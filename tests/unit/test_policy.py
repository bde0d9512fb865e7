"""Runner policy merge / restore / diff: examples from realistic policies, then properties."""

from __future__ import annotations

import copy
import json
from pathlib import Path as FsPath
from typing import Any, Iterator

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from sunk_sandbox_operator.api import OwnedPath, parse_spec
from sunk_sandbox_operator.core.policy.merge import Desired, desired_fields, diff, merge, restore
from sunk_sandbox_operator.core.policy.checks import policy_warnings, validate_policy
from sunk_sandbox_operator.core.policy.paths import (
    CREATED,
    GRACE_PATH,
    ROOT,
    PolicyError,
    annotation_path,
    format_path,
    parse_path,
    strict_equal,
)

FIXTURES = FsPath(__file__).parent / "fixtures" / "policies"
SCHED = "base.spec.schedulerName"
PARTITION = 'base.metadata.annotations["sunk.coreweave.com/partition"]'
USER_ID = "sunk.coreweave.com/user-id"


def load(name: str) -> Any:
    return json.loads((FIXTURES / name).read_text())


def spec(**extra: Any):
    base = {
        "runner": {"id": "runner-7f3a", "tokenSecretRef": {"name": "coreweave-api"}},
        "sandboxNamespaces": {"names": ["ds-*"]},
    }
    base.update(extra)
    return parse_spec(base)


def dumps(doc: Any) -> str:
    """Order- and type-sensitive rendering: equal strings mean byte-identical JSON."""
    return json.dumps(doc)


def get(doc: Any, path: str) -> Any:
    node = doc
    for seg in parse_path(path):
        node = node[seg]
    return node


# ---------------------------------------------------------------- paths


@pytest.mark.parametrize(
    "segments, text",
    [
        (("base", "spec", "schedulerName"), "base.spec.schedulerName"),
        (("base", "metadata", "annotations", "sunk.coreweave.com/partition"), PARTITION),
        ((), "$"),
        (("a b", "x"), '["a b"].x'),
        (("k", 'quote"and\\slash'), 'k["quote\\"and\\\\slash"]'),
        (("k", ""), 'k[""]'),
        (("k", "$"), 'k["$"]'),
        (("k", "ünï"), 'k["ünï"]'),
    ],
)
def test_format_and_parse_path(segments, text):
    assert format_path(segments) == text
    assert parse_path(text) == segments


def test_parse_path_accepts_brackets_for_plain_keys():
    assert parse_path('base["spec"].schedulerName') == ("base", "spec", "schedulerName")


@pytest.mark.parametrize("bad", ["", "a..b", "a.", ".a", "a[b]", 'a["b"', 'a["b"]c', "a[1]", "a b", 'a["b"]]'])
def test_parse_path_rejects_malformed(bad):
    with pytest.raises(PolicyError, match="malformed policy path"):
        parse_path(bad)


@given(st.lists(st.text(), min_size=1, max_size=5).map(tuple))
def test_path_roundtrip(segments):
    assert parse_path(format_path(segments)) == segments


# ---------------------------------------------------------------- desired_fields


def test_desired_fields_scheduler_and_pinned_annotations():
    d = desired_fields(spec(partition="sandboxes", slurm={"account": "ml", "userId": "1000"}), "slurm-scheduler")
    assert d.values == {
        SCHED: "slurm-scheduler",
        'base.metadata.annotations["sunk.coreweave.com/account"]': "ml",
        'base.metadata.annotations["sunk.coreweave.com/user-id"]': "1000",
        PARTITION: "sandboxes",
    }
    assert list(d.values)[0] == SCHED


def test_desired_fields_only_scheduler_without_pins():
    assert desired_fields(spec(), "s").values == {SCHED: "s"}


@pytest.mark.parametrize("name", ["", " ", "slurm scheduler", " slurm"])
def test_desired_fields_rejects_empty_or_blank_scheduler(name):
    with pytest.raises(PolicyError, match="spec.scheduler.name"):
        desired_fields(spec(), name)


def test_desired_fields_refuses_pinning_a_client_key_even_if_the_model_was_bypassed():
    s = spec(partition="p").model_copy(update={"client_annotations": ["sunk.coreweave.com/partition"]})
    with pytest.raises(PolicyError, match=r"sunk.coreweave.com/partition is both pinned .*spec.clientAnnotations"):
        desired_fields(s, "s")


# ---------------------------------------------------------------- merge: examples


DESIRED = Desired({SCHED: "slurm-scheduler", PARTITION: "sandboxes"})


def test_merge_into_realistic_policy_keeps_everything_else():
    current = load("full.json")
    before = copy.deepcopy(current)
    r = merge(current, DESIRED, client_annotations=[USER_ID])
    assert current == before  # input not mutated
    assert r.changed
    assert r.warnings == []
    assert get(r.policy, SCHED) == "slurm-scheduler"
    assert get(r.policy, PARTITION) == "sandboxes"
    assert dumps(r.policy["constraints"]) == dumps(current["constraints"])
    assert dumps(r.policy["display_name"]) == dumps(current["display_name"])
    spec_before = dict(current["base"]["spec"])
    spec_after = dict(r.policy["base"]["spec"])
    assert spec_after.pop("schedulerName") == "slurm-scheduler"
    assert dumps(spec_after) == dumps(spec_before)  # same keys, same order
    ann = r.policy["base"]["metadata"]["annotations"]
    assert list(ann) == list(current["base"]["metadata"]["annotations"]) + ["sunk.coreweave.com/partition"]
    assert "terminationGracePeriodSeconds" not in r.policy["base"]["spec"]
    # Existing containers were not created by us, so no {} entries for them.
    assert [(o.path, o.value, o.previous) for o in r.owned] == [
        (SCHED, "slurm-scheduler", None),
        (PARTITION, "sandboxes", None),
    ]


def test_merge_null_creates_document_and_records_root():
    r = merge(None, DESIRED)
    assert r.changed
    assert r.policy == {
        "base": {
            "spec": {"schedulerName": "slurm-scheduler"},
            "metadata": {"annotations": {"sunk.coreweave.com/partition": "sandboxes"}},
        }
    }
    paths = [(o.path, o.value) for o in r.owned]
    assert paths[0] == (ROOT, CREATED)
    assert ("base", CREATED) in paths and ("base.metadata.annotations", CREATED) in paths
    assert restore(r.policy, r.owned) is None


def test_merge_empty_policy_restores_to_empty_not_null():
    r = merge({}, DESIRED)
    assert ROOT not in [o.path for o in r.owned]
    assert restore(r.policy, r.owned) == {}


def test_merge_with_nothing_desired_leaves_null_null():
    r = merge(None, Desired({}))
    assert r.policy is None and not r.changed and r.owned == []


def test_merge_unchanged_when_already_holding_our_values():
    current = load("already-merged.json")
    r = merge(current, DESIRED)
    assert not r.changed
    assert dumps(r.policy) == dumps(current)
    # Someone else set them first: previous is that same value, so restore changes nothing.
    assert all(o.previous == o.value for o in r.owned)
    assert dumps(restore(r.policy, r.owned)) == dumps(current)


def test_merge_replaces_existing_value_and_records_previous():
    current = {"base": {"spec": {"schedulerName": "default-scheduler", "priorityClassName": "x"}}}
    r = merge(current, Desired({SCHED: "slurm-scheduler"}))
    assert r.owned == [OwnedPath(path=SCHED, value="slurm-scheduler", previous="default-scheduler")]
    assert list(r.policy["base"]["spec"]) == ["schedulerName", "priorityClassName"]
    assert restore(r.policy, r.owned) == current


def test_merge_keeps_original_previous_across_value_changes():
    current = {"base": {"spec": {"schedulerName": "default-scheduler"}}}
    r1 = merge(current, Desired({SCHED: "a"}))
    r2 = merge(r1.policy, Desired({SCHED: "b"}), r1.owned)
    assert r2.owned == [OwnedPath(path=SCHED, value="b", previous="default-scheduler")]
    assert restore(r2.policy, r2.owned) == current


def test_merge_corrects_drift_and_keeps_original_previous():
    current = {"base": {"spec": {"schedulerName": "orig"}}}
    r1 = merge(current, Desired({SCHED: "ours"}))
    drifted = copy.deepcopy(r1.policy)
    drifted["base"]["spec"]["schedulerName"] = "someone-else"
    r2 = merge(drifted, Desired({SCHED: "ours"}), r1.owned)
    assert r2.changed and get(r2.policy, SCHED) == "ours"
    assert r2.owned[0].previous == "orig"


def test_merge_restores_a_path_no_longer_desired():
    current = {"base": {"metadata": {"annotations": {"team": "ml"}}, "spec": {}}}
    r1 = merge(current, DESIRED)
    r2 = merge(r1.policy, Desired({SCHED: "slurm-scheduler"}), r1.owned)
    assert r2.changed
    assert r2.policy["base"]["metadata"]["annotations"] == {"team": "ml"}
    assert [o.path for o in r2.owned] == [SCHED]


def test_merge_prunes_objects_it_created_for_a_path_no_longer_desired():
    r1 = merge({"base": {"spec": {}}}, DESIRED)
    assert "base.metadata" in [o.path for o in r1.owned]
    r2 = merge(r1.policy, Desired({SCHED: "slurm-scheduler"}), r1.owned)
    assert r2.policy == {"base": {"spec": {"schedulerName": "slurm-scheduler"}}}
    assert [o.path for o in r2.owned] == [SCHED]


def test_merge_leaves_a_no_longer_desired_path_another_admin_changed():
    r1 = merge({}, DESIRED)
    changed = copy.deepcopy(r1.policy)
    changed["base"]["metadata"]["annotations"]["sunk.coreweave.com/partition"] = "theirs"
    r2 = merge(changed, Desired({SCHED: "slurm-scheduler"}), r1.owned)
    assert get(r2.policy, PARTITION) == "theirs"
    assert PARTITION not in [o.path for o in r2.owned]
    # The objects holding their value are not pruned, and no longer ours.
    assert "base.metadata.annotations" not in [o.path for o in r2.owned]


def test_merge_never_adds_grace_period_and_keeps_an_existing_one():
    current = load("hazards.json")
    r = merge(current, DESIRED, client_annotations=[USER_ID])
    assert r.policy["base"]["spec"]["terminationGracePeriodSeconds"] == 30
    assert r.policy["base"]["spec"]["nodeSelector"] == current["base"]["spec"]["nodeSelector"]
    assert dumps(r.policy["constraints"]) == dumps(current["constraints"])
    assert "terminationGracePeriodSeconds" not in merge({}, DESIRED).policy["base"]["spec"]


def test_merge_treats_null_objects_and_leaves_as_absent():
    r = merge({"base": None, "constraints": {"network": None}}, DESIRED)
    assert get(r.policy, SCHED) == "slurm-scheduler"
    assert r.policy["constraints"] == {"network": None}
    # null == unset in proto3 JSON: restore removes the key instead of writing null back.
    assert restore(r.policy, r.owned) == {"constraints": {"network": None}}
    r2 = merge({"base": {"spec": {"schedulerName": None}}}, Desired({SCHED: "s"}))
    assert r2.owned[-1].previous is None
    assert restore(r2.policy, r2.owned) == {"base": {"spec": {}}}


def test_merge_refuses_to_pin_a_client_annotation():
    with pytest.raises(PolicyError, match="sunk.coreweave.com/partition is both pinned"):
        merge({}, DESIRED, client_annotations=["sunk.coreweave.com/partition"])


@pytest.mark.parametrize("field", ["terminationGracePeriodSeconds", "affinity", "runtimeClassName"])
def test_merge_refuses_forbidden_base_fields(field):
    with pytest.raises(PolicyError, match=f"base.spec.{field}"):
        merge({}, Desired({f"base.spec.{field}": "30"}))


def test_merge_refuses_to_write_through_a_non_object():
    with pytest.raises(PolicyError, match="base.spec.extra: is a string, not an object"):
        merge({"base": {"spec": {"extra": "s"}}}, Desired({"base.spec.extra.x": "v"}))


def test_merge_refuses_overwriting_a_non_string_leaf():
    with pytest.raises(PolicyError, match=r"base.spec.priority: holds a number"):
        merge({"base": {"spec": {"priority": 5}}}, Desired({"base.spec.priority": "v"}))


def test_merge_rejects_invalid_policy():
    with pytest.raises(PolicyError, match=r'base.metadata.annotations\["sunk.coreweave.com/partition"\]: must be a string'):
        merge(load("invalid-annotations.json"), DESIRED)


# ---------------------------------------------------------------- restore: examples


def test_restore_keeps_an_empty_annotations_map_that_existed():
    current = {"base": {"metadata": {"annotations": {}}}}
    r = merge(current, DESIRED)
    assert dumps(restore(r.policy, r.owned)) == dumps(current)


def test_restore_keeps_later_admin_change_and_its_containers():
    r = merge(None, DESIRED)
    later = copy.deepcopy(r.policy)
    later["base"]["spec"]["schedulerName"] = "their-scheduler"
    later["constraints"] = {"network": {"egress": {"default": "none"}}}
    out = restore(later, r.owned)
    assert out == {
        "base": {"spec": {"schedulerName": "their-scheduler"}},
        "constraints": {"network": {"egress": {"default": "none"}}},
    }


def test_restore_does_not_prune_created_object_holding_admin_additions():
    r = merge({}, DESIRED)
    later = copy.deepcopy(r.policy)
    later["base"]["metadata"]["annotations"]["example.com/x"] = "y"
    later["base"]["spec"]["nodeSelector"] = {}  # an empty object of theirs counts as content
    out = restore(later, r.owned)
    assert out == {"base": {"metadata": {"annotations": {"example.com/x": "y"}}, "spec": {"nodeSelector": {}}}}


def test_restore_of_null_policy_is_null():
    assert restore(None, merge(None, DESIRED).owned) is None
    assert restore(None, []) is None


def test_restore_does_not_mutate_input():
    r = merge({}, DESIRED)
    snapshot = dumps(r.policy)
    restore(r.policy, r.owned)
    assert dumps(r.policy) == snapshot


# ---------------------------------------------------------------- warnings


def test_warnings_for_hazardous_policy_name_field_and_fix():
    w = policy_warnings(load("hazards.json"), [USER_ID])
    text = "\n".join(w)
    assert any(s.startswith("base.spec.nodeSelector") and "NodeAffinity" in s and "partition/constraint" in s for s in w)
    assert any("terminationGracePeriodSeconds" in s and "rejects" in s for s in w)
    assert any("constraints.compute.instance_types" in s for s in w)
    assert any(
        "denied_annotation_prefixes" in s and '"sunk.coreweave.com/"' in s and f'"{USER_ID}"' in s for s in w
    )
    assert f'base.metadata.annotations["{USER_ID}"]' in text and "clients cannot choose it" in text
    assert len(w) == 5


def test_warning_for_camel_case_denied_prefixes_and_only_matching_keys():
    policy = {"constraints": {"metadata": {"deniedAnnotationPrefixes": ["sunk.coreweave.com/user", "x/"]}}}
    w = policy_warnings(policy, [USER_ID, "sunk.coreweave.com/account"])
    assert len(w) == 1
    assert "deniedAnnotationPrefixes" in w[0] and USER_ID in w[0] and "sunk.coreweave.com/account" not in w[0]


def test_no_denied_prefix_warning_without_client_annotations():
    assert policy_warnings(load("hazards.json"), []) == [
        s for s in policy_warnings(load("hazards.json"), []) if "denied" not in s
    ]
    assert not any("denied" in s for s in policy_warnings(load("hazards.json"), []))


def test_merge_reports_warnings_but_deletes_nothing():
    current = load("hazards.json")
    r = merge(current, DESIRED, client_annotations=[USER_ID])
    assert r.warnings == policy_warnings(r.policy, [USER_ID])
    assert r.warnings
    assert r.policy["constraints"]["metadata"] == current["constraints"]["metadata"]


def test_no_warnings_for_null_or_empty_or_clean_policy():
    assert policy_warnings(None, [USER_ID]) == []
    assert policy_warnings({}, [USER_ID]) == []
    assert policy_warnings(load("full.json"), [USER_ID]) == []


def test_warnings_for_container_security_context_and_node_name():
    w = policy_warnings({"base": {"spec": {"nodeName": "n1", "containers": [{"securityContext": {}}]}}})
    assert any("nodeName" in s for s in w)
    assert any("base.spec.containers[0].securityContext" in s for s in w)


# ---------------------------------------------------------------- validate_policy


@pytest.mark.parametrize(
    "policy, message",
    [
        ([], "policy: must be a JSON object or null, got array"),
        ("x", "policy: must be a JSON object or null, got string"),
        ({"base": "x"}, "policy base: must be an object, got string"),
        ({"base": {"spec": []}}, "policy base.spec: must be an object, got array"),
        ({"base": {"metadata": {"annotations": []}}}, "policy base.metadata.annotations: must be an object"),
        ({"base": {"metadata": {"labels": {"a": 1}}}}, "policy base.metadata.labels.a: must be a string, got number"),
        ({"base": {"spec": {"schedulerName": 3}}}, "policy base.spec.schedulerName: must be a string"),
        ({"base": {"spec": {"nodeSelector": {"a/b": True}}}}, 'policy base.spec.nodeSelector["a/b"]: must be a string'),
        ({"constraints": []}, "policy constraints: must be an object"),
        ({"constraints": {"metadata": {"denied_annotation_prefixes": "x"}}},
         "policy constraints.metadata.denied_annotation_prefixes: must be an array"),
        ({"constraints": {"metadata": {"deniedAnnotationPrefixes": [1]}}},
         r"policy constraints.metadata.deniedAnnotationPrefixes[0]: must be a string"),
    ],
)
def test_validate_policy_names_the_path(policy, message):
    with pytest.raises(PolicyError) as e:
        validate_policy(policy)
    assert str(e.value).startswith(message)


@pytest.mark.parametrize("name", ["full.json", "null.json", "empty.json", "hazards.json", "already-merged.json"])
def test_validate_policy_accepts_fixtures(name):
    validate_policy(load(name))


# ---------------------------------------------------------------- diff


def test_diff_lines():
    before = {"base": {"spec": {"schedulerName": "a", "x": 1}}, "c": True}
    after = {"base": {"spec": {"schedulerName": "b"}, "metadata": {"annotations": {"k.io/p": "v"}}}, "c": 1}
    assert diff(before, after) == [
        'base.spec.schedulerName: "a" -> "b"',
        "- base.spec.x",
        '+ base.metadata.annotations["k.io/p"] = "v"',
        "c: true -> 1",
    ]


def test_diff_null_and_empty():
    assert diff(None, None) == []
    assert diff({}, {}) == []
    assert diff(None, {}) == ["$: null -> {}"]
    assert diff(None, {"a": {"b": "c"}}) == ["$: null -> {}", '+ a.b = "c"']
    assert diff({"a": {}}, None) == ["- a", "$: {} -> null"]
    assert diff({}, {"a": {}}) == ["+ a = {}"]


def test_strict_equal_tells_json_types_apart():
    assert not strict_equal(1, True)
    assert not strict_equal({"a": 1}, {"a": 1.0})
    assert strict_equal({"a": [1, {"b": None}]}, {"a": [1, {"b": None}]})


# ---------------------------------------------------------------- properties

PINNED_KEYS = [f"sunk.coreweave.com/{k}" for k in ("partition", "account", "qos", "constraint", "exclusive", "user-id")]
ann_keys = st.one_of(
    st.sampled_from(PINNED_KEYS + ["example.com/owner", "team", "a.b.c/d.e", "x/y/z"]),
    st.text(min_size=1, max_size=12),
)
scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False, allow_infinity=False),
                    st.text(max_size=8))
json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)),
    max_leaves=8,
)
str_maps = st.dictionaries(ann_keys, st.text(max_size=10), max_size=4)


def extras(reserved: set[str]) -> st.SearchStrategy[dict]:
    keys = st.one_of(st.sampled_from(["tolerations", "priorityClassName", "terminationGracePeriodSeconds",
                                      "display_name", "x.y/z"]), st.text(max_size=6))
    return st.dictionaries(keys.filter(lambda k: k not in reserved), json_values, max_size=3)


# Built once: constructing strategies inside @composite costs more than drawing from them.
EXTRA = {name: extras(reserved) for name, reserved in {
    "metadata": {"annotations", "labels"}, "spec": {"schedulerName", "nodeSelector"},
    "base": {"metadata", "spec"}, "constraints": {"network", "metadata"}, "top": {"base", "constraints"},
}.items()}
PREFIXES = st.lists(st.text(max_size=20), max_size=3)


def _object(rnd, fixed: dict, extra: dict) -> dict:
    """fixed (present with probability 1/2 each) plus extra keys, in random order."""
    items = [(k, v) for k, v in fixed.items() if rnd.random() < 0.5]
    items += [(k, v) for k, v in extra.items() if k not in fixed]
    rnd.shuffle(items)
    return dict(items)


@st.composite
def policies(draw) -> dict | None:
    if draw(st.integers(0, 9)) == 0:
        return None
    rnd = draw(st.randoms(use_true_random=False))
    metadata = _object(rnd, {"annotations": draw(str_maps), "labels": draw(str_maps)}, draw(EXTRA["metadata"]))
    pod = _object(rnd, {"schedulerName": draw(st.text(max_size=10)), "nodeSelector": draw(str_maps)},
                  draw(EXTRA["spec"]))
    base = _object(rnd, {"metadata": metadata, "spec": pod}, draw(EXTRA["base"]))
    cmeta = _object(rnd, {"denied_annotation_prefixes": draw(PREFIXES)}, {})
    constraints = _object(rnd, {"network": draw(json_values), "metadata": cmeta}, draw(EXTRA["constraints"]))
    return _object(rnd, {"base": base, "constraints": constraints}, draw(EXTRA["top"]))


@st.composite
def desireds(draw) -> Desired:
    values: dict[str, str] = {}
    if draw(st.integers(0, 5)) != 0:
        values[SCHED] = draw(st.text(min_size=1, max_size=10))
    for key in draw(st.lists(ann_keys, max_size=3, unique=True)):
        values[annotation_path(key)] = draw(st.text(max_size=10))
    if draw(st.integers(0, 4)) == 0:
        values = {}
    return Desired(values)


def leaves(doc: Any, path: tuple = ()) -> Iterator[tuple[tuple, Any]]:
    """Every non-object value and every empty object, with its path."""
    if isinstance(doc, dict) and doc:
        for k, v in doc.items():
            yield from leaves(v, path + (k,))
    else:
        yield path, doc


def objects(doc: Any, path: tuple = ()) -> Iterator[tuple[tuple, dict]]:
    if isinstance(doc, dict):
        yield path, doc
        for k, v in doc.items():
            yield from objects(v, path + (k,))


def at(doc: Any, path: tuple) -> Any:
    for seg in path:
        doc = doc[seg]
    return doc


PROPS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPS
@given(policies(), desireds())
@example(None, Desired({SCHED: "s"}))
@example({}, Desired({SCHED: "s"}))
def test_prop_untouched_paths_preserved_exactly(x, d):
    r = merge(x, d)
    if r.policy is None:
        assert x is None and not d.values
        return
    ours = {parse_path(p) for p in d.values}
    for path, value in leaves(x if x is not None else {}):
        if path in ours or not path:
            continue
        # An empty object on our way now holds our fields; everything else is identical.
        if value == {} and any(o[: len(path)] == path for o in ours):
            continue
        assert dumps(at(r.policy, path)) == dumps(value), format_path(path)
    for path, obj in objects(x if x is not None else {}):
        kept = [k for k in at(r.policy, path) if k in obj]
        assert kept == list(obj), f"key order changed at {format_path(path)}"
    # Nothing appears beyond our paths.
    allowed = {p for p, _ in leaves(x if x is not None else {})} | ours
    for path, _ in leaves(r.policy if r.policy is not None else {}):
        assert path in allowed or not path, format_path(path)
    for path, value in d.values.items():
        assert at(r.policy, parse_path(path)) == value


@PROPS
@given(policies(), desireds())
def test_prop_merge_is_idempotent(x, d):
    r1 = merge(x, d)
    r2 = merge(r1.policy, d, r1.owned)
    assert not r2.changed
    assert dumps(r2.policy) == dumps(r1.policy)
    assert r2.owned == r1.owned
    assert not merge(r1.policy, d).changed  # even without status


@PROPS
@given(policies(), desireds())
@example(None, Desired({SCHED: "s"}))
@example({}, Desired({SCHED: "s"}))
@example({"base": {"metadata": {"annotations": {}}}}, Desired({PARTITION: "p"}))
def test_prop_restore_undoes_merge(x, d):
    r = merge(x, d)
    back = restore(r.policy, r.owned)
    assert dumps(back) == dumps(x)
    assert (back is None) == (x is None)  # null and {} stay distinct


@PROPS
@given(policies(), desireds(), desireds())
def test_prop_restore_after_two_merges(x, d1, d2):
    r1 = merge(x, d1)
    r2 = merge(r1.policy, d2, r1.owned)
    assert dumps(restore(r2.policy, r2.owned)) == dumps(x)


@PROPS
@given(policies(), desireds())
def test_prop_never_adds_grace_period(x, d):
    r = merge(x, d)
    had = x is not None and _has(x, GRACE_PATH)
    assert _has(r.policy, GRACE_PATH) == had
    assert all("terminationGracePeriodSeconds" not in o.path for o in r.owned)


def _has(doc: Any, path: tuple) -> bool:
    for seg in path:
        if not isinstance(doc, dict) or seg not in doc:
            return False
        doc = doc[seg]
    return True


@PROPS
@given(policies(), desireds(), st.data())
def test_prop_restore_keeps_later_admin_change(x, d, data):
    r = merge(x, d)
    leaf_paths = [parse_path(p) for p in d.values]
    if not leaf_paths:
        return
    target = data.draw(st.sampled_from(leaf_paths))
    theirs = d.values[format_path(target)] + "-theirs"
    later = copy.deepcopy(r.policy)
    at(later, target[:-1])[target[-1]] = theirs
    out = restore(later, r.owned)
    expected = copy.deepcopy(x) if x is not None else {}
    node = expected
    for seg in target[:-1]:
        if not isinstance(node.get(seg), dict):
            node[seg] = {}
        node = node[seg]
    node[target[-1]] = theirs
    assert strict_equal(out, expected)


@PROPS
@given(policies(), desireds())
def test_prop_owned_paths_parse_and_values_are_strings(x, d):
    for o in merge(x, d).owned:
        parse_path(o.path)
        assert isinstance(o.value, str)
        assert o.previous is None or isinstance(o.previous, str)

