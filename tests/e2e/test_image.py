"""The container image, built by `make image` (buildah on a debootstrap base) and run.

`buildah run` with chroot isolation shares the host's network, so the image's processes reach this
module's own control plane on loopback (its own: the session operator would hold the Lease): the
image's `sunk-sandbox-operator` with the Deployment's arguments, as the shipped ServiceAccount
(a TokenRequest kubeconfig mounted read-only, owned by the image's user), and the image's
`runner-api-emulator` as the runner API. Checked: liveness and readiness answer, the example
binding becomes Ready and its policy is written, the processes run as 65532, SIGTERM stops the
operator cleanly, and `doctor` inside it reads the binding as the tree's does; every command the
image ships works inside it; the image holds the product and
its dependencies only (no test or dev tools, no pip) and not the host's CA bundle.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import tomllib
import urllib.request
import uuid
from pathlib import Path

import pytest
import yaml

from sunk_sandbox_operator import __version__
from tests.conftest import OPERATOR_NS, OPERATOR_SA, REPO, TEST_ENV, Kube, install_manifests, wait_for
from tests.integration.conftest import ADMIN_TOKEN, make_scheduler

pytestmark = [pytest.mark.e2e, pytest.mark.needs_tool("image")]

NS = "tenant-slurm"
UID = 65532
DEPLOYMENT = yaml.safe_load((REPO / "manifests" / "deployment.yaml").read_text())
(CONTAINER,) = DEPLOYMENT["spec"]["template"]["spec"]["containers"]
# The kubernetes client is the `exec-auth` extra: in a pod the ServiceAccount is read without it.
TEST_ONLY = {"pytest", "pytest-asyncio", "hypothesis", "lupa", "cryptography", "import-linter", "kubernetes"}
RUNTIME = {"sunk-sandbox-operator", "kopf", "httpx", "pydantic", "pyyaml", "aiohttp", "prometheus-client"}


# ---------------------------------------------------------------- the image and a container of it


@pytest.fixture(scope="module")
def buildah():
    from sunk_sandbox_devtools.image import Buildah

    return Buildah()


@pytest.fixture(scope="module")
def image(buildah):
    from sunk_sandbox_devtools.image import ensure_image

    built = ensure_image(buildah)  # `make test` built it already: a cache hit
    print(f"\nimage {built.tag} ({built.ref}): {built.size}, {'built' if built.built else 'cached'} "
          f"in {built.seconds:.1f}s on {built.base}")
    return built


@pytest.fixture(scope="module")
def container(buildah, image):
    name = f"ssb-e2e-{uuid.uuid4().hex[:8]}"
    buildah("from", "--pull=never", "--name", name, image.ref)
    try:
        yield name
    finally:
        buildah("rm", name, check=False)


@pytest.fixture(scope="module")
def config(buildah, image) -> dict:
    return buildah.image(image.ref)["OCIv1"]["config"]


def run_argv(buildah, container, argv, *, volumes=(), env=None) -> list[str]:
    args = ["run", "--isolation", "chroot"]
    for volume in volumes:
        args += ["--volume", volume]
    for key, value in (env or {}).items():
        args += ["--env", f"{key}={value}"]
    return buildah.argv(*args, container, "--", *argv)


def in_image(buildah, container, *argv, input=None, volumes=(), timeout=120) -> subprocess.CompletedProcess:
    return subprocess.run(run_argv(buildah, container, argv, volumes=volumes), input=input, capture_output=True,
                          text=True, timeout=timeout)


# ---------------------------------------------------------------- what the image is


def test_the_image_config_is_the_dockerfiles(config):
    assert config["User"] == f"{UID}:{UID}"
    assert config["Entrypoint"] == ["/opt/venv/bin/sunk-sandbox-operator"]
    assert config["Cmd"] == ["run", "--standalone", "--all-namespaces"]
    assert config["Cmd"] == CONTAINER["args"][:3], "the Deployment starts with the image's CMD"
    assert set(config["ExposedPorts"]) == {f"{p['containerPort']}/TCP".lower() for p in CONTAINER["ports"]}
    assert config["Labels"]["org.opencontainers.image.version"] == __version__
    assert "PATH=/opt/venv/bin:" in " ".join(config["Env"])


def test_the_image_holds_the_product_only(buildah, container, image):
    probe = ("import getpass, importlib.metadata as m, importlib.util as u, json, os, shutil, sunk_sandbox_operator as s;"
             "print(json.dumps({'dists': sorted(d.metadata['Name'].lower() for d in m.distributions()),"
             "'user': getpass.getuser(),"
             "'file': s.__file__, 'devtools': u.find_spec('sunk_sandbox_devtools') is not None,"
             "'tests': u.find_spec('tests') is not None, 'src': os.path.exists('/src'),"
             "'tools': sorted(t for t in ('pip', 'pip3', 'pytest', 'gcc', 'cc', 'make', 'git', 'go')"
             " if shutil.which(t))}))")
    done = in_image(buildah, container, "python", "-c", probe)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    found["dists"] = sorted(re.sub(r"[-_.]+", "-", name) for name in found["dists"])  # PEP 503 names
    print(f"image {image.tag}: {image.size}; {len(found['dists'])} distributions: {' '.join(found['dists'])}")
    assert RUNTIME <= set(found["dists"]), RUNTIME - set(found["dists"])
    assert not TEST_ONLY & set(found["dists"]), "test dependencies in the image"
    assert not {"pip", "setuptools"} & set(found["dists"]), "a package manager in the shipped venv"
    assert found["file"].startswith("/opt/venv/lib/"), "installed, not a source tree"
    assert not found["devtools"] and not found["tests"], "dev tools or tests in the image"
    assert not found["src"], "the builder's source tree was shipped"
    assert found["user"] == "nonroot", "uid 65532 has a passwd entry (kopf asks getpass.getuser())"
    assert found["tools"] == [], f"build or dev tools on PATH: {found['tools']}"


def host_only_certificates(base_bundle: str) -> list[str]:
    """PEM bodies in the host's bundle and not in the base image's (a TLS-inspecting proxy's CA)."""
    from sunk_sandbox_devtools.image import HOST_CA

    if not HOST_CA.is_file():
        return []
    pem = re.compile(r"-----BEGIN CERTIFICATE-----(.+?)-----END CERTIFICATE-----", re.S)
    debian = {"".join(body.split()) for body in pem.findall(base_bundle)}
    return [b for b in ("".join(body.split()) for body in pem.findall(HOST_CA.read_text())) if b not in debian]


@pytest.fixture(scope="module")
def base_bundle(buildah, image) -> str:
    """The base's CA bundle: Debian's, made by debootstrap, which never saw the host's."""
    name = f"ssb-e2e-base-{uuid.uuid4().hex[:8]}"
    buildah("from", "--pull=never", "--name", name, image.base)
    try:
        return (Path(buildah("mount", name).stdout.strip()) / "etc/ssl/certs/ca-certificates.crt").read_text()
    finally:
        buildah("rm", name, check=False)


def test_the_hosts_ca_bundle_was_for_the_build_only(buildah, container, base_bundle):
    """The build mounts the host's CA bundle as a secret for pip: nothing of it may be shipped."""
    # Where the host's bundle holds nothing Debian's lacks the search below has nothing to find; the
    # shipped bundle must still be Debian's own, byte for byte, on every host.
    needles = [body[64:128].encode() for body in host_only_certificates(base_bundle)]  # a line of each body
    rootfs = Path(buildah("mount", container).stdout.strip())
    try:
        assert (rootfs / "etc/ssl/certs/ca-certificates.crt").read_text() == base_bundle
        for path in rootfs.rglob("*"):
            if path.is_file() and not path.is_symlink() and path.stat().st_size < 64 * 1024 * 1024:
                data = path.read_bytes()
                assert not any(n in data for n in needles), f"the host's CA is in the image: /{path.relative_to(rootfs)}"
    finally:
        buildah("umount", container, check=False)


def test_every_command_it_ships_works_inside_it(buildah, container, tmp_path):
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    listed = in_image(buildah, container, "python", "-c", "import importlib.metadata as m, json; print(json.dumps("
                      "{'ours': sorted(e.name for e in m.distribution('sunk-sandbox-operator').entry_points"
                      " if e.group == 'console_scripts'), 'all': sorted(e.name for e in m.entry_points("
                      "group='console_scripts'))}))")
    found = json.loads(listed.stdout)
    assert found["ours"] == sorted(scripts), "the image's console scripts are pyproject's"
    print(f"\nconsole scripts of the dependencies (not ours): {sorted(set(found['all']) - set(scripts))}")
    for script in scripts:
        helped = in_image(buildah, container, script, "--help")
        assert helped.returncode == 0, (script, helped.stderr)

    version = in_image(buildah, container, "sunk-sandbox-operator", "--version")
    assert (version.returncode, version.stdout) == (0, f"sunk-sandbox-operator {__version__}\n"), version.stderr
    usage = in_image(buildah, container, "sunk-sandbox-operator", "--help").stdout
    commands = re.findall(r"^  ([a-z][\w-]*)\s{2,}", usage, re.M)
    assert {"run", "doctor", "runner-api-emulator", "render-policy", "crd"} <= set(commands), usage
    for command in commands:
        helped = in_image(buildah, container, "sunk-sandbox-operator", command, "--help")
        assert helped.returncode == 0, (command, helped.stderr)
        assert helped.stdout.startswith("usage:"), (command, helped.stdout)  # help, nothing else (crd once printed the CRD)
    plugin = in_image(buildah, container, "kubectl-ssb", "doctor", "--help")
    assert plugin.returncode == 0 and "usage: kubectl ssb doctor" in plugin.stdout, plugin.stderr
    exec_config = {"apiVersion": "v1", "kind": "Config", "current-context": "c",
                   "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
                   "clusters": [{"name": "k", "cluster": {"server": "https://127.0.0.1:1"}}],
                   "users": [{"name": "u", "user": {"exec": {"apiVersion": "client.authentication.k8s.io/v1",
                                                             "command": "cloud-login"}}}]}
    (tmp_path / "exec.kubeconfig").write_text(yaml.safe_dump(exec_config))
    os.chown(tmp_path / "exec.kubeconfig", UID, UID)
    without_client = subprocess.run(  # an exec plugin needs the client, which the image does not carry
        run_argv(buildah, container, ["kubectl-ssb", "doctor", "ns/b"], env={"KUBECONFIG": "/mnt/exec.kubeconfig"},
                 volumes=[f"{tmp_path / 'exec.kubeconfig'}:/mnt/exec.kubeconfig:ro"]),
        capture_output=True, text=True, timeout=120)
    said = without_client.stderr.splitlines()[0]  # buildah adds its own lines about the exit status
    assert without_client.returncode == 2 and "Traceback" not in without_client.stderr, without_client.stderr
    assert "the kubeconfig /mnt/exec.kubeconfig (user.exec) needs the kubernetes client" in said, said
    assert said.endswith("pip install 'sunk-sandbox-operator[exec-auth]'"), said

    crd = in_image(buildah, container, "sunk-sandbox-operator", "crd")
    assert crd.returncode == 0, crd.stderr
    assert crd.stdout == (REPO / "crds" / "sunksandboxbindings.yaml").read_text(), "the image renders the shipped CRD"

    argv = ("render-policy", "--binding", "/mnt/binding.yaml", "--policy", "-", "--scheduler-name", "slurm-scheduler")
    rendered = in_image(buildah, container, "sunk-sandbox-operator", *argv, input="null",
                        volumes=[f"{REPO / 'manifests' / 'examples' / 'binding.yaml'}:/mnt/binding.yaml:ro"])
    assert rendered.returncode == 0, rendered.stderr
    assert json.loads(rendered.stdout)["base"]["spec"]["schedulerName"] == "slurm-scheduler"
    host_argv = [a.replace("/mnt/binding.yaml", str(REPO / "manifests" / "examples" / "binding.yaml")) for a in argv]
    on_host = subprocess.run([sys.executable, "-m", "sunk_sandbox_operator", *host_argv], input="null",
                             capture_output=True, text=True, timeout=60)
    assert (rendered.stdout, rendered.stderr) == (on_host.stdout, on_host.stderr), "the image and the tree disagree"
    # `run`, `runner-api-emulator` and `doctor` (both ways) run for real below.


# ---------------------------------------------------------------- the image against a control plane


@pytest.fixture(scope="module")
def plane(tmp_path_factory):
    """This module's own control plane with the shipped manifests, and the operator's kubeconfig."""
    from sunk_sandbox_devtools import devcluster

    cluster = devcluster.temp_cluster()
    try:
        kube = install_manifests(Kube(cluster))
        work = tmp_path_factory.mktemp("image-e2e")
        kubeconfig = cluster.service_account_kubeconfig(OPERATOR_NS, OPERATOR_SA, work / "operator.kubeconfig")
        # A pod's projected token is readable by its user: so is this copy, and only by it.
        os.chown(kubeconfig, UID, UID)
        os.chmod(kubeconfig, 0o400)
        yield kube, kubeconfig, work
    finally:
        cluster.stop()


class InImage:
    """A long-running `buildah run` of the image: its log, its process tree, a clean stop."""

    def __init__(self, argv: list[str], log: Path, *, read_first_line: bool = False) -> None:
        self.log = log
        self._log = open(log, "w")
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE if read_first_line else self._log,
                                     stderr=self._log, text=True, start_new_session=True)
        self.first_line = self.proc.stdout.readline() if read_first_line else ""

    def processes(self) -> list[int]:
        """The image's processes: buildah's descendants that run the image's Python."""
        children: dict[int, list[int]] = {}
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                except (OSError, IndexError, ValueError):
                    continue
                children.setdefault(ppid, []).append(int(entry.name))
        found, todo = [], list(children.get(self.proc.pid, []))
        while todo:
            pid = todo.pop()
            todo += children.get(pid, [])
            try:
                if Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"/opt/venv/bin/python"):
                    found.append(pid)
            except OSError:
                pass
        return found

    def ids(self, pid: int) -> dict[str, list[int]]:
        status = Path(f"/proc/{pid}/status").read_text().splitlines()
        return {line.split(":")[0]: [int(x) for x in line.split()[1:]] for line in status
                if line.startswith(("Uid:", "Gid:"))}

    def stop(self, timeout: float = 30.0) -> int | None:
        """SIGTERM to the image's process (as the kubelet stops a container), then its exit code."""
        if self.proc.poll() is None:
            for pid in self.processes():
                os.kill(pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
                return None
        if self.proc.stdout:
            self.proc.stdout.close()
        self._log.close()
        return self.proc.returncode


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError as exc:
        return 0, str(exc)


def deployment_args(liveness_port: int, metrics_port: int) -> list[str]:
    """The Deployment's arguments, on free ports (the host network is shared)."""
    out = []
    for arg in CONTAINER["args"]:
        arg = re.sub(r"^(--liveness=http://[^:/]+):8081(/.*)$", rf"\g<1>:{liveness_port}\2", arg)
        out.append(re.sub(r"^--metrics-port=8080$", f"--metrics-port={metrics_port}", arg))
    assert f"--metrics-port={metrics_port}" in out and any(f":{liveness_port}/healthz" in a for a in out), out
    return out


def doctor_agrees_with_the_tree(buildah, container, kube, work: Path) -> None:
    """`doctor` on the Ready binding, as a user runs it (the admin's kubeconfig, no settings of its own:
    it reads those the operator published): inside the image, both as a command and as the kubectl
    plugin, the same verdicts as the tree's own `doctor`, and the binding allowed, as the operator
    found it (issue 34: with its own defaults the doctor refused the operator's Ready binding)."""
    admin = work / "admin.kubeconfig"
    shutil.copy(kube.cluster.kubeconfig, admin)
    os.chown(admin, UID, UID)
    os.chmod(admin, 0o400)
    args = [f"{NS}/cpu-sandboxes", "-o", "json"]
    tree = {"PYTHONPATH": os.environ["PYTHONPATH"]} if os.environ.get("PYTHONPATH") else {}
    on_host = subprocess.run([str(Path(sys.executable).parent / "sunk-sandbox-operator"), "doctor", *args],
                             env={"PATH": os.environ["PATH"], "HOME": str(work), "KUBECONFIG": str(admin), **tree},
                             capture_output=True, text=True, timeout=120)
    assert on_host.returncode in (0, 1), on_host.stderr
    host_report = json.loads(on_host.stdout)
    assert host_report["settings"]["source"] == "operator", host_report["settings"]
    expected = [(c["id"], c["ok"]) for c in host_report["checks"]]
    assert ("binding", True) in expected, host_report  # the operator's Ready binding is allowed
    for argv in (["sunk-sandbox-operator", "doctor"], ["kubectl-ssb", "doctor"]):
        done = subprocess.run(run_argv(buildah, container, [*argv, *args], env={"KUBECONFIG": "/mnt/admin.kubeconfig"},
                                       volumes=[f"{admin}:/mnt/admin.kubeconfig:ro"]),
                              capture_output=True, text=True, timeout=120)
        assert done.returncode in (0, 1), (argv, done.stderr)  # 2: it could not read the cluster
        report = json.loads(done.stdout)
        assert report["binding"] == f"{NS}/cpu-sandboxes" and report["settings"]["source"] == "operator"
        assert [(c["id"], c["ok"]) for c in report["checks"]] == expected, argv
    print(f"doctor in the image: {len(expected)} checks, failing (no kubelet, no Slurm here): "
          f"{[i for i, ok in expected if ok is False]}")


def test_the_image_runs_the_operator_against_the_control_plane(buildah, container, config, plane):
    from sunk_sandbox_devtools.devcluster import free_port

    kube, kubeconfig, work = plane
    started = time.monotonic()
    emulator = InImage(run_argv(buildah, container, [
        *config["Entrypoint"], "runner-api-emulator", "--listen", "127.0.0.1:0", "--token", ADMIN_TOKEN,
        "--runner", "runner-7f3a"]), work / "emulator.log", read_first_line=True)
    operator = None
    try:
        assert emulator.first_line.startswith("runner-api emulator listening on "), emulator.log.read_text()
        emulator_url = emulator.first_line.split()[-1]

        liveness, metrics = free_port(), free_port()
        env = {**TEST_ENV, "KUBECONFIG": "/mnt/operator.kubeconfig",
               "POD_NAMESPACE": OPERATOR_NS, "POD_NAME": "sunk-sandbox-operator-image-e2e"}
        operator = InImage(run_argv(buildah, container, [*config["Entrypoint"], *deployment_args(liveness, metrics)],
                                    volumes=[f"{kubeconfig}:/mnt/operator.kubeconfig:ro"], env=env),
                           work / "operator.log")

        def alive():
            assert operator.proc.poll() is None, f"the image's operator exited:\n{operator.log.read_text()[-3000:]}"
            return get(f"http://127.0.0.1:{liveness}/healthz")[0] == 200
        wait_for(alive, 90, lambda: str(get(f"http://127.0.0.1:{liveness}/healthz")))
        print(f"\nthe image's operator answers /healthz {time.monotonic() - started:.1f}s after `buildah run`")
        wait_for(lambda: get(f"http://127.0.0.1:{liveness}/readyz")[0] == 200, 30,
                 lambda: str(get(f"http://127.0.0.1:{liveness}/readyz")))

        for proc in (operator, emulator):  # runAsNonRoot: real, effective, saved and filesystem ids
            pids = proc.processes()
            assert pids, f"no process of the image under buildah {proc.proc.pid}"
            for pid in pids:
                assert proc.ids(pid) == {"Uid": [UID] * 4, "Gid": [UID] * 4}, pid

        kube.apply({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "coreweave-api", "namespace": NS},
                    "stringData": {"token": ADMIN_TOKEN}})
        make_scheduler(kube, NS)
        binding = yaml.safe_load((REPO / "manifests" / "examples" / "binding.yaml").read_text())
        binding["spec"]["runner"]["apiURL"] = emulator_url
        kube.apply(binding)
        out = kube.kubectl("wait", "--for=condition=Ready", "ssb/cpu-sandboxes", "-n", NS, "--timeout=90s",
                           check=False)
        assert out.returncode == 0, (out.stderr, json.dumps(kube.binding(NS, "cpu-sandboxes").get("status"), indent=1),
                                     operator.log.read_text()[-3000:])

        _, state = get(f"{emulator_url}/_emulator/state")
        policy = json.loads(state)["runners"]["runner-7f3a"]["policy"]
        assert policy["base"]["spec"]["schedulerName"] == "slurm-scheduler", policy
        code, text = get(f"http://127.0.0.1:{metrics}/metrics")
        assert code == 200
        assert f'ssb_condition{{binding="{NS}/cpu-sandboxes",condition="Ready",status="True"}} 1' in text
        lines = [line for line in operator.log.read_text().splitlines() if line.strip()]
        assert lines and all(json.loads(line) for line in lines), "--log-format=json: one object a line"

        doctor_agrees_with_the_tree(buildah, container, kube, work)

        kube.kubectl("delete", "ssb", "-n", NS, "cpu-sandboxes", "--timeout=60s")  # the finalizer restores
        policy = json.loads(get(f"{emulator_url}/_emulator/state")[1])["runners"]["runner-7f3a"]["policy"]
        assert policy is None, f"not restored to the runner's policy before the binding (none): {policy}"
    finally:
        codes = {"operator": operator.stop() if operator else None, "emulator": emulator.stop()}
    assert ADMIN_TOKEN not in operator.log.read_text(), "the token reached the operator's log"
    assert codes == {"operator": 0, "emulator": 0}, f"SIGTERM: not a clean exit: {codes}"
