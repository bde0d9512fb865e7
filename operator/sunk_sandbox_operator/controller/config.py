"""Process-wide operator settings, from the environment (the `run` flags set these)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Callable

from ..core import policy_contention, resync, selectors
from ..core.units import parse_go_duration
from ..core.tenancy import DEFAULT_API_URLS, DEFAULT_GRANT_ROLES, TenancyPolicy, check_allowed_urls, parse_reach


def _float(name: str, default: float) -> float:
    return float(os.environ.get(name, default))


@dataclass(frozen=True)
class Config:
    # Scope writes go out as soon as a change arrives; changes arriving during a write are folded
    # into the next one (group commit). An optional extra window folds bursts further.
    scope_window_seconds: float = 0.0
    # At most this many scope writes per second per binding (bounded load on the API server).
    scope_max_writes_per_second: float = 50.0
    # At most one coalesced status patch per binding per this many seconds (pod churn).
    status_min_interval_seconds: float = 2.0
    # A sandbox pod created less than this many seconds after the policy write that lacks the new
    # values is PlacementVerified=Unknown PolicyPropagating, not False (the change takes a while).
    policy_propagation_seconds: float = 60.0
    # Minimum seconds between two Warning events of the same hazard on one binding.
    hazard_event_interval_seconds: float = 60.0
    # Upper bound for the resync interval jitter (fraction of the interval).
    resync_jitter: float = 0.1
    # A binding's spec.resyncInterval below this is raised to it (core/resync.py): the admin's floor.
    min_resync_seconds: float = resync.DEFAULT_MINIMUM_SECONDS
    # Stale-etag retries of one policy write before ConflictRetriesExhausted.
    policy_conflict_retries: int = 5
    # Another writer removing the binding's keys from the runner policy (Terraform applying its own):
    # this many are put back within the window, the next one stops the writes (PolicyManagedElsewhere).
    # A window of 0 never stops.
    policy_contention_corrections: int = policy_contention.DEFAULT_CORRECTIONS
    policy_contention_window_seconds: float = policy_contention.DEFAULT_WINDOW_SECONDS
    # Lost resourceVersion races of one scope write before ScopeSynced=False Conflict.
    scope_conflict_retries: int = 5
    metrics_port: int = 0
    metrics_address: str = "0.0.0.0"  # e.g. 127.0.0.1 behind a sidecar proxy, or the pod IP only
    # The operator's own namespace: policy ownership records, the leader Lease.
    operator_namespace: str = "sunk-sandbox-operator-system"
    # Leader election (client-go's defaults): lease, renew deadline, retry period, seconds.
    lease_duration_seconds: float = 15.0
    renew_deadline_seconds: float = 10.0
    retry_period_seconds: float = 2.0
    # A standby reads the Lease this often (a GET), so it takes over soon after the Lease expires.
    standby_poll_seconds: float = 0.5
    # Failpoints for crash tests (controller/failpoints.py); empty in production.
    failpoints: str = ""
    # Items per LIST page of the Namespace and Pod informers (bounded memory while listing).
    list_page_size: int = 500
    # Deletion with Restore: attempts, and seconds between them, before the binding is released
    # anyway (with a Warning event) so a permanent error never leaves it Terminating forever.
    restore_retries: int = 30
    restore_retry_delay_seconds: float = 10.0
    # Tenancy (core/tenancy.py): the runner API base URLs bindings may use (the token is sent
    # there; plain http only for a loopback URL), and which binding namespaces may reach which
    # other namespaces (scheduler, scope target, system namespaces named explicitly).
    allowed_api_urls: tuple[str, ...] = DEFAULT_API_URLS
    allowed_reach: dict[str, tuple[str, ...]] = field(default_factory=dict)
    allowed_grant_roles: tuple[str, ...] = DEFAULT_GRANT_ROLES
    # Binding namespace (glob) -> namespaces (globs) its bindings may grant spec.scope.grantClusterRole
    # in (`--allow-grant`, SSB_ALLOWED_GRANTS); empty: no binding grants anywhere.
    allowed_grants: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # sandboxNamespaces that match (nearly) everything (`*`, `{}`, only NotIn / DoesNotExist) are
    # refused unless this is set; and no binding ever matches a namespace outside this label
    # selector (the `labelSelector=` grammar; empty: no bound), except its own namespace.
    allow_match_all: bool = False
    sandbox_namespace_selector: str = ""
    # The admission webhook (HTTPS, POST /validate; every replica, leader or standby): 0 = off.
    # The directory holds tls.crt and tls.key (a cert-manager Certificate's Secret, mounted).
    webhook_port: int = 0
    webhook_address: str = "0.0.0.0"
    webhook_cert_dir: str = ""
    # Slurm (spec.slurm.restAPI): the slurmrestd base URLs bindings may name (the Slurm JWT is sent
    # there; the rules of allowed_api_urls, default none), how often the shared poller reads the job
    # list (one request per slurmrestd and user, 304 when unchanged), and how long a pending reason
    # must last (seconds and polls, both) before a placeholder job counts as stuck.
    allowed_slurm_urls: tuple[str, ...] = ()
    slurm_poll_seconds: float = 10.0
    slurm_pending_seconds: float = 60.0
    slurm_pending_polls: int = 3
    slurm_timeout_seconds: float = 15.0

    def tenancy(self) -> TenancyPolicy:
        """What bindings may ask. ValueError when --sandbox-namespace-selector does not parse."""
        bound = selectors.parse_selector_string(self.sandbox_namespace_selector) \
            if self.sandbox_namespace_selector.strip() else None
        if bound is not None and bound.error:
            raise ValueError(f"--sandbox-namespace-selector / SSB_SANDBOX_NAMESPACE_SELECTOR: {bound.error}")
        return TenancyPolicy(self.allowed_api_urls, self.allowed_reach, self.operator_namespace,
                             self.allowed_grant_roles, self.allow_match_all, bound,
                             allowed_slurm_urls=self.allowed_slurm_urls, grants=self.allowed_grants)


def _window(name: str, default: float) -> float:
    """A duration setting (24h, 30m) or plain seconds, never negative; a bad one names itself."""
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        seconds = float(text) if text.replace(".", "", 1).isdigit() else parse_go_duration(text)
    except ValueError:
        raise ValueError(f"{name}: {text!r} is not a duration (e.g. 24h, 30m) or a number of seconds") from None
    if seconds < 0:
        raise ValueError(f"{name}: {text!r} is negative")
    return seconds


def _bool(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def load() -> Config:
    return Config(
        scope_window_seconds=_float("SSB_SCOPE_WINDOW_SECONDS", 0.0),
        scope_max_writes_per_second=_float("SSB_SCOPE_MAX_WRITES_PER_SECOND", 50.0),
        status_min_interval_seconds=_float("SSB_STATUS_MIN_INTERVAL_SECONDS", 2.0),
        hazard_event_interval_seconds=_float("SSB_HAZARD_EVENT_INTERVAL_SECONDS", 60.0),
        policy_propagation_seconds=_float("SSB_POLICY_PROPAGATION_SECONDS", 60.0),
        resync_jitter=_float("SSB_RESYNC_JITTER", 0.1),
        min_resync_seconds=resync.parse_setting(os.environ.get("SSB_MIN_RESYNC_INTERVAL") or "30s"),
        policy_conflict_retries=int(_float("SSB_POLICY_CONFLICT_RETRIES", 5)),
        scope_conflict_retries=int(_float("SSB_SCOPE_CONFLICT_RETRIES", 5)),
        policy_contention_corrections=int(_float("SSB_POLICY_CONTENTION_CORRECTIONS",
                                                 policy_contention.DEFAULT_CORRECTIONS)),
        policy_contention_window_seconds=_window("SSB_POLICY_CONTENTION_WINDOW",
                                                 policy_contention.DEFAULT_WINDOW_SECONDS),
        metrics_port=int(_float("SSB_METRICS_PORT", 0)),
        metrics_address=os.environ.get("SSB_METRICS_ADDRESS") or "0.0.0.0",
        list_page_size=int(_float("SSB_LIST_PAGE_SIZE", 500)),
        operator_namespace=os.environ.get("POD_NAMESPACE") or os.environ.get("SSB_OPERATOR_NAMESPACE")
        or "sunk-sandbox-operator-system",
        failpoints=os.environ.get("SSB_FAILPOINTS", ""),
        lease_duration_seconds=_float("SSB_LEASE_DURATION_SECONDS", 15.0),
        renew_deadline_seconds=_float("SSB_RENEW_DEADLINE_SECONDS", 10.0),
        retry_period_seconds=_float("SSB_RETRY_PERIOD_SECONDS", 2.0),
        standby_poll_seconds=_float("SSB_STANDBY_POLL_SECONDS", 0.5),
        restore_retries=int(_float("SSB_RESTORE_RETRIES", 30)),
        restore_retry_delay_seconds=_float("SSB_RESTORE_RETRY_DELAY_SECONDS", 10.0),
        allowed_api_urls=tuple(u.strip() for u in os.environ.get("SSB_ALLOWED_API_URLS", "").split(",") if u.strip())
        or DEFAULT_API_URLS,
        allowed_reach=parse_reach(os.environ.get("SSB_ALLOWED_REACH", "")),
        allowed_grants=parse_reach(os.environ.get("SSB_ALLOWED_GRANTS", "")),
        allowed_grant_roles=tuple(r.strip() for r in os.environ.get("SSB_ALLOWED_GRANT_ROLES", "").split(",")
                                  if r.strip()) or DEFAULT_GRANT_ROLES,
        allow_match_all=_bool("SSB_ALLOW_MATCH_ALL"),
        sandbox_namespace_selector=os.environ.get("SSB_SANDBOX_NAMESPACE_SELECTOR", ""),
        webhook_port=int(_float("SSB_WEBHOOK_PORT", 0)),
        webhook_address=os.environ.get("SSB_WEBHOOK_ADDRESS") or "0.0.0.0",
        webhook_cert_dir=os.environ.get("SSB_WEBHOOK_CERT_DIR", ""),
        allowed_slurm_urls=tuple(u.strip() for u in os.environ.get("SSB_ALLOWED_SLURM_URLS", "").split(",")
                                 if u.strip()),
        slurm_poll_seconds=_float("SSB_SLURM_POLL_SECONDS", 10.0),
        slurm_pending_seconds=_float("SSB_SLURM_PENDING_SECONDS", 60.0),
        slurm_pending_polls=int(_float("SSB_SLURM_PENDING_POLLS", 3)),
        slurm_timeout_seconds=_float("SSB_SLURM_TIMEOUT_SECONDS", 15.0),
    )


def tenancy_from_flags(args: Any, error: Callable[[str], Any]) -> TenancyPolicy:
    """The tenancy settings a command line gives (`run` and `doctor` share the flags), else the SSB_*
    variables, checked: `error` is called with the setting named when one does not parse."""
    for flag, name, sep in (("allowed_api_url", "SSB_ALLOWED_API_URLS", ","),
                            ("allowed_slurm_url", "SSB_ALLOWED_SLURM_URLS", ","),
                            ("allow_reach", "SSB_ALLOWED_REACH", ";"), ("allow_grant", "SSB_ALLOWED_GRANTS", ";")):
        if getattr(args, flag, None):
            os.environ[name] = sep.join(getattr(args, flag))
    if getattr(args, "allow_match_all", False):
        os.environ["SSB_ALLOW_MATCH_ALL"] = "true"
    for flag, name in (("sandbox_namespace_selector", "SSB_SANDBOX_NAMESPACE_SELECTOR"),
                       ("min_resync_interval", "SSB_MIN_RESYNC_INTERVAL")):
        if getattr(args, flag, None) is not None:
            os.environ[name] = getattr(args, flag)
    try:
        cfg = load()
        policy = cfg.tenancy()
    except ValueError as exc:  # a setting that does not parse: say which, do not start
        error(str(exc))
        raise
    for urls, name in ((cfg.allowed_api_urls, "--allowed-api-url / SSB_ALLOWED_API_URLS"),
                       (cfg.allowed_slurm_urls, "--allowed-slurm-url / SSB_ALLOWED_SLURM_URLS")):
        bad = check_allowed_urls(u.removesuffix(":*") for u in urls)
        if bad:
            error(f"{name}: " + "; ".join(bad))
    return policy
