"""What a binding may make the operator do, decided by the operator's settings (pure).

Whoever can create a binding in a namespace gets only what a binding should give: the runner
API URLs are the operator's to allow (the token is sent there), and a binding reaches the
scheduler, the scope target and the token Secret in its own namespace only, unless the operator's
settings let bindings of that namespace reach further (External Secrets' SecretStore vs
ClusterSecretStore, cert-manager's cluster resource namespace are the models). System namespaces
are never matched by a selector or a glob. The admission webhook and the controller ask the same
question here; the controller stays the authority.
"""

from __future__ import annotations

import fnmatch
import ipaddress
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping
from urllib.parse import urlsplit

from ..api.spec import BindingSpec, LabelSelector, parse_spec
from . import selectors
from .redact import describe
from .scope import glob_literals, is_literal
from .target_ref import locate

DEFAULT_API_URLS = ("https://api.coreweave.com",)
DEFAULT_GRANT_ROLES = ("sunk-scheduler-sandbox",)  # the ClusterRole the operator may bind (manifests/rbac.yaml)
SYSTEM_GLOBS = ("kube-*",)  # and the operator's own namespace
# One regex for them: `system` runs for every namespace at every resync (10,000 fnmatch calls were
# half of its CPU).
_SYSTEM = re.compile("|".join(fnmatch.translate(g) for g in SYSTEM_GLOBS))


@dataclass(frozen=True)
class Violation:
    field: str      # the spec field, e.g. spec.runner.apiURL
    message: str    # what is wrong and the fix

    def text(self) -> str:
        return f"{self.field}: {self.message}"


@dataclass(frozen=True)
class TenancyPolicy:
    """The operator's settings (flags, environment, Helm values), never a binding's."""

    allowed_api_urls: tuple[str, ...] = DEFAULT_API_URLS
    # Binding namespace (or glob) -> the namespaces (or globs) its bindings may reach besides their
    # own: the scheduler, the scope target (an Argo CD namespace), system namespaces named explicitly.
    reach: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    operator_namespace: str = "sunk-sandbox-operator-system"
    # ClusterRoles spec.scope.grantClusterRole may name (RBAC's `bind` rule enforces it too).
    allowed_grant_roles: tuple[str, ...] = DEFAULT_GRANT_ROLES
    # Whether sandboxNamespaces may match (nearly) everything: `{}`, a selector a namespace without
    # labels satisfies, a glob without a literal character (`*`). Off: refused like `{}` always was.
    allow_match_all: bool = False
    # Namespaces outside this selector are never matched by any binding (`--sandbox-namespace-selector`;
    # the ClusterSecretStore `namespaceSelector` model), except each binding's own. None: no bound.
    namespace_bound: selectors.ParsedSelector | None = None
    # slurmrestd base URLs spec.slurm.restAPI.url may name (the Slurm JWT is sent there): the same
    # rules as allowed_api_urls, their own list, empty by default (a binding naming one is refused).
    allowed_slurm_urls: tuple[str, ...] = ()
    # Binding namespace (or glob) -> the namespaces (or globs) where its bindings may grant
    # spec.scope.grantClusterRole (`--allow-grant`). A grant hands a ServiceAccount the binding picked
    # (the scheduler pods' own) read access to every pod spec there: only the admin says where. Empty:
    # no binding grants anywhere.
    grants: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def system(self, namespace: str) -> bool:
        return namespace == self.operator_namespace or _SYSTEM.match(namespace) is not None

    def may_reach(self, binding_namespace: str, namespace: str) -> bool:
        if namespace == binding_namespace and not self.system(namespace):
            return True
        return any(fnmatch.fnmatchcase(binding_namespace, src) and any(fnmatch.fnmatchcase(namespace, t) for t in targets)
                   for src, targets in self.reach.items())


    def grant_bound(self, binding_namespace: str) -> Callable[[str], bool] | None:
        """Where bindings in `binding_namespace` may grant (`--allow-grant`): a namespace test, or None
        when the admin gave that namespace nowhere (then no binding there grants anything)."""
        globs = tuple(t for src, targets in self.grants.items() if fnmatch.fnmatchcase(binding_namespace, src)
                      for t in targets)
        if not globs:
            return None
        inside = re.compile("|".join(fnmatch.translate(g) for g in globs))
        return lambda namespace: inside.match(namespace) is not None


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


# An API URL's host part: a DNS name or an IP literal, an optional port; nothing else (no userinfo:
# `https://api.coreweave.com@evil.io` is a request to evil.io; no backslash, which some parsers read as /).
_NETLOC = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+)(:[0-9]*)?$")
# An API URL's path: unreserved characters and `/` only. Percent-encoded dots, slashes, backslashes
# (or a `%25` that becomes one on a second decoding), backslashes and `;` (Tomcat's `..;/`) are
# what a server may resolve into a path the check never saw.
_PATH = re.compile(r"^[A-Za-z0-9._~/-]*$")


def remove_dot_segments(path: str) -> str:
    """RFC 3986 section 5.2.4, as httpx resolves a request path before sending it (a unit test pins
    that): `/runner/../admin` is `/admin`."""
    out: list[str] = []
    # The input buffer is path[i:] (an index, not a copy per step: each character is read once).
    i, n = 0, len(path)
    while i < n:
        if path.startswith("../", i):
            i += 3
        elif path.startswith("./", i):
            i += 2
        elif path.startswith("/./", i):
            i += 2
        elif path.startswith("/.", i) and i + 2 == n:
            path, i, n = "/", 0, 1
        elif path.startswith("/../", i):
            i += 3
            if out:
                out.pop()
        elif path.startswith("/..", i) and i + 3 == n:
            path, i, n = "/", 0, 1
            if out:
                out.pop()
        elif n - i <= 2 and path.startswith("." * (n - i), i):  # what is left is "." or ".."
            i = n
        else:
            cut = path.find("/", i + 1)
            cut = n if cut < 0 else cut
            out.append(path[i:cut])
            i = cut
    return "".join(out)


def url_problem(url: str) -> str | None:
    """Why `url` is no API URL at all, whatever the allow-list says (None: it is one)."""
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        return f"not a URL ({describe(exc)})"
    if parts.scheme not in ("https", "http") or not parts.netloc:
        return "not an http(s) URL"
    if "?" in url or "#" in url:
        return "a query or a fragment has no place in an API base URL"
    if not _NETLOC.match(parts.netloc):
        return "the host part may hold only a host name or IP address and a port (no user@, no backslash)"
    if not _PATH.match(parts.path):
        return ("the path may hold only letters, digits, '-', '.', '_', '~' and '/' (no percent-encoding, "
                "backslash or ';')")
    return None


def _base(url: str) -> tuple[str, str, int | None, str]:
    """(scheme, host, port or None for the default, path) as the HTTP client will send them: host in
    lower case; the path is what precedes `/<service>/<method>` in the request line (the runner
    client strips the base's trailing slashes, appends, and httpx resolves dot segments).
    ValueError for a bad port."""
    parts = urlsplit(url)
    port = parts.port
    default = {"https": 443, "http": 80}.get(parts.scheme)
    path = remove_dot_segments(parts.path.rstrip("/") + "/")[:-1]
    return (parts.scheme, (parts.hostname or "").lower(), None if port == default else port, path)


def check_allowed_urls(urls: Iterable[str]) -> list[str]:
    """Errors in the operator's own setting: plain http is allowed only for a loopback URL."""
    errors = []
    for url in urls:
        problem = url_problem(url)
        if problem:
            errors.append(f"{url!r}: {problem}")
            continue
        scheme, host, _, _ = _base(url)
        if not host:
            errors.append(f"{url!r} is not an http(s) URL")
        elif scheme == "http" and not _loopback(host):
            errors.append(f"{url!r}: plain http is allowed only for a loopback address (127.0.0.1, ::1, localhost)")
    return errors


def url_allowed(url: str, policy: TenancyPolicy, allowed_urls: Iterable[str] | None = None) -> bool:
    """The URL is one of the allowed bases, or below one (same scheme, host, port; path prefix),
    compared as the HTTP client will send it (`_base`: `/runner/../admin` is not below `/runner`).
    An allowed base may end in `:*` (any port: a loopback emulator on a random port in tests).
    `allowed_urls`: the list to check against (default: the runner API's)."""
    try:
        if check_allowed_urls([url]):
            return False
        scheme, host, port, path = _base(url)
    except ValueError:  # a port that is not a number
        return False
    for allowed in (policy.allowed_api_urls if allowed_urls is None else allowed_urls):
        any_port = allowed.endswith(":*")
        try:
            a_scheme, a_host, a_port, a_path = _base(allowed[:-2] if any_port else allowed)
        except ValueError:
            continue
        if check_allowed_urls([allowed[:-2] if any_port else allowed]):
            continue  # a plain-http entry for a non-loopback host is never honoured
        if (scheme, host) == (a_scheme, a_host) and (any_port or port == a_port) \
                and (path == a_path or path.startswith(a_path + "/")):
            return True
    return False


def _url_violation(url: str, policy: TenancyPolicy, *, allowed_urls: tuple[str, ...] | None = None,
                   field_name: str = "spec.runner.apiURL", what: str = "an API URL",
                   setting: str = "--allowed-api-url / SSB_ALLOWED_API_URLS") -> Violation | None:
    allowed = policy.allowed_api_urls if allowed_urls is None else allowed_urls
    if url_allowed(url, policy, allowed):
        return None
    problem = url_problem(url)
    if problem is None:
        try:
            scheme, host, port, path = _base(url)
            if path != urlsplit(url).path.rstrip("/"):  # dot segments: say where the request goes
                problem = f"it resolves to {scheme}://{host}{f':{port}' if port else ''}{path or '/'}"
        except ValueError:
            pass
    why = f": {problem}" if problem else ""
    return Violation(field_name, f"{url} is not {what} the operator allows{why} (allowed: "
                     f"{', '.join(allowed) or 'none'}); the token is sent only there: use one of them, or ask "
                     f"the operator's admin to allow it ({setting})")


def _selector_empty(selector: LabelSelector | None) -> bool:
    return selector is not None and not selector.match_labels and not selector.match_expressions


def _matches_unlabelled(selector: LabelSelector | None) -> bool:
    """A namespace (or pod) without labels satisfies it: no matchLabels, only NotIn / DoesNotExist
    (or nothing at all). It selects what `{}` selects, less the few that carry those labels."""
    return selector is not None and selectors.matches(selector, {})


_MATCH_ALL_FIX = "or ask the operator's admin to allow it (SSB_ALLOW_MATCH_ALL=true)"


def violations(spec: BindingSpec, binding_namespace: str, policy: TenancyPolicy) -> list[Violation]:
    """Everything this binding asks that the operator's settings do not allow (empty: allowed)."""
    out: list[Violation] = []
    bad_url = _url_violation(spec.runner.api_url, policy)
    if bad_url is not None:
        out.append(bad_url)
    rest = spec.slurm.rest_api
    if rest is not None:
        bad_slurm = _url_violation(rest.url, policy, allowed_urls=policy.allowed_slurm_urls,
                                   field_name="spec.slurm.restAPI.url", what="a slurmrestd URL",
                                   setting="--allowed-slurm-url / SSB_ALLOWED_SLURM_URLS")
        if bad_slurm is not None:
            out.append(bad_slurm)

    def reach(field_name: str, namespace: str, what: str) -> None:
        if namespace and not policy.may_reach(binding_namespace, namespace):
            out.append(Violation(field_name, f"{what} in namespace {namespace}: bindings in {binding_namespace} may "
                                 f"reach only their own namespace; create the binding in {namespace}, or ask the "
                                 "operator's admin to allow it (--allow-reach / SSB_ALLOWED_REACH)"))

    sched_ns = spec.scheduler_namespace(binding_namespace)
    reach("spec.scheduler.namespace", sched_ns, "the scheduler")
    target = locate(spec, binding_namespace)
    if target.namespace != sched_ns:  # the scheduler's namespace was checked above
        reach(*target.namespace_field[:1], target.namespace, target.namespace_field[1])
    role = spec.scope.grant_cluster_role
    if role and role not in policy.allowed_grant_roles:
        out.append(Violation("spec.scope.grantClusterRole", f"{role} is not a ClusterRole the operator may grant "
                             f"({', '.join(policy.allowed_grant_roles)}): use sunk-scheduler-sandbox, or ask the "
                             "operator's admin to allow it (SSB_ALLOWED_GRANT_ROLES and the RBAC `bind` rule)"))
    pods = spec.scheduler.pod_selector
    if _matches_unlabelled(pods):
        what = "an empty selector" if _selector_empty(pods) else "a selector that a pod without labels satisfies " \
            "(only NotIn / DoesNotExist)"
        out.append(Violation("spec.scheduler.podSelector", f"{what} matches every pod in the namespace "
                             "(their ServiceAccounts would be granted and their Deployments rolled): select the "
                             "scheduler's pods, e.g. matchLabels: {app.kubernetes.io/name: sunk-scheduler}"))
    sn = spec.sandbox_namespaces
    if not policy.allow_match_all and _matches_unlabelled(sn.selector):
        if _selector_empty(sn.selector):
            what = "an empty selector matches every namespace: give it matchLabels or matchExpressions"
        else:
            what = ("a selector that a namespace without labels satisfies (only NotIn / DoesNotExist expressions) "
                    "matches nearly every namespace: add a matchLabels entry or an In / Exists expression")
        out.append(Violation("spec.sandboxNamespaces.selector", f"{what} (e.g. matchLabels: "
                             f"{{sunk.coreweave.com/sandbox: \"true\"}}), {_MATCH_ALL_FIX}"))
    for i, name in enumerate(sn.names):
        if not policy.allow_match_all and not glob_literals(name):
            out.append(Violation(f"spec.sandboxNamespaces.names[{i}]", f"{name} has no literal character, so it "
                                 f"matches (nearly) every namespace: name a prefix or suffix (e.g. ds-*), "
                                 f"{_MATCH_ALL_FIX}"))
        literal = is_literal(name)
        if literal and policy.system(name) and not policy.may_reach(binding_namespace, name):
            out.append(Violation(f"spec.sandboxNamespaces.names[{i}]", f"{name} is a system namespace: the operator's "
                                 "admin must allow bindings here to reach it (--allow-reach)"))
    for i, name in enumerate(spec.scope.always_include):
        if policy.system(name) and not policy.may_reach(binding_namespace, name):
            out.append(Violation(f"spec.scope.alwaysInclude[{i}]", f"{name} is a system namespace: the operator's "
                                 "admin must allow bindings here to reach it (--allow-reach)"))
    return out


def admissible(body: Mapping[str, Any], policy: TenancyPolicy) -> bool:
    """Does this binding (a listed body) pass the check? A binding that does not claims nothing: not
    a runner, not a target, not names on a shared target."""
    meta = body.get("metadata") or {}
    try:
        spec = parse_spec(body.get("spec") or {})
    except Exception:  # an unparsable spec (the CRD refuses it first) claims nothing either
        return False
    return not violations(spec, meta.get("namespace") or "", policy)


def parse_reach(text: str) -> dict[str, tuple[str, ...]]:
    """`SSB_ALLOWED_REACH`: `tenant-slurm=argocd,slurm-*;team-*=shared-slurm` (binding namespace or glob
    = the namespaces or globs its bindings may reach)."""
    out: dict[str, tuple[str, ...]] = {}
    for item in (text or "").split(";"):
        src, sep, targets = item.strip().partition("=")
        if not sep or not src.strip():
            continue
        out[src.strip()] = tuple(t.strip() for t in targets.split(",") if t.strip())
    return out
