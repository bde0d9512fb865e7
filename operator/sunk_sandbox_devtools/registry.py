"""A real OCI registry on loopback, for the release tests (tests/e2e/test_release.py).

CNCF distribution's `registry` (the reference implementation of the OCI distribution API, which
`helm push`, skopeo and buildah speak), built from the pinned wrapper module hack/registry like
helm (devcluster.ensure_built: one build per pinned version under its lock, cached beside the
control plane's binaries; `$REGISTRY_BIN` wins), last in the background go lane (tools.py).
`Registry` serves it on a free loopback port over plain HTTP with its storage in a directory of its
own: `helm push --plain-http`, `skopeo copy --dest-tls-verify=false` and `buildah pull
--tls-verify=false` reach it; nothing else can.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import yaml

from . import devcluster

MODULE = "github.com/distribution/distribution/v3"
BINARY = ("registry",)


def registry_version() -> str:
    return devcluster._pinned(devcluster.HACK / "registry", MODULE)


def build_registry(out: Path) -> None:
    """`go build` of hack/registry/main.go: distribution's root command with the filesystem storage
    driver only (cold, empty Go caches: 440 s on 2 cores beside another build; the upstream
    cmd/registry with its cloud drivers: 692 s)."""
    version = registry_version()
    started = time.monotonic()
    print(f"[registry] building registry ({MODULE} {version}; first time only)", file=sys.stderr, flush=True)
    devcluster._go_build("registry", out, ".", name="registry", ldflags=f"-s -w -X {MODULE}/version.version={version}")
    print(f"[registry] built in {time.monotonic() - started:.0f}s", file=sys.stderr, flush=True)


def registry_path() -> Path:
    return Path(os.environ.get("REGISTRY_BIN") or devcluster.CACHE_ROOT / f"registry-{registry_version()}" / "registry")


def ensure_registry() -> Path:
    return devcluster._ensure_tool(registry_path(), "REGISTRY_BIN", build_registry, BINARY)


class Registry:
    """`registry serve` on 127.0.0.1:<free port>, its blobs under `workdir`; `host` is what image
    references and `oci://` URLs name (e.g. `127.0.0.1:40123/charts/sunk-sandbox-operator`)."""

    def __init__(self, workdir: Path, binary: Path | None = None, timeout: float = 30.0) -> None:
        self.workdir = workdir
        self.port = devcluster.free_port()
        self.host = f"127.0.0.1:{self.port}"
        workdir.mkdir(parents=True, exist_ok=True)
        config = workdir / "config.yml"
        config.write_text(yaml.safe_dump({
            "version": 0.1,
            "log": {"level": "warn", "accesslog": {"disabled": True}},
            "storage": {"filesystem": {"rootdirectory": str(workdir / "storage")}, "delete": {"enabled": True}},
            "http": {"addr": self.host, "secret": secrets.token_hex(16)},
        }))
        self.log_path = workdir / "registry.log"
        env = {**os.environ, "OTEL_TRACES_EXPORTER": "none"}  # no span exporter (it would dial an OTLP collector)
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen([str(binary or ensure_registry()), "serve", str(config)], stdout=log,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                         start_new_session=True)
        self._wait(timeout)

    def _wait(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"registry exited {self.proc.returncode}:\n{self.logs()[-3000:]}")
            try:
                with urllib.request.urlopen(f"http://{self.host}/v2/", timeout=1) as resp:
                    if resp.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"registry not answering on {self.host} after {timeout}s:\n{self.logs()[-3000:]}")

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
