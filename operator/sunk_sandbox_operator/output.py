"""`-o text|json|yaml` for every command that prints (doctor, why, version, crd): one way to print a document."""

from __future__ import annotations

import json
from typing import Any

import yaml

OUTPUTS = ("text", "json", "yaml")


def render(doc: Any, output: str) -> str:
    """`doc` as JSON (indent 2) or YAML (keys in the order given, Unicode kept), ending with a newline."""
    if output == "yaml":
        return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True, default_flow_style=False)
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"
