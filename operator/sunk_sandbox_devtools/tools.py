"""The tools only some tests need (helm, promtool, argocd-health, the operator image), built in the
background while the rest of the suite runs.

Cold, they are ~13 minutes of builds on 2 cores; run first, they pushed a cold CI run past its 30
minute budget, while the test suite leaves about half the CPU idle (it mostly waits on the API
server). `make test` runs `tools start` before building the control plane: when one of them is
missing, one detached process at the lowest CPU priority builds them, in two lanes (the image,
mostly downloads, beside the Go tools one after another), each through the same `ensure_*` and
under the same lock a test takes, so a test that needs a tool waits for it, or builds it itself if
nothing is building it. The tests that need one run last (`needs_tool` marker, tests/conftest.py).
Warm (every Go tool present), nothing starts: the image's cache check is the test's own.

`tools build` builds them in the foreground (what the detached process runs).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import traceback
from pathlib import Path
from typing import Callable

from . import devcluster

REPO_ROOT = Path(__file__).resolve().parents[2]
LOG = REPO_ROOT / ".devcluster" / "tools-build.log"


def _image() -> object:
    from . import image

    return image.ensure_image()


# What the suite needs, in the order its late tests use them (tests/conftest.py sorts by this order).
GO_TOOLS: tuple[tuple[str, Callable[[], object], Callable[[], Path]], ...] = (
    ("helm", devcluster.ensure_helm, lambda: devcluster.CACHE_ROOT / f"helm-{devcluster.helm_version()}" / "helm"),
    ("promtool", devcluster.ensure_promtool,
     lambda: devcluster.CACHE_ROOT / f"promtool-{devcluster.promtool_version()}" / "promtool"),
    ("argocd-health", devcluster.ensure_argocd_health,
     lambda: devcluster.CACHE_ROOT / f"argocd-{devcluster.argocd_version()}" / "argocd-health"),
)
ORDER = tuple(name for name, _, _ in GO_TOOLS) + ("image",)


def missing() -> list[str]:
    return [name for name, _, path in GO_TOOLS if not path().is_file()]


def _lane(steps: list[tuple[str, Callable[[], object]]], failed: list[str]) -> None:
    for name, ensure in steps:
        try:
            print(f"[tools] {name}: {ensure()}", flush=True)
        except Exception:  # noqa: BLE001 - the test that needs it builds it again and shows the error
            traceback.print_exc()
            failed.append(name)


def build() -> int:
    failed: list[str] = []
    lanes = [threading.Thread(target=_lane, args=([("image", _image)], failed), name="image"),
             threading.Thread(target=_lane, args=([(n, e) for n, e, _ in GO_TOOLS], failed), name="go tools")]
    for t in lanes:
        t.start()
    for t in lanes:
        t.join()
    print(f"[tools] done{'; failed: ' + ', '.join(failed) if failed else ''}", flush=True)
    return 1 if failed else 0


def start(popen: Callable[..., object] = subprocess.Popen) -> bool:
    """Start the detached background build when a Go tool is missing; True when started."""
    todo = missing()
    if not todo:
        return False
    LOG.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT / "operator")}
    with open(LOG, "w") as log:
        popen([sys.executable, "-m", "sunk_sandbox_devtools", "tools", "build"], stdout=log,
              stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True, env=env,
              preexec_fn=lambda: os.nice(19), cwd=REPO_ROOT)
    print(f"[tools] building {', '.join(todo)} and the image in the background at nice 19 (log: {LOG})",
          file=sys.stderr, flush=True)
    return True


def main(argv: list[str]) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m sunk_sandbox_devtools tools",
                                     description="Build helm, promtool, argocd-health and the image (cached).")
    parser.add_argument("action", choices=["start", "build"])
    args = parser.parse_args(argv)
    if args.action == "build":
        return build()
    start()
    return 0
