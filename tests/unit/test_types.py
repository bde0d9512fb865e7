"""The type checker passes: mypy as configured in pyproject.toml ([tool.mypy]: --strict's checks on
api/ and core/, the default ones on the rest of the package) over the package and the unit tests'
fakes. The Harness hands its FakeKube to `Context(kube=...)`, typed `KubeAPI`: a fake that drifts
from the real client (a method missing, a return type changed) fails here, not in whichever test
happens to call it; tests/unit/test_kube.py keeps the parameter names equal."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sunk_sandbox_operator.adapters.kube import Kube, KubeAPI

ROOT = Path(__file__).resolve().parents[2]
FAKES = "tests/unit/fakes.py"


@pytest.fixture(scope="module")
def mypy() -> subprocess.CompletedProcess[str]:
    """One run over both (a warm cache in .mypy_cache makes it a few seconds)."""
    env = {**os.environ, "MYPYPATH": str(ROOT)}  # the `tests` package, for tests.unit.fakes
    return subprocess.run([sys.executable, "-m", "mypy", "-p", "sunk_sandbox_operator", "-m", "tests.unit.fakes"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


def _errors(out: subprocess.CompletedProcess[str], in_fakes: bool) -> list[str]:
    return [line for line in out.stdout.splitlines()
            if ": error:" in line and line.startswith(FAKES) == in_fakes]


def test_the_package_type_checks(mypy: subprocess.CompletedProcess[str]) -> None:
    only_the_fakes = mypy.returncode == 1 and _errors(mypy, in_fakes=True) and not _errors(mypy, in_fakes=False)
    assert mypy.returncode == 0 or only_the_fakes, mypy.stdout[-8000:] + mypy.stderr[-2000:]


def test_the_fake_kube_of_the_unit_tests_is_a_kube_api(mypy: subprocess.CompletedProcess[str]) -> None:
    assert mypy.returncode in (0, 1), mypy.stdout[-4000:] + mypy.stderr[-4000:]
    assert not _errors(mypy, in_fakes=True), mypy.stdout[-8000:]


def test_kube_api_lists_what_kube_offers() -> None:
    """The protocol is the whole client, so a method added to Kube is added to it (and to the fake)."""
    def members(cls: type) -> dict[str, list[str]]:
        return {n: list(inspect.signature(f).parameters) for n, f in inspect.getmembers(cls, inspect.isfunction)
                if not n.startswith("_")}

    assert members(KubeAPI) == members(Kube)
    assert "writable" in KubeAPI.__annotations__
