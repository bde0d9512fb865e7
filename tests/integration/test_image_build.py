"""The image's builder stage executed for real, on the host.

Without a container engine, `test_builder_install_step_produces_a_working_venv`
replays the builder stage: it copies what the stage COPYs (honouring .dockerignore), runs its
RUN lines with /opt/venv pointing into tmp_path, and then runs the console script the final
stage's ENTRYPOINT names. It needs the package index (pip) and takes 30-90 s depending on the
index's latency (the subprocess timeouts are the budget), so it is not a unit test. The static
checks of the Dockerfile are in tests/unit/test_dockerfile.py; the image itself, built with
buildah by `make image`, runs in tests/e2e/test_image.py.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.unit.test_dockerfile import (ROOT, builder, copy_context, dockerignore_patterns,  # noqa: F401 (fixtures)
                                        final, parse_key_values, stages)

pytestmark = pytest.mark.integration


# ---------------------------------------------------------------- replay the builder stage


def test_builder_install_step_produces_a_working_venv(builder, final, tmp_path):
    """Replay the builder stage on the host (a real, non-editable `pip install .`)."""
    venv = tmp_path / "opt-venv"
    root = tmp_path / "rootfs"
    (root / "etc").mkdir(parents=True)
    for name in ("passwd", "group"):  # the base's files, which the builder appends to
        shutil.copy(f"/etc/{name}", root / "etc" / name)
    workdir = root
    patterns = dockerignore_patterns()
    env = {k: v for k, v in os.environ.items() if k not in {"VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME"}}
    shims = tmp_path / "shims"
    shims.mkdir()
    (shims / "python").symlink_to(sys.executable)
    env["PATH"] = f"{shims}{os.pathsep}{env.get('PATH', '')}"

    for ins in builder.instructions:
        if ins.keyword == "ENV":
            env.update(parse_key_values([ins]))
        elif ins.keyword == "WORKDIR":
            workdir = root / ins.value.lstrip("/")
            workdir.mkdir(parents=True, exist_ok=True)
        elif ins.keyword == "COPY":
            _, args = ins.flags_and_args()
            *sources, target = args
            for source in sources:
                src = ROOT / source.rstrip("/")
                assert src.exists(), f"COPY {source}: missing from the repository, `docker build` would fail"
                if src.is_dir():
                    dest = workdir / target.rstrip("/") if target not in {".", "./"} else workdir
                else:
                    dest = workdir / target / src.name if target.endswith("/") else workdir / target
                copy_context(src, dest, source.rstrip("/"), patterns)
        elif ins.keyword == "RUN":
            # Same command with the venv in tmp_path and /etc in the replay's root, never the
            # host's; without its --mount flags (the host's pip has the host's CA bundle). Speed
            # only: pip may use its cache, and skips byte-compiling (the image keeps it: its root
            # filesystem is read-only).
            _, command = ins.run_parts()
            command = command.replace("/opt/venv", str(venv)).replace("/etc/", f"{root}/etc/")
            stray = [w for w in shlex.split(command) if w.startswith("/") and not w.startswith(str(tmp_path))]
            assert not stray, f"the replay would touch the host: {stray} in RUN {ins.value}"
            command = command.replace("--no-cache-dir", "")
            command = command.replace("pip install", "pip install --no-compile")
            done = subprocess.run(
                ["sh", "-c", command], cwd=workdir, env=env, capture_output=True, text=True, timeout=600
            )
            assert done.returncode == 0, f"RUN {ins.value} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        elif ins.keyword in {"ARG", "LABEL"}:
            continue
        else:
            pytest.fail(f"the replay does not know builder instruction {ins.keyword}")

    uid, _, gid = final.last("USER").value.partition(":")
    assert any(line.split(":")[2:4] == [uid, gid] for line in (root / "etc" / "passwd").read_text().splitlines()), \
        "no passwd entry for the final stage's USER"
    assert any(line.split(":")[2] == gid for line in (root / "etc" / "group").read_text().splitlines())

    entry = final.last("ENTRYPOINT").exec_form()[0].replace("/opt/venv", str(venv))
    assert Path(entry).is_file(), "the ENTRYPOINT console script was not installed"

    python = venv / "bin" / "python"
    probe = subprocess.run(
        [
            str(python),
            "-c",
            "import importlib.metadata as m, json, sunk_sandbox_operator as s;"
            "print(json.dumps({'file': s.__file__, 'dists': sorted(d.metadata['Name'].lower() for d in m.distributions())}))",
        ],
        cwd=tmp_path,
        env={"PATH": env["PATH"]},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert probe.returncode == 0, probe.stderr
    info = json.loads(probe.stdout)
    assert info["file"].startswith(str(venv)), f"not a real install: imported from {info['file']}"
    # What pyproject.toml requires is installed; the `exec-auth` extra (the kubernetes client, 126 MB)
    # is not: in a pod the ServiceAccount is read without it.
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    required = {re.split(r"[<>=!~;\[ ]", dep, maxsplit=1)[0].lower() for dep in project["dependencies"]}
    installed = {re.sub(r"[-_.]+", "-", name) for name in info["dists"]}  # PEP 503 names
    for needed in sorted(required | {"sunk-sandbox-operator"}):
        assert re.sub(r"[-_.]+", "-", needed) in installed, f"{needed} missing from the image venv"
    assert "kopf" in required and "httpx" in required
    assert "kubernetes" not in installed, "the exec-auth extra (kubernetes) was installed in the image"
    leaked = {"pytest", "pytest-asyncio", "hypothesis", "lupa"} & set(info["dists"])
    assert not leaked, f"test dependencies in the image: {sorted(leaked)}"
    assert not {"pip", "setuptools"} & set(info["dists"]), "the shipped venv keeps no package manager"

    if (ROOT / "operator" / "sunk_sandbox_operator" / "__main__.py").exists():
        helped = subprocess.run(
            [entry, "--help"], cwd=tmp_path, env={"PATH": env["PATH"], "HOME": str(tmp_path)},
            capture_output=True, text=True, timeout=120,
        )
        assert helped.returncode == 0, f"{entry} --help failed:\n{helped.stdout}\n{helped.stderr}"
        assert "run" in helped.stdout
    else:
        pytest.fail("operator/sunk_sandbox_operator/__main__.py (the console script's main) is missing")

    # The doctor ships in the image too (and as the kubectl plugin): with the runtime dependencies
    # alone it imports everything it uses and reaches the point of asking the API server, which is
    # not there (exit 2, one line, no traceback).
    dead = tmp_path / "dead.kubeconfig"
    dead.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1", "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": {"token": "x"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    for argv in ([entry, "doctor"], [str(Path(entry).with_name("kubectl-ssb")), "doctor", "-o", "json"]):
        done = subprocess.run(argv, cwd=tmp_path, env={"PATH": env["PATH"], "HOME": str(tmp_path),
                                                      "KUBECONFIG": str(dead)},
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 2 and "cannot read the cluster" in done.stderr, (argv, done.stdout, done.stderr)
        assert "Traceback" not in done.stderr, done.stderr
