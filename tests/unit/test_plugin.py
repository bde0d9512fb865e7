"""The command lines: `kubectl ssb` (plugin.py) and `sunk-sandbox-operator` (__main__.py). `--help` on every
command prints help and does nothing else; `version` and `-o text|json|yaml`; the completion protocol
kubectl speaks with `kubectl_complete-ssb`."""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path

import pytest
import yaml

from sunk_sandbox_operator import __main__ as cli
from sunk_sandbox_operator import __version__, plugin

ROOT = Path(__file__).resolve().parents[2]
NOWHERE = {"KUBECONFIG": "/nonexistent/kubeconfig", "KUBERNETES_SERVICE_HOST": ""}


def _run(main, argv: list[str], capsys) -> tuple[int, str, str]:
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's --help and usage errors
        code = exc.code if isinstance(exc.code, int) else 0
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("argv", [["--help"], ["doctor", "--help"], ["why", "--help"], ["version", "--help"],
                                  ["why", "pod", "ns/p", "--help"], ["doctor", "ns/b", "-h"]])
def test_help_on_every_plugin_command_prints_help_and_touches_nothing(argv, capsys, monkeypatch) -> None:
    for key, value in NOWHERE.items():  # no cluster to reach: a read would fail the command, not print help
        monkeypatch.setenv(key, value)
    before = dict(os.environ)
    code, out, err = _run(plugin.main, argv, capsys)
    assert code == 0 and out.startswith("usage: kubectl ssb") and err == "", (out, err)
    assert dict(os.environ) == before  # no setting exported (the tenancy flags would be)


@pytest.mark.parametrize("command", ["run", "doctor", "why", "runner-api-emulator", "render-policy", "crd", "version"])
def test_help_on_every_operator_command_prints_help_and_nothing_else(command, capsys, monkeypatch) -> None:
    for key, value in NOWHERE.items():
        monkeypatch.setenv(key, value)
    before = dict(os.environ)
    code, out, err = _run(cli.main, [command, "--help"], capsys)
    assert code == 0 and out.startswith(f"usage: sunk-sandbox-operator {command}"), (out[:300], err)
    assert "CustomResourceDefinition\n" not in out and "apiVersion:" not in out  # `crd --help` once printed the CRD
    assert dict(os.environ) == before


def test_version_in_every_output(capsys) -> None:
    code, out, _ = _run(plugin.main, ["version"], capsys)
    assert code == 0 and out.startswith(f"kubectl-ssb {__version__} (sunk-sandbox-operator {__version__}, Python ")
    assert json.loads(_run(plugin.main, ["version", "-o", "json"], capsys)[1])["version"] == __version__
    assert yaml.safe_load(_run(plugin.main, ["version", "-o", "yaml"], capsys)[1])["version"] == __version__
    assert _run(cli.main, ["version", "-o", "json"], capsys)[1] == json.dumps({"version": __version__}, indent=2) + "\n"
    assert _run(cli.main, ["--version"], capsys)[1] == f"sunk-sandbox-operator {__version__}\n"


def test_crd_prints_yaml_or_json(capsys) -> None:
    text = _run(cli.main, ["crd"], capsys)[1]
    assert text == (ROOT / "crds" / "sunksandboxbindings.yaml").read_text()
    assert json.loads(_run(cli.main, ["crd", "-o", "json"], capsys)[1]) == yaml.safe_load(text)


def test_an_unknown_command_is_a_usage_error(capsys) -> None:
    code, _, err = _run(plugin.main, ["status"], capsys)
    assert code == 2 and "unknown command 'status'" in err


def test_why_refuses_a_malformed_target_as_usage(capsys) -> None:
    assert _run(plugin.main, ["why", "pod", "no-slash"], capsys)[0] == 2
    assert _run(plugin.main, ["why", "namespace", "a/b"], capsys)[0] == 2
    assert _run(plugin.main, ["why", "node", "x"], capsys)[0] == 2


NAMES = {("namespaces", ""): ["ds-alice", "ds-bob", "tenant-slurm"], ("pods", "ds-alice"): ["sbx-1", "sbx-2"],
         ("bindings", ""): ["tenant-slurm/cpu-sandboxes"]}


def lister(kind: str, namespace: str) -> list[str]:
    return NAMES.get((kind, namespace), [])


@pytest.mark.parametrize("words, want, directive", [
    ([""], ["doctor\tcheck the runbook against the cluster", "why\twhy is a sandbox pod not placed",
            "version\tprint the plugin's version"], 4),
    (["w"], ["why\twhy is a sandbox pod not placed"], 4),
    (["why", ""], ["pod", "namespace"], 4),
    (["why", "pod", "ds-"], ["ds-alice/", "ds-bob/"], 6),          # a namespace, then no space: its pods follow
    (["why", "pod", "ds-alice/s"], ["ds-alice/sbx-1", "ds-alice/sbx-2"], 4),
    (["why", "namespace", "t"], ["tenant-slurm"], 4),
    (["why", "pod", "ds-alice/sbx-1", "-o", "y"], ["yaml"], 4),
    (["why", "pod", "ds-alice/sbx-1", "--pend"], ["--pending-seconds"], 4),
    (["doctor", ""], ["tenant-slurm/cpu-sandboxes"], 4),
    (["doctor", "--scheduler-namespace", ""], [], 4),               # a value it cannot offer
    (["version", "-o", ""], ["text", "json", "yaml"], 4),
    (["nope", ""], [], 4),
])
def test_completion_offers_commands_kinds_names_flags_and_outputs(words, want, directive) -> None:
    assert plugin.candidates(words, lister) == (want, directive)


def test_completion_prints_cobras_protocol_and_survives_no_cluster(capsys, monkeypatch) -> None:
    for key, value in NOWHERE.items():
        monkeypatch.setenv(key, value)
    assert plugin.complete_main(["why", "namespace", ""]) == 0
    assert capsys.readouterr().out == ":4\n"  # no names (no cluster), no error: the shell just offers nothing
    assert plugin.main(["__complete", "why", ""]) == 0
    assert capsys.readouterr().out == "pod\nnamespace\n:4\n"


def test_the_console_scripts_are_the_plugin_and_its_completion() -> None:
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["kubectl-ssb"] == "sunk_sandbox_operator.plugin:main"
    assert scripts["kubectl_complete-ssb"] == "sunk_sandbox_operator.plugin:complete_main"


def test_the_release_archives_completion_script_asks_the_plugin(tmp_path) -> None:
    """The krew archive's kubectl_complete-ssb (sunk_sandbox_devtools/release.py) runs `kubectl-ssb __complete`."""
    import subprocess
    import sys

    from sunk_sandbox_devtools import release

    (tmp_path / "kubectl_complete-ssb").write_bytes(release.COMPLETION_SCRIPT)
    (tmp_path / "kubectl-ssb").write_text(f"#!{sys.executable}\nimport sys\nsys.path.insert(0, {str(ROOT / 'operator')!r})\n"
                                          "from sunk_sandbox_operator.plugin import main\nsys.exit(main())\n")
    for name in ("kubectl_complete-ssb", "kubectl-ssb"):
        (tmp_path / name).chmod(0o755)
    out = subprocess.run([str(tmp_path / "kubectl_complete-ssb"), "why", ""], capture_output=True, text=True,
                         env={"PATH": f"{tmp_path}:/usr/bin:/bin", **NOWHERE}, timeout=60)
    assert (out.returncode, out.stdout) == (0, "pod\nnamespace\n:4\n"), out.stderr
