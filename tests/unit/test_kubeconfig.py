"""adapters/kubeconfig.py: in-cluster and kubeconfig credentials read without the kubernetes client
where the entry is simple, the same answers as the client's loader, and the client's loader for
everything else; the operator's `run` never imports the client."""

from __future__ import annotations

import base64
import datetime as dt
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from sunk_sandbox_operator.adapters import kubeconfig
from sunk_sandbox_operator.adapters.kubeconfig import Access, ConfigError, from_kubeconfig, in_cluster

ROOT = Path(__file__).resolve().parents[2]


def self_signed(tmp: Path, name: str = "ssb-test") -> tuple[bytes, bytes]:
    """A PEM certificate and key (cryptography, a test dependency)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = dt.datetime.now(dt.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
            .serial_number(1).not_valid_before(now).not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    return (cert.public_bytes(serialization.Encoding.PEM),
            key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                              serialization.NoEncryption()))


def doc(cluster: dict, user: dict | None = None) -> dict:
    return {"apiVersion": "v1", "kind": "Config", "current-context": "c",
            "contexts": [{"name": "other", "context": {"cluster": "x", "user": "x"}},
                         {"name": "c", "context": {"cluster": "k", "user": "u", "namespace": "ns"}}],
            "clusters": [{"name": "k", "cluster": cluster}],
            "users": [{"name": "u", "user": user if user is not None else {}}]}


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def test_a_static_token_and_ca_data(tmp_path: Path) -> None:
    cert, _ = self_signed(tmp_path)
    access = from_kubeconfig(doc({"server": "https://10.0.0.1:6443/", "certificate-authority-data": b64(cert)},
                                 {"token": "Tok3nZ"}), tmp_path)
    assert access is not None
    assert access.server == "https://10.0.0.1:6443" and access.authorization() == "Bearer Tok3nZ"
    assert "Tok3nZ" not in repr(access)  # the token is behind a function
    assert access.ca_data == cert.decode() and access.ca_file is None and not access.insecure
    ctx = access.ssl_context()
    assert not isinstance(ctx, bool) and ctx.get_ca_certs()[0]["subject"] == ((("commonName", "ssb-test"),),)


def test_a_token_file_relative_to_the_kubeconfig_is_read_again_when_rotated(tmp_path: Path) -> None:
    (tmp_path / "tok").write_text("one\n")
    access = from_kubeconfig(doc({"server": "https://k", "insecure-skip-tls-verify": True}, {"tokenFile": "tok"}),
                             tmp_path)
    assert access is not None and access.insecure and access.ssl_context() is False
    assert access.authorization() == "Bearer one"
    (tmp_path / "tok").write_text("two")
    assert access.authorization() == "Bearer two"


def test_client_certificates_from_data_and_from_files(tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path)
    access = from_kubeconfig(doc({"server": "https://k"},
                                 {"client-certificate-data": b64(cert), "client-key-data": b64(key)}), tmp_path)
    assert access is not None and access.cert_data == cert and access.key_data == key
    assert access.authorization() is None
    assert "PRIVATE KEY" not in repr(access) and b64(key) not in repr(access)  # never in a log line
    assert not isinstance(access.ssl_context(), bool)  # the chain loads (through a private temporary directory)
    (tmp_path / "c.crt").write_bytes(cert)
    (tmp_path / "c.key").write_bytes(key)
    (tmp_path / "ca.crt").write_bytes(cert)
    access = from_kubeconfig(doc({"server": "https://k", "certificate-authority": "ca.crt"},
                                 {"client-certificate": "c.crt", "client-key": "c.key"}), tmp_path)
    assert access is not None and access.cert_file == str(tmp_path / "c.crt")
    assert access.key_file == str(tmp_path / "c.key") and access.ca_file == str(tmp_path / "ca.crt")
    assert not isinstance(access.ssl_context(), bool)


@pytest.mark.parametrize("cluster, user", [
    ({"server": "https://k"}, {"exec": {"command": "x", "apiVersion": "client.authentication.k8s.io/v1"}}),
    ({"server": "https://k"}, {"auth-provider": {"name": "oidc"}}),
    ({"server": "https://k"}, {"username": "u", "password": "p"}),
    ({"server": "https://k"}, {"token": "a", "tokenFile": "b"}),
    ({"server": "https://k"}, {"client-certificate-data": "eA=="}),  # a certificate without its key
    ({"server": "https://k", "proxy-url": "http://proxy:3128"}, {"token": "a"}),
    ({"server": "https://k", "tls-server-name": "kubernetes"}, {"token": "a"}),
    ({}, {"token": "a"}),  # no server: the client's loader says so
])
def test_what_is_not_read_here_goes_to_the_client_loader(tmp_path: Path, cluster: dict, user: dict) -> None:
    assert from_kubeconfig(doc(cluster, user), tmp_path) is None


def test_no_current_context_goes_to_the_client_loader(tmp_path: Path) -> None:
    d = doc({"server": "https://k"}, {"token": "a"})
    assert from_kubeconfig({**d, "current-context": "missing"}, tmp_path) is None
    assert from_kubeconfig({k: v for k, v in d.items() if k != "current-context"}, tmp_path) is None
    with pytest.raises(ConfigError, match="not a mapping"):
        from_kubeconfig(["a"], tmp_path)


def test_errors_name_the_file_or_field_and_never_the_token(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="certificate-authority-data is not base64"):
        from_kubeconfig(doc({"server": "https://k", "certificate-authority-data": "!!"}, {"token": "s3cret"}), tmp_path)
    with pytest.raises(ConfigError, match=r"token file .*missing"):
        from_kubeconfig(doc({"server": "https://k"}, {"tokenFile": "missing"}), tmp_path)
    (tmp_path / "empty").write_text("  \n")
    with pytest.raises(ConfigError, match="is empty"):
        from_kubeconfig(doc({"server": "https://k"}, {"tokenFile": "empty"}), tmp_path)
    with pytest.raises(ConfigError, match=str(tmp_path / "nope")):
        kubeconfig.load({"KUBECONFIG": str(tmp_path / "nope")})
    (tmp_path / "bad").write_text("a: [")
    with pytest.raises(ConfigError, match="is not YAML"):
        kubeconfig.load({"KUBECONFIG": str(tmp_path / "bad")})


def test_in_cluster_reads_the_mounted_service_account_and_rotates_its_token(tmp_path: Path) -> None:
    cert, _ = self_signed(tmp_path)
    (tmp_path / "ca.crt").write_bytes(cert)
    (tmp_path / "token").write_text("first")
    access = in_cluster({"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}, tmp_path)
    assert access.server == "https://10.96.0.1:443" and access.ca_file == str(tmp_path / "ca.crt")
    assert access.authorization() == "Bearer first"
    (tmp_path / "token").write_text("second")  # the kubelet rotates the projected token
    assert access.authorization() == "Bearer second"
    v6 = in_cluster({"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443"}, tmp_path)
    assert v6.server == "https://[fd00::1]:443"
    with pytest.raises(ConfigError, match="KUBERNETES_SERVICE_PORT"):
        in_cluster({"KUBERNETES_SERVICE_HOST": "10.96.0.1"}, tmp_path)
    (tmp_path / "token").write_text("")
    with pytest.raises(ConfigError, match="is empty"):
        in_cluster({"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}, tmp_path)
    with pytest.raises(ConfigError, match="no CA file"):
        in_cluster({"KUBERNETES_SERVICE_HOST": "h", "KUBERNETES_SERVICE_PORT": "1"}, tmp_path / "absent")


def _client_view(path: Path) -> tuple[str, bool, str | None, bytes | None, bytes | None]:
    """What the kubernetes client's loader makes of a kubeconfig: host, verify, Authorization, CA and
    client certificate contents."""
    import kubernetes.config
    from kubernetes.client.configuration import Configuration

    cfg = Configuration()
    kubernetes.config.load_kube_config(config_file=str(path), client_configuration=cfg)
    auth = cfg.auth_settings().get("BearerToken")
    read = lambda p: Path(p).read_bytes() if p else None  # noqa: E731
    return cfg.host, cfg.verify_ssl, auth["value"] if auth else None, read(cfg.ssl_ca_cert), read(cfg.cert_file)


@pytest.mark.parametrize("variant", ["token", "tokenFile", "certs-data", "certs-files", "insecure", "nothing"])
def test_the_same_answers_as_the_kubernetes_client_loader(tmp_path: Path, variant: str) -> None:
    cert, key = self_signed(tmp_path)
    for name, data in (("ca.crt", cert), ("c.crt", cert), ("c.key", key)):
        (tmp_path / name).write_bytes(data)
    (tmp_path / "tok").write_text("from-file")
    cluster: dict = {"server": "https://127.0.0.1:6443", "certificate-authority-data": b64(cert)}
    user: dict = {
        "token": {"token": "static"}, "tokenFile": {"tokenFile": "tok"},
        "certs-data": {"client-certificate-data": b64(cert), "client-key-data": b64(key)},
        "certs-files": {"client-certificate": "c.crt", "client-key": "c.key"},
        "insecure": {"token": "t"}, "nothing": {},
    }[variant]
    if variant == "certs-files":
        cluster = {"server": "https://127.0.0.1:6443", "certificate-authority": "ca.crt"}
    if variant == "insecure":
        cluster = {"server": "https://127.0.0.1:6443", "insecure-skip-tls-verify": True}
    path = tmp_path / "config"
    path.write_text(yaml.safe_dump(doc(cluster, user)))
    ours = kubeconfig.load({"KUBECONFIG": str(path)})
    ca = ours.ca_data.encode() if ours.ca_data else Path(ours.ca_file).read_bytes() if ours.ca_file else None
    client_cert = ours.cert_data or (Path(ours.cert_file).read_bytes() if ours.cert_file else None)
    assert (ours.server, not ours.insecure, ours.authorization(), ca, client_cert) == _client_view(path)


def test_an_exec_plugin_kubeconfig_is_loaded_by_the_client_and_its_token_sent(tmp_path: Path) -> None:
    credential = {"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
                  "status": {"token": "from-plugin"}}
    user = {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": sys.executable,
                     "args": ["-c", f"print({json.dumps(json.dumps(credential))})"], "interactiveMode": "Never"}}
    path = tmp_path / "config"
    path.write_text(yaml.safe_dump(doc({"server": "https://127.0.0.1:6443", "insecure-skip-tls-verify": True}, user)))
    access = kubeconfig.load({"KUBECONFIG": str(path)})
    assert access.server == "https://127.0.0.1:6443" and access.insecure
    assert access.authorization() == "Bearer from-plugin"


def test_two_kubeconfig_files_are_merged_by_the_client_loader(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    d = doc({"server": "https://127.0.0.1:6443", "insecure-skip-tls-verify": True}, {"token": "t"})
    first.write_text(yaml.safe_dump({k: v for k, v in d.items() if k != "users"}))
    second.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Config", "users": d["users"]}))
    access = kubeconfig.load({"KUBECONFIG": f"{first}:{second}"})
    assert access.server == "https://127.0.0.1:6443" and access.authorization() == "Bearer t"


def test_the_operator_run_path_never_imports_the_kubernetes_client() -> None:
    """kopf hidden from it while imported (__main__.import_kopf), a plain kopf registry (no
    piggybacking login), our own kubeconfig and quantity readers: 0.17 CPU-s and 10 MiB of the start."""
    code = ("import sys\n"
            "from sunk_sandbox_operator.__main__ import import_kopf\n"
            "kopf = import_kopf()\n"
            "kopf.set_default_registry(kopf.OperatorRegistry())\n"
            "from sunk_sandbox_operator import handlers\n"
            "from sunk_sandbox_operator.controller import main, lifecycle\n"
            "from kopf._core.intents import causes\n"
            "registry = kopf.get_default_registry()\n"
            "logins = [h.id for h in registry._activities.get_handlers(activity=causes.Activity.AUTHENTICATION)]\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'kubernetes'), logins)\n"
            "import kubernetes.config\n"  # importable again afterwards (an exec-plugin kubeconfig)
            "print(kubernetes.config.ConfigException.__name__)\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                         env={"PYTHONPATH": str(ROOT / "operator"), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    assert lines[0].startswith("[] [") and "login" in lines[0] and "login_via_client" not in lines[0], lines
    assert lines[1] == "ConfigException"


def test_kopf_logs_in_with_the_session_credentials(tmp_path: Path) -> None:
    import kopf

    from sunk_sandbox_operator.adapters.kubehttp import KubeHTTP
    from sunk_sandbox_operator.controller import lifecycle

    cert, key = self_signed(tmp_path)
    ctx = type("Ctx", (), {})()
    ctx.http = KubeHTTP(Access(server="https://k:6443", authorization=lambda: "Bearer tok", ca_data=cert.decode(),
                               cert_data=cert, key_data=key))
    info = lifecycle.login(ctx)  # type: ignore[arg-type]
    assert isinstance(info, kopf.ConnectionInfo)
    assert (info.server, info.scheme, info.token, info.ca_data, info.certificate_data, info.private_key_data) == \
        ("https://k:6443", "Bearer", "tok", cert.decode(), cert, key)
    ctx.http = None
    with pytest.raises(kopf.LoginError):
        lifecycle.login(ctx)  # type: ignore[arg-type]


def test_run_without_credentials_says_so_in_one_line_and_exits_2(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "sunk_sandbox_operator", "run"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=120, env={"PYTHONPATH": str(ROOT / "operator"), "PATH": "/usr/bin:/bin",
                                                      "HOME": str(tmp_path), "KUBECONFIG": str(tmp_path / "absent")})
    assert out.returncode == 2, out.stderr[-3000:]
    assert "Traceback" not in out.stderr and out.stderr.count("\n") == 1, out.stderr
    assert f"cannot read the kubeconfig {tmp_path / 'absent'}" in out.stderr and "KUBECONFIG" in out.stderr


def _without_the_client(argv: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    """A console entry point run where the kubernetes client is not installed (`None` in
    sys.modules is the import system's "not installed"), as in the image."""
    code = ("import sys\nsys.modules['kubernetes'] = None\n"
            f"from {argv[0]} import {argv[1]} as entry\nsys.argv[0] = {argv[2]!r}\n"
            f"sys.exit(entry({argv[3:]!r}))\n")
    return subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(ROOT / "operator"), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
                               "KUBECONFIG": str(tmp_path / "config")})


@pytest.mark.parametrize("user, named", [
    ({"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "cloud-login"}}, "user.exec"),
    ({"auth-provider": {"name": "oidc", "config": {"id-token": "s3cret"}}}, "user.auth-provider"),
])
@pytest.mark.parametrize("entry", [
    ["sunk_sandbox_operator.__main__", "main", "sunk-sandbox-operator", "run"],
    ["sunk_sandbox_operator.doctor", "kubectl_plugin", "kubectl-ssb", "doctor", "tenant-slurm/b"],
], ids=["run", "kubectl-ssb doctor"])
def test_without_the_client_a_kubeconfig_that_needs_it_says_which_extra_in_one_line(
        tmp_path: Path, user: dict, named: str, entry: list[str]) -> None:
    (tmp_path / "config").write_text(yaml.safe_dump(doc({"server": "https://127.0.0.1:6443"}, user)))
    out = _without_the_client(entry, tmp_path)
    assert out.returncode == 2, out.stderr[-3000:]
    assert "Traceback" not in out.stderr and out.stderr.count("\n") == 1, out.stderr
    assert f"the kubeconfig {tmp_path / 'config'} ({named}) needs the kubernetes client" in out.stderr
    assert "pip install 'sunk-sandbox-operator[exec-auth]'" in out.stderr and "s3cret" not in out.stderr


def test_without_the_client_a_simple_kubeconfig_is_read_as_before(tmp_path: Path) -> None:
    """The client is needed for what this module does not read, nothing else: a token kubeconfig
    gets as far as the API server (none answers here)."""
    (tmp_path / "config").write_text(yaml.safe_dump(doc({"server": "https://127.0.0.1:1"}, {"token": "t"})))
    out = _without_the_client(["sunk_sandbox_operator.doctor", "kubectl_plugin", "kubectl-ssb", "doctor",
                               "tenant-slurm/b"], tmp_path)
    assert out.returncode == 2 and "kubernetes client" not in out.stderr, out.stderr
    # The connection error itself (its address is quoted text, which core.redact.describe drops).
    assert "ClientConnectorError: Connect call failed" in out.stderr, out.stderr


def test_merged_kubeconfig_files_without_the_client_say_so(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "kubernetes", None)  # not installed
    with pytest.raises(ConfigError, match=r"several files in KUBECONFIG needs the kubernetes client.*\[exec-auth\]"):
        kubeconfig.load({"KUBECONFIG": f"{tmp_path / 'a'}:{tmp_path / 'b'}"})
