"""What another owner of the runner policy must carry, written out for that owner (pure).

When the policy has a second declarative owner (Terraform's `coreweave_sandbox_managed_runner`, a
GitOps pipeline calling `cwic`), the operator's keys must live in that owner's desired policy, or
that owner must leave the policy alone. This module renders the binding's keys both ways:

* as a policy fragment in JSON, as the runner API and `cwic` take it;
* as the block to add to the Terraform resource's `policy` (HCL, the API's field names in
  snake_case as the provider's attributes are; annotation keys are map keys, quoted);
* and the opposite hand-off, `lifecycle { ignore_changes = [policy] }`.

Every rendering is bounded (`MAX_CHARS`): the values come from the spec (bounded by the CRD) and
from the scheduler's discovered name (tenant-written).
"""

from __future__ import annotations

import json
import re
from typing import Any

from .policy import Desired
from .policy_paths import _MISSING, PolicyError, _get, parse_path

MAX_CHARS = 4096
TERRAFORM_RESOURCE = "coreweave_sandbox_managed_runner"
IGNORE_POLICY = "lifecycle { ignore_changes = [policy] }"
# Fields whose keys are data (annotation keys, labels): quoted as they are, never renamed.
_MAP_FIELDS = frozenset({"annotations", "labels", "nodeSelector"})
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_SHOWN = 80  # characters of a value found in the policy, in a message


def tree(want: Desired) -> dict[str, Any]:
    """The desired paths as one nested policy document."""
    doc: dict[str, Any] = {}
    for text, value in want.values.items():
        path = parse_path(text)
        node = doc
        for seg in path[:-1]:
            node = node.setdefault(seg, {})
        node[path[-1]] = value
    return doc


def _bounded(text: str) -> str:
    if len(text) <= MAX_CHARS:
        return text
    return text[:MAX_CHARS] + f"… (cut: {len(text)} characters; status.policy.owned has every value)"


def as_json(want: Desired) -> str:
    return _bounded(json.dumps(tree(want), ensure_ascii=False, separators=(",", ":")))


def snake(name: str) -> str:
    """schedulerName -> scheduler_name (protoc's field name, as the Terraform provider spells attributes)."""
    return _CAMEL.sub("_", name).lower()


def hcl_string(value: str) -> str:
    """An HCL quoted string: escapes, and `${` / `%{` kept literal (no interpolation or directive)."""
    out = []
    for ch in value:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif ch == "\t":
            out.append("\\t")
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out).replace("${", "$${").replace("%{", "%%{") + '"'


def _hcl(value: Any, keys_are_data: bool = False) -> str:
    if not isinstance(value, dict):
        return hcl_string(str(value))
    items = []
    for key, child in value.items():
        name = key if keys_are_data else snake(key)
        shown = name if not keys_are_data and _IDENT.fullmatch(name) else hcl_string(name)
        items.append(f"{shown} = {_hcl(child, not keys_are_data and key in _MAP_FIELDS)}")
    return "{ " + ", ".join(items) + " }"


def as_hcl(want: Desired) -> str:
    """`policy = { base = { ... } }`: the block to merge into the Terraform resource's policy."""
    return _bounded("policy = " + _hcl(tree(want)))


def show(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= _SHOWN else text[:_SHOWN] + "…"


def missing(current: Any, want: Desired) -> list[str]:
    """Each desired path the policy does not hold with our value: `path (wants "v")` or
    `path (is "x", wants "v")`, in the desired order."""
    out = []
    for text, value in want.values.items():
        try:
            found = _get(current, parse_path(text))
        except PolicyError:
            continue
        if found == value:
            continue
        wanted = f"wants {show(value)}"
        out.append(f"{text} ({wanted})" if found is _MISSING or found is None else f"{text} (is {show(found)}, {wanted})")
    return out


def carry(want: Desired) -> str:
    """What the policy's other owner must carry: the JSON fragment, then the Terraform block."""
    return f"{as_json(want)} (Terraform: merge into the {TERRAFORM_RESOURCE} resource: {as_hcl(want)})"


def listed(items: list[str], limit: int = 6) -> str:
    """A bounded list for a message: the first `limit`, then how many more."""
    shown = "; ".join(items[:limit])
    return shown + (f"; and {len(items) - limit} more" if len(items) > limit else "")
