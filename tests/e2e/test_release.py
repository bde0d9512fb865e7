"""The release, installed from a registry as a user would (`make release`, then README's install).

`make release`'s code builds the artifacts (the image is `make image`'s cached build; the kubectl
plugin for this machine's OS, architecture and Python only), a real OCI registry runs on loopback
(CNCF distribution, hack/registry), and:

- SHA256SUMS, release.json and the krew manifest agree with the files; the chart package is the
  one version and pins the image's digest;
- the SBOM is CycloneDX 1.6 whose root is the image by its manifest digest, and it lists exactly the
  Python distributions and Debian packages found in the image;
- `helm push` the chart and `skopeo copy --preserve-digests` the image archive to the registry, then
  `helm install oci://127.0.0.1:PORT/charts/sunk-sandbox-operator` (the registry as the image's
  mirror: `image.repository`) into a control plane of its own: the installed Deployment's image is
  the registry's `...@<the SBOM's digest>`. No kubelet runs here, so the test does its part: it pulls
  that reference into an empty buildah storage (nothing cached: it comes from the registry) and
  runs it with the Deployment's arguments and environment as the installed ServiceAccount; the
  example binding becomes Ready and its deletion restores the policy;
- the plugin archive for this machine, unpacked as krew does, runs as `kubectl ssb doctor` and
  gives the verdicts of the tree's `doctor`.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import time
import uuid
from pathlib import Path

import pytest
import yaml

from sunk_sandbox_operator import __version__
from tests.conftest import OPERATOR_NS, OPERATOR_SA, REPO, TEST_ENV, Kube, wait_for
from tests.e2e.test_image import UID, InImage, get
from tests.integration.conftest import ADMIN_TOKEN, make_scheduler

pytestmark = [pytest.mark.e2e, pytest.mark.needs_tool("helm"), pytest.mark.needs_tool("registry"),
              pytest.mark.needs_tool("image")]

NS = "tenant-slurm"
RELEASE = "sunk-sandbox-operator"
ARCH = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}[platform.machine().lower()]
HOST = (sys.platform, ARCH)
# A user's `python3` for the plugin's `#!/usr/bin/env python3`: the venv's base interpreter (none of the
# venv's packages; the plugin is built for its minor).
USER_PYTHON = Path(sys.base_prefix) / "bin" / "python3"


def _helms() -> list:
    """The Helm majors to install with: helm 3 (hack/helm), and helm 4 where hack/helm4 is built
    (devcluster.ensure_helm4, from the branch that adds it: the same test then runs with both)."""
    from sunk_sandbox_devtools import devcluster

    majors = [pytest.param(devcluster.ensure_helm, id="helm3")]
    if hasattr(devcluster, "ensure_helm4"):
        majors.append(pytest.param(devcluster.ensure_helm4, id="helm4", marks=pytest.mark.needs_tool("helm4")))
    return majors


def run(argv: list, **kw) -> subprocess.CompletedProcess:
    done = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=600, **kw)
    assert done.returncode == 0, f"{' '.join(map(str, argv))}: {done.stdout[-2000:]}{done.stderr[-3000:]}"
    return done


# ---------------------------------------------------------------- the release and the registry


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> Path:
    from sunk_sandbox_devtools import release

    out = tmp_path_factory.mktemp("release") / "dist"
    started = time.monotonic()
    built = release.build(out, platforms=(HOST,), pythons=(f"{sys.version_info.major}.{sys.version_info.minor}",))
    print(f"\nrelease {built.version} built in {time.monotonic() - started:.0f}s: "
          + ", ".join(f"{p.name} {p.stat().st_size:,}" for p in built.files))
    yield out
    shutil.rmtree(out, ignore_errors=True)


@pytest.fixture(scope="module")
def sbom(dist) -> dict:
    return json.loads((dist / f"sunk-sandbox-operator-{__version__}.cdx.json").read_text())


@pytest.fixture(scope="module")
def digest(sbom) -> str:
    """The image's manifest digest, as the SBOM records it (its root's hash)."""
    root = sbom["metadata"]["component"]
    (sha,) = [h["content"] for h in root["hashes"] if h["alg"] == "SHA-256"]
    assert root["type"] == "container" and root["purl"].startswith(f"pkg:oci/sunk-sandbox-operator@sha256:{sha}?")
    return f"sha256:{sha}"


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    from sunk_sandbox_devtools.registry import Registry

    work = tmp_path_factory.mktemp("registry")
    started = time.monotonic()
    served = Registry(work)
    print(f"\nregistry on {served.host} in {time.monotonic() - started:.1f}s")
    yield served
    served.stop()
    shutil.rmtree(work, ignore_errors=True)


@pytest.fixture(scope="module")
def published(dist, registry) -> dict[str, str]:
    """The chart and the image pushed as README's Releasing says, to the loopback registry."""
    from sunk_sandbox_devtools import devcluster, image

    image.ensure_tools(tools=("skopeo",))
    pushed = run([devcluster.ensure_helm(), "push", dist / f"{RELEASE}-{__version__}.tgz",
                  f"oci://{registry.host}/charts", "--plain-http"])
    assert f"Pushed: {registry.host}/charts/{RELEASE}:{__version__}" in pushed.stdout + pushed.stderr, pushed
    repository = f"{registry.host}/sunksandbox/sunk-sandbox-operator"
    run(["skopeo", "copy", "--quiet", "--preserve-digests", "--dest-tls-verify=false",
         f"oci-archive:{dist / f'sunk-sandbox-operator-{__version__}.oci.tar'}", f"docker://{repository}:{__version__}"])
    return {"chart": f"oci://{registry.host}/charts/{RELEASE}", "repository": repository}


# ---------------------------------------------------------------- what is in dist/


def test_the_checksums_and_the_manifests_name_every_artifact(dist, digest):
    from sunk_sandbox_devtools.release import sha256

    sums = dict(reversed(line.split("  ")) for line in (dist / "SHA256SUMS").read_text().splitlines())
    assert set(sums) == {p.name for p in dist.iterdir()} - {"SHA256SUMS"}
    assert all(sha256(dist / name) == value for name, value in sums.items())
    manifest = json.loads((dist / "release.json").read_text())
    assert manifest["version"] == __version__ and manifest["image"]["digest"] == digest
    assert {n: f["sha256"] for n, f in manifest["files"].items()} == {n: v for n, v in sums.items() if n != "release.json"}
    assert {n: f["size"] for n, f in manifest["files"].items()} == {n: (dist / n).stat().st_size for n in manifest["files"]}

    with tarfile.open(dist / f"{RELEASE}-{__version__}.tgz") as tar:
        chart = yaml.safe_load(tar.extractfile(f"{RELEASE}/Chart.yaml").read())  # type: ignore[union-attr]
        values = yaml.safe_load(tar.extractfile(f"{RELEASE}/values.yaml").read())  # type: ignore[union-attr]
    assert (chart["version"], chart["appVersion"]) == (__version__, __version__)
    assert values["image"] == {**yaml.safe_load((REPO / "charts" / RELEASE / "values.yaml").read_text())["image"],
                               "digest": digest}, "the released chart pins its image, nothing else differs"

    krew = yaml.safe_load((dist / "ssb.yaml").read_text())
    assert (krew["kind"], krew["metadata"]["name"], krew["spec"]["version"]) == ("Plugin", "ssb", f"v{__version__}")
    (entry,) = krew["spec"]["platforms"]
    archive = f"kubectl-ssb-{__version__}-{HOST[0]}-{HOST[1]}.tar.gz"
    assert entry["selector"]["matchLabels"] == {"os": HOST[0], "arch": HOST[1]}
    assert entry["uri"].endswith(f"/releases/download/v{__version__}/{archive}") and entry["sha256"] == sums[archive]
    with tarfile.open(dist / archive) as tar:
        assert sorted(tar.getnames()) == ["LICENSE", "kubectl-ssb", "kubectl_complete-ssb"]
        assert tar.getmember("kubectl-ssb").mode == tar.getmember("kubectl_complete-ssb").mode == 0o755
    assert entry["bin"] == "kubectl-ssb"
    assert {f["from"] for f in entry["files"]} == {"kubectl-ssb", "kubectl_complete-ssb", "LICENSE"}


def test_the_sbom_lists_what_is_in_the_image(sbom, digest):
    """Every Python distribution of the image's venv and every installed Debian package, no more."""
    from sunk_sandbox_devtools.image import Buildah, ensure_image
    from sunk_sandbox_devtools.sbom import components

    assert (sbom["bomFormat"], sbom["specVersion"]) == ("CycloneDX", "1.6")
    b = Buildah()
    built = ensure_image(b)
    container = b("from", "--pull=never", "--name", f"ssb-sbom-check-{uuid.uuid4().hex[:8]}", built.ref).stdout.strip()
    try:
        dists = b("run", "--isolation", "chroot", container, "--", "/opt/venv/bin/python", "-c",
                  "import importlib.metadata as m, json; print(json.dumps("
                  "sorted([d.metadata['Name'], d.version] for d in m.distributions())))").stdout
        debs = b("run", "--isolation", "chroot", container, "--", "dpkg-query", "-W", "-f",
                 "${db:Status-Status} ${Package} ${Version}\\n").stdout
    finally:
        b("rm", container, check=False)
    listed = components(sbom)
    assert listed["python"] == {(name, version) for name, version in json.loads(dists)}
    assert listed["deb"] == {tuple(line.split()[1:]) for line in debs.splitlines() if line.startswith("installed ")}
    assert "kubernetes" not in {name for name, _ in listed["python"]}, "the image does without the kubernetes client"
    dependencies = {d["ref"]: set(d.get("dependsOn", [])) for d in sbom["dependencies"]}
    assert len(dependencies[sbom["metadata"]["component"]["bom-ref"]]) == len(sbom["components"])
    print(f"\nSBOM of {digest}: {len(listed['python'])} Python distributions, {len(listed['deb'])} Debian packages")


# ---------------------------------------------------------------- installed from the registry


def fields(deployment: dict, pod: str) -> dict[str, str]:
    """The kubelet's values of the downward API fields a container's env refers to."""
    return {"metadata.namespace": deployment["metadata"]["namespace"], "metadata.name": pod,
            "spec.serviceAccountName": deployment["spec"]["template"]["spec"]["serviceAccountName"]}


def container_env(deployment: dict, pod: str) -> dict[str, str]:
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    known, out = fields(deployment, pod), {}
    for var in container.get("env", []):
        if "value" in var:
            out[var["name"]] = var["value"]
        else:
            path = var["valueFrom"]["fieldRef"]["fieldPath"]
            assert path in known, f"{var['name']}: the test does not play the kubelet for {path} yet"
            out[var["name"]] = known[path]
    return out


def doctor_from_the_krew_archive(dist: Path, kube: Kube, work: Path) -> None:
    """`kubectl ssb doctor` with the plugin unpacked as krew does: the tree's verdicts."""
    bindir = work / "krew-bin"
    with tarfile.open(dist / f"kubectl-ssb-{__version__}-{HOST[0]}-{HOST[1]}.tar.gz") as tar:
        tar.extractall(bindir, filter="data")
    env = {"PATH": f"{bindir}:{USER_PYTHON.parent}:/usr/bin:/bin", "HOME": str(work), "PEX_ROOT": str(work / "pex"),
           "KUBECONFIG": str(kube.cluster.kubeconfig)}
    args = [f"{NS}/cpu-sandboxes", "-o", "json", "--allowed-api-url", "http://127.0.0.1:*"]
    plugin = subprocess.run([str(kube.cluster.kubectl), "ssb", "doctor", *args], env=env, capture_output=True,
                            text=True, timeout=300)
    tree = subprocess.run([sys.executable, "-m", "sunk_sandbox_operator", "doctor", *args],
                          env={**env, "PATH": os.environ["PATH"], "PYTHONPATH": str(REPO / "operator")},
                          capture_output=True, text=True, timeout=120)
    assert plugin.returncode == tree.returncode and plugin.returncode in (0, 1), (plugin.stderr, tree.stderr)
    verdicts = [(c["id"], c["ok"]) for c in json.loads(plugin.stdout)["checks"]]
    assert verdicts == [(c["id"], c["ok"]) for c in json.loads(tree.stdout)["checks"]]
    print(f"kubectl ssb doctor from the krew archive: {len(verdicts)} checks, as the tree's")


@pytest.mark.parametrize("helm", _helms())
def test_installed_from_the_registry_it_runs_the_released_image(helm, dist, digest, published, tmp_path):
    from sunk_sandbox_devtools import devcluster
    from sunk_sandbox_devtools.image import Buildah
    from sunk_sandbox_operator.adapters.runnerapi.emulator import EmulatorState, running_emulator

    helm_bin = helm()
    cluster = devcluster.temp_cluster()
    kubelet = Buildah(root=tmp_path / "kubelet-storage", runroot=tmp_path / "kubelet-run")
    operator = None
    try:
        kube = Kube(cluster)
        kube.create_namespace(NS)
        health, metrics = devcluster.free_port(), devcluster.free_port()
        install = run([helm_bin, "--kubeconfig", cluster.kubeconfig, "install", RELEASE, published["chart"],
                       "--version", __version__, "--plain-http", "--namespace", OPERATOR_NS, "--create-namespace",
                       "--set", f"image.repository={published['repository']}",
                       "--set", "tenancy.allowedApiUrls={http://127.0.0.1:*}",
                       "--set", f"healthPort={health}", "--set", f"metrics.port={metrics}"])
        assert "STATUS: deployed" in install.stdout, install.stdout
        made = [d for d in yaml.safe_load_all(run([helm_bin, "--kubeconfig", cluster.kubeconfig, "get", "manifest",
                                                   RELEASE, "-n", OPERATOR_NS]).stdout) if d]
        (deployment,) = [d for d in made if d["kind"] == "Deployment"]
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        assert container["image"] == f"{published['repository']}@{digest}", "the release's image, by the SBOM's digest"

        # The kubelet's pull: the reference as the Deployment names it, into a storage of its own.
        kubelet.runroot.mkdir(parents=True)
        image_id = kubelet("pull", "--quiet", "--tls-verify=false", container["image"]).stdout.strip()
        pulled = kubelet.image(image_id)
        assert pulled is not None and pulled["FromImageDigest"] == digest
        config = pulled["OCIv1"]["config"]
        name = kubelet("from", "--pull=never", "--name", f"ssb-release-{uuid.uuid4().hex[:8]}", image_id).stdout.strip()

        token = cluster.service_account_kubeconfig(OPERATOR_NS, OPERATOR_SA, tmp_path / "operator.kubeconfig")
        os.chown(token, UID, UID)
        os.chmod(token, 0o400)
        env = {**container_env(deployment, "sunk-sandbox-operator-0"), "KUBECONFIG": "/mnt/operator.kubeconfig",
               **{k: v for k, v in TEST_ENV.items() if k != "SSB_ALLOWED_API_URLS"}}
        assert env["SSB_ALLOWED_API_URLS"] == "http://127.0.0.1:*" and env["POD_NAMESPACE"] == OPERATOR_NS
        argv = ["run", "--isolation", "chroot", "--volume", f"{token}:/mnt/operator.kubeconfig:ro"]
        for key, value in env.items():
            argv += ["--env", f"{key}={value}"]
        with running_emulator(EmulatorState(admin_tokens={ADMIN_TOKEN})) as emulator:
            with emulator.state.lock:
                emulator.state.add_runner("runner-7f3a", None)
            operator = InImage(kubelet.argv(*argv, name, "--", *config["Entrypoint"], *container["args"]),
                               tmp_path / "operator.log")
            wait_for(lambda: operator.proc.poll() is None and get(f"http://127.0.0.1:{health}/readyz")[0] == 200, 90,
                     lambda: f"{get(f'http://127.0.0.1:{health}/readyz')}\n{operator.log.read_text()[-3000:]}")
            kube.core.create_namespaced_secret(NS, {"metadata": {"name": "coreweave-api"},
                                                    "stringData": {"token": ADMIN_TOKEN}})
            make_scheduler(kube, NS)
            binding = yaml.safe_load((REPO / "manifests" / "examples" / "binding.yaml").read_text())
            binding["spec"]["runner"]["apiURL"] = emulator.url
            kube.apply(binding)
            out = kube.kubectl("wait", "--for=condition=Ready", f"ssb/{binding['metadata']['name']}", "-n", NS,
                               "--timeout=90s", check=False)
            assert out.returncode == 0, (out.stderr, json.dumps(kube.binding(NS, "cpu-sandboxes").get("status")),
                                         operator.log.read_text()[-3000:])
            assert emulator.state.runners["runner-7f3a"]["policy"]["base"]["spec"]["schedulerName"] == "slurm-scheduler"
            print(f"\n{container['image']} from the registry: binding Ready")

            doctor_from_the_krew_archive(dist, kube, tmp_path)

            kube.kubectl("delete", "ssb", "-n", NS, "cpu-sandboxes", "--timeout=60s")
            assert emulator.state.runners["runner-7f3a"]["policy"] is None, "restored to the runner's (none)"
        assert operator.stop() == 0, f"SIGTERM: not a clean exit:\n{operator.log.read_text()[-3000:]}"
    finally:
        if operator is not None:
            operator.stop()
        kubelet("rm", "--all", check=False)
        cluster.stop()
        shutil.rmtree(tmp_path / "kubelet-storage", ignore_errors=True)
