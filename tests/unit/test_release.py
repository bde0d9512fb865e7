"""What a released project carries: the licence, a changelog, and one version in one place.

`__version__` (operator/sunk_sandbox_operator/__init__.py) is the source; the package metadata,
the chart's appVersion (and so its image tag default), the kustomize image tag, the Dockerfile's
VERSION and `sunk-sandbox-operator --version` equal it.
"""

from __future__ import annotations

import re
import tomllib
from importlib import metadata
from pathlib import Path

import yaml

from sunk_sandbox_operator import __version__
from sunk_sandbox_operator.__main__ import main

ROOT = Path(__file__).resolve().parents[2]


def test_the_version_is_semver() -> None:
    assert re.fullmatch(r"\d+\.\d+\.\d+", __version__)


def test_pyproject_reads_the_one_version() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "sunk_sandbox_operator.__version__"}
    assert metadata.version("sunk-sandbox-operator") == __version__  # the installed package's metadata


def test_the_charts_app_version_and_the_image_tags_are_the_package_version() -> None:
    chart = yaml.safe_load((ROOT / "charts" / "sunk-sandbox-operator" / "Chart.yaml").read_text())
    assert chart["appVersion"] == __version__, "run `make chart-sync`"
    values = yaml.safe_load((ROOT / "charts" / "sunk-sandbox-operator" / "values.yaml").read_text())
    assert values["image"]["tag"] == "", "the image tag defaults to appVersion"
    (image,) = yaml.safe_load((ROOT / "manifests" / "kustomization.yaml").read_text())["images"]
    assert image["newTag"] == __version__
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert re.search(rf"^ARG VERSION={re.escape(__version__)}$", dockerfile, re.M)


def test_version_flag(capsys) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"sunk-sandbox-operator {__version__}\n"


def test_license_is_the_apache_2_text() -> None:
    text = (ROOT / "LICENSE").read_text()
    assert text.lstrip().startswith("Apache License\n                           Version 2.0, January 2004")
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text
    assert "9. Accepting Warranty or Additional Liability." in text and "END OF TERMS AND CONDITIONS" in text
    assert len(text.split()) > 1500  # the full text, not a notice
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["license"] == "Apache-2.0" and project["license-files"] == ["LICENSE"]
    assert 'org.opencontainers.image.licenses="Apache-2.0"' in (ROOT / "Dockerfile").read_text()


def test_changelog_keeps_a_changelog() -> None:
    text = (ROOT / "CHANGELOG.md").read_text()
    assert text.startswith("# Changelog\n") and "Keep a Changelog" in text
    headings = re.findall(r"^## \[([^\]]+)\](?: - (\d{4}-\d{2}-\d{2}))?$", text, re.M)
    assert headings[0] == ("Unreleased", "")
    versions = [v for v, _ in headings[1:]]
    assert versions and versions[0] == __version__, "the current version has its section"
    assert all(date for _, date in headings[1:]), "each released version has a date"
    for section in re.findall(r"^### (.+)$", text, re.M):
        assert section in {"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"}, section
    for version in ["Unreleased", *versions]:
        assert re.search(rf"^\[{re.escape(version)}\]: https://", text, re.M), f"link for [{version}]"
