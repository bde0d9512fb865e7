"""render-policy CLI: exit codes, stdout JSON, stderr warnings/diff/errors."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import pytest

from sunk_sandbox_operator.render import main, unwrap_policy

FIXTURES = Path(__file__).parent / "fixtures" / "policies"

BINDING = """\
apiVersion: sunksandbox.dev/v1alpha1
kind: SunkSandboxBinding
metadata:
  name: cpu-sandboxes
  namespace: tenant-slurm
spec:
  runner:
    id: runner-7f3a
    tokenSecretRef: {name: coreweave-api}
  scheduler:
    name: {scheduler}
  partition: sandboxes
  slurm:
    exclusive: {exclusive}
  clientAnnotations: [sunk.coreweave.com/user-id]
  sandboxNamespaces:
    names: ["ds-*"]
"""


def binding(tmp_path: Path, scheduler: str = "slurm-scheduler", exclusive: str = "user", text: str | None = None) -> str:
    path = tmp_path / "binding.yaml"
    path.write_text(text if text is not None else
                    BINDING.replace("{scheduler}", json.dumps(scheduler)).replace("{exclusive}", exclusive))
    return str(path)


def fixture(tmp_path: Path, name: str) -> str:
    dest = tmp_path / name
    shutil.copy(FIXTURES / name, dest)
    return str(dest)


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_renders_merged_policy_preserving_constraints(tmp_path, capsys):
    policy_file = fixture(tmp_path, "full.json")
    code, out, err = run(capsys, "--binding", binding(tmp_path), "--policy", policy_file)
    assert code == 0, err
    rendered = json.loads(out)
    current = json.loads(Path(policy_file).read_text())
    assert rendered["base"]["spec"]["schedulerName"] == "slurm-scheduler"
    assert rendered["base"]["metadata"]["annotations"]["sunk.coreweave.com/partition"] == "sandboxes"
    assert rendered["base"]["metadata"]["annotations"]["sunk.coreweave.com/exclusive"] == "user"
    assert json.dumps(rendered["constraints"]) == json.dumps(current["constraints"])
    assert out.startswith("{\n  ")  # indent 2
    assert "diff (current -> rendered):" in err
    assert '  + base.spec.schedulerName = "slurm-scheduler"' in err
    assert "warning:" not in err
    assert "terminationGracePeriodSeconds" not in out


def test_null_policy_becomes_new_document(tmp_path, capsys):
    code, out, err = run(capsys, "--binding", binding(tmp_path), "--policy", fixture(tmp_path, "null.json"))
    assert code == 0
    assert json.loads(out) == {
        "base": {
            "spec": {"schedulerName": "slurm-scheduler"},
            "metadata": {"annotations": {"sunk.coreweave.com/exclusive": "user",
                                         "sunk.coreweave.com/partition": "sandboxes"}},
        }
    }
    assert "$: null -> {}" in err


def test_empty_policy(tmp_path, capsys):
    code, out, err = run(capsys, "--binding", binding(tmp_path), "--policy", fixture(tmp_path, "empty.json"))
    assert code == 0
    assert json.loads(out)["base"]["spec"] == {"schedulerName": "slurm-scheduler"}
    assert "$: null" not in err


def test_scheduler_name_flag_overrides_spec(tmp_path, capsys):
    code, out, _ = run(capsys, "--binding", binding(tmp_path), "--policy", fixture(tmp_path, "empty.json"),
                       "--scheduler-name", "tenant-slurm-slurm-scheduler")
    assert code == 0
    assert json.loads(out)["base"]["spec"]["schedulerName"] == "tenant-slurm-slurm-scheduler"


def test_scheduler_name_unknown_exits_2(tmp_path, capsys):
    code, out, err = run(capsys, "--binding", binding(tmp_path, scheduler=""), "--policy",
                         fixture(tmp_path, "empty.json"))
    assert code == 2
    assert out == ""
    assert err.strip() == "error: scheduler name unknown: pass --scheduler-name or set spec.scheduler.name"


def test_warnings_on_stderr_and_nothing_deleted(tmp_path, capsys):
    policy_file = fixture(tmp_path, "hazards.json")
    code, out, err = run(capsys, "--binding", binding(tmp_path), "--policy", policy_file)
    assert code == 0
    rendered = json.loads(out)
    assert rendered["base"]["spec"]["nodeSelector"] == {"node.kubernetes.io/instance-type": "cd-gp-i64-erapids"}
    warnings = [line for line in err.splitlines() if line.startswith("warning: ")]
    assert any("base.spec.nodeSelector" in w and "NodeAffinity" in w for w in warnings)
    assert any('"sunk.coreweave.com/"' in w and '"sunk.coreweave.com/user-id"' in w for w in warnings)
    assert any("terminationGracePeriodSeconds" in w for w in warnings)


def test_no_change_is_reported(tmp_path, capsys):
    text = BINDING.replace("{scheduler}", '"slurm-scheduler"').replace("  slurm:\n    exclusive: {exclusive}\n", "")
    code, out, err = run(capsys, "--binding", binding(tmp_path, text=text),
                         "--policy", fixture(tmp_path, "already-merged.json"))
    assert code == 0
    assert json.loads(out) == json.loads((FIXTURES / "already-merged.json").read_text())
    assert "no change" in err and "diff" not in err


@pytest.mark.parametrize("name", ["runner-response.json", "runner-response-null.json"])
def test_runner_response_is_unwrapped(tmp_path, capsys, name):
    code, out, _ = run(capsys, "--binding", binding(tmp_path), "--policy", fixture(tmp_path, name))
    assert code == 0
    rendered = json.loads(out)
    assert set(rendered) <= {"base", "constraints"}
    assert "etag" not in rendered and "identity" not in rendered
    assert rendered["base"]["spec"]["schedulerName"] == "slurm-scheduler"
    if name == "runner-response.json":
        assert rendered["constraints"] == {"network": {"egress": {"default": "none"}}}
        assert rendered["base"]["spec"]["priorityClassName"] == "sandbox-default"


def test_unwrap_policy_shapes():
    assert unwrap_policy(None) is None
    assert unwrap_policy({}) == {}
    assert unwrap_policy({"base": {}}) == {"base": {}}
    assert unwrap_policy({"etag": "1", "identity": {}}) is None  # proto JSON omits a null policy
    assert unwrap_policy({"policy": {"constraints": {}}, "etag": "1"}) == {"constraints": {}}
    assert unwrap_policy({"runnerId": "r", "managedRunner": {"policy": {"base": {}}, "etag": "1"}}) == {"base": {}}
    assert unwrap_policy({"display_name": "x"}) == {"display_name": "x"}


def test_policy_from_stdin(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO('{"constraints": {"network": {"egress": {"default": "none"}}}}'))
    code, out, _ = run(capsys, "--binding", binding(tmp_path), "--policy", "-")
    assert code == 0
    assert json.loads(out)["constraints"] == {"network": {"egress": {"default": "none"}}}


def test_invalid_enum_names_the_field(tmp_path, capsys):
    code, out, err = run(capsys, "--binding", binding(tmp_path, exclusive="always"),
                         "--policy", fixture(tmp_path, "empty.json"))
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1
    assert "spec.slurm.exclusive: Input should be 'none', 'user' or 'ok'" in err


def test_invalid_binding_lists_every_field_on_one_line(tmp_path, capsys):
    text = BINDING.replace("{scheduler}", '"s"').replace("{exclusive}", "none").replace(
        "clientAnnotations: [sunk.coreweave.com/user-id]", "clientAnnotations: [Not A Key]").replace(
        "id: runner-7f3a", "id: ''")
    code, _, err = run(capsys, "--binding", binding(tmp_path, text=text), "--policy", fixture(tmp_path, "empty.json"))
    assert code == 2
    line = err.strip()
    assert "\n" not in line
    assert "spec.runner.id:" in line and "spec.clientAnnotations[0]:" in line


def test_pinned_and_client_annotation_clash(tmp_path, capsys):
    text = BINDING.replace("{scheduler}", '"s"').replace("{exclusive}", "none").replace(
        "[sunk.coreweave.com/user-id]", "[sunk.coreweave.com/partition]")
    code, _, err = run(capsys, "--binding", binding(tmp_path, text=text), "--policy", fixture(tmp_path, "empty.json"))
    assert code == 2
    assert "sunk.coreweave.com/partition is both pinned" in err
    assert "Value error" not in err


def test_missing_required_field(tmp_path, capsys):
    text = BINDING.replace("{scheduler}", '"s"').replace("{exclusive}", "none").replace(
        '  sandboxNamespaces:\n    names: ["ds-*"]\n', "")
    code, _, err = run(capsys, "--binding", binding(tmp_path, text=text), "--policy", fixture(tmp_path, "empty.json"))
    assert code == 2
    assert "spec.sandboxNamespaces: Field required" in err


@pytest.mark.parametrize(
    "text, message",
    [
        ("kind: SunkSandboxBinding\nspec: [1\n", "invalid YAML at line"),
        ("kind: ConfigMap\nspec: {}\n", "kind is 'ConfigMap', expected SunkSandboxBinding"),
        ("kind: SunkSandboxBinding\nmetadata: {name: x}\n", "no spec mapping"),
        ("- a\n- b\n", "expected a SunkSandboxBinding manifest"),
        ("", "expected exactly one SunkSandboxBinding document, found 0"),
    ],
)
def test_bad_binding_file(tmp_path, capsys, text, message):
    code, out, err = run(capsys, "--binding", binding(tmp_path, text=text), "--policy", fixture(tmp_path, "empty.json"))
    assert code == 2 and out == ""
    assert err.startswith("error: binding ")
    assert message in err
    assert len(err.strip().splitlines()) == 1


def test_binding_picked_from_multi_document_file(tmp_path, capsys):
    text = "apiVersion: v1\nkind: Secret\nmetadata: {name: coreweave-api}\n---\n" + BINDING.replace(
        "{scheduler}", '"s"').replace("{exclusive}", "none")
    code, out, _ = run(capsys, "--binding", binding(tmp_path, text=text), "--policy", fixture(tmp_path, "empty.json"))
    assert code == 0
    assert json.loads(out)["base"]["spec"]["schedulerName"] == "s"


def test_missing_binding_file(tmp_path, capsys):
    code, _, err = run(capsys, "--binding", str(tmp_path / "nope.yaml"), "--policy", fixture(tmp_path, "empty.json"))
    assert code == 2
    assert "nope.yaml: cannot read: No such file or directory" in err


@pytest.mark.parametrize("text", ["", "{", "{'base': {}}", "nul"])
def test_invalid_json(tmp_path, capsys, text):
    p = tmp_path / "p.json"
    p.write_text(text)
    code, out, err = run(capsys, "--binding", binding(tmp_path), "--policy", str(p))
    assert code == 2 and out == ""
    assert err.startswith(f"error: policy {p}: invalid JSON: ")
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "doc, message",
    [
        ([], "must be a JSON object or null, got array"),
        ({"base": {"metadata": {"annotations": {"a": 1}}}}, "base.metadata.annotations.a: must be a string"),
        ({"etag": "1", "policy": {"base": []}}, "base: must be an object, got array"),
    ],
)
def test_invalid_policy(tmp_path, capsys, doc, message):
    p = tmp_path / "p.json"
    p.write_text(json.dumps(doc))
    code, out, err = run(capsys, "--binding", binding(tmp_path), "--policy", str(p))
    assert code == 2 and out == ""
    assert err.startswith(f"error: policy {p}: {message}")
    assert len(err.strip().splitlines()) == 1


def test_invalid_policy_fixture(tmp_path, capsys):
    code, _, err = run(capsys, "--binding", binding(tmp_path), "--policy", fixture(tmp_path, "invalid-annotations.json"))
    assert code == 2
    assert 'base.metadata.annotations["sunk.coreweave.com/partition"]: must be a string, got number 7' in err


def test_usage_errors_exit_2(capsys):
    assert main([]) == 2
    assert "--binding" in capsys.readouterr().err


def test_help_exits_0(capsys):
    assert main(["--help"]) == 0
    assert "render-policy" in capsys.readouterr().out
