"""The tools only some tests need (helm, promtool, argocd-health, the operator image, the Slurm 24.11
and 26.05 chroots), built in the background while the rest of the suite runs.

Cold, they are ~13 minutes of builds on 2 cores; run first, they pushed a cold CI run past its 30
minute budget, while the test suite leaves about half the CPU idle (it mostly waits on the API
server). `make test` starts two lanes, each one detached process at the lowest CPU priority:

- `tools start image` before the control plane's Go build: the Slurm chroots, then the image, are
  mostly downloads (debootstrap, pip), so they fit beside that build; the chroots first (about a
  minute each, cold): the Slurm tests of those releases run right after the tests that need nothing;
- `tools start go` after it: helm, promtool and argocd-health one after another, whose k8s.io
  packages (hack/*/go.mod pin hack/kube's versions) then come from that build's cache instead of
  being compiled again (measured: started beside it, both compiled them and it took 984 s, not 565).

Each tool goes through the same `ensure_*` and under the same lock a test takes, so a test that
needs one waits for it, or builds it itself if nothing is building it; the tests that need one run
last (`needs_tool` marker, tests/conftest.py). Warm, the go lane starts nothing and the image lane
costs one cache check. `tools build LANE` builds a lane in the foreground (what the process runs).
"""

from __future__ import annotations

import os
import subprocess
import sys
import traceback
from pathlib import Path
from typing import Callable

from . import devcluster, registry

REPO_ROOT = Path(__file__).resolve().parents[2]
LOGS = REPO_ROOT / ".devcluster"


def _image() -> object:
    from . import image

    return image.ensure_image()


def _slurm() -> object:
    from . import slurm_chroot

    done, failed = [], []
    for release in slurm_chroot.SUITES:  # one failing (a sid that cannot install today) keeps the other
        try:
            r = slurm_chroot.ensure_root(release)
            done.append(f"{release} {'built' if r.built else 'cached'} in {r.seconds:.1f}s")
        except Exception as exc:  # noqa: BLE001 - the test that needs it builds it again and shows the error
            failed.append(f"{release}: {exc}")
    if failed:
        raise RuntimeError("; ".join(failed))
    return ", ".join(done)


# What the suite needs, in the order its late tests use them (tests/conftest.py sorts by this order).
GO_TOOLS: tuple[tuple[str, Callable[[], object], Callable[[], Path]], ...] = (
    ("helm", devcluster.ensure_helm, devcluster.helm_path),
    ("promtool", devcluster.ensure_promtool, devcluster.promtool_path),
    ("argocd-health", devcluster.ensure_argocd_health, devcluster.argocd_health_path),
)
# The OCI registry of the release test (tests/e2e/test_release.py, which runs last, with the image's).
GO_TOOLS += (("registry", registry.ensure_registry, registry.registry_path),)
# The chroots come first (built first, in the image lane, and well before the Go tools).
ORDER = ("slurm", *(name for name, _, _ in GO_TOOLS), "image")


def missing() -> list[str]:
    return [name for name, _, path in GO_TOOLS if not path().is_file()]


def steps(lane: str) -> list[tuple[str, Callable[[], object]]]:
    return [("slurm", _slurm), ("image", _image)] if lane == "image" else [(n, e) for n, e, _ in GO_TOOLS]


def build(lane: str) -> int:
    failed: list[str] = []
    for name, ensure in steps(lane):
        try:
            print(f"[tools] {name}: {ensure()}", flush=True)
        except Exception:  # noqa: BLE001 - the test that needs it builds it again and shows the error
            traceback.print_exc()
            failed.append(name)
    print(f"[tools] {lane} done{'; failed: ' + ', '.join(failed) if failed else ''}", flush=True)
    return 1 if failed else 0


def start(lane: str, popen: Callable[..., object] = subprocess.Popen) -> bool:
    """Start the lane's detached background build (the go lane: when a Go tool is missing); True when started."""
    todo = ["slurm", "image"] if lane == "image" else missing()
    if not todo:
        return False
    LOGS.mkdir(parents=True, exist_ok=True)
    log_path = LOGS / f"tools-{lane}.log"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT / "operator")}
    with open(log_path, "w") as log:
        popen([sys.executable, "-m", "sunk_sandbox_devtools", "tools", "build", lane], stdout=log,
              stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True, env=env,
              preexec_fn=lambda: os.nice(19), cwd=REPO_ROOT)
    print(f"[tools] {', '.join(todo)}: in the background at nice 19 (log: {log_path})", file=sys.stderr, flush=True)
    return True


def main(argv: list[str]) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m sunk_sandbox_devtools tools",
                                     description="Build helm, promtool, argocd-health, the Slurm chroots and the "
                                     "image (cached).")
    parser.add_argument("action", choices=["start", "build"])
    parser.add_argument("lane", choices=["image", "go"])
    args = parser.parse_args(argv)
    if args.action == "build":
        return build(args.lane)
    start(args.lane)
    return 0
