"""`make image` (sunk_sandbox_devtools.image) without buildah, debootstrap or the network.

buildah is reached through an injected runner; here a fake one keeps an image store in memory,
so the cache logic is tested as it runs: an unchanged tree builds nothing, a changed source
rebuilds the image but not the base, a __pycache__ changes nothing. The real build and a run of
the image are in tests/e2e/test_image.py.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from sunk_sandbox_devtools import image
from sunk_sandbox_operator import __version__
from tests.unit.test_dockerfile import builder, stages  # noqa: F401 (fixtures)

ROOT = Path(__file__).resolve().parents[2]


class FakeBuildah:
    """The few buildah and debootstrap commands `ensure_image` uses, on an in-memory store."""

    def __init__(self) -> None:
        self.images: dict[str, str] = {}  # name -> id
        self.calls: list[list[str]] = []
        self.serial = 0

    def __call__(self, argv, capture_output=False, text=False, **kw) -> subprocess.CompletedProcess:
        if argv[0] == "debootstrap":
            self.calls.append(["debootstrap"])
            rootfs = Path(argv[-2])
            (rootfs / "usr" / "share" / "doc" / "python3").mkdir(parents=True)
            (rootfs / "usr" / "share" / "doc" / "python3" / "copyright").write_text("PSF")
            (rootfs / "usr" / "share" / "doc" / "python3" / "changelog.gz").write_text("...")
            return self.done(argv)
        args = argv[argv.index("vfs") + 1:]  # after the storage options
        self.calls.append(args)
        verb = args[0]
        if verb == "inspect":
            ref = args[-1]
            return self.done(argv, json.dumps({"FromImageID": self.images[ref]}) if ref in self.images else "",
                             0 if ref in self.images else 125)
        if verb == "images":
            by_id: dict[str, list[str]] = {}
            for name, ident in self.images.items():
                by_id.setdefault(ident, []).append(name)
            return self.done(argv, json.dumps([{"id": i, "names": n, "size": "299 MB", "created": int(i)}
                                               for i, n in by_id.items()]))
        if verb == "from":
            return self.done(argv, "ctr\n")
        if verb in {"commit", "bud"}:
            self.serial += 1
            refs = [args[-1]] if verb == "commit" else [args[i + 1] for i, a in enumerate(args) if a == "--tag"]
            for ref in refs:
                self.images[ref] = str(self.serial)
        if verb == "tag":
            self.images[args[2]] = self.images[args[1]]
        if verb == "rmi" and args[1] != "--prune":
            self.images.pop(args[1], None)
        return self.done(argv)

    @staticmethod
    def done(argv, stdout: str = "", code: int = 0) -> subprocess.CompletedProcess:
        return subprocess.CompletedProcess(argv, code, stdout, "")

    def verbs(self) -> list[str]:
        return [c[0] for c in self.calls]


@pytest.fixture
def tree(tmp_path) -> Path:
    """A build context: what the Dockerfile COPYs, plus local state that must not matter."""
    root = tmp_path / "tree"
    (root / "operator" / "pkg" / "__pycache__").mkdir(parents=True)
    for name in ("Dockerfile", ".dockerignore", "pyproject.toml", "README.md"):
        (root / name).write_text(name)
    (root / "operator" / "pkg" / "__init__.py").write_text("x = 1\n")
    return root


@pytest.fixture
def fake(tmp_path):
    run = FakeBuildah()
    b = image.Buildah(root=tmp_path / "storage", runroot=tmp_path / "run", run=run)
    return run, b


def build(fake, tree, tmp_path, ca=None) -> image.Image:
    run, b = fake
    return image.ensure_image(b, root=tree, run=run, cache=tmp_path / "cache", tools=lambda _: None, ca=ca)


def test_the_second_run_on_an_unchanged_tree_builds_nothing(fake, tree, tmp_path):
    run, _ = fake
    first = build(fake, tree, tmp_path)
    assert first.built and run.verbs().count("bud") == 1 and ["debootstrap"] in run.calls
    assert first.ref.startswith("localhost/sunk-sandbox-operator:build-")
    assert first.tag == f"{image.REPOSITORY}:{__version__}"
    assert first.size == "299 MB"
    run.calls.clear()
    (tree / "operator" / "pkg" / "__pycache__" / "__init__.cpython-311.pyc").write_bytes(b"\0")
    second = build(fake, tree, tmp_path)
    assert (second.ref, second.built) == (first.ref, False)
    assert "bud" not in run.verbs() and ["debootstrap"] not in run.calls
    assert ["tag", first.ref, first.tag] in run.calls, "the version tag points at this tree's image"


def test_a_source_change_rebuilds_the_image_on_the_cached_base(fake, tree, tmp_path):
    run, _ = fake
    first = build(fake, tree, tmp_path)
    run.calls.clear()
    (tree / "operator" / "pkg" / "__init__.py").write_text("x = 2\n")
    second = build(fake, tree, tmp_path)
    assert second.built and second.ref != first.ref and second.base == first.base
    assert run.verbs().count("bud") == 1 and ["debootstrap"] not in run.calls


def test_the_ca_bundle_is_a_build_secret_only_when_the_file_exists(fake, tree, tmp_path):
    run, _ = fake
    build(fake, tree, tmp_path, ca=tmp_path / "absent.crt")
    (bud,) = [c for c in run.calls if c[0] == "bud"]
    assert "--secret" not in bud
    ca = tmp_path / "ca.crt"
    ca.write_text("pem")
    (tree / "README.md").write_text("changed")
    build(fake, tree, tmp_path, ca=ca)
    bud = [c for c in run.calls if c[0] == "bud"][-1]
    assert bud[bud.index("--secret") + 1] == f"id=ca-bundle,src={ca}"
    assert bud[:4] == ["bud", "--isolation", "chroot", "--pull=never"]
    assert f"PYTHON_IMAGE={image.base_ref()}" in bud


def test_old_builds_are_pruned_but_the_newest_kept(fake, tree, tmp_path):
    run, _ = fake
    refs = []
    for i in range(image.KEEP_BUILDS + 2):
        (tree / "README.md").write_text(f"v{i}")
        refs.append(build(fake, tree, tmp_path).ref)
    kept = {n for n in run.images if n.startswith(f"{image.BUILD_REPOSITORY}:build-")}
    assert kept == set(refs[-image.KEEP_BUILDS:])
    assert image.base_ref() in run.images, "the base is never pruned"


def test_the_base_keeps_copyright_files_and_drops_other_docs(tmp_path):
    rootfs = tmp_path / "rootfs"
    for rel in ("usr/share/doc/bash/copyright", "usr/share/doc/bash/README.gz", "usr/share/man/man1/ls.1.gz",
                "var/lib/apt/lists/deb.debian.org_dists", "dev/null", "usr/bin/python3"):
        (rootfs / rel).parent.mkdir(parents=True, exist_ok=True)
        (rootfs / rel).write_text("x")
    image.trim(rootfs)
    left = sorted(str(p.relative_to(rootfs)) for p in rootfs.rglob("*") if p.is_file())
    assert left == ["usr/bin/python3", "usr/share/doc/bash/copyright"]
    assert (rootfs / "dev").is_dir() and (rootfs / "var/lib/apt/lists").is_dir()


def test_the_context_digest_follows_what_the_dockerfile_copies(builder):  # noqa: F811
    copied = {a.rstrip("/") for ins in builder.all("COPY") for a in ins.flags_and_args()[1][:-1]}
    assert set(image.CONTEXT) == copied


def test_the_image_name_is_the_manifests():
    (entry,) = yaml.safe_load((ROOT / "manifests" / "kustomization.yaml").read_text())["images"]
    assert image.REPOSITORY == entry["newName"]


@pytest.mark.parametrize("files,expected", [
    ({"sources.list.d/debian.sources": "Types: deb\n# a comment\nURIs: http://mirror.example/debian\n"
      "Suites: bookworm bookworm-updates\nComponents: main\n\nTypes: deb\nURIs: http://sec.example/debian-security\n"
      "Suites: bookworm-security\n"}, "http://mirror.example/debian"),
    ({"sources.list": "# deb http://old.example/debian bookworm main\n"
      "deb [arch=amd64 signed-by=/k.gpg] http://one.example/debian bookworm main\n"}, "http://one.example/debian"),
    ({"sources.list.d/other.sources": "Types: deb\nURIs: https://deb.nodesource.com/node_20.x\nSuites: nodistro\n"},
     image.DEFAULT_MIRROR),
])
def test_the_debian_mirror_is_the_one_apt_uses(tmp_path, monkeypatch, files, expected):
    monkeypatch.delenv("SSB_DEBIAN_MIRROR", raising=False)
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    assert image.debian_mirror(tmp_path) == expected


def test_missing_tools_are_installed_with_apt_get_or_named():
    calls = []

    def run(argv, **kw):
        calls.append(argv)
        return subprocess.CompletedProcess(argv, 100 if len(calls) == 1 else 0)

    image.ensure_tools(run, which=lambda t: None if t == "debootstrap" else f"/usr/bin/{t}", euid=lambda: 0)
    assert calls == [["apt-get", "install", "-y", "-q", "--no-install-recommends", "debootstrap"],
                     ["apt-get", "update", "-q"],
                     ["apt-get", "install", "-y", "-q", "--no-install-recommends", "debootstrap"]]
    image.ensure_tools(run, which=lambda t: f"/usr/bin/{t}", euid=lambda: 0)
    assert len(calls) == 3, "nothing to install"
    with pytest.raises(RuntimeError, match="buildah and debootstrap missing"):
        image.ensure_tools(run, which=lambda t: None, euid=lambda: 0)
    with pytest.raises(RuntimeError, match="debootstrap missing: install"):  # not root: say what to do
        image.ensure_tools(run, which=lambda t: None if t == "debootstrap" else t, euid=lambda: 1000)
    assert len(calls) == 3
