"""`make release`'s pure parts (sunk_sandbox_devtools.release and .sbom), without buildah, helm or pex.

The whole release, built for real and installed from a loopback registry, is tests/e2e/test_release.py.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import tomllib
from pathlib import Path

import pytest
import yaml

from sunk_sandbox_devtools import release, sbom
from sunk_sandbox_devtools.__main__ import main as cli

ROOT = Path(__file__).resolve().parents[2]
DIGEST = "sha256:" + "ab" * 32

STATUS = """Package: libc6
Status: install ok installed
Priority: optional
Architecture: amd64
Multi-Arch: same
Source: glibc
Version: 2.36-9+deb12u14
Maintainer: GNU Libc Maintainers <debian-glibc@lists.debian.org>
Description: GNU C Library: Shared libraries
 Contains the standard libraries that are used by nearly all programs on
 the system. Package: not-a-package
Homepage: https://www.gnu.org/software/libc/libc.html

Package: python3.11-minimal
Status: install ok installed
Architecture: amd64
Source: python3.11 (3.11.2-6+deb12u6)
Version: 3.11.2-6+deb12u6
Maintainer: Matthias Klose <doko@debian.org>

Package: removed-one
Status: deinstall ok config-files
Architecture: amd64
Version: 1.0

Package: tzdata
Status: install ok installed
Architecture: all
Version: 2025b-0+deb12u2
Maintainer: GNU Libc Maintainers <debian-glibc@lists.debian.org>
"""


def test_dpkg_status_gives_the_installed_packages_only():
    got = sbom.dpkg_packages(STATUS)
    assert [(p.name, p.version, p.arch, p.source) for p in got] == [
        ("libc6", "2.36-9+deb12u14", "amd64", "glibc"),
        ("python3.11-minimal", "3.11.2-6+deb12u6", "amd64", "python3.11"),
        ("tzdata", "2025b-0+deb12u2", "all", None),
    ]
    assert got[0].homepage == "https://www.gnu.org/software/libc/libc.html"


def test_os_release_and_the_venvs_python():
    assert sbom.os_release('PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nID=debian\nVERSION_ID="12"\n') == \
        {"PRETTY_NAME": "Debian GNU/Linux 12 (bookworm)", "ID": "debian", "VERSION_ID": "12"}
    assert sbom.venv_python("home = /usr/bin\ninclude-system-site-packages = false\nversion = 3.11.2\n") == "3.11"
    with pytest.raises(RuntimeError, match="pyvenv.cfg"):
        sbom.venv_python("home = /usr/bin\n")


def python_doc() -> dict:
    """What `cyclonedx-py environment` writes, cut to two components."""
    return {
        "$schema": "http://cyclonedx.org/schema/bom-1.6.schema.json", "bomFormat": "CycloneDX", "specVersion": "1.6",
        "version": 1, "metadata": {"tools": {"components": []}},
        "components": [
            {"bom-ref": "pydantic==2.14.4", "type": "library", "name": "pydantic", "version": "2.14.4",
             "purl": "pkg:pypi/pydantic@2.14.4", "licenses": [{"expression": "MIT"}]},
            {"bom-ref": "pydantic-core==2.50.5", "type": "library", "name": "pydantic_core", "version": "2.50.5",
             "purl": "pkg:pypi/pydantic-core@2.50.5"},
            {"bom-ref": "sunk-sandbox-operator==0.1.0", "type": "library", "name": "sunk-sandbox-operator",
             "version": "0.1.0", "externalReferences": [{"comment": "PackageSource: Local", "type": "distribution",
                                                         "url": "file:///src"}]},  # installed from a directory
        ],
        "dependencies": [{"ref": "pydantic==2.14.4", "dependsOn": ["pydantic-core==2.50.5"]},
                         {"ref": "pydantic-core==2.50.5"}, {"ref": "sunk-sandbox-operator==0.1.0"}],
    }


def test_the_sbom_is_rooted_at_the_image_by_digest_and_valid_cyclonedx():
    release_info = {"ID": "debian", "VERSION_ID": "12", "PRETTY_NAME": "Debian GNU/Linux 12 (bookworm)"}
    args = dict(name="ghcr.io/sunksandbox/sunk-sandbox-operator", version="0.1.0", digest=DIGEST,
                created="2026-12-03T15:55:46.123456789Z")
    text = sbom.compose(python_doc(), sbom.dpkg_packages(STATUS), release_info, **args)
    doc = json.loads(text)
    root = doc["metadata"]["component"]
    assert root["type"] == "container" and root["name"] == args["name"] and root["version"] == "0.1.0"
    assert root["purl"] == ("pkg:oci/sunk-sandbox-operator@sha256:" + "ab" * 32
                            + "?repository_url=ghcr.io/sunksandbox/sunk-sandbox-operator&tag=0.1.0")
    assert root["hashes"] == [{"alg": "SHA-256", "content": "ab" * 32}]
    assert sbom.components(doc) == {
        "python": {("pydantic", "2.14.4"), ("pydantic_core", "2.50.5"), ("sunk-sandbox-operator", "0.1.0")},
        "deb": {("libc6", "2.36-9+deb12u14"), ("python3.11-minimal", "3.11.2-6+deb12u6"),
                ("tzdata", "2025b-0+deb12u2")},
        "os": {("debian", "12")},
    }
    purls = {c["name"]: c.get("purl") for c in doc["components"]}
    assert purls["libc6"] == "pkg:deb/debian/libc6@2.36-9%2Bdeb12u14?arch=amd64&distro=debian-12&upstream=glibc"
    dependencies = {d["ref"]: d.get("dependsOn", []) for d in doc["dependencies"]}
    assert len(dependencies[root["bom-ref"]]) == 7 and dependencies["pydantic==2.14.4"] == ["pydantic-core==2.50.5"]
    assert doc["metadata"]["timestamp"].startswith("2026-12-03T15:55:46")
    assert sbom.compose(python_doc(), sbom.dpkg_packages(STATUS), release_info, **args) == text, "reproducible"
    with pytest.raises(ValueError, match="not a sha256 digest"):
        sbom.compose(python_doc(), [], release_info, **{**args, "digest": "sha256:abc"})


def test_the_released_chart_pins_the_digest_and_changes_nothing_else():
    values = (ROOT / "charts" / "sunk-sandbox-operator" / "values.yaml").read_text()
    pinned = release.pin_digest(values, DIGEST)
    before, after = yaml.safe_load(values), yaml.safe_load(pinned)
    assert before["image"]["digest"] == "" and after["image"]["digest"] == DIGEST
    assert {**after, "image": {**after["image"], "digest": ""}} == before
    assert [a for a, b in zip(values.splitlines(), pinned.splitlines()) if a != b] == ['  digest: ""']
    with pytest.raises(RuntimeError, match="no `image.digest"):
        release.pin_digest(values.replace('  digest: ""', '  digest: "sha256:x"'), DIGEST)


def test_the_oci_archives_digest_is_its_index(tmp_path):
    archive = tmp_path / "image.oci.tar"
    index = json.dumps({"schemaVersion": 2, "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json",
                                                           "digest": DIGEST, "size": 1}]}).encode()
    with tarfile.open(archive, "w") as tar:
        info = tarfile.TarInfo("index.json")
        info.size = len(index)
        tar.addfile(info, io.BytesIO(index))
    assert release.archive_digest(archive) == DIGEST


def test_the_krew_manifest_lists_each_archive_by_its_sha256(tmp_path):
    archives = {}
    for os_, arch in (("linux", "amd64"), ("darwin", "arm64")):
        path = tmp_path / f"kubectl-ssb-0.1.0-{os_}-{arch}.tar.gz"
        path.write_bytes(f"{os_}/{arch}".encode())
        archives[(os_, arch)] = path
    plugin = yaml.safe_load(release.krew_manifest("0.1.0", archives))
    assert (plugin["apiVersion"], plugin["kind"]) == ("krew.googlecontainertools.github.com/v1alpha2", "Plugin")
    assert plugin["metadata"]["name"] == "ssb" and plugin["spec"]["version"] == "v0.1.0"
    assert plugin["spec"]["shortDescription"] and "python3" in plugin["spec"]["caveats"]
    by_os = {(p["selector"]["matchLabels"]["os"], p["selector"]["matchLabels"]["arch"]): p
             for p in plugin["spec"]["platforms"]}
    assert set(by_os) == set(archives)
    for key, entry in by_os.items():
        assert entry["sha256"] == hashlib.sha256(archives[key].read_bytes()).hexdigest()
        assert entry["uri"] == f"{release.HOMEPAGE}/releases/download/v0.1.0/{archives[key].name}"
        assert entry["bin"] == "kubectl-ssb"


def test_the_plugin_is_built_for_every_platform_and_python():
    assert set(release.PLUGIN_PLATFORMS) == {("linux", "amd64"), ("linux", "arm64"), ("darwin", "amd64"),
                                             ("darwin", "arm64")}
    assert release.pex_platforms("linux", "arm64", ("3.11", "3.14")) == \
        ["manylinux2014_aarch64-cp-311-cp311", "manylinux2014_aarch64-cp-314-cp314"]
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    assert requires == f">={release.PLUGIN_PYTHONS[0]}", "the plugin covers every Python the package supports"


def test_the_registry_is_built_last_in_the_go_lane_from_its_pinned_module():
    from sunk_sandbox_devtools import registry, tools

    assert [name for name, _, _ in tools.GO_TOOLS][-1] == "registry"
    assert tools.ORDER.index("registry") < tools.ORDER.index("image")
    version = registry.registry_version()  # hack/registry/go.mod's pin of distribution
    assert version.startswith("v3.") and registry.registry_path().parent.name == f"registry-{version}"


@pytest.mark.parametrize("argv", [["release", "--help"]])
def test_cli_dispatches_to_release(argv, capsys):
    with pytest.raises(SystemExit) as exited:
        cli(argv)
    assert exited.value.code == 0
    assert "python -m sunk_sandbox_devtools release" in capsys.readouterr().out
