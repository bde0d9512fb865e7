"""The Helm chart's generated parts, kept equal to their one source.

- `crds/sunksandboxbindings.yaml` (rendered from the models by `sunk-sandbox-operator crd`) is also
  the chart's `templates/crd.yaml`, behind `crds.enabled` and with `crds.keep`'s annotation: a
  template, so `helm upgrade` upgrades it (Helm never touches a chart's `crds/` after the install);
- `manifests/monitoring/` (the PrometheusRule and the Grafana dashboard) is also the chart's
  `files/`;
- the chart's `appVersion` is the package's `__version__`;
- docs/configuration.md's values table and the chart's `values.schema.json` are rendered from the `# --` comments
  of the chart's values.yaml: each documented key, its type (a leading `(type)` in the comment, one
  of TYPES, or the default's) and, for the keys in `enums()`, the values the code accepts. Every
  object that is not a documented value itself has `additionalProperties: false`, so a misspelt key
  fails `helm install` and `helm lint`.

`python -m sunk_sandbox_devtools chart sync` (`make chart-sync`) writes them all;
tests/unit/test_chart.py fails when one has drifted.
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
CHART = REPO_ROOT / "charts" / "sunk-sandbox-operator"
README = REPO_ROOT / "docs" / "configuration.md"  # the page holding the chart values table
# (source, copy in the chart)
COPIES = (
    (REPO_ROOT / "manifests" / "monitoring" / "prometheusrule.yaml", CHART / "files" / "prometheusrule.yaml"),
    (REPO_ROOT / "manifests" / "monitoring" / "sunk-sandbox-operator.json", CHART / "files" / "sunk-sandbox-operator.json"),
)
CRD = REPO_ROOT / "crds" / "sunksandboxbindings.yaml"
CRD_TEMPLATE = CHART / "templates" / "crd.yaml"
SCHEMA = CHART / "values.schema.json"
TABLE_BEGIN = "<!-- chart-values:begin (make chart-sync writes this table from charts/sunk-sandbox-operator/values.yaml) -->"
TABLE_END = "<!-- chart-values:end -->"
_KEY = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z0-9_.-]+):(?:\s|$)")
_APP_VERSION = re.compile(r'^appVersion: .*$', re.M)
_HINT = re.compile(r"^\((?P<type>[a-z ]+)\)\s*")

_STRINGS = {"type": "array", "items": {"type": "string"}}
# The types a `# -- (type)` comment may name, as JSON schema.
TYPES: dict[str, dict[str, Any]] = {
    "string": {"type": "string"},
    "int": {"type": "integer"},
    "number or null": {"type": ["number", "null"]},
    "int or string": {"type": ["integer", "string"]},
    "port": {"type": "integer", "minimum": 1, "maximum": 65535},
    "bool": {"type": "boolean"},
    "object": {"type": "object"},
    "list": {"type": "array"},
    "list of strings": _STRINGS,
    "list of objects": {"type": "array", "items": {"type": "object"}},
    "map of strings": {"type": "object", "additionalProperties": {"type": "string"}},
    "map of string lists": {"type": "object", "additionalProperties": _STRINGS},
}


@dataclass(frozen=True)
class Row:
    key: str
    default: Any
    description: str
    type: str


def inferred_type(key: str, default: Any) -> str:
    if isinstance(default, bool):
        return "bool"
    if isinstance(default, int):
        return "int"
    if isinstance(default, str):
        return "string"
    if isinstance(default, dict):
        return "object"
    if isinstance(default, list) and default and all(isinstance(v, str) for v in default):
        return "list of strings"
    raise ValueError(f"values.yaml: {key}: its default {default!r} does not show its type; start its `# --` "
                     f"comment with one of ({'), ('.join(TYPES)})")


def documented_values(text: str) -> list[Row]:
    """Every key preceded by a `# --` comment (helm-docs' convention; continuation lines are `#`
    comments right after it), with its default from the parsed document and its type: the comment's
    leading `(type)`, else the default's."""
    values = yaml.safe_load(text) or {}
    rows: list[Row] = []
    stack: list[tuple[int, str]] = []
    pending: list[str] | None = None
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("# --"):
            pending = [stripped[4:].strip()]
            continue
        if stripped.startswith("#"):
            if pending is not None:
                pending.append(stripped[1:].strip())
            continue
        match = _KEY.match(line)
        if not match or stripped.startswith("-"):
            if stripped:
                pending = None
            continue
        indent = len(match["indent"])
        while stack and stack[-1][0] >= indent:
            stack.pop()
        stack.append((indent, match["key"]))
        if pending is not None:
            path = [k for _, k in stack]
            node: Any = values
            for part in path:
                node = node[part]
            key, description = ".".join(path), " ".join(pending)
            hint = _HINT.match(description)
            if hint and hint["type"] not in TYPES:
                raise ValueError(f"values.yaml: {key}: unknown type ({hint['type']}); one of ({'), ('.join(TYPES)})")
            kind = hint["type"] if hint else inferred_type(key, node)
            rows.append(Row(key, node, description[hint.end():] if hint else description, kind))
            pending = None
    return rows


def cli_choices(flag: str) -> tuple[str, ...]:
    """The choices `sunk-sandbox-operator run` accepts for FLAG, as its `--help` lists them."""
    import contextlib
    import io

    sys.path.insert(0, str(REPO_ROOT / "operator"))
    from sunk_sandbox_operator.__main__ import _run

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
        _run(["--help"])
    found = re.search(re.escape(flag) + r" \{([^}]+)\}", out.getvalue())
    if not found:
        raise ValueError(f"`sunk-sandbox-operator run --help` lists no choices for {flag}")
    return tuple(found[1].split(","))


def enums() -> dict[str, tuple[str, ...]]:
    """Values with a closed set: the operator's own (from its command line), and the API's."""
    return {
        "logFormat": cli_choices("--log-format"),
        "image.pullPolicy": ("Always", "IfNotPresent", "Never"),
        "webhook.failurePolicy": ("Ignore", "Fail"),
    }


def values_schema(text: str | None = None, closed: dict[str, tuple[str, ...]] | None = None) -> dict[str, Any]:
    """values.schema.json: the documented keys and their types (and enums); every object that is not a
    documented value of its own accepts no other key."""
    rows = documented_values((CHART / "values.yaml").read_text() if text is None else text)
    closed = enums() if closed is None else closed
    root: dict[str, Any] = {"type": "object", "additionalProperties": False, "properties": {}}
    for row in rows:
        node = root
        *parents, leaf = row.key.split(".")
        for part in parents:
            node = node["properties"].setdefault(part, {"type": "object", "additionalProperties": False,
                                                          "properties": {}})
        schema = {"description": row.description, **TYPES[row.type]}
        if row.key in closed:
            if row.default not in closed[row.key]:
                raise ValueError(f"values.yaml: {row.key}: default {row.default!r} is not one of {closed[row.key]}")
            schema["enum"] = list(closed[row.key])
        node["properties"][leaf] = schema
    unknown = set(closed) - {row.key for row in rows}
    if unknown:
        raise ValueError(f"enums for values that are not documented: {sorted(unknown)}")
    # Helm's global values, which a parent chart passes to this one as a dependency.
    root["properties"]["global"] = {"description": "Helm's values for every chart of a release (none read here).",
                                    "type": "object"}
    return {"$schema": "http://json-schema.org/draft-07/schema#", "title": "sunk-sandbox-operator chart values",
            **root}


def schema_text(text: str | None = None) -> str:
    return json.dumps(values_schema(text), indent=2) + "\n"


CRD_HEADER = """\
{{- /* Generated from crds/sunksandboxbindings.yaml by `make chart-sync` (sunk_sandbox_devtools/chart.py):
do not edit. A template, not the chart's crds/, so that `helm upgrade` upgrades it. */ -}}
{{- if .Values.crds.enabled }}
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: %s
  labels:
    {{- include "ssb.labels" . | nindent 4 }}
  {{- if .Values.crds.keep }}
  annotations:
    # Kept by `helm uninstall` (and when crds.enabled is turned off): deleting the CRD deletes every binding.
    helm.sh/resource-policy: keep
  {{- end }}
"""


def crd_template(text: str | None = None) -> str:
    """templates/crd.yaml: the CRD as crds/ holds it, its spec verbatim (any `{{` escaped), under the
    chart's metadata."""
    text = CRD.read_text() if text is None else text
    crd = yaml.safe_load(text)
    if set(crd["metadata"]) != {"name"}:
        raise ValueError(f"{CRD.name}: metadata other than its name ({sorted(crd['metadata'])}): carry it into "
                         "chart.CRD_HEADER")
    spec = text[text.index("\nspec:\n") + 1:].replace("{{", '{{ "{{" }}')
    return CRD_HEADER % crd["metadata"]["name"] + spec.rstrip("\n") + "\n{{- end }}\n"


def _escape(text: str) -> str:
    return text.replace("|", "\\|")


def _cell(value: Any) -> str:
    return "`" + _escape(json.dumps(value, separators=(", ", ": "))) + "`"


def values_table(text: str | None = None, closed: dict[str, tuple[str, ...]] | None = None) -> str:
    rows = documented_values((CHART / "values.yaml").read_text() if text is None else text)
    closed = enums() if closed is None else closed
    lines = ["| Key | Type | Default | Description |", "| --- | --- | --- | --- |"]
    lines += [f"| `{r.key}` | {_escape(' | '.join(closed[r.key]) if r.key in closed else r.type)} | "
              f"{_cell(r.default)} | {_escape(r.description)} |" for r in rows]
    return "\n".join(lines)


def readme_with_table(readme: str, table: str) -> str:
    start, end = readme.index(TABLE_BEGIN) + len(TABLE_BEGIN), readme.index(TABLE_END)
    return readme[:start] + "\n" + table + "\n" + readme[end:]


def readme_table(readme: str) -> str:
    start, end = readme.index(TABLE_BEGIN) + len(TABLE_BEGIN), readme.index(TABLE_END)
    return readme[start:end].strip("\n")


def chart_yaml_with_version(text: str, version: str) -> str:
    return _APP_VERSION.sub(f'appVersion: "{version}"', text, count=1)


def package_version() -> str:
    sys.path.insert(0, str(REPO_ROOT / "operator"))
    from sunk_sandbox_operator import __version__

    return __version__


def sync() -> list[Path]:
    """Write every generated part; return the files that changed."""
    changed = []
    for source, copy in COPIES:
        if not copy.exists() or copy.read_bytes() != source.read_bytes():
            copy.parent.mkdir(parents=True, exist_ok=True)
            copy.write_bytes(source.read_bytes())
            changed.append(copy)
    for path, want in ((CRD_TEMPLATE, crd_template()), (SCHEMA, schema_text())):
        if not path.exists() or path.read_text() != want:
            path.write_text(want)
            changed.append(path)
    chart_yaml = CHART / "Chart.yaml"
    text = chart_yaml.read_text()
    new = chart_yaml_with_version(text, package_version())
    if new != text:
        chart_yaml.write_text(new)
        changed.append(chart_yaml)
    readme = README.read_text()
    new = readme_with_table(readme, values_table())
    if new != readme:
        README.write_text(new)
        changed.append(README)
    return changed


def main(argv: list[str]) -> int:
    if argv != ["sync"]:
        print("usage: python -m sunk_sandbox_devtools chart sync", file=sys.stderr)
        return 2
    for path in sync():
        print(f"wrote {path.relative_to(REPO_ROOT)}")
    return 0
