"""`render-policy`: what the operator would write into a runner policy, computed offline.

    sunk-sandbox-operator render-policy --binding B.yaml --policy CURRENT.json [--scheduler-name N]

Prints the merged policy (JSON, indent 2) on stdout, warnings and a diff on stderr; exit 0.
Exit 2 with a one-line error for an unreadable or invalid binding, JSON or policy, or an
unknown scheduler name. `render` is the pure part; `main` only reads files and prints.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from typing import Any, Sequence

import yaml
from pydantic import ValidationError

from .api.keys import KIND
from .api.spec import BindingSpec, parse_spec
from .core.policy.merge import PolicyError, desired_fields, diff, merge, validate_policy

PROG = "sunk-sandbox-operator render-policy"
# Keys of a GetManagedRunner response (or UpdateManagedRunner body); a bare policy has none.
_RUNNER_KEYS = {"policy", "etag", "identity", "runnerId", "managedRunner"}
_POLICY_KEYS = {"base", "constraints"}


class RenderError(ValueError):
    """Bad input for render-policy; the message is the one line shown to the user."""


@dataclass(frozen=True)
class Rendered:
    policy: dict | None
    warnings: list[str]
    diff: list[str]
    changed: bool


# ---------------------------------------------------------------- pure parts


def format_validation_error(err: ValidationError, root: str = "spec") -> str:
    """Pydantic errors as 'spec.slurm.exclusive: Input should be ...', joined on one line."""
    parts = []
    for e in err.errors():
        where = root
        for loc in e["loc"]:
            where += f"[{loc}]" if isinstance(loc, int) else f".{loc}"
        msg = str(e["msg"]).removeprefix("Value error, ")
        parts.append(f"{where}: {msg}")
    return "; ".join(parts)


def binding_spec(docs: Sequence[Any], label: str) -> BindingSpec:
    """The validated spec of the one SunkSandboxBinding among the YAML documents."""
    docs = [d for d in docs if d is not None]
    if len(docs) > 1:
        docs = [d for d in docs if isinstance(d, dict) and d.get("kind") == KIND]
    if len(docs) != 1:
        raise RenderError(f"binding {label}: expected exactly one {KIND} document, found {len(docs)}")
    doc = docs[0]
    if not isinstance(doc, dict):
        raise RenderError(f"binding {label}: expected a {KIND} manifest (a YAML mapping)")
    if doc.get("kind", KIND) != KIND:
        raise RenderError(f"binding {label}: kind is {doc.get('kind')!r}, expected {KIND}")
    spec = doc.get("spec")
    if not isinstance(spec, dict):
        raise RenderError(f"binding {label}: no spec mapping (expected a full {KIND} manifest)")
    try:
        return parse_spec(spec)
    except ValidationError as e:
        raise RenderError(f"binding {label}: invalid: {format_validation_error(e)}") from None


def unwrap_policy(doc: Any) -> Any:
    """The policy from a bare policy document or a GetManagedRunner response."""
    if not isinstance(doc, dict) or doc.keys() & _POLICY_KEYS:
        return doc
    if isinstance(doc.get("managedRunner"), dict):
        doc = doc["managedRunner"]
    if doc.keys() & _RUNNER_KEYS:
        return doc.get("policy")  # a response without `policy`: never configured (null)
    return doc


def render(spec: BindingSpec, policy: Any, scheduler_name: str | None, label: str = "policy") -> Rendered:
    """Merge the binding's fields into policy exactly as the operator would on first write."""
    try:
        validate_policy(policy)
    except PolicyError as e:
        # "policy base.spec: ..." -> "policy FILE: base.spec: ..." (the label already says policy)
        msg = str(e).removeprefix("policy: ").removeprefix("policy ")
        raise RenderError(f"{label}: {msg}") from None
    name = scheduler_name or spec.scheduler.name
    if not name:
        raise RenderError("scheduler name unknown: pass --scheduler-name or set spec.scheduler.name")
    try:
        result = merge(policy, desired_fields(spec, name), client_annotations=spec.client_annotations)
    except PolicyError as e:
        raise RenderError(str(e)) from None
    return Rendered(result.policy, result.warnings, diff(policy, result.policy), result.changed)


# ---------------------------------------------------------------- shell


def _read(path: str, what: str) -> tuple[str, str]:
    if path == "-":
        return sys.stdin.read(), "<stdin>"
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read(), path
    except OSError as e:
        raise RenderError(f"{what} {path}: cannot read: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise RenderError(f"{what} {path}: not UTF-8 text: {e.reason}") from None


def _load_binding(path: str) -> BindingSpec:
    text, label = _read(path, "binding")
    try:
        docs = list(yaml.safe_load_all(text))
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise RenderError(f"binding {label}: invalid YAML{where}: {problem}") from None
    return binding_spec(docs, label)


def _load_policy(path: str) -> tuple[Any, str]:
    text, label = _read(path, "policy")
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise RenderError(f"policy {label}: invalid JSON: {e}") from None
    return unwrap_policy(doc), label


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Print the runner policy the operator would write for a binding (nothing is sent).",
    )
    p.add_argument("--binding", required=True, metavar="B.yaml", help="SunkSandboxBinding manifest")
    p.add_argument("--policy", required=True, metavar="CURRENT.json",
                   help="current policy: bare JSON, null, or a GetManagedRunner response; - for stdin")
    p.add_argument("--scheduler-name", default=None, metavar="N",
                   help="SUNK scheduler name (default: spec.scheduler.name)")
    return p


def main(argv: list[str] | None = None) -> int:
    try:
        args = _parser().parse_args(argv)
    except SystemExit as e:  # argparse already printed usage or help
        return e.code if isinstance(e.code, int) else 2
    try:
        spec = _load_binding(args.binding)
        policy, label = _load_policy(args.policy)
        out = render(spec, policy, args.scheduler_name, label=f"policy {label}")
    except RenderError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(out.policy, indent=2, ensure_ascii=False))
    for w in out.warnings:
        print(f"warning: {w}", file=sys.stderr)
    if out.changed:
        print("diff (current -> rendered):", file=sys.stderr)
        for line in out.diff:
            print(f"  {line}", file=sys.stderr)
    else:
        print("no change: the policy already holds these fields", file=sys.stderr)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
