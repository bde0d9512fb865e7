"""`make release` (`python -m sunk_sandbox_devtools release`): what a release publishes, into dist/.

Publishing is a maintainer's step (docs/development.md, "Releasing"); this builds it, for the one
version (operator/sunk_sandbox_operator/__init__.py):

- `sunk-sandbox-operator-V.oci.tar`: the image as an OCI archive (`buildah push oci-archive:`) of
  the build `make image` made and cached; `skopeo copy --preserve-digests` puts it in a registry
  under the same manifest digest;
- `sunk-sandbox-operator-V.cdx.json`: the image's SBOM (sunk_sandbox_devtools/sbom.py), whose root
  is the image by that digest;
- `sunk-sandbox-operator-V.tgz`: the chart (`helm package`, version and appVersion V) with
  `image.digest` set to that digest in its values: installed from a registry, it runs that image;
- `sunk_sandbox_operator-V-py3-none-any.whl`: the package, both commands (`pipx install` it);
- `kubectl-ssb-V-OS-ARCH.tar.gz`: the kubectl plugin as one file, `kubectl-ssb` (and LICENSE), what
  krew installs. A zipapp of pure-Python code cannot carry it: pydantic-core, orjson and msgspec are
  compiled (no pure-Python form; aiohttp, PyYAML and the multidict family have one, slower). So it is
  a PEX (a zipapp that unpacks its wheels to ~/.pex on first run) with the wheels of every
  dependency for each CPython minor of PLUGIN_PYTHONS on that OS and architecture; it runs with
  the first of those on PATH;
- `ssb.yaml`: the krew plugin manifest for those archives (URLs of the GitHub release, sha256);
- `release.json`: the version, the image's digest, the chart's OCI reference, each file's size and
  sha256; `SHA256SUMS`: the same sums in `sha256sum -c` form.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from . import devcluster
from . import image as images

REPO_ROOT = Path(__file__).resolve().parents[2]
DIST = REPO_ROOT / "dist"
CHART = REPO_ROOT / "charts" / "sunk-sandbox-operator"
HOMEPAGE = "https://github.com/sunksandbox/sunk-sandbox-operator"
CHART_REPOSITORY = "oci://ghcr.io/sunksandbox/charts"  # where docs/development.md's Releasing pushes the chart
WHEEL_SOURCES = ("pyproject.toml", "README.md", "LICENSE", "operator/sunk_sandbox_operator")
# (krew's os, arch) -> the wheel platform tag pex resolves for (manylinux2014 = glibc 2.17).
PLUGIN_PLATFORMS = {("linux", "amd64"): "manylinux2014_x86_64", ("linux", "arm64"): "manylinux2014_aarch64",
                    ("darwin", "amd64"): "macosx_11_0_x86_64", ("darwin", "arm64"): "macosx_11_0_arm64"}
PLUGIN_PYTHONS = ("3.11", "3.12", "3.13", "3.14")  # requires-python >= 3.11, to the newest CPython


def _log(msg: str) -> None:
    print(f"[release] {msg}", file=sys.stderr, flush=True)


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


@dataclass(frozen=True)
class Release:
    version: str
    digest: str             # the image's manifest digest
    files: tuple[Path, ...]  # every artifact, SHA256SUMS last


# ---------------------------------------------------------------- the image and its SBOM


def archive_digest(archive: Path) -> str:
    """The manifest digest of the one image in an OCI archive (its index.json)."""
    with tarfile.open(archive) as tar:
        member = tar.extractfile("index.json")
        if member is None:
            raise RuntimeError(f"{archive} has no index.json")
        (manifest,) = json.load(member)["manifests"]
    return manifest["digest"]


def export_image(b: images.Buildah, ref: str, dist: Path, version: str) -> tuple[Path, str]:
    archive = dist / f"sunk-sandbox-operator-{version}.oci.tar"
    with tempfile.TemporaryDirectory() as tmp:
        digestfile = Path(tmp) / "digest"
        b("push", "--quiet", "--digestfile", str(digestfile), ref, f"oci-archive:{archive}:{version}")
        digest = digestfile.read_text().strip()
    if archive_digest(archive) != digest:
        raise RuntimeError(f"buildah push said {digest}, the archive's index says {archive_digest(archive)}")
    return archive, digest


# ---------------------------------------------------------------- the chart


def pin_digest(values: str, digest: str) -> str:
    """values.yaml's text with `image.digest` set (comments and layout kept)."""
    lines, in_image = values.splitlines(keepends=True), False
    for i, line in enumerate(lines):
        if line.strip() and not line.startswith((" ", "#")):
            in_image = line.startswith("image:")
        elif in_image and line.rstrip("\n") == '  digest: ""':
            lines[i] = f'  digest: "{digest}"\n'
            text = "".join(lines)
            assert yaml.safe_load(text)["image"]["digest"] == digest
            return text
    raise RuntimeError('the chart\'s values.yaml has no `image.digest: ""` to pin')


def package_chart(helm: Path, dist: Path, version: str, digest: str, chart: Path = CHART) -> Path:
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / chart.name
        shutil.copytree(chart, copy)
        (copy / "values.yaml").write_text(pin_digest((copy / "values.yaml").read_text(), digest))
        subprocess.run([str(helm), "package", str(copy), "--version", version, "--app-version", version,
                        "--destination", str(dist)], check=True, capture_output=True, text=True)
    return dist / f"{chart.name}-{version}.tgz"


# ---------------------------------------------------------------- the package and the plugin


def build_wheel(dist: Path, root: Path = REPO_ROOT) -> Path:
    """The wheel, built from a copy of what it holds (no build/ or egg-info left in the tree)."""
    with tempfile.TemporaryDirectory() as tmp:
        for rel in WHEEL_SOURCES:
            source, target = root / rel, Path(tmp) / rel
            if source.is_dir():
                shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
            else:
                shutil.copy2(source, target)
        subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--disable-pip-version-check", "--no-deps",
                        "--wheel-dir", str(dist), tmp], check=True)
    (wheel,) = dist.glob("sunk_sandbox_operator-*-py3-none-any.whl")
    return wheel


def pex_platforms(os_: str, arch: str, pythons: tuple[str, ...]) -> list[str]:
    """pex's abbreviated platforms (PLATFORM-IMPL-PYVER-ABI) for one OS/arch and the CPython minors."""
    tag = PLUGIN_PLATFORMS[(os_, arch)]
    return [f"{tag}-cp-{p.replace('.', '')}-cp{p.replace('.', '')}" for p in pythons]


def _add(tar: tarfile.TarFile, name: str, data: bytes, mode: int) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime, info.uname, info.gname = len(data), mode, 0, "root", "root"
    tar.addfile(info, io.BytesIO(data))


# What kubectl (>= 1.26) runs for `kubectl ssb <TAB>` in bash and zsh: the plugin answers (Cobra's protocol).
COMPLETION_SCRIPT = b'#!/bin/sh\nexec kubectl-ssb __complete "$@"\n'


def plugin_archive(wheel: Path, dist: Path, version: str, os_: str, arch: str,
                   pythons: tuple[str, ...] = PLUGIN_PYTHONS, root: Path = REPO_ROOT) -> Path:
    """kubectl-ssb for one OS/arch: a PEX of the wheel and its dependencies, in a tar.gz with LICENSE
    (the same bytes for the same inputs: fixed times and owners)."""
    out = dist / f"kubectl-ssb-{version}-{os_}-{arch}.tar.gz"
    with tempfile.TemporaryDirectory() as tmp:
        pex = Path(tmp) / "kubectl-ssb"
        argv = [sys.executable, "-m", "pex", str(wheel), "--console-script", "kubectl-ssb", "--no-build",
                "--python-shebang", "/usr/bin/env python3", "--output-file", str(pex)]
        for platform in pex_platforms(os_, arch, pythons):
            argv += ["--platform", platform]
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)  # it prints the file's path
        raw = io.BytesIO()
        with gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as gz, tarfile.open(fileobj=gz, mode="w") as tar:
            _add(tar, "kubectl-ssb", pex.read_bytes(), 0o755)
            _add(tar, "kubectl_complete-ssb", COMPLETION_SCRIPT, 0o755)
            _add(tar, "LICENSE", (root / "LICENSE").read_bytes(), 0o644)
        out.write_bytes(raw.getvalue())
    return out


def krew_manifest(version: str, archives: dict[tuple[str, str], Path]) -> str:
    """krew's Plugin for `kubectl krew install`: one platform per archive, its URL on the release."""
    platforms = [{
        "selector": {"matchLabels": {"os": os_, "arch": arch}},
        "uri": f"{HOMEPAGE}/releases/download/v{version}/{path.name}",
        "sha256": sha256(path),
        "files": [{"from": "kubectl-ssb", "to": "."}, {"from": "kubectl_complete-ssb", "to": "."},
                  {"from": "LICENSE", "to": "."}],
        "bin": "kubectl-ssb",
    } for (os_, arch), path in sorted(archives.items())]
    pythons = f"{PLUGIN_PYTHONS[0]} to {PLUGIN_PYTHONS[-1]}"
    plugin = {
        "apiVersion": "krew.googlecontainertools.github.com/v1alpha2",
        "kind": "Plugin",
        "metadata": {"name": "ssb"},
        "spec": {
            "version": f"v{version}",
            "homepage": HOMEPAGE,
            "shortDescription": "Check SUNK sandbox bindings and what they need",
            "description": "kubectl ssb doctor runs every check of the sunk-sandbox-operator runbook against the "
                           "current cluster (and Slurm, the runner API), before any binding or for one, and "
                           "prints each check with its fix; kubectl ssb why pod NS/NAME says why a sandbox pod is "
                           "not placed (the first broken link, with its fix). It only reads.\n",
            "caveats": f"Needs CPython {pythons} on PATH (python3, or python3.X: it picks one); the first "
                       "run unpacks its dependencies to ~/.pex. Shell completion (kubectl 1.26 or later, bash and "
                       "zsh): krew puts only kubectl-ssb on PATH; link the completion next to it: ln -s "
                       f"~/.krew/store/ssb/v{version}/kubectl_complete-ssb ~/.krew/bin/\n",
            "platforms": platforms,
        },
    }
    return yaml.safe_dump(plugin, sort_keys=False, width=100)


# ---------------------------------------------------------------- all of it


def build(dist: Path = DIST, *, platforms: tuple[tuple[str, str], ...] = tuple(PLUGIN_PLATFORMS),
          pythons: tuple[str, ...] = PLUGIN_PYTHONS, root: Path = REPO_ROOT) -> Release:
    from sunk_sandbox_operator import __version__ as version

    from .sbom import image_bom

    if dist.exists():
        shutil.rmtree(dist)
    dist.mkdir(parents=True)
    b = images.Buildah()
    built = images.ensure_image(b, root)  # a cache hit after `make image`
    step = time.monotonic()
    archive, digest = export_image(b, built.ref, dist, version)
    _log(f"image {built.ref}: {archive.name}, {digest} ({time.monotonic() - step:.0f}s)")
    step = time.monotonic()
    sbom = dist / f"sunk-sandbox-operator-{version}.cdx.json"
    sbom.write_text(image_bom(b, built.ref, name=images.REPOSITORY, version=version, digest=digest))
    _log(f"SBOM {sbom.name} ({time.monotonic() - step:.0f}s)")
    chart = package_chart(devcluster.ensure_helm(), dist, version, digest)
    step = time.monotonic()
    wheel = build_wheel(dist, root)
    archives = {(o, a): plugin_archive(wheel, dist, version, o, a, pythons, root) for o, a in platforms}
    _log(f"{wheel.name} and kubectl-ssb for {', '.join(f'{o}/{a}' for o, a in platforms)} "
         f"({time.monotonic() - step:.0f}s)")
    krew = dist / "ssb.yaml"
    krew.write_text(krew_manifest(version, archives))
    files = [archive, sbom, chart, wheel, *archives.values(), krew]
    manifest = dist / "release.json"
    manifest.write_text(json.dumps({
        "version": version,
        "image": {"name": images.REPOSITORY, "tag": version, "digest": digest,
                  "reference": f"{images.REPOSITORY}@{digest}"},
        "chart": {"reference": f"{CHART_REPOSITORY}/{CHART.name}", "version": version},
        "files": {p.name: {"size": p.stat().st_size, "sha256": sha256(p)} for p in files},
    }, indent=1) + "\n")
    files.append(manifest)
    sums = dist / "SHA256SUMS"
    sums.write_text("".join(f"{sha256(p)}  {p.name}\n" for p in sorted(files)))
    return Release(version=version, digest=digest, files=(*files, sums))


def main(argv: list[str]) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m sunk_sandbox_devtools release",
                                     description="Build the release artifacts into dist/ (see docs/development.md, Releasing).")
    parser.add_argument("--dist", type=Path, default=DIST, help="output directory, emptied first (default: dist/)")
    parser.add_argument("--platform", action="append", choices=[f"{o}/{a}" for o, a in PLUGIN_PLATFORMS],
                        help="the plugin's OS/arch (repeatable; default: all)")
    args = parser.parse_args(argv)
    platforms = tuple((o, a) for o, _, a in (p.partition("/") for p in args.platform or []))
    started = time.monotonic()
    release = build(args.dist, platforms=platforms or tuple(PLUGIN_PLATFORMS))
    for path in release.files:
        print(f"{path.stat().st_size:>12,}  {path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path}")
    print(f"sunk-sandbox-operator {release.version}: image {release.digest}; {time.monotonic() - started:.0f}s")
    return 0
