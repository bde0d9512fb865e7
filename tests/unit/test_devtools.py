"""The local-only dev tools package: its CLI, its place outside the wheel, and the binary cache.

No Go and no network: `ensure_built` gets an injected build function. Two runs of the build
(two terminals, or `make test` next to `make demo`) must not share a temp dir: one builds under
an exclusive lock into its own temp dir and renames it into place; the other waits, then finds
the binaries and builds nothing.
"""

from __future__ import annotations

import fnmatch
import threading
import tomllib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from sunk_sandbox_devtools import __main__ as cli
from sunk_sandbox_devtools import devcluster
from sunk_sandbox_devtools.devcluster import BINARIES, ensure_built

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def find_packages(where: Path, include: list[str]) -> set[str]:
    """setuptools' `packages.find` (without importing setuptools: not in every venv)."""
    names = {".".join(init.parent.relative_to(where).parts) for init in where.rglob("__init__.py")}
    return {n for n in names if any(fnmatch.fnmatchcase(n, pattern) for pattern in include)}


def writes_binaries(out: Path) -> None:
    for name in BINARIES:
        (out / name).write_text(f"#!/bin/false {name}\n")


def listing(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


@pytest.fixture
def dest(tmp_path) -> Path:
    return tmp_path / "cache" / "kube-v1.0.0_etcd-v3.0.0"


# ---------------------------------------------------------------- packaging and CLI


def test_the_wheel_holds_the_operator_and_not_the_dev_tools():
    find = PYPROJECT["tool"]["setuptools"]["packages"]["find"]
    packages = find_packages(ROOT / find["where"][0], find["include"])
    assert "sunk_sandbox_operator" in packages
    assert {"sunk_sandbox_operator.adapters.runnerapi", "sunk_sandbox_operator.core"} <= packages
    assert not any(p.startswith("sunk_sandbox_devtools") for p in packages), sorted(packages)


def test_dev_tool_dependencies_are_an_extra_not_a_runtime_dependency():
    project = PYPROJECT["project"]
    assert any(d.startswith("cryptography") for d in project["optional-dependencies"]["local"])
    assert any(d.startswith("cryptography") for d in project["optional-dependencies"]["test"])
    assert not any(d.startswith("cryptography") for d in project["dependencies"])


def test_cli_usage_and_unknown_command(capsys):
    assert cli.main([]) == 0
    assert "devcluster" in capsys.readouterr().out
    assert cli.main(["nope"]) == 2
    assert "unknown command 'nope'" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["devcluster", "--help"], ["demo", "--help"], ["image", "--help"]])
def test_cli_dispatches_to_the_tools(argv, capsys):
    with pytest.raises(SystemExit) as exited:
        cli.main(argv)
    assert exited.value.code == 0
    assert f"python -m sunk_sandbox_devtools {argv[0]}" in capsys.readouterr().out


def test_devcluster_rejects_an_unknown_action(capsys):
    with pytest.raises(SystemExit) as exited:
        cli.main(["devcluster", "sideways"])
    assert exited.value.code == 2
    assert "invalid choice" in capsys.readouterr().err


# ---------------------------------------------------------------- the binary cache


def test_builds_into_a_private_temp_dir_and_renames_it_into_place(dest):
    built_in = []

    def build(out: Path) -> None:
        built_in.append(out)
        assert out.is_dir() and out.parent == dest.parent and out != dest
        assert not dest.exists(), "nothing is visible at dest while building"
        writes_binaries(out)

    assert ensure_built(dest, build) == dest
    assert listing(dest) == sorted(BINARIES)
    assert not built_in[0].exists(), "the temp dir was renamed, not copied"
    assert listing(dest.parent) == [dest.name, f"{dest.name}.lock"]
    assert ensure_built(dest, build) == dest
    assert len(built_in) == 1, "cached: built once"


def test_a_second_run_waits_for_the_lock_then_finds_the_binaries(dest, monkeypatch):
    building, waiting, release = threading.Event(), threading.Event(), threading.Event()
    builds: list[Path] = []

    def slow_build(out: Path) -> None:
        builds.append(out)
        building.set()
        assert release.wait(10)
        writes_binaries(out)

    def log(message: str) -> None:
        if message.startswith("waiting for another build"):
            waiting.set()

    monkeypatch.setattr(devcluster, "_log", log)
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(ensure_built, dest, slow_build)
        assert building.wait(10)
        second = pool.submit(ensure_built, dest, slow_build)
        assert waiting.wait(10), "the second run did not block on the lock"
        assert len(builds) == 1 and not dest.exists()
        release.set()
        assert first.result(10) == dest
        assert second.result(10) == dest
    assert len(builds) == 1, "the second run built again"
    assert listing(dest) == sorted(BINARIES)
    assert listing(dest.parent) == [dest.name, f"{dest.name}.lock"]


def test_a_failed_build_leaves_nothing_and_releases_the_lock(dest):
    def failing(out: Path) -> None:
        (out / "etcd").write_text("half")
        raise RuntimeError("go build failed")

    with pytest.raises(RuntimeError, match="go build failed"):
        ensure_built(dest, failing)
    assert not dest.exists()
    assert listing(dest.parent) == [f"{dest.name}.lock"]
    assert ensure_built(dest, writes_binaries) == dest  # not left locked


def test_a_build_missing_a_binary_is_an_error(dest):
    with pytest.raises(RuntimeError, match="kube-apiserver, kubectl"):
        ensure_built(dest, lambda out: (out / "etcd").write_text("only"))
    assert not dest.exists()
    assert listing(dest.parent) == [f"{dest.name}.lock"]


def test_an_incomplete_dest_and_stale_temp_dirs_are_replaced(dest):
    dest.mkdir(parents=True)
    (dest / "etcd").write_text("old")
    stale = dest.parent / f".{dest.name}.killed.tmp"
    stale.mkdir()
    (stale / "kubectl").write_text("partial")
    other_version = dest.parent / ".kube-v9.9.9_etcd-v3.0.0.x.tmp"
    other_version.mkdir()
    assert ensure_built(dest, writes_binaries) == dest
    assert listing(dest) == sorted(BINARIES)
    assert (dest / "etcd").read_text() != "old"
    assert not stale.exists()
    assert other_version.exists(), "another version's build is not ours to clean"


def test_ensure_binaries_uses_the_versioned_cache_and_never_builds_when_cached(tmp_path, monkeypatch):
    monkeypatch.delenv("KUBEBUILDER_ASSETS", raising=False)
    monkeypatch.setattr(devcluster, "CACHE_ROOT", tmp_path)
    monkeypatch.setattr(devcluster, "versions", lambda: ("v1.2.3", "v3.4.5"))

    def no_build(out: Path) -> None:
        raise AssertionError("must not build")

    monkeypatch.setattr(devcluster, "build_binaries", no_build)
    cached = tmp_path / "kube-v1.2.3_etcd-v3.4.5"
    cached.mkdir()
    writes_binaries(cached)
    assert devcluster.ensure_binaries() == cached


def test_kubebuilder_assets_win_and_must_be_complete(tmp_path, monkeypatch):
    writes_binaries(tmp_path)
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(tmp_path))
    assert devcluster.ensure_binaries() == tmp_path
    (tmp_path / "kubectl").unlink()
    with pytest.raises(RuntimeError, match="lacks kubectl"):
        devcluster.ensure_binaries()


# ---------------------------------------------------------------- tools built in the background


def test_tools_start_builds_in_the_background_only_what_is_missing(tmp_path, monkeypatch):
    from sunk_sandbox_devtools import tools

    monkeypatch.setattr(tools, "LOGS", tmp_path)
    present = tmp_path / "helm"
    present.write_text("")
    absent = tmp_path / "promtool"
    monkeypatch.setattr(tools, "GO_TOOLS", (("helm", lambda: None, lambda: present),
                                            ("promtool", lambda: None, lambda: absent)))
    started: list[dict] = []
    assert tools.start("go", popen=lambda argv, **kw: started.append({"argv": argv, **kw})) is True
    (call,) = started
    assert call["argv"][-3:] == ["tools", "build", "go"] and call["start_new_session"] is True
    assert call["stdin"] is tools.subprocess.DEVNULL and call["preexec_fn"] is not None
    absent.write_text("")  # warm: nothing starts
    assert tools.start("go", popen=lambda *a, **kw: started.append(kw)) is False and len(started) == 1
    assert tools.start("image", popen=lambda argv, **kw: started.append({"argv": argv})) is True  # its own cache check
    assert started[-1]["argv"][-1] == "image"


def test_a_tool_that_fails_to_build_does_not_stop_the_next(monkeypatch):
    from sunk_sandbox_devtools import tools

    built: list[str] = []

    def fails() -> None:
        raise RuntimeError("no network")
    monkeypatch.setattr(tools, "GO_TOOLS", (("helm", fails, lambda: None),
                                            ("promtool", lambda: built.append("promtool"), lambda: None)))
    assert tools.build("go") == 1
    assert built == ["promtool"]


def test_every_test_that_needs_a_background_tool_is_marked_so_it_runs_last():
    """A test calling ensure_helm & co. without the marker would wait for the background build
    early instead of running last (tests/conftest.py orders by the marker)."""
    import re

    calls = re.compile(r"ensure_(helm|promtool|argocd_health|image)\(")
    root = Path(__file__).resolve().parents[1]
    unmarked = []
    for path in sorted(root.rglob("test_*.py")):
        if "unit" in path.parts:
            continue  # unit tests never build a tool (fakes only)
        text = path.read_text()
        for m in calls.finditer(text):
            tool = m.group(1).replace("_", "-")
            marked = f'needs_tool("{tool}")' in text
            if not marked:
                unmarked.append(f"{path.relative_to(root)}: ensure_{m.group(1)}")
    assert not unmarked, unmarked


def test_the_slurm_chroots_are_built_first_in_the_image_lane_and_their_tests_run_first_of_the_late():
    """The chroots are downloads like the image: they go in its lane, before it, so the tests of
    Slurm 24.11 and 26.05 (marked needs_tool("slurm") by their fixture) can run early among the late."""
    from sunk_sandbox_devtools import tools

    assert [name for name, _ in tools.steps("image")] == ["slurm", "image"]
    assert tools.ORDER[0] == "slurm" and tools.ORDER[-1] == "image"
    conftest = (Path(__file__).resolve().parents[1] / "integration" / "conftest.py").read_text()
    assert conftest.count('marks=pytest.mark.needs_tool("slurm")') == 2
