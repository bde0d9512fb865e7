"""A real local control plane (etcd + kube-apiserver) for tests and the demo.

No controller-manager, scheduler or kubelet: tests create Pod objects and set their status.
Binaries are built from the pinned Go wrapper modules in hack/ (envtest's approach) and cached
per version; `$KUBEBUILDER_ASSETS` (a directory holding etcd, kube-apiserver, kubectl) wins.
"""

from __future__ import annotations

import base64
import datetime as dt
import fcntl
import json
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

REPO_ROOT = Path(__file__).resolve().parents[2]
HACK = REPO_ROOT / "hack"
CACHE_ROOT = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "sunk-sandbox-operator" / "k8s"
STATE_DIR = REPO_ROOT / ".devcluster"
BINARIES = ("etcd", "kube-apiserver", "kubectl")
HELM = ("helm",)  # built the same way, cached in its own directory (only the Helm tests need it)
OLDEST_APISERVER = ("kube-apiserver",)  # the oldest minor the chart accepts (etcd and kubectl: the current ones)
PROMTOOL = ("promtool",)  # likewise (the alert-rule tests)
ARGOCD_HEALTH = ("argocd-health",)  # likewise (Argo CD's own health engine on the shipped health.lua)
CLI = "PYTHONPATH=operator .venv/bin/python -m sunk_sandbox_devtools devcluster"  # from the repository root


def _pinned(module_dir: Path, module: str) -> str:
    text = (module_dir / "go.mod").read_text()
    match = re.search(rf"^\s*(?:require\s+)?{re.escape(module)}\s+(v\S+)", text, re.M)
    if not match:
        raise RuntimeError(f"{module} is not pinned in {module_dir / 'go.mod'}")
    return match.group(1)


def versions() -> tuple[str, str]:
    """(Kubernetes, etcd) versions pinned by the wrapper modules."""
    return _pinned(HACK / "kube", "k8s.io/kubernetes"), _pinned(HACK / "etcd", "go.etcd.io/etcd/server/v3")


def helm_version() -> str:
    return _pinned(HACK / "helm", "helm.sh/helm/v3")


def helm4_version() -> str:
    return _pinned(HACK / "helm4", "helm.sh/helm/v4")


def oldest_kube_version() -> str:
    """The Kubernetes of hack/kube-oldest: the oldest minor Chart.yaml's kubeVersion accepts."""
    return _pinned(HACK / "kube-oldest", "k8s.io/kubernetes")


def promtool_version() -> str:
    return _pinned(HACK / "promtool", "github.com/prometheus/prometheus")


def argocd_version() -> str:
    return _pinned(HACK / "argocd", "github.com/argoproj/argo-cd/v3")


def _log(msg: str) -> None:
    print(f"[devcluster] {msg}", file=sys.stderr, flush=True)


def _go_build(module: str, out: Path, *packages: str, ldflags: str = "-s -w", name: str | None = None,
              tags: str = "") -> None:
    """`go build` of `packages` from the pinned wrapper module hack/<module> into `out` (static, trimmed);
    one package is named `name` (default: its last path segment)."""
    env = {**os.environ, "CGO_ENABLED": "0", "GOFLAGS": "-mod=mod"}
    target = str(out / (name or packages[0].rsplit("/", 1)[-1])) if len(packages) == 1 else str(out) + "/"
    subprocess.run(["go", "build", "-trimpath", "-ldflags", ldflags, *(["-tags", tags] if tags else []), "-o", target,
                    *packages],
                   cwd=HACK / module, env=env, check=True)


def _kube_ldflags(kube: str) -> str:
    """The version the binaries report (`/version`: what Helm checks a chart's kubeVersion against)."""
    minor = kube.lstrip("v").split(".")
    return (f"-s -w -X k8s.io/component-base/version.gitVersion={kube} "
            f"-X k8s.io/component-base/version.gitMajor={minor[0]} -X k8s.io/component-base/version.gitMinor={minor[1]}")


def build_binaries(out: Path) -> None:
    """Build kube-apiserver, kubectl and etcd with `go build` into the directory `out` (cold: minutes)."""
    kube, etcd = versions()
    started = time.monotonic()
    _log(f"building kube-apiserver and kubectl {kube} (first time only, several minutes)")
    _go_build("kube", out, "k8s.io/kubernetes/cmd/kube-apiserver", "k8s.io/kubernetes/cmd/kubectl",
              ldflags=_kube_ldflags(kube))
    _log(f"building etcd {etcd}")
    _go_build("etcd", out, "go.etcd.io/etcd/server/v3", name="etcd")
    _log(f"built in {time.monotonic() - started:.0f}s")


def _helm3_kube_minor() -> str:
    """The Kubernetes minor of hack/helm's client-go (v0.37.x: 1.37)."""
    return "1." + _pinned(HACK / "helm", "k8s.io/client-go").split(".")[1]


def build_helm(out: Path) -> None:
    """Build helm from the pinned wrapper module in hack/helm (cold: about a minute)."""
    version = helm_version()
    major, minor = _helm3_kube_minor().split(".")
    started = time.monotonic()
    _log(f"building helm {version} (first time only)")
    # The Kubernetes version `helm template` and `lint` assume (Chart.yaml kubeVersion is checked
    # against it): Helm 3's Makefile sets it from client-go's, else it is 1.20. Helm 4 reads it from
    # the build info.
    kube = " ".join(f"-X helm.sh/helm/v3/pkg/{pkg}.k8sVersionMajor={major} "
                    f"-X helm.sh/helm/v3/pkg/{pkg}.k8sVersionMinor={minor}" for pkg in ("chartutil", "lint/rules"))
    _go_build("helm", out, "helm.sh/helm/v3/cmd/helm",
              ldflags=f"-s -w -X helm.sh/helm/v3/internal/version.version={version} {kube}")
    _log(f"built in {time.monotonic() - started:.0f}s")


def build_helm4(out: Path) -> None:
    """Build helm 4 from the pinned wrapper module in hack/helm4, beside helm 3 (its own cache directory)."""
    version = helm4_version()
    started = time.monotonic()
    _log(f"building helm {version} (first time only)")
    _go_build("helm4", out, "helm.sh/helm/v4/cmd/helm",
              ldflags=f"-s -w -X helm.sh/helm/v4/internal/version.version={version}")
    _log(f"built in {time.monotonic() - started:.0f}s")


def build_oldest_apiserver(out: Path) -> None:
    """Build the kube-apiserver of hack/kube-oldest (no k8s.io package in common with hack/kube: a full
    compile, minutes)."""
    kube = oldest_kube_version()
    started = time.monotonic()
    _log(f"building kube-apiserver {kube}, the oldest minor the chart accepts (first time only, minutes)")
    _go_build("kube-oldest", out, "k8s.io/kubernetes/cmd/kube-apiserver", ldflags=_kube_ldflags(kube))
    _log(f"built in {time.monotonic() - started:.0f}s")


def build_promtool(out: Path) -> None:
    """Build promtool from the pinned wrapper module in hack/promtool (cold: a few minutes)."""
    started = time.monotonic()
    _log(f"building promtool (github.com/prometheus/prometheus {promtool_version()}; first time only)")
    # remove_all_sd: without the service-discovery plugins (cloud SDKs, client-go), which rule tests never use.
    _go_build("promtool", out, "github.com/prometheus/prometheus/cmd/promtool", tags="remove_all_sd")
    _log(f"built in {time.monotonic() - started:.0f}s")


def build_argocd_health(out: Path) -> None:
    """Build argocd-health (hack/argocd/main.go: the call path of `argocd admin settings
    resource-overrides health`, Argo CD's util/lua and gitops-engine) from the pinned wrapper module
    (cold, empty Go caches: about 5.5 min on 2 cores; it compiles much of Argo CD's API and client-go)."""
    version = argocd_version()
    env = {**os.environ, "CGO_ENABLED": "0", "GOFLAGS": "-mod=mod"}
    started = time.monotonic()
    _log(f"building argocd-health (github.com/argoproj/argo-cd/v3 {version}; first time only, minutes)")
    subprocess.run(
        ["go", "build", "-trimpath", "-ldflags", "-s -w", "-o", str(out / "argocd-health"), "."],
        cwd=HACK / "argocd", env=env, check=True,
    )
    _log(f"built in {time.monotonic() - started:.0f}s")


def _complete(directory: Path, binaries: tuple[str, ...] = BINARIES) -> bool:
    return all((directory / b).is_file() for b in binaries)


def ensure_built(dest: Path, build: Callable[[Path], None] | None = None,
                 binaries: tuple[str, ...] = BINARIES) -> Path:
    """`dest` holding every binary, built by `build(tmp)` (default: `build_binaries`) at most once
    across concurrent runs.

    Under an exclusive `flock` on `<dest>.lock` (next to `dest`, in the cache dir), the build goes
    into a fresh `tempfile.mkdtemp` directory beside `dest`, which is then renamed into place: a
    reader sees no `dest` or a complete one, and a run that waited on the lock finds the binaries
    and builds nothing. A failed or interrupted build leaves no partial `dest`.
    """
    if _complete(dest, binaries):
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    with open(dest.parent / f"{dest.name}.lock", "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            _log(f"waiting for another build of {dest.name} (lock {lock.name})")
            fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if _complete(dest, binaries):  # built by the run we waited for
                return dest
            # We hold the lock: temp dirs left by runs that were killed mid-build are stale.
            for stale in dest.parent.glob(f".{dest.name}.*.tmp"):
                shutil.rmtree(stale, ignore_errors=True)
            tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent))
            try:
                (build or build_binaries)(tmp)
                missing = [b for b in binaries if not (tmp / b).is_file()]
                if missing:
                    raise RuntimeError(f"the build produced no {', '.join(missing)}")
                if dest.exists():  # an incomplete directory (older layout, manual edits): replace it
                    shutil.rmtree(dest)
                os.chmod(tmp, 0o755)  # mkdtemp's 0700 is for the build only
                os.rename(tmp, dest)  # atomic: same directory, `dest` absent
            except BaseException:
                shutil.rmtree(tmp, ignore_errors=True)
                raise
            _log(f"binaries in {dest}")
            return dest
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def ensure_binaries() -> Path:
    assets = os.environ.get("KUBEBUILDER_ASSETS")
    if assets:
        path = Path(assets)
        missing = [b for b in BINARIES if not (path / b).exists()]
        if missing:
            raise RuntimeError(f"KUBEBUILDER_ASSETS={assets} lacks {', '.join(missing)}")
        return path
    kube, etcd = versions()
    return ensure_built(CACHE_ROOT / f"kube-{kube}_etcd-{etcd}")


def helm_path() -> Path:
    """Where helm is (or will be): $HELM_BIN when set, else its cache directory's binary."""
    # The Kubernetes version it defaults to is in the name: binaries built before it was set are not reused.
    return Path(os.environ.get("HELM_BIN")
                or CACHE_ROOT / f"helm-{helm_version()}_kube-{_helm3_kube_minor()}" / "helm")


def helm4_path() -> Path:
    return Path(os.environ.get("HELM4_BIN") or CACHE_ROOT / f"helm-{helm4_version()}" / "helm")


def oldest_apiserver_path() -> Path:
    return Path(os.environ.get("OLDEST_APISERVER_BIN")
                or CACHE_ROOT / f"kube-apiserver-{oldest_kube_version()}" / "kube-apiserver")


def promtool_path() -> Path:
    return Path(os.environ.get("PROMTOOL_BIN") or CACHE_ROOT / f"promtool-{promtool_version()}" / "promtool")


def argocd_health_path() -> Path:
    return Path(os.environ.get("ARGOCD_HEALTH_BIN") or CACHE_ROOT / f"argocd-{argocd_version()}" / "argocd-health")


def _ensure_tool(path: Path, env: str, build: Callable[[Path], None], binaries: tuple[str, ...]) -> Path:
    """A tool's binary: $`env` when set, else built once per pinned version under `ensure_built`'s lock."""
    return path if os.environ.get(env) else ensure_built(path.parent, build, binaries) / path.name


def ensure_helm() -> Path:
    return _ensure_tool(helm_path(), "HELM_BIN", build_helm, HELM)


def ensure_helm4() -> Path:
    return _ensure_tool(helm4_path(), "HELM4_BIN", build_helm4, HELM)


def ensure_oldest_apiserver() -> Path:
    return _ensure_tool(oldest_apiserver_path(), "OLDEST_APISERVER_BIN", build_oldest_apiserver, OLDEST_APISERVER)


def ensure_promtool() -> Path:
    return _ensure_tool(promtool_path(), "PROMTOOL_BIN", build_promtool, PROMTOOL)


def ensure_argocd_health() -> Path:
    return _ensure_tool(argocd_health_path(), "ARGOCD_HEALTH_BIN", build_argocd_health, ARGOCD_HEALTH)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ------------------------------------------------------------------ certificates


def _write_certs(d: Path) -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec, rsa
    from cryptography.x509.oid import NameOID
    import ipaddress

    now = dt.datetime.now(dt.timezone.utc)

    def key():
        return ec.generate_private_key(ec.SECP256R1())

    def pem_key(k) -> bytes:
        return k.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())

    def name(cn: str, org: str | None = None):
        attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
        if org:
            attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
        return x509.Name(attrs)

    def cert(subject, pub, issuer, issuer_key, *, ca=False, server=False, client=False):
        b = (
            x509.CertificateBuilder()
            .subject_name(subject).issuer_name(issuer).public_key(pub)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )
        if ca:
            b = b.add_extension(x509.KeyUsage(True, False, False, False, False, True, True, False, False), critical=True)
        else:
            usages = ([x509.ExtendedKeyUsageOID.SERVER_AUTH] if server else []) + (
                [x509.ExtendedKeyUsageOID.CLIENT_AUTH] if client else [])
            b = b.add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        if server:
            b = b.add_extension(x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        return b.sign(issuer_key, hashes.SHA256())

    def pem(c) -> bytes:
        return c.public_bytes(serialization.Encoding.PEM)

    serving_ca_key, client_ca_key = key(), key()
    serving_ca = cert(name("devcluster-serving-ca"), serving_ca_key.public_key(), name("devcluster-serving-ca"), serving_ca_key, ca=True)
    client_ca = cert(name("devcluster-client-ca"), client_ca_key.public_key(), name("devcluster-client-ca"), client_ca_key, ca=True)
    serving_key, admin_key = key(), key()
    serving = cert(name("kube-apiserver"), serving_key.public_key(), serving_ca.subject, serving_ca_key, server=True)
    admin = cert(name("admin", "system:masters"), admin_key.public_key(), client_ca.subject, client_ca_key, client=True)
    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)

    files = {
        "serving-ca.crt": pem(serving_ca),
        "client-ca.crt": pem(client_ca),
        "apiserver.crt": pem(serving),
        "apiserver.key": pem_key(serving_key),
        "admin.crt": pem(admin),
        "admin.key": pem_key(admin_key),
        "sa.key": pem_key(sa_key),
        "sa.pub": sa_key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo),
    }
    for fname, data in files.items():
        (d / fname).write_bytes(data)
        os.chmod(d / fname, 0o600)


def kubeconfig_text(server: str, ca_pem: bytes, *, cert_pem: bytes | None = None, key_pem: bytes | None = None,
                    token: str | None = None, user: str = "admin", namespace: str | None = None) -> str:
    """A kubeconfig for one user (client certificate or bearer token)."""
    b64 = lambda b: base64.b64encode(b).decode()  # noqa: E731
    creds: dict = {"token": token} if token else {
        "client-certificate-data": b64(cert_pem), "client-key-data": b64(key_pem)}
    ctx: dict = {"cluster": "devcluster", "user": user}
    if namespace:
        ctx["namespace"] = namespace
    cfg = {
        "apiVersion": "v1", "kind": "Config", "current-context": "devcluster",
        "clusters": [{"name": "devcluster", "cluster": {"server": server, "certificate-authority-data": b64(ca_pem)}}],
        "users": [{"name": user, "user": creds}],
        "contexts": [{"name": "devcluster", "context": ctx}],
    }
    return json.dumps(cfg, indent=2)


# ------------------------------------------------------------------ the cluster


@dataclass
class DevCluster:
    """etcd + kube-apiserver on free loopback ports, state in `workdir`."""

    workdir: Path
    bindir: Path = field(default_factory=ensure_binaries)
    apiserver: Path | None = None  # another kube-apiserver (an older minor) with bindir's etcd and kubectl
    etcd_port: int = 0
    api_port: int = 0
    pids: dict[str, int] = field(default_factory=dict)
    _procs: dict[str, subprocess.Popen] = field(default_factory=dict)
    # Users whose every request the API server records (audit, Metadata level: verb, resource,
    # namespace, name) in `audit_log`; empty: no audit.
    audited_users: tuple[str, ...] = ()

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.api_port}"

    @property
    def kubeconfig(self) -> Path:
        return self.workdir / "admin.kubeconfig"

    @property
    def kubectl(self) -> Path:
        return self.bindir / "kubectl"

    @property
    def ca_file(self) -> Path:
        return self.workdir / "serving-ca.crt"

    def start(self, *, detach: bool = False, timeout: float = 90.0) -> "DevCluster":
        started = time.monotonic()
        self.workdir.mkdir(parents=True, exist_ok=True)
        _write_certs(self.workdir)
        self.etcd_port, peer = free_port(), free_port()
        self.api_port = free_port()
        etcd_url = f"http://127.0.0.1:{self.etcd_port}"
        self._spawn("etcd", [
            str(self.bindir / "etcd"), "--data-dir", str(self.workdir / "etcd"),
            "--listen-client-urls", etcd_url, "--advertise-client-urls", etcd_url,
            "--listen-peer-urls", f"http://127.0.0.1:{peer}", "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
            "--initial-cluster", f"default=http://127.0.0.1:{peer}",
            "--unsafe-no-fsync", "--quota-backend-bytes", str(4 * 1024**3), "--log-level", "warn",
        ], detach)
        d = self.workdir
        self._spawn("kube-apiserver", [
            str(self.apiserver or self.bindir / "kube-apiserver"), f"--etcd-servers={etcd_url}", f"--cert-dir={d}",
            f"--tls-cert-file={d / 'apiserver.crt'}", f"--tls-private-key-file={d / 'apiserver.key'}",
            f"--secure-port={self.api_port}", "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
            "--service-cluster-ip-range=10.0.0.0/24", "--allow-privileged=true",
            "--disable-admission-plugins=ServiceAccount", "--authorization-mode=RBAC",
            f"--service-account-issuer={self.server}/", f"--service-account-key-file={d / 'sa.pub'}",
            f"--service-account-signing-key-file={d / 'sa.key'}", f"--client-ca-file={d / 'client-ca.crt'}",
            "--api-audiences=https://kubernetes.default.svc", "--max-requests-inflight=2000",
            "--max-mutating-requests-inflight=1000", "--event-ttl=1h", "-v=0",
            "--endpoint-reconciler-type=none",  # loopback advertise address: no kubernetes Endpoints
            *self._audit_flags(),
        ], detach)
        self.kubeconfig.write_text(kubeconfig_text(
            self.server, (d / "serving-ca.crt").read_bytes(),
            cert_pem=(d / "admin.crt").read_bytes(), key_pem=(d / "admin.key").read_bytes()))
        self._wait_ready(timeout)
        (d / "state.json").write_text(json.dumps(
            {"pids": self.pids, "server": self.server, "kubeconfig": str(self.kubeconfig), "bindir": str(self.bindir)}))
        _log(f"control plane ready at {self.server} in {time.monotonic() - started:.1f}s")
        return self

    @property
    def audit_log(self) -> Path:
        return self.workdir / "audit.log"

    def _audit_flags(self) -> list[str]:
        if not self.audited_users:
            return []
        policy = self.workdir / "audit-policy.json"
        policy.write_text(json.dumps({"apiVersion": "audit.k8s.io/v1", "kind": "Policy", "omitStages": ["RequestReceived"],
                                      "rules": [{"level": "Metadata", "users": list(self.audited_users)},
                                                {"level": "None"}]}))
        return [f"--audit-policy-file={policy}", f"--audit-log-path={self.audit_log}", "--audit-log-mode=blocking"]

    def audit_events(self, user: str) -> list[dict]:
        """The requests `user` made (one record each, in order), as the API server audited them."""
        if not self.audit_log.exists():
            return []
        events = [json.loads(line) for line in self.audit_log.read_text().splitlines() if line.strip()]
        return [e for e in events if (e.get("user") or {}).get("username") == user]

    def _spawn(self, name: str, argv: list[str], detach: bool) -> None:
        log = open(self.workdir / f"{name}.log", "ab")
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
        log.close()
        self.pids[name] = proc.pid
        if not detach:
            self._procs[name] = proc

    def _wait_ready(self, timeout: float) -> None:
        ctx = ssl.create_default_context(cafile=str(self.ca_file))
        ctx.load_cert_chain(str(self.workdir / "admin.crt"), str(self.workdir / "admin.key"))
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            for name, proc in self._procs.items():
                if proc.poll() is not None:
                    tail = (self.workdir / f"{name}.log").read_text(errors="replace")[-3000:]
                    self.stop()
                    raise RuntimeError(f"{name} exited with {proc.returncode}:\n{tail}")
            try:
                with urllib.request.urlopen(f"{self.server}/readyz", context=ctx, timeout=2) as resp:
                    if resp.status == 200:
                        return
            except Exception as exc:  # not up yet
                last = str(exc)
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"kube-apiserver not ready after {timeout}s: {last}")

    def stop(self, timeout: float = 10.0) -> None:
        stop_pids(self.pids, timeout)
        self._procs.clear()

    def kubectl_run(self, *args: str, kubeconfig: Path | None = None, input: str | None = None,
                    check: bool = True) -> subprocess.CompletedProcess:
        out = subprocess.run(
            [str(self.kubectl), f"--kubeconfig={kubeconfig or self.kubeconfig}", *args],
            input=input, capture_output=True, text=True, timeout=120)
        if check and out.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)} failed ({out.returncode}): {out.stderr.strip()}")
        return out


    def service_account_kubeconfig(self, namespace: str, sa: str, path: Path) -> Path:
        """A kubeconfig with a real TokenRequest token of the ServiceAccount (what a pod would mount)."""
        token = self.kubectl_run("create", "token", sa, "-n", namespace, "--duration=24h",
                                 "--audience=https://kubernetes.default.svc").stdout.strip()
        path.write_text(kubeconfig_text(self.server, self.ca_file.read_bytes(), token=token, user=sa))
        os.chmod(path, 0o600)
        return path


class OperatorProcess:
    """`sunk-sandbox-operator run` as a subprocess with its own kubeconfig (as in production)."""

    def __init__(self, kubeconfig: Path, log_path: Path, env: dict[str, str] | None = None,
                 args: tuple[str, ...] = (), timeout: float = 60.0, verbose: bool = True) -> None:
        self.metrics_port = free_port()
        self.liveness_port = free_port()
        self.log_path = log_path
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
        # The operator of this source tree, whichever tree the venv's editable install points at.
        path = [str(REPO_ROOT / "operator"), *filter(None, [full_env.get("PYTHONPATH")])]
        full_env.update({"KUBECONFIG": str(kubeconfig), "PYTHONPATH": os.pathsep.join(path), **(env or {})})
        self._log = open(log_path, "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "sunk_sandbox_operator", "run", *(["--verbose"] if verbose else []),
             f"--metrics-port={self.metrics_port}",
             f"--liveness=http://127.0.0.1:{self.liveness_port}/healthz", *args],
            stdout=self._log, stderr=subprocess.STDOUT, env=full_env, start_new_session=True)
        self._wait_alive(timeout)

    def _wait_alive(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"operator exited {self.proc.returncode}:\n{self.logs()[-4000:]}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.liveness_port}/healthz", timeout=1) as r:
                    if r.status == 200:
                        return
            except Exception:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"operator not alive after {timeout}s:\n{self.logs()[-4000:]}")

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace")

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as r:
            return r.read().decode()

    def rss_kib(self) -> int | None:
        try:
            for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        except OSError:
            return None
        return None

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if not self._log.closed:
            self._log.close()


def stop_pids(pids: dict[str, int], timeout: float = 10.0) -> None:
    """SIGTERM the apiserver before etcd, then SIGKILL whatever outlives the timeout."""
    for name in ("kube-apiserver", "etcd"):
        pid = pids.get(name)
        if pid is None:
            continue
        try:
            os.killpg(pid, signal.SIGTERM)
        except ProcessLookupError:
            continue
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
                if done:
                    break
            except ChildProcessError:  # not our child (detached `up`): poll for existence
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    break
            time.sleep(0.1)
        else:
            try:
                os.killpg(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass


# ------------------------------------------------------------------ CLI


def up(workdir: Path = STATE_DIR, apiserver: Path | None = None) -> DevCluster:
    if (workdir / "state.json").exists():
        down(workdir)
    shutil.rmtree(workdir, ignore_errors=True)
    return DevCluster(workdir, apiserver=apiserver).start(detach=True)


def down(workdir: Path = STATE_DIR) -> bool:
    state_file = workdir / "state.json"
    if not state_file.exists():
        return False
    stop_pids(json.loads(state_file.read_text())["pids"])
    state_file.unlink()
    return True


def env_lines(workdir: Path = STATE_DIR) -> str:
    state = json.loads((workdir / "state.json").read_text())
    return f"export KUBECONFIG={state['kubeconfig']}\nexport PATH={state['bindir']}:$PATH\n"


def main(argv: list[str]) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m sunk_sandbox_devtools devcluster",
                                     description="Local etcd + kube-apiserver for tests and the demo.")
    parser.add_argument("action", choices=["up", "down", "env", "build", "helm", "helm4", "oldest", "promtool",
                                           "argocd-health"])
    parser.add_argument("--dir", type=Path, default=STATE_DIR, help="state directory (default: .devcluster/)")
    parser.add_argument("--oldest", action="store_true",
                        help="up: the kube-apiserver of the oldest minor the chart accepts (hack/kube-oldest)")
    args = parser.parse_args(argv)
    if args.action == "build":
        print(ensure_binaries())
    elif args.action == "helm":
        print(ensure_helm())
    elif args.action == "helm4":
        print(ensure_helm4())
    elif args.action == "oldest":
        print(ensure_oldest_apiserver())
    elif args.action == "promtool":
        print(ensure_promtool())
    elif args.action == "argocd-health":
        print(ensure_argocd_health())
    elif args.action == "up":
        cluster = up(args.dir, ensure_oldest_apiserver() if args.oldest else None)
        print(f"control plane at {cluster.server}; run: eval \"$({CLI} env)\"")
    elif args.action == "down":
        print("stopped" if down(args.dir) else "not running")
    else:
        try:
            sys.stdout.write(env_lines(args.dir))
        except FileNotFoundError:
            print(f"devcluster is not running: {CLI} up", file=sys.stderr)
            return 1
    return 0


def temp_cluster(apiserver: Path | None = None, audited_users: tuple[str, ...] = ()) -> DevCluster:
    """A throwaway cluster in a temp dir (pytest session fixture); `apiserver`: another kube-apiserver
    binary; `audited_users`: see DevCluster."""
    return DevCluster(Path(tempfile.mkdtemp(prefix="ssb-devcluster-")), apiserver=apiserver,
                      audited_users=audited_users).start()
