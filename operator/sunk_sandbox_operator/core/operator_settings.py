"""The operator's tenancy settings as it publishes them, so that `doctor` judges with them (pure).

The leader writes them at the start of each leadership term into a ConfigMap of its own namespace
(adapters/settings.py); `doctor` reads them back when it is given no settings of its own. What is
published is what decides what bindings may ask (core/tenancy.py) and the resync floor: the allowed
runner API and slurmrestd URLs, the reach and grant allowances, the grantable roles, the match-all
switch, the namespace bound, the operator's namespace, the minimum resync interval. Never a secret:
these are the admin's flags, which say where tokens may go, never a token.

The document is read by a person's tool from a ConfigMap only admins and the operator may write, but
it is still parsed as untrusted text: bounded by the ConfigMap's size (1 MiB), checked field by field,
an error naming the field; fields it does not know are ignored and missing ones keep the default (an
operator and a doctor of different versions still understand each other).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Mapping

KEY = "settings.json"
MAX_BYTES = 1 << 20  # a ConfigMap's own bound


@dataclass(frozen=True)
class Published:
    allowed_api_urls: tuple[str, ...] | None = None
    allowed_slurm_urls: tuple[str, ...] | None = None
    allowed_reach: Mapping[str, tuple[str, ...]] | None = None
    allowed_grants: Mapping[str, tuple[str, ...]] | None = None
    allowed_grant_roles: tuple[str, ...] | None = None
    allow_match_all: bool | None = None
    sandbox_namespace_selector: str | None = None
    min_resync_seconds: float | None = None
    operator_namespace: str | None = None
    # Who published them, and when: said by the doctor.
    published_at: str = ""
    published_by: str = ""
    version: str = ""
    unknown: tuple[str, ...] = field(default=())  # fields of a newer operator, ignored

    def settings(self) -> dict[str, Any]:
        """The settings given (None: not in the document), by Config field name."""
        return {name: value for name in _FIELDS if (value := getattr(self, name)) is not None}


# Config field name -> (document key, kind)
_FIELDS: dict[str, tuple[str, str]] = {
    "allowed_api_urls": ("allowedAPIURLs", "strings"),
    "allowed_slurm_urls": ("allowedSlurmURLs", "strings"),
    "allowed_reach": ("allowedReach", "globs"),
    "allowed_grants": ("allowedGrants", "globs"),
    "allowed_grant_roles": ("allowedGrantRoles", "strings"),
    "allow_match_all": ("allowMatchAll", "bool"),
    "sandbox_namespace_selector": ("sandboxNamespaceSelector", "string"),
    "min_resync_seconds": ("minResyncSeconds", "number"),
    "operator_namespace": ("operatorNamespace", "string"),
}
_ABOUT = {"publishedAt": "published_at", "publishedBy": "published_by", "version": "version"}


def encode(p: Published) -> dict[str, str]:
    """The ConfigMap's data."""
    doc: dict[str, Any] = {key: {k: list(v) for k, v in value.items()} if kind == "globs" else
                           list(value) if kind == "strings" else value
                           for name, (key, kind) in _FIELDS.items() if (value := getattr(p, name)) is not None}
    doc.update({key: getattr(p, attr) for key, attr in _ABOUT.items()})
    return {KEY: json.dumps(doc, indent=1, sort_keys=True)}


def _strings(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{where}: expected a list of strings")
    return tuple(value)


def _value(kind: str, value: Any, where: str) -> Any:
    if kind == "strings":
        return _strings(value, where)
    if kind == "globs":
        if not isinstance(value, dict):
            raise ValueError(f"{where}: expected an object of namespace globs to lists of globs")
        return {str(k): _strings(v, f"{where}.{k}") for k, v in value.items()}
    if kind == "bool":
        if not isinstance(value, bool):
            raise ValueError(f"{where}: expected true or false")
        return value
    if kind == "number":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise ValueError(f"{where}: expected a number of seconds, not negative")
        return float(value)
    if not isinstance(value, str):
        raise ValueError(f"{where}: expected a string")
    return value


def decode(data: Mapping[str, Any] | None) -> Published:
    """The settings in a ConfigMap's data; ValueError naming what is wrong."""
    text = (data or {}).get(KEY)
    if not isinstance(text, str):
        raise ValueError(f"no key {KEY}")
    if len(text.encode()) > MAX_BYTES:
        raise ValueError(f"{KEY} is larger than {MAX_BYTES} bytes")
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"{KEY} is not JSON: {exc.__class__.__name__} at line {getattr(exc, 'lineno', '?')}") from None
    if not isinstance(doc, dict):
        raise ValueError(f"{KEY} is not a JSON object")
    given: dict[str, Any] = {}
    for name, (key, kind) in _FIELDS.items():
        if key in doc:
            given[name] = _value(kind, doc[key], f"{KEY}: {key}")
    for key, attr in _ABOUT.items():
        if key in doc:
            given[attr] = _value("string", doc[key], f"{KEY}: {key}")
    known = {key for key, _ in _FIELDS.values()} | set(_ABOUT)
    return Published(**given, unknown=tuple(sorted(str(k) for k in doc if k not in known)))
