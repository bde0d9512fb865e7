"""Tenant-written text, read at a cost its size warrants (pure): the registry of every parser of it.

Tenants write ConfigMaps, Pods, Secrets, bindings and the scope target, and the operator reads
text out of them on the loop that also serves every other tenant. Every function that parses such
text is listed in PARSERS with its bound, and reads it without going back over what it read: no
regex with two quantifiers over the same characters on unbounded text (`\\s*=\\s*` over a run of
spaces, `\\d+\\.?\\d*` before a unit), str methods and one-pass scanners instead, and expansions
that count what they would write before writing it. Text past a bound is refused (`Refused`, a
ValueError) before anything is built; the caller names the object and key (SchedulerReady
`InputRefused`, ScopeSynced `DocumentRefused`) and goes on with everything else it read.

`printable` is how a tenant-written value is quoted into status, events and logs: control
characters and escape sequences escaped, at most MAX_SHOWN characters of it. `dns_subdomain_problem`
checks a name copied into status (the scheduler's) before it is used at all.

tests/unit/test_tenant_text.py times every registered parser on adversarial shapes at two sizes
(4x the input may cost at most 8x the time), and checks that every regex, JSON, YAML, shlex, glob,
base64 and zlib call in core/, adapters/ and controller/ belongs to a registered parser or is
listed in NOT_TENANT_TEXT with the reason it needs none.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from .untrusted import Refused as Refused  # one refusal for every tenant-written text, YAML included

MAX_SHOWN = 64
MAX_DNS_SUBDOMAIN = 253
_DNS_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-")
_ALNUM = frozenset("abcdefghijklmnopqrstuvwxyz0123456789")


def printable(value: object, limit: int = MAX_SHOWN) -> str:
    """A tenant-written value as status, events and logs may show it: a string quoted with every control
    character, escape sequence and invisible formatting character escaped (repr's rules: ESC reads
    `\\x1b`, U+202E `\\u202e`), cut at `limit` characters with its length said; other values by type."""
    if isinstance(value, str):
        if len(value) <= limit:
            return repr(value)
        return f"{value[:limit]!r}… ({len(value):,} characters)"
    if value is None or isinstance(value, (bool, int, float)):
        text = repr(value)  # an int's repr is bounded by Python's 4,300-digit limit
        return text if len(text) <= limit else f"{text[:limit]}… ({len(text):,} characters)"
    return f"a {type(value).__name__}"


_PLAIN = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


def shown(value: object, limit: int = MAX_SHOWN) -> str:
    """A tenant-written word for a status field (`scope.type`): itself when it is plain (letters, digits,
    `.`, `_`, `-`, at most `limit`), else `printable(value)`, which cannot pass for a plain one."""
    if isinstance(value, str) and 0 < len(value) <= limit and set(value) <= _PLAIN:
        return value
    return printable(value, limit)


def dns_subdomain_problem(name: str) -> str | None:
    """Why `name` is not a DNS-1123 subdomain (what Kubernetes accepts as a pod's `schedulerName`), or
    None. Lowercase letters, digits, `-` and `.`, labels starting and ending with a letter or digit,
    at most 253 characters; checked with set operations, never a regex."""
    if not name:
        return "it is empty"
    if len(name) > MAX_DNS_SUBDOMAIN:
        return f"it is {len(name):,} characters, more than the {MAX_DNS_SUBDOMAIN} of a DNS-1123 subdomain"
    for label in name.split("."):
        if not label or not set(label) <= _DNS_CHARS or label[0] not in _ALNUM or label[-1] not in _ALNUM:
            return ("it is not a DNS-1123 subdomain (lowercase letters, digits, '-' and '.', starting and ending "
                    "with a letter or digit), so Kubernetes refuses it as a pod's schedulerName")
    return None


def load_json(text: str | bytes, limit: int) -> Any:
    """json.loads of tenant-written JSON: Refused past `limit` characters (unread); JSON nested deeper
    than Python's recursion allows is a ValueError, like any other malformed JSON (json's C decoder
    raises RecursionError there, which no caller of a parser expects)."""
    if len(text) > limit:
        raise Refused(f"refused as untrusted input: {len(text):,} characters of JSON (at most {limit:,})")
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("JSON nested deeper than the operator reads") from None


# ---------------------------------------------------------------- the registry


@dataclass(frozen=True)
class Parser:
    function: str               # module.function in core/
    reads: str                  # which tenant-written text, in which objects
    bound: str                  # what is read at most (docs/threat-model.md says the same)
    refusal: str                # where a refusal shows
    sites: tuple[str, ...] = ()  # module.name globs of the regexes and helpers whose text-reading calls are its


PARSERS: tuple[Parser, ...] = (
    Parser("scheduler.slurm_conf.slurm_kill_wait",
           "every ConfigMap key ending in slurm.conf in the scheduler's namespace (KillWait, Include)",
           "1 MiB a key, 64 KiB a line", "SchedulerReady InputRefused naming the ConfigMap and key; the key is skipped"),
    Parser("scheduler.conf.parse_scheduler_args",
           "the scheduler pods' `scheduler` container: command, args, env (--scheduler-name, --slurm-kill-wait)",
           "what scheduler.argv.expand passes (256 KiB a container)",
           "SchedulerReady InputRefused naming the pod, container and argument; the argument is skipped",
           ("scheduler.conf._SPACE",)),
    Parser("scheduler.conf.parse_scheduler_conf", "scheduler.conf's strings: scheduler.name, a kill-wait, scope.type",
           "the YAML guard's (untrusted.load), then each value's own (a name 253, a duration 64 characters)",
           "SchedulerReady InputRefused naming the ConfigMap, key and field; the other fields are still read"),
    Parser("units.parse_go_duration",
           "--slurm-kill-wait in the scheduler's args, kill-wait strings in scheduler.conf, spec durations",
           "64 characters", "SchedulerReady InputRefused naming the pod, container and argument (or ConfigMap and "
           "key); the spec's are bounded by the CRD first", ("units._DIGITS", "units._UNIT")),
    Parser("scheduler.argv.expand", "$(VAR) references in the scheduler container's command, args and env values",
           "128 KiB an argument, 256 KiB a container, counted before anything is built",
           "SchedulerReady InputRefused naming the pod, container and argument; the argument is skipped"),
    Parser("scheduler.argv.shell_words", "`sh -c` strings in the scheduler container's command and args",
           "what expansion passed (256 KiB a container)", "as scheduler.argv.expand",
           ("scheduler.argv._PIECE", "scheduler.argv._BLANKS", "scheduler.argv._DQ_ESCAPE")),
    Parser("untrusted.load", "scheduler.conf (discovery and scope target), an Application's helm.values, the Flux "
           "values ConfigMap", "1 MiB, 50,000 nodes, 100 levels, no alias, integers of 4,300 characters",
           "ScopeSynced DocumentRefused, SchedulerReady InputRefused",
           ("untrusted.*", "scope.yaml_splice.*")),
    Parser("tenant_text.dns_subdomain_problem", "the scheduler's name from scheduler.conf or --scheduler-name",
           "253 characters", "SchedulerReady InputRefused; the name is not used or reported"),
    Parser("scope.ledger.decode", "the scope ledger annotation on the tenant's own target (JSON, or zlib: + base64)",
           "the annotation (256 KiB), 8 MiB inflated, nesting within Python's recursion limit",
           "read as unreadable and rebuilt (docs/threat-model.md)", ("tenant_text.load_json",)),
    Parser("slurm.facts.token_problem", "the Slurm JWT in the binding's Secret (its claims, decoded before sending)",
           "8 KiB", "SlurmReady names the Secret, never the value", ("slurm.facts._unb64",)),
    Parser("pods.parse_time", "timestamps, the rolled-at annotation on the scheduler's pod template",
           "64 characters", "read as absent"),
    Parser("units.parse_quantity", "resource quantities of tenant pods (checked by the API server first)",
           "128 characters", "read as invalid", ("units._GRAMMAR",)),
    Parser("scope.membership.compile_matcher", "spec.sandboxNamespaces.names globs, matched against namespace names",
           "the CRD: 64 globs of 63 characters, at most five `*`; names of 63", "the CRD refuses the binding"),
    Parser("tenancy.url_problem", "spec.runner.apiURL, spec.slurm.restAPI.url",
           "the CRD: 2,048 characters", "NotAllowed naming the field",
           ("tenancy._NETLOC", "tenancy._PATH")),
    Parser("selectors.to_label_selector_string", "the binding's label selectors, rendered for a LIST",
           "the CRD: 16 requirements of 64 values", "listed unfiltered, matched in process", ("selectors._RENDERABLE",)),
    Parser("selectors.parse_selector_string", "the admin's --sandbox-namespace-selector and the doctor's selector "
           "flags (not tenant-written, read by the same rules)", "linear in the text", "the setting is refused",
           ("selectors._SET", "selectors._VALUE", "selectors._EQUALS", "selectors._ABSENT", "selectors._KEY")),
)

# Calls that parse text, but not text a tenant writes, or only through a bounded one-pass C decoder.
NOT_TENANT_TEXT: dict[str, str] = {
    "tenancy._SYSTEM": "the operator's own system-namespace globs",
    "tenancy.TenancyPolicy.may_reach": "the admin's --allow-reach globs",
    "tenancy.TenancyPolicy.grant_bound": "the admin's --allow-grant globs",
    "redact.*": "exception text and log lines: cut to 4 KiB before the quote and control passes (elide_quoted, "
                "clean); the secret pattern is an alternation of at most MAX_FRAGMENTS escaped literals",
    "policy.contention._epoch": "the operator's own status.policy.contention times (fromisoformat, C, one pass)",
    "policy.handoff.*": "the names of the binding's desired policy fields (the operator's keys, the CRD-bounded "
                        "annotation keys): one-pass patterns without nested quantifiers",
    "policy.ownership.from_json": "the operator's own record ConfigMap, in its own namespace",
    "scope.slo.created_at": "a namespace's creationTimestamp, which the API server writes (fromisoformat, C, one pass)",
    "operator_settings.decode": "the settings the leader publishes in its own namespace (MAX_BYTES, read by the doctor)",
    "policy.paths.*": "paths the operator formatted itself (format_path) into its record and status",
    "adapters/kube.Kube.read_secret_key": "a Secret value base64-decoded by C in one pass; used as a token, never parsed",
    "adapters/kubeconfig.*": "the admin's kubeconfig",
    "adapters/kubehttp.*": "the API server's JSON: orjson, C, one pass, nesting at most 1,024",
    "adapters/informer.Informer.list": "a LIST page of the API server (orjson or the page decoder, C, one pass)",
    "adapters/podwire.*": "the API server's pod pages: msgspec and orjson, C, one pass",
    "adapters/runnerapi/*": "the runner API emulator's own settings (tests, demo)",
    "adapters/slurmrest.*": "slurmrestd's answers, from a URL the admin allowed (the Slurm client's own bounds)",
}
