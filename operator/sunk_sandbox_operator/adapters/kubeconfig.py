"""Where the API server is and how to authenticate: the in-cluster ServiceAccount, else a kubeconfig.

The operator's HTTP session (adapters/kubehttp.py) and kopf's login need only a server, a CA, a
client certificate and a bearer token. They are read here, without the kubernetes client, for the
in-cluster ServiceAccount and for kubeconfig entries made only of those fields, so the operator's
start need not import the client at all (`controller/process.import_kopf`; docs/scale.md: what it saves).
Any other entry (an exec plugin, an auth-provider, basic auth, a proxy, a TLS server name, several
files in KUBECONFIG) goes to the client's own loader, imported then, so every kubeconfig works as
it did before. The client is the `exec-auth` extra (not in the image, where the ServiceAccount is
read here): without it such a kubeconfig is a one-line ConfigError naming the field and the extra.

Same rules as the client: in a pod (KUBERNETES_SERVICE_HOST set) and no KUBECONFIG, in-cluster;
else KUBECONFIG or ~/.kube/config, its current context; relative paths from the file's directory.
"""

from __future__ import annotations

import base64
import binascii
import os
import ssl
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

import yaml

from ..core.redact import describe

IN_CLUSTER_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
DEFAULT_KUBECONFIG = "~/.kube/config"
# What installs the kubernetes client, whose loader reads the entries this module does not.
CLIENT_EXTRA = "pip install 'sunk-sandbox-operator[exec-auth]'"

# The kubeconfig fields read here; an entry with any other field goes to the client's loader.
CLUSTER_FIELDS = frozenset({"server", "certificate-authority", "certificate-authority-data",
                            "insecure-skip-tls-verify", "extensions"})
USER_FIELDS = frozenset({"token", "tokenFile", "client-certificate", "client-certificate-data",
                         "client-key", "client-key-data", "extensions"})


class ConfigError(Exception):
    """No usable credentials: not in a pod and no kubeconfig, or a kubeconfig that does not say
    enough (the message names the file and the field; never a token)."""


@dataclass(frozen=True)
class Access:
    """The server and the credentials; `authorization()` is the Authorization header's value now
    (a token file is read again at each call: a rotated token is picked up)."""

    server: str
    authorization: Callable[[], str | None]
    ca_file: str | None = None
    ca_data: str | None = None       # PEM text
    insecure: bool = False
    cert_file: str | None = None
    key_file: str | None = None
    cert_data: bytes | None = field(default=None, repr=False)  # PEM
    key_data: bytes | None = field(default=None, repr=False)   # PEM: a secret, never in a repr or a log

    def ssl_context(self) -> ssl.SSLContext | bool:
        """What aiohttp takes: False to skip verification (insecure-skip-tls-verify), else a context."""
        if self.insecure:
            return False
        ctx = ssl.create_default_context(cafile=self.ca_file, cadata=self.ca_data)
        if self.cert_data is not None and self.key_data is not None:
            # ssl reads a certificate chain from files only: a private directory, gone once read.
            with tempfile.TemporaryDirectory(prefix="ssb-tls-") as tmp:
                cert, key = Path(tmp) / "tls.crt", Path(tmp) / "tls.key"
                cert.write_bytes(self.cert_data)
                key.write_bytes(self.key_data)
                ctx.load_cert_chain(str(cert), str(key))
        elif self.cert_file:
            ctx.load_cert_chain(self.cert_file, self.key_file)
        return ctx


def load(environ: Mapping[str, str] | None = None) -> Access:
    """In-cluster credentials in a pod, else the kubeconfig (the kubernetes client's rule)."""
    env = os.environ if environ is None else environ
    if env.get("KUBERNETES_SERVICE_HOST") and not env.get("KUBECONFIG"):
        return in_cluster(env)
    files = env.get("KUBECONFIG") or DEFAULT_KUBECONFIG
    paths = [p for p in files.split(os.pathsep) if p]
    if len(paths) != 1:
        return _from_client(files, "several files in KUBECONFIG")  # merged: the client's rules
    path = Path(paths[0]).expanduser()
    try:
        doc = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise ConfigError(f"cannot read the kubeconfig {path}: {exc.strerror or describe(exc)}") from None
    except yaml.YAMLError as exc:
        # Said without yaml's snippet of the document: that line may be the token's.
        raise ConfigError(f"the kubeconfig {path} is not YAML: {describe(exc)}") from None
    access = from_kubeconfig(doc, path.parent)
    return access if access is not None else _from_client(str(path), f"the kubeconfig {path} ({unread(doc)})")


def in_cluster(env: Mapping[str, str], directory: Path = IN_CLUSTER_DIR) -> Access:
    host, port = env.get("KUBERNETES_SERVICE_HOST", ""), env.get("KUBERNETES_SERVICE_PORT", "")
    if not host or not port:
        raise ConfigError("in-cluster: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must be set")
    token, ca = directory / "token", directory / "ca.crt"
    if not ca.is_file():
        raise ConfigError(f"in-cluster: no CA file {ca} (is the ServiceAccount token mounted?)")
    _read_token(token)  # said now, not at the first request
    server = f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"
    return Access(server=server, authorization=lambda: "Bearer " + _read_token(token), ca_file=str(ca))


def from_kubeconfig(doc: Any, base: Path) -> Access | None:
    """The current context's server and credentials, or None when the entry has a field not read
    here (the client's loader takes it). ConfigError when the document does not say enough."""
    if not isinstance(doc, dict):
        raise ConfigError("the kubeconfig is not a mapping")
    current = doc.get("current-context")
    context = _named(doc, "contexts", current, "context") if current else None
    if not isinstance(context, dict):
        return None  # no current context, or a missing one: the client says which
    cluster = _named(doc, "clusters", context.get("cluster"), "cluster")
    user = _named(doc, "users", context.get("user"), "user") if context.get("user") else {}
    if not isinstance(cluster, dict) or not isinstance(user, dict) or not cluster.get("server"):
        return None
    if set(cluster) - CLUSTER_FIELDS or set(user) - USER_FIELDS or ("token" in user and "tokenFile" in user):
        return None
    if ("client-certificate" in user or "client-certificate-data" in user) != \
            ("client-key" in user or "client-key-data" in user):
        return None
    token, token_file = user.get("token"), _path(base, user.get("tokenFile"))
    if token is not None and not isinstance(token, str):
        return None
    if token:
        authorization: Callable[[], str | None] = lambda: "Bearer " + token
    elif token_file:
        _read_token(Path(token_file))  # said now, not at the first request
        authorization = lambda: "Bearer " + _read_token(Path(token_file))  # noqa: E731
    else:
        authorization = lambda: None  # noqa: E731  (a client certificate, or no credentials)
    ca_data = _pem(cluster, "certificate-authority-data")
    return Access(
        server=str(cluster["server"]).rstrip("/"),
        authorization=authorization,
        ca_file=None if ca_data else _path(base, cluster.get("certificate-authority")),
        ca_data=ca_data.decode() if ca_data else None,
        insecure=cluster.get("insecure-skip-tls-verify") is True,
        cert_file=_path(base, user.get("client-certificate")),
        key_file=_path(base, user.get("client-key")),
        cert_data=_pem(user, "client-certificate-data"),
        key_data=_pem(user, "client-key-data"),
    )


def _named(doc: dict[str, Any], section: str, name: Any, kind: str) -> Any:
    """The `kind` mapping of the entry of `section` called `name` (None: no such entry)."""
    for entry in doc.get(section) or []:
        if isinstance(entry, dict) and entry.get("name") == name:
            return entry.get(kind) or {}
    return None


def _path(base: Path, value: Any) -> str | None:
    return str(base / os.path.expanduser(value)) if isinstance(value, str) and value else None


def _pem(entry: Mapping[str, Any], key: str) -> bytes | None:
    """A `*-data` field decoded (None when absent or empty)."""
    if not entry.get(key):
        return None
    try:
        return base64.b64decode(str(entry[key]), validate=True)
    except (binascii.Error, ValueError):
        raise ConfigError(f"kubeconfig: {key} is not base64") from None


def _read_token(path: Path) -> str:
    try:
        token = path.read_text().strip()
    except OSError as exc:
        raise ConfigError(f"cannot read the token file {path}: {exc.strerror or describe(exc)}") from None
    if not token:
        raise ConfigError(f"the token file {path} is empty")
    return token


def unread(doc: Any) -> str:
    """Why `from_kubeconfig` passed `doc` on, for the message when the client is missing: the
    current context's fields this module does not read (names only: a value may be a secret)."""
    context = _named(doc, "contexts", doc.get("current-context"), "context") if isinstance(doc, dict) else None
    if not isinstance(context, dict):
        return "no current context"
    cluster = _named(doc, "clusters", context.get("cluster"), "cluster")
    user = _named(doc, "users", context.get("user"), "user") if context.get("user") else {}
    fields = [f"user.{k}" for k in sorted(user) if k not in USER_FIELDS] if isinstance(user, dict) else []
    fields += [f"cluster.{k}" for k in sorted(cluster) if k not in CLUSTER_FIELDS] if isinstance(cluster, dict) else []
    return ", ".join(fields) or "fields only the client's loader combines"


def _from_client(files: str, why: str) -> Access:
    """The kubernetes client's loader (exec plugins, auth-providers, merged files), imported now;
    `why` names what needs it, for the one line said when the client is not installed."""
    try:
        import kubernetes.config
        from kubernetes.client.configuration import Configuration
    except ImportError:
        raise ConfigError(f"{why} needs the kubernetes client, which is not installed: {CLIENT_EXTRA}") from None

    cfg = Configuration()
    try:
        kubernetes.config.load_kube_config(config_file=files, client_configuration=cfg)
    except kubernetes.config.ConfigException as exc:
        raise ConfigError(describe(exc)) from None

    def authorization() -> str | None:  # the client's refresh hook runs here (an exec plugin's token)
        auth = cfg.auth_settings().get("BearerToken")
        return (auth.get("value") or None) if auth else None

    return Access(server=cfg.host.rstrip("/"), authorization=authorization, ca_file=cfg.ssl_ca_cert,
                  insecure=not cfg.verify_ssl, cert_file=cfg.cert_file, key_file=cfg.key_file)
