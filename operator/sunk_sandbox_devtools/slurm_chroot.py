"""Slurm releases Debian 12 does not ship, as cached debootstrap chroots: 24.11 (trixie), 26.05 (sid).

SUNK 8.1/8.2 ship Slurm 25.11 (REST v0.0.41-v0.0.44), which Debian does not package; trixie's 24.11
(v0.0.40-v0.0.42) and sid's 26.05 (v0.0.42-v0.0.45) bracket it (shared/reference/slurm-versions.md).

- `ensure_root(release)`: `debootstrap --variant=minbase --include=<the daemons> <suite>` from the
  mirror apt uses here, once per recipe: built in a temp dir beside the cache entry, renamed into
  place when complete, under a per-suite file lock (a second session waits, then finds it made).
  Cached under ~/.cache/sunk-sandbox-operator/slurm/<suite>-<recipe digest>/ (~300 MB each).
  debootstrap itself keeps postinst scripts from starting daemons (a fake start-stop-daemon).
- `in_root(root, argv, ...)`: the argv that runs one daemon inside the chroot with /proc and /sys
  mounted only in that process's own mount namespace (`unshare --mount --propagation private`,
  no `--fork`: the daemon keeps the PID the harness started, so it is stopped by that PID), so
  nothing is ever mounted on the host and an exit leaves nothing behind.

Tools only: no operator code imports this.
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
from dataclasses import dataclass
from pathlib import Path

from .image import debian_mirror

CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "sunk-sandbox-operator" / "slurm"
SUITES = {"24.11": "trixie", "26.05": "sid"}
PACKAGES = ("munge", "slurmctld", "slurmd", "slurmrestd", "slurm-client", "slurm-wlm-basic-plugins",
            "slurm-wlm-jwt-plugin")
USERS = (("slurmrestd", True), ("k8sop", False))   # (name, system): slurmrestd refuses root; the API user
RECIPE = 1   # bump when the chroot is made differently (the directory changes, so it is rebuilt)
READY = ".ssb-ready"   # written last: a directory without it was never finished
TRIMMED = ("var/cache/apt/archives", "var/lib/apt/lists", "usr/share/man", "usr/share/doc", "usr/share/locale")


def _log(msg: str) -> None:
    print(f"[slurm-chroot] {msg}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Root:
    release: str
    path: Path
    built: bool         # False: found in the cache
    seconds: float


def root_path(release: str, cache: Path = CACHE) -> Path:
    suite = SUITES[release]
    recipe = json.dumps([RECIPE, suite, PACKAGES, USERS, TRIMMED]).encode()
    return cache / f"{suite}-{hashlib.sha256(recipe).hexdigest()[:12]}"


def ready(release: str, cache: Path = CACHE) -> bool:
    return (root_path(release, cache) / READY).is_file()


def ensure_debootstrap() -> None:
    if shutil.which("debootstrap") is not None:
        return
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise RuntimeError("debootstrap missing: install it (Debian: apt-get install debootstrap)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "-q", "-o", "DPkg::Lock::Timeout=600", "--no-install-recommends",
               "debootstrap"]
    if subprocess.run(install, env=env).returncode != 0:  # stale package lists
        subprocess.run(["apt-get", "update", "-q", "-o", "DPkg::Lock::Timeout=600"], env=env, check=True)
        subprocess.run(install, env=env, check=True)


def _trim(rootfs: Path) -> None:
    for rel in TRIMMED:
        top = rootfs / rel
        if top.is_dir():
            for child in top.iterdir():
                if child.is_dir() and not child.is_symlink():
                    shutil.rmtree(child)
                elif child.name != "lock":
                    child.unlink()


def _build(release: str, rootfs: Path, log: Path) -> None:
    suite, mirror = SUITES[release], debian_mirror(suite=SUITES[release])
    _log(f"debootstrap {suite} minbase + Slurm from {mirror} (first time only, ~1 min; log {log})")
    with open(log, "w") as out:
        done = subprocess.run(["debootstrap", "--variant=minbase", f"--include={','.join(PACKAGES)}", suite,
                               str(rootfs), mirror], stdout=out, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        raise RuntimeError(f"debootstrap {suite} failed ({done.returncode}):\n{log.read_text(errors='replace')[-3000:]}")
    for name, system in USERS:
        subprocess.run(["chroot", str(rootfs), "useradd", *(["--system"] if system else []), "--no-create-home",
                        "--shell", "/usr/sbin/nologin", name], check=True, capture_output=True)
    _trim(rootfs)


def ensure_root(release: str, cache: Path = CACHE) -> Root:
    """The chroot of `release` (24.11 or 26.05), built once (root only: debootstrap and chroot need it)."""
    started = time.monotonic()
    path = root_path(release, cache)
    if (path / READY).is_file():
        return Root(release, path, False, time.monotonic() - started)
    if os.geteuid() != 0:
        raise RuntimeError(f"Slurm {release} for the tests is a debootstrap chroot: building it needs root")
    ensure_debootstrap()
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / f"{SUITES[release]}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another session building it: wait, then find it made
        if (path / READY).is_file():
            return Root(release, path, False, time.monotonic() - started)
        work = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=cache))
        try:
            _build(release, work / "root", work / "debootstrap.log")
            (work / "root" / READY).write_text(json.dumps({"release": release, "suite": SUITES[release],
                                                           "seconds": round(time.monotonic() - started, 1)}))
            if path.exists():  # a half-made one from a crash (no READY): replaced
                shutil.rmtree(path)
            os.rename(work / "root", path)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    took = time.monotonic() - started
    _log(f"Slurm {release} ({SUITES[release]}) chroot built in {took:.0f}s at {path}")
    return Root(release, path, True, took)


def ensure_hosts(root: Path, host: str) -> None:
    """The chroot's /etc/hosts names this machine (debootstrap writes none): without it slurmctld 24.11
    resolves the host name through DNS at each job submit (511 ms a job here, 5 ms with it). Written
    atomically, only when it differs (sessions share the chroot)."""
    want = f"127.0.0.1 localhost\n::1 localhost ip6-localhost ip6-loopback\n127.0.0.1 {host}\n"
    hosts = root / "etc" / "hosts"
    if hosts.is_file() and hosts.read_text() == want:
        return
    tmp = hosts.with_name(f".hosts.{os.getpid()}")
    tmp.write_text(want)
    os.chmod(tmp, 0o644)
    os.replace(tmp, hosts)


def ids(root: Path, user: str) -> tuple[int, int]:
    """A user's uid and gid in the chroot's /etc/passwd (not the host's: the users differ)."""
    for line in (root / "etc" / "passwd").read_text().splitlines():
        fields = line.split(":")
        if len(fields) > 3 and fields[0] == user:
            return int(fields[2]), int(fields[3])
    raise RuntimeError(f"no user {user} in {root}/etc/passwd")


def in_root(root: Path, argv: list[str], user: str | None = None, mounts: bool = True) -> list[str]:
    """argv run inside the chroot (as `user`, else root). `mounts`: /proc and /sys in a private mount
    namespace of that one process (daemons need /proc; client commands do not)."""
    chroot = ["chroot"]
    if user is not None:
        uid, gid = ids(root, user)
        chroot += [f"--userspec={uid}:{gid}", f"--groups={gid}"]
    chroot += [str(root), *argv]
    if not mounts:
        return chroot
    script = 'mount -t proc proc "$1/proc" && mount -t sysfs sysfs "$1/sys" && shift && exec "$@"'
    return ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", script, "sh", str(root), *chroot]


def main(argv: list[str]) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m sunk_sandbox_devtools slurm-chroot",
                                     description="Build (once) the Slurm 24.11 / 26.05 chroots the tests run.")
    parser.add_argument("releases", nargs="*", default=list(SUITES), choices=list(SUITES))
    args = parser.parse_args(argv)
    for release in args.releases:
        root = ensure_root(release)
        print(f"Slurm {release}: {root.path} ({'built' if root.built else 'cached'} in {root.seconds:.1f}s)")
    return 0
