"""The admission decision for a SunkSandboxBinding (pure): AdmissionReview request in, answer out.

    skip     DELETE / CONNECT, and an UPDATE that leaves the spec as it was (status, finalizer,
             label and annotation patches are never blocked, whatever the spec says)
    deny     a spec that does not parse (the model's message), or one that `tenancy.violations`
             refuses: every violation, each naming the field and the fix (403)
    warn     allowed, with admission warnings from cross-object facts the caller gathered
             (`Facts`): an older binding already manages the runner, other bindings write the same
             scope target, the token Secret does not exist yet or lacks the key

The controller asks `tenancy.violations` too and stays the authority: the webhook is optional and
fails open (failurePolicy Ignore), so nothing here is the last line. A fact that could not be
gathered is Unknown and produces no warning, or a mild one (the operator may not read Secrets in
that namespace: it will not be able to use the token either). No Secret value is ever an input.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from ..api import keys
from ..api.spec import BindingSpec, parse_spec
from . import conflicts, tenancy
from .redact import describe

SKIPPED_OPERATIONS = ("DELETE", "CONNECT")
NEWEST = "\uffff"  # the age of an object without creationTimestamp: younger than every stored binding


@dataclass(frozen=True)
class Request:
    """The part of an AdmissionReview v1 `request` this webhook reads."""

    uid: str
    operation: str                      # CREATE | UPDATE | DELETE | CONNECT
    namespace: str
    name: str
    group: str
    kind: str
    object: dict[str, Any] | None = None
    old_object: dict[str, Any] | None = None


def parse_request(review: dict[str, Any]) -> Request:
    """ValueError when the body is not an AdmissionReview with a request uid."""
    request = (review or {}).get("request") if isinstance(review, dict) else None
    if not isinstance(request, dict) or not request.get("uid"):
        raise ValueError("not an AdmissionReview request (no request.uid)")
    obj, old = request.get("object"), request.get("oldObject")
    meta = (obj or old or {}).get("metadata") or {}
    kind = request.get("kind") or {}
    return Request(uid=str(request["uid"]), operation=str(request.get("operation") or ""),
                   namespace=request.get("namespace") or meta.get("namespace") or "",
                   name=request.get("name") or meta.get("name") or meta.get("generateName") or "",
                   group=kind.get("group") or "", kind=kind.get("kind") or "",
                   object=obj if isinstance(obj, dict) else None, old_object=old if isinstance(old, dict) else None)


@dataclass(frozen=True)
class Decision:
    allowed: bool
    message: str = ""                   # why (denied), or why nothing was checked (skipped)
    warnings: tuple[str, ...] = ()
    code: int = 200
    checked: bool = True                # False: skipped without looking at the spec

    @classmethod
    def skip(cls, why: str) -> "Decision":
        return cls(True, why, checked=False)

    @classmethod
    def deny(cls, message: str) -> "Decision":
        return cls(False, message, code=403)


class SecretFact(enum.Enum):
    PRESENT = "present"          # the key exists and is not empty
    MISSING = "missing"          # no such Secret
    NO_KEY = "no-key"            # the Secret exists without the key (or with an empty value)
    FORBIDDEN = "forbidden"      # the operator may not get Secrets in that namespace
    UNKNOWN = "unknown"          # not checked, timed out, or failed otherwise: say nothing


@dataclass(frozen=True)
class Facts:
    """Cross-object facts, read through the Kubernetes API by the caller."""

    bindings: list[dict[str, Any]] | None = None  # every binding as listed (None: not known)
    secret: SecretFact = SecretFact.UNKNOWN        # the spec's runner.tokenSecretRef


@dataclass(frozen=True)
class Screened:
    """After the checks that need nothing but the request: a final answer, or the spec whose
    cross-object facts to gather before `decide`."""

    final: Decision | None
    spec: BindingSpec | None = None


def _ours(req: Request) -> bool:
    return (req.group, req.kind) in (("", ""), (keys.GROUP, keys.KIND))


def _spec_of(obj: dict[str, Any] | None) -> dict[str, Any] | None:
    return (obj or {}).get("spec")


def _pydantic_message(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        where = ".".join(["spec", *(str(p) for p in err.get("loc", ()))])
        parts.append(f"{where}: {err.get('msg', 'invalid')}")
    return "; ".join(parts) or describe(exc)


def screen(req: Request, policy: tenancy.TenancyPolicy) -> Screened:
    """Skip or deny from the request alone; otherwise hand back the parsed spec."""
    if req.operation in SKIPPED_OPERATIONS:
        return Screened(Decision.skip(f"{req.operation}: not checked"))
    if not _ours(req):
        return Screened(Decision.skip(f"{req.group}/{req.kind} is not a {keys.KIND}: not checked"))
    if req.object is None:
        return Screened(Decision.skip("no object in the request: not checked"))
    if req.operation == "UPDATE" and _spec_of(req.object) == _spec_of(req.old_object):
        return Screened(Decision.skip("the spec did not change: not checked"))
    try:
        spec = parse_spec(_spec_of(req.object) or {})
    except ValidationError as exc:
        return Screened(Decision.deny(f"the spec is invalid: {_pydantic_message(exc)}"))
    refused = tenancy.violations(spec, req.namespace, policy)
    if refused:
        return Screened(Decision.deny("not allowed by the operator's settings: "
                                      + "; ".join(v.text() for v in refused)))
    return Screened(None, spec)


def _me(req: Request) -> dict[str, Any]:
    """The object as the listed bindings look, with an age: a new one is younger than all."""
    obj = req.object or {}
    meta = {**(obj.get("metadata") or {}), "namespace": req.namespace, "name": req.name}
    meta.setdefault("creationTimestamp", NEWEST)
    if not meta["creationTimestamp"]:
        meta["creationTimestamp"] = NEWEST
    return {**obj, "metadata": meta}


def _target_text(key: tuple[str, ...]) -> str:
    return " ".join(str(part) for part in key if part)


def warnings(req: Request, spec: BindingSpec, facts: Facts, policy: tenancy.TenancyPolicy | None = None) -> list[str]:
    """Admission warnings (the object is allowed): what the controller will find once it exists."""
    out: list[str] = []
    role = spec.scope.grant_cluster_role
    if role and policy is not None and policy.grant_bound(req.namespace) is None:
        out.append(f"spec.scope.grantClusterRole {role}: the operator's admin lets bindings in {req.namespace} grant in "
                   "no namespace (--allow-grant / SSB_ALLOWED_GRANTS), so no RoleBinding will be made (ScopeSynced=False "
                   "GrantsNotAllowed): ask the admin, or grant the scheduler through the Slurm chart")
    if facts.bindings is not None:
        me = _me(req)
        others = [b for b in facts.bindings if conflicts.ref(b) != conflicts.ref(me)]
        owner = conflicts.older_owner(me, others)
        if owner:
            out.append(f"runner {spec.runner.id} is already bound by binding {owner} (older): this binding will "
                       "write nothing (RunnerConflict) while that one exists; delete one of them")
        key = conflicts.target_key(me)
        sharing = sorted(conflicts.ref(b) for b in others if conflicts.target_key(b) == key)
        disagree = conflicts.shared_target_conflict(me, others) if sharing else None
        if disagree:
            out.append(f"{disagree} (until then this binding writes nothing to the scope target)")
        elif sharing:
            out.append(f"the scope target ({_target_text(key)}) is also written by {', '.join(sharing)}: the "
                       "namespace lists are merged")
    ref = spec.runner.token_secret_ref
    secret = f"{req.namespace}/{ref.name}"
    if facts.secret is SecretFact.MISSING:
        out.append(f"Secret {secret} (spec.runner.tokenSecretRef) does not exist yet: the binding stays "
                   f"PolicySynced=False CredentialsMissing until it is created with the token under key {ref.key!r}")
    elif facts.secret is SecretFact.NO_KEY:
        out.append(f"Secret {secret} has no key {ref.key!r} (or it is empty): add it, or set "
                   "spec.runner.tokenSecretRef.key")
    elif facts.secret is SecretFact.FORBIDDEN:
        out.append(f"the operator may not read Secrets in namespace {req.namespace}, so {secret} was not checked and "
                   "cannot be used: grant it with a RoleBinding to the ClusterRole sunk-sandbox-operator-secret-reader")
    return out


def admitted(req: Request, spec: BindingSpec, facts: Facts, policy: tenancy.TenancyPolicy | None = None) -> Decision:
    """A screened request is allowed, with the warnings its facts (and the settings) give."""
    return Decision(True, warnings=tuple(warnings(req, spec, facts, policy)))


def decide(req: Request, policy: tenancy.TenancyPolicy, facts: Facts | None = None) -> Decision:
    """The whole decision in one call (facts None: nothing known, so no warnings)."""
    screened = screen(req, policy)
    if screened.final is not None or screened.spec is None:
        return screened.final or Decision.skip("nothing to check")
    return admitted(req, screened.spec, facts or Facts(), policy)


def response(uid: str, decision: Decision) -> dict[str, Any]:
    """The AdmissionReview v1 answer the API server expects."""
    answer: dict[str, Any] = {"uid": uid, "allowed": decision.allowed}
    if not decision.allowed:
        answer["status"] = {"code": decision.code, "reason": "Forbidden", "message": decision.message}
    if decision.warnings:
        answer["warnings"] = list(decision.warnings)
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": answer}
