"""Where an Argo CD Application keeps the list (core/app_values): which source, which inline values
document (Argo CD renders valuesObject if set, else the `values` string, never both), when the list
may come from valueFiles, and the spec patch that writes it."""

from __future__ import annotations

import pytest
import yaml

from sunk_sandbox_operator.core.scope import app_values as av
from sunk_sandbox_operator.core.scope.doc import ListRead

PATH = "scheduler.scope.namespaces"
VALUES = """# the admin's values
slurmConfig:
  KillWait: 60   # keep in step with the grace period
scheduler:
  scope:
    type: namespace
    namespaces: [slurm]
"""


def problem(fn, *args) -> av.Problem:
    with pytest.raises(av.Problem) as info:
        fn(*args)
    return info.value


def at(helm: dict | None, index: int | None = None) -> av.Location:
    return av.locate(av.Source(index, {"repoURL": "r", "chart": "slurm", **({"helm": helm} if helm is not None else {})}),
                     PATH)


# ---------------------------------------------------------------- which source

SLURM = {"repoURL": "https://charts", "chart": "slurm", "helm": {"valuesObject": {}}}
REF = {"repoURL": "https://git/values", "ref": "values"}
OTHER = {"repoURL": "https://charts", "chart": "monitoring", "helm": {"values": "a: 1"}}


def test_a_single_source_is_the_source() -> None:
    assert av.select_source({"source": SLURM}) == av.Source(None, SLURM)
    assert av.select_source({"source": SLURM, "sources": []}).index is None   # empty sources: Argo CD uses source
    assert av.select_source({"source": SLURM}, "slurm").index is None
    assert av.select_source({"source": SLURM}, None, 0).index is None


@pytest.mark.parametrize("chart, index, fragment", [
    ("other", None, "no source renders chart other (spec.source): fix spec.scope.target.application.sourceChart"),
    (None, 1, "single spec.source: remove sourceIndex"),
])
def test_a_single_source_that_the_selector_does_not_match(chart, index, fragment) -> None:
    p = problem(av.select_source, {"source": SLURM}, chart, index)
    assert p.reason == "InvalidConfig" and fragment in p.message


def test_multi_source_picks_the_only_source_with_helm_or_a_chart() -> None:
    assert av.select_source({"sources": [REF, SLURM]}) == av.Source(1, SLURM)
    assert av.select_source({"sources": [{"repoURL": "g", "path": "charts/slurm", "helm": {}}, REF]}).index == 0


def test_multi_source_by_chart_name_or_git_path_or_index() -> None:
    spec = {"sources": [OTHER, REF, SLURM]}
    assert av.select_source(spec, "slurm") == av.Source(2, SLURM)
    assert av.select_source(spec, "monitoring").index == 0
    assert av.select_source({"sources": [REF, {"repoURL": "g", "path": "deploy/slurm/"}]}, "slurm").index == 1
    assert av.select_source(spec, None, 1) == av.Source(1, REF)


@pytest.mark.parametrize("spec, chart, index, fragment", [
    ({"sources": [OTHER, SLURM]}, None, None,
     "has 2 spec.sources and 2 of them with helm or a chart ([0] chart monitoring, [1] chart slurm): set "
     "spec.scope.target.application.sourceChart (or sourceIndex)"),
    ({"sources": [REF, {"repoURL": "x"}]}, None, None, "and none of them with helm or a chart"),
    ({"sources": [OTHER, REF]}, "slurm", None, "no source renders chart slurm ([0] chart monitoring, [1] ref values)"),
    ({"sources": [SLURM, SLURM]}, "slurm", None, "2 sources render chart slurm ([0], [1]): set "
     "spec.scope.target.application.sourceIndex"),
    ({"sources": [SLURM]}, None, 3, "sourceIndex is 3, but spec.sources has 1 entries"),
    ({"project": "default"}, None, None, "has neither spec.source nor spec.sources"),
])
def test_source_selection_problems_name_the_field_to_set(spec, chart, index, fragment) -> None:
    p = problem(av.select_source, spec, chart, index)
    assert p.reason == "InvalidConfig" and fragment in p.message, p.message


# ---------------------------------------------------------------- which values document


def test_the_list_in_values_object() -> None:
    loc = at({"valuesObject": {"scheduler": {"scope": {"type": "namespace", "namespaces": ["slurm"]}}}})
    assert (loc.field, loc.list) == ("valuesObject", ListRead(["slurm"], "list", "namespace"))
    assert loc.describe(PATH) == f"spec.source.helm.valuesObject.{PATH}"


def test_the_list_in_the_values_string() -> None:
    loc = at({"values": VALUES})
    assert (loc.field, loc.list, loc.text) == ("values", ListRead(["slurm"], "list", "namespace"), VALUES)
    assert loc.data == yaml.safe_load(VALUES)
    assert loc.describe(PATH) == f"{PATH} in spec.source.helm.values"


def test_a_set_values_object_makes_the_values_string_dead() -> None:
    """Argo CD renders valuesObject alone when it is set (even {}): the list in `values` has no effect."""
    loc = at({"valuesObject": {}, "values": VALUES})
    assert (loc.field, loc.list) == ("valuesObject", ListRead([], "missing"))


def test_without_the_path_a_non_blank_values_string_is_still_where_it_goes() -> None:
    """A new valuesObject would silence every other value of the `values` string."""
    assert at({"values": "slurmConfig: {KillWait: 60}\n"}).field == "values"
    assert at({"values": "# only a comment\n"}).field == "values"
    assert at({"values": "  \n"}).field == "valuesObject"
    assert at({"releaseName": "slurm"}).field == "valuesObject"
    assert at(None) == av.Location(av.Source(None, {"repoURL": "r", "chart": "slurm"}), "valuesObject",
                                   ListRead([], "missing"))


@pytest.mark.parametrize("helm, inline", [
    ({"valueFiles": ["values.yaml", "$values/slurm/prod.yaml"]}, "valuesObject or values (neither is set)"),
    ({"valueFiles": ["values.yaml", "$values/slurm/prod.yaml"], "values": "slurmConfig: {KillWait: 60}\n"}, "values"),
    ({"valueFiles": ["values.yaml", "$values/slurm/prod.yaml"], "valuesObject": {"scheduler": {"enabled": True}}},
     "valuesObject"),
])
def test_path_only_possibly_in_value_files_is_not_editable(helm, inline) -> None:
    p = problem(at, helm)
    assert p.reason == "ListNotEditable"
    assert f"{PATH} is not in spec.source.helm.{inline}" in p.message
    assert "valueFiles (values.yaml, $values/slurm/prod.yaml)" in p.message and "cannot edit" in p.message
    field = "values" if inline == "values" else "valuesObject"
    assert f"Put the list into spec.source.helm.{field} (an empty list is enough" in p.message


@pytest.mark.parametrize("helm, field", [
    ({"valueFiles": ["v.yaml"], "valuesObject": {"scheduler": {"scope": {"namespaces": []}}}}, "valuesObject"),
    ({"valueFiles": ["v.yaml"], "valuesObject": {"scheduler": {"scope": {"namespaces": None}}}}, "valuesObject"),
    ({"valueFiles": ["v.yaml"], "values": VALUES}, "values"),
    ({"valueFiles": ["v.yaml"], "values": "scheduler: {scope: {type: cluster}}"}, "values"),  # nothing to write
    ({"valueFiles": ["v.yaml"], "values": "scheduler: [\n"}, "values"),                        # reported as invalid
])
def test_value_files_do_not_matter_when_the_inline_document_decides(helm, field) -> None:
    assert at(helm).field == field


def test_malformed_values_string_is_an_error_in_the_read() -> None:
    loc = at({"values": "scheduler:\n  scope: [\n"})
    assert loc.field == "values" and loc.list.values is None and "malformed YAML" in loc.list.error


@pytest.mark.parametrize("name", [PATH, f"{PATH}[0]", "scheduler.scope"])
def test_a_helm_parameter_at_the_path_overrides_any_write(name) -> None:
    p = problem(at, {"valuesObject": {}, "parameters": [{"name": name, "value": "x"}]})
    assert p.reason == "ListNotEditable" and f"spec.source.helm.parameters {name} overrides {PATH}" in p.message
    assert at({"valuesObject": {}, "parameters": [{"name": "scheduler.scopeX", "value": "x"}]}).field == "valuesObject"


def test_the_values_string_is_parsed_through_the_callers_parse() -> None:
    seen = []
    av.locate(av.Source(None, {"helm": {"values": VALUES}}), PATH, lambda text: (seen.append(text), ({}, None))[1])
    assert seen == [VALUES]


# ---------------------------------------------------------------- the patch


def test_patch_of_the_values_string_edits_it_in_place() -> None:
    loc = at({"values": VALUES})
    patch, data = av.spec_patch(loc, PATH, ["ds-a", "slurm"], {})
    text = patch["source"]["helm"]["values"]
    assert list(patch) == ["source"] and list(patch["source"]["helm"]) == ["values"]
    assert text == VALUES.replace("[slurm]", "[ds-a, slurm]")          # comments and the other values kept
    assert data == yaml.safe_load(text)


def test_patch_of_the_values_object_sets_only_the_path() -> None:
    loc = at({"valuesObject": {"scheduler": {"scope": {"namespaces": "slurm"}}, "x": 1}})
    patch, data = av.spec_patch(loc, PATH, ["ds-a", "slurm"], {})
    assert patch == {"source": {"helm": {"valuesObject": {"scheduler": {"scope": {"namespaces": "ds-a,slurm"}}}}}}
    assert data is None


def test_multi_source_patch_replaces_the_sources_changing_only_the_selected_one() -> None:
    spec = {"sources": [OTHER, REF, {**SLURM, "helm": {"releaseName": "s", "valuesObject": {
        "scheduler": {"enabled": True, "scope": {"namespaces": ["slurm"]}}, "gone": None}}}]}
    loc = av.locate(av.select_source(spec, "slurm"), PATH)
    patch, _ = av.spec_patch(loc, PATH, ["ds-a", "slurm"], spec)
    assert patch["sources"][:2] == [OTHER, REF]
    assert patch["sources"][2] == {**SLURM, "helm": {"releaseName": "s", "valuesObject": {
        "scheduler": {"enabled": True, "scope": {"namespaces": ["ds-a", "slurm"]}}, "gone": None}}}
    assert spec["sources"][2]["helm"]["valuesObject"]["scheduler"]["scope"]["namespaces"] == ["slurm"]  # not mutated


def test_multi_source_patch_of_a_values_string() -> None:
    spec = {"sources": [REF, {"repoURL": "c", "chart": "slurm", "helm": {"values": VALUES}}]}
    loc = av.locate(av.select_source(spec), PATH)
    patch, data = av.spec_patch(loc, PATH, ["ds-a"], spec)
    assert patch["sources"][0] == REF and "valuesObject" not in patch["sources"][1]["helm"]
    assert yaml.safe_load(patch["sources"][1]["helm"]["values"]) == data and "# the admin's values" in \
        patch["sources"][1]["helm"]["values"]


def test_patch_over_an_unreadable_list_is_refused() -> None:
    p = problem(av.spec_patch, at({"values": "scheduler: [\n"}), PATH, ["ds-a"], {})
    assert p.reason == "InvalidConfig" and "malformed YAML" in p.message
