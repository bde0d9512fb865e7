"""The operator's container image, built where no registry and no container daemon are reachable.

`make image` (`python -m sunk_sandbox_devtools image`, run by `make test`):

1. a base image made from Debian's packages: `debootstrap --variant=minbase` of bookworm with
   python3, python3-venv, python-is-python3 and ca-certificates, without docs (copyright files
   kept), man pages, locales, apt lists, the .deb cache and device nodes, imported with
   `buildah from scratch` + `add` + `commit` (python:3.11-slim is on Docker Hub, out of reach);
2. `buildah bud` of the Dockerfile on it (`--build-arg PYTHON_IMAGE=<the base>`).

buildah runs as root with the vfs storage driver and chroot isolation (no overlayfs, no user
namespaces, no daemon); chroot isolation shares the host's network, so the builder's pip reaches
the package index and a `buildah run` of the image reaches the local control plane on loopback
(tests/e2e/test_image.py).

TLS: where the package index is reached through a TLS-inspecting proxy, its CA is only in the
host's bundle. The host's /etc/ssl/certs/ca-certificates.crt (when it exists) is passed as the
build secret `ca-bundle`, which the Dockerfile mounts over the builder stage's bundle for the pip
step only: a secret mount is in no layer, and the builder stage is not shipped.

Caching (CI's cold run has a budget): buildah's storage is under
~/.cache/sunk-sandbox-operator/image/. The base is built once per recipe (its tag is a digest of
the recipe), the image once per build context: its tag `build-<digest>` is a digest of what the
Dockerfile COPYs plus the Dockerfile, .dockerignore, the base image's id and the version, so an
unchanged tree costs one `buildah inspect`. Tests use that reference (the version tag is shared
by every worktree on the machine); the newest KEEP_BUILDS builds are kept, older ones removed.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

REPO_ROOT = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "sunk-sandbox-operator" / "image"
# runroot holds locks and run state: a tmpfs-like place that a reboot clears, shared by worktrees.
RUNROOT = Path("/run/sunk-sandbox-operator/buildah") if os.geteuid() == 0 else Path(
    tempfile.gettempdir()) / f"sunk-sandbox-operator-buildah-{os.geteuid()}"
HOST_CA = Path("/etc/ssl/certs/ca-certificates.crt")
TOOLS = ("buildah", "debootstrap")  # Debian's package names too

SUITE = "bookworm"
PACKAGES = ("python3", "python3-venv", "python-is-python3", "ca-certificates")
TRIMMED = ("var/cache/apt", "var/lib/apt/lists", "usr/share/man", "usr/share/info", "usr/share/locale", "dev")
BASE_RECIPE = 1  # bump when the base is made differently (the tag changes, so it is rebuilt)
BASE_REPOSITORY = "localhost/ssb-python-base"
BASE_ENV = ("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8")
DEFAULT_MIRROR = "http://deb.debian.org/debian"

BUILD_REPOSITORY = "localhost/sunk-sandbox-operator"  # build-<digest> tags: what tests run
REPOSITORY = "ghcr.io/sunksandbox/sunk-sandbox-operator"  # manifests/kustomization.yaml's image name
CONTEXT = ("pyproject.toml", "README.md", "operator")  # what the Dockerfile COPYs (a unit test checks)
KEEP_BUILDS = 3

Runner = Callable[..., subprocess.CompletedProcess]


def _log(msg: str) -> None:
    print(f"[image] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- the tools


def ensure_tools(run: Runner = subprocess.run, which: Callable[[str], str | None] = shutil.which,
                 euid: Callable[[], int] = os.geteuid, tools: tuple[str, ...] = TOOLS) -> None:
    """buildah and debootstrap (or `tools`: skopeo for the release test), installed with apt-get when
    missing (as root on Debian, as in CI)."""
    missing = [t for t in tools if which(t) is None]
    if not missing:
        return
    if euid() != 0 or which("apt-get") is None:
        raise RuntimeError(f"{' and '.join(missing)} missing: install them (Debian: apt-get install {' '.join(missing)})")
    _log(f"installing {' '.join(missing)} with apt-get")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "-q", "--no-install-recommends", *missing]
    if run(install, env=env).returncode != 0:  # stale package lists
        run(["apt-get", "update", "-q"], env=env, check=True)
        run(install, env=env, check=True)


def debian_mirror(apt_dir: Path = Path("/etc/apt"), suite: str = SUITE) -> str:
    """The Debian mirror apt uses here for `suite` ($SSB_DEBIAN_MIRROR wins; else deb.debian.org)."""
    if os.environ.get("SSB_DEBIAN_MIRROR"):
        return os.environ["SSB_DEBIAN_MIRROR"]
    for path in sorted(apt_dir.glob("sources.list.d/*.sources")):  # deb822 stanzas
        for stanza in path.read_text(errors="replace").split("\n\n"):
            fields: dict[str, str] = {}
            for line in stanza.splitlines():
                if line.startswith("#") or ":" not in line or line[0].isspace():
                    continue
                key, _, value = line.partition(":")
                fields[key.strip().lower()] = value.strip()
            if "deb" in fields.get("types", "").split() and suite in fields.get("suites", "").split() \
                    and fields.get("uris"):
                return fields["uris"].split()[0]
    for path in [apt_dir / "sources.list", *sorted(apt_dir.glob("sources.list.d/*.list"))]:
        if not path.is_file():
            continue
        for line in path.read_text(errors="replace").splitlines():
            words = line.split("#", 1)[0].split()
            if words[:1] != ["deb"]:
                continue
            words = words[1:]
            if words and words[0].startswith("["):  # [arch=... signed-by=...]
                while words and not words[0].endswith("]"):
                    words.pop(0)
                words = words[1:]
            if len(words) >= 2 and words[1] == suite:
                return words[0]
    return DEFAULT_MIRROR


# ---------------------------------------------------------------- buildah


@dataclass(frozen=True)
class Buildah:
    """buildah on its own storage (vfs) and run root; `run` is injected (tests record the calls)."""

    root: Path = CACHE / "storage"
    runroot: Path = RUNROOT
    run: Runner = subprocess.run

    def argv(self, *args: str) -> list[str]:
        return ["buildah", "--root", str(self.root), "--runroot", str(self.runroot), "--storage-driver", "vfs", *args]

    def __call__(self, *args: str, check: bool = True, capture: bool = True, **kw) -> subprocess.CompletedProcess:
        done = self.run(self.argv(*args), capture_output=capture, text=True, **kw)
        if check and done.returncode != 0:
            tail = ((done.stdout or "") + (done.stderr or ""))[-4000:] if capture else ""
            raise RuntimeError(f"buildah {' '.join(args)} failed ({done.returncode}):\n{tail}")
        return done

    def image(self, ref: str) -> dict | None:
        """`buildah inspect` of the image `ref`, or None when there is none."""
        done = self(*("inspect", "--type", "image", ref), check=False)
        return json.loads(done.stdout) if done.returncode == 0 else None

    def images(self) -> list[dict]:
        return json.loads(self("images", "--json").stdout or "[]") or []


@dataclass(frozen=True)
class Image:
    ref: str            # localhost/sunk-sandbox-operator:build-<digest>
    tag: str            # ghcr.io/sunksandbox/sunk-sandbox-operator:<version>
    base: str
    size: str           # as `buildah images` shows it (uncompressed)
    built: bool         # False: found in the cache
    seconds: float


# ---------------------------------------------------------------- the base


def base_ref() -> str:
    recipe = json.dumps([BASE_RECIPE, SUITE, PACKAGES, TRIMMED, BASE_ENV]).encode()
    return f"{BASE_REPOSITORY}:{SUITE}-{hashlib.sha256(recipe).hexdigest()[:12]}"


def trim(rootfs: Path) -> None:
    """What a slim image leaves out: the contents of TRIMMED and docs except their copyright files."""
    for rel in TRIMMED:
        top = rootfs / rel
        if top.is_dir():
            for child in top.iterdir():
                shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()
    docs = rootfs / "usr" / "share" / "doc"
    if docs.is_dir():
        for path in sorted(docs.rglob("*"), reverse=True):  # children before their directories
            if path.is_symlink() or path.is_file():
                if path.name != "copyright":
                    path.unlink()
            elif path.is_dir() and not any(path.iterdir()):
                path.rmdir()


def build_base(b: Buildah, ref: str, work: Path, run: Runner = subprocess.run) -> None:
    rootfs, log = work / "rootfs", work / "debootstrap.log"
    mirror = debian_mirror()
    _log(f"debootstrap {SUITE} minbase + {', '.join(PACKAGES)} from {mirror} (first time only, ~1 min)")
    with open(log, "w") as out:
        done = run(["debootstrap", "--variant=minbase", f"--include={','.join(PACKAGES)}", SUITE, str(rootfs), mirror],
                   stdout=out, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        raise RuntimeError(f"debootstrap failed ({done.returncode}):\n{log.read_text(errors='replace')[-3000:]}")
    trim(rootfs)
    container = b("from", "--name", f"ssb-base-{uuid.uuid4().hex[:8]}", "scratch").stdout.strip()
    try:
        b("add", container, f"{rootfs}/", "/")
        b("config", *(a for env in BASE_ENV for a in ("--env", env)), "--cmd", "python3",
          "--label", f"org.opencontainers.image.description=Debian {SUITE} minbase with Python 3 (debootstrap): "
          "the base of the sunk-sandbox-operator image where no registry is reachable", container)
        b("commit", "--quiet", "--rm", container, ref)
    except BaseException:
        b("rm", container, check=False)
        raise


def ensure_base(b: Buildah, cache: Path = CACHE, run: Runner = subprocess.run) -> str:
    ref = base_ref()
    if b.image(ref) is None:
        started = time.monotonic()
        work = Path(tempfile.mkdtemp(prefix=".base.", dir=cache))
        try:
            build_base(b, ref, work, run)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        _log(f"base {ref} built in {time.monotonic() - started:.0f}s")
    return ref


# ---------------------------------------------------------------- the image


def _context_files(root: Path) -> Iterator[Path]:
    for name in CONTEXT:
        path = root / name
        if path.is_file():
            yield path
            continue
        for child in sorted(path.rglob("*")):
            parts = child.relative_to(root).parts
            if child.is_file() and "__pycache__" not in parts and child.suffix != ".pyc" \
                    and not any(p.endswith(".egg-info") for p in parts):
                yield child


def context_digest(root: Path, base_id: str, version: str) -> str:
    """What decides the image: the Dockerfile, .dockerignore, what it COPYs, the base, the version."""
    h = hashlib.sha256(json.dumps([base_id, version]).encode())
    for path in [root / "Dockerfile", root / ".dockerignore", *_context_files(root)]:
        h.update(str(path.relative_to(root)).encode() + b"\0")
        h.update(path.read_bytes() if path.exists() else b"<absent>")
        h.update(b"\0")
    return h.hexdigest()[:16]


def bud_args(base: str, version: str, refs: tuple[str, ...], ca: Path | None) -> list[str]:
    args = ["bud", "--isolation", "chroot", "--pull=never", "--build-arg", f"PYTHON_IMAGE={base}",
            "--build-arg", f"VERSION={version}"]
    if ca is not None:
        args += ["--secret", f"id=ca-bundle,src={ca}"]
    for ref in refs:
        args += ["--tag", ref]
    return args + ["--file", "Dockerfile", "."]


def prune(b: Buildah, keep: int = KEEP_BUILDS) -> None:
    """Keep the newest `keep` build-* images (other worktrees' among them); drop untagged images."""
    builds = [(img.get("created", 0), name) for img in b.images() for name in img.get("names") or []
              if name.startswith(f"{BUILD_REPOSITORY}:build-")]
    for _, name in sorted(builds, reverse=True)[keep:]:
        b("rmi", name, check=False)  # an image a container still uses stays
    b("rmi", "--prune", check=False)


def ensure_image(b: Buildah | None = None, root: Path = REPO_ROOT, run: Runner = subprocess.run,
                 cache: Path = CACHE, tools: Callable[[Runner], None] = ensure_tools,
                 ca: Path | None = HOST_CA) -> Image:
    """The image of the tree at `root`, built at most once per build context (under a lock).

    `ca`: the CA bundle passed to the build as the `ca-bundle` secret, when that file exists."""
    from sunk_sandbox_operator import __version__ as version

    started = time.monotonic()
    b = b or Buildah()
    tools(run)
    cache.mkdir(parents=True, exist_ok=True)
    b.runroot.mkdir(parents=True, exist_ok=True)
    with open(cache / "image.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one build at a time (worktrees share the storage)
        base = ensure_base(b, cache, run)
        ref = f"{BUILD_REPOSITORY}:build-{context_digest(root, image_id(b, base), version)}"
        tag = f"{REPOSITORY}:{version}"
        built = b.image(ref) is None
        if built:
            _log(f"buildah bud on {base} -> {ref}")
            b(*bud_args(base, version, (ref, tag), ca if ca is not None and ca.is_file() else None), cwd=root)
            prune(b)
        else:
            b("tag", ref, tag)
        size = next((img.get("size", "?") for img in b.images() if ref in (img.get("names") or [])), "?")
    return Image(ref=ref, tag=tag, base=base, size=size, built=built, seconds=time.monotonic() - started)


def image_id(b: Buildah, ref: str) -> str:
    info = b.image(ref)
    if info is None:
        raise RuntimeError(f"no image {ref}")
    return info["FromImageID"]


def main(argv: list[str]) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m sunk_sandbox_devtools image",
                                     description="Build the operator image with buildah (cached).")
    parser.parse_args(argv)
    image = ensure_image()
    verb = "built" if image.built else "cached"
    print(f"{image.ref} ({image.tag}): {image.size}, {verb} in {image.seconds:.1f}s on {image.base}")
    return 0
