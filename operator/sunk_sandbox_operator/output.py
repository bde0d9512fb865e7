"""`-o text|json|yaml` for every command that prints (doctor, why, version, crd): one way to print a document."""

from __future__ import annotations

import json
import sys
from typing import Any, Callable, TypeVar

import yaml

OUTPUTS = ("text", "json", "yaml")
T = TypeVar("T")


def render(doc: Any, output: str) -> str:
    """`doc` as JSON (indent 2) or YAML (keys in the order given, Unicode kept), ending with a newline."""
    if output == "yaml":
        return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True, default_flow_style=False)
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"


def read_or_exit_code(prog: str, read: Callable[[], T], not_found: type[Exception]) -> T | int:
    """What `read` returns, or the exit code after one line on stderr: 1 when the object asked for is
    not there (`not_found`), 2 when the cluster cannot be read (no kubeconfig, no API server)."""
    from .adapters.kube import KubeError
    from .adapters.kubeconfig import ConfigError
    from .core.redact import describe

    try:
        return read()
    except not_found as exc:
        print(f"{prog}: {describe(exc)}", file=sys.stderr)  # our own exception: its text is kept
        return 1
    except (KubeError, ConfigError) as exc:
        print(f"{prog}: cannot read the cluster: {describe(exc)}", file=sys.stderr)
        return 2
