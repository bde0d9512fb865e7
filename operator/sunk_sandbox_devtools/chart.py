"""The Helm chart's generated parts, kept equal to their one source.

- `crds/sunksandboxbindings.yaml` (rendered from the models by `sunk-sandbox-operator crd`) is also
  the chart's `crds/` file (Helm installs it and never deletes it);
- `manifests/monitoring/` (the PrometheusRule and the Grafana dashboard) is also the chart's
  `files/`;
- the chart's `appVersion` is the package's `__version__`;
- README's values table is rendered from the `# --` comments of the chart's values.yaml.

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
README = REPO_ROOT / "README.md"
# (source, copy in the chart)
COPIES = (
    (REPO_ROOT / "crds" / "sunksandboxbindings.yaml", CHART / "crds" / "sunksandboxbindings.yaml"),
    (REPO_ROOT / "manifests" / "monitoring" / "prometheusrule.yaml", CHART / "files" / "prometheusrule.yaml"),
    (REPO_ROOT / "manifests" / "monitoring" / "sunk-sandbox-operator.json", CHART / "files" / "sunk-sandbox-operator.json"),
)
TABLE_BEGIN = "<!-- chart-values:begin (make chart-sync writes this table from charts/sunk-sandbox-operator/values.yaml) -->"
TABLE_END = "<!-- chart-values:end -->"
_KEY = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z0-9_.-]+):(?:\s|$)")
_APP_VERSION = re.compile(r'^appVersion: .*$', re.M)


@dataclass(frozen=True)
class Row:
    key: str
    default: Any
    description: str


def documented_values(text: str) -> list[Row]:
    """Every key preceded by a `# --` comment (helm-docs' convention; continuation lines are `#`
    comments right after it), with its default from the parsed document."""
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
            rows.append(Row(".".join(path), node, " ".join(pending)))
            pending = None
    return rows


def _escape(text: str) -> str:
    return text.replace("|", "\\|")


def _cell(value: Any) -> str:
    return "`" + _escape(json.dumps(value, separators=(", ", ": "))) + "`"


def values_table(text: str | None = None) -> str:
    rows = documented_values((CHART / "values.yaml").read_text() if text is None else text)
    lines = ["| Key | Default | Description |", "| --- | --- | --- |"]
    lines += [f"| `{r.key}` | {_cell(r.default)} | {_escape(r.description)} |" for r in rows]
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
