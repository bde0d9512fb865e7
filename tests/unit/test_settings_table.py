"""The settings table (docs/configuration.md) is what the code reads, and the documented timings are the code's.

Every `SSB_*` name anywhere in the operator package has a row in the table of environment variables
(docs/configuration.md, "Operator settings"), every row names only variables the code knows, and each numeric default in
the table is the default `controller/config.load` (or the command line) falls back to.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from sunk_sandbox_operator.controller.config import Config
from sunk_sandbox_operator.controller.leader import ERROR_BACKOFF_CAP, JITTER_FACTOR

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "operator" / "sunk_sandbox_operator"
README = (ROOT / "docs" / "configuration.md").read_text()  # the settings table
OPERATIONS = (ROOT / "docs" / "operations.md").read_text()  # High availability
NAME = re.compile(r"\bSSB_[A-Z0-9_]*[A-Z0-9]\b")


def table_rows() -> list[tuple[list[str], list[str]]]:
    """(names, defaults) of each row of the environment table, names and defaults split on " / "."""
    start = README.index("| environment | default | meaning |")
    rows = []
    for line in README[start:].splitlines()[2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        names = NAME.findall(cells[0])
        defaults = [d.strip().strip("`") for d in cells[1].split(" / ")]
        rows.append((names, defaults))
    return rows


def code_names() -> set[str]:
    return {n for p in PACKAGE.rglob("*.py") for n in NAME.findall(p.read_text())}


def code_defaults() -> dict[str, float]:
    """SSB_X -> the numeric default the code falls back to: `_float("SSB_X", d)` in config.load and
    `os.environ.get("SSB_X", "d")` anywhere."""
    out: dict[str, float] = {}
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Call) and len(node.args) == 2 and all(
                    isinstance(a, ast.Constant) for a in node.args)):
                continue
            name, default = (a.value for a in node.args)  # type: ignore[attr-defined]
            called = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
            if isinstance(name, str) and name.startswith("SSB_") and called in ("_float", "get"):
                try:
                    out[name] = float(default)
                except (TypeError, ValueError):
                    pass
    return out


def test_every_ssb_variable_the_code_names_has_a_row_and_no_row_is_stale() -> None:
    documented = {n for names, _ in table_rows() for n in names}
    assert code_names() - documented == set(), "SSB_* variables without a row in docs/configuration.md"
    assert documented - code_names() == set(), "docs/configuration.md rows for variables the code does not read"


def test_the_documented_defaults_are_the_codes() -> None:
    defaults = code_defaults()
    checked = 0
    for names, cells in table_rows():
        if len(cells) != len(names):  # one default for a name and its aliases (POD_NAMESPACE ...)
            continue
        for name, cell in zip(names, cells):
            if name in defaults and re.fullmatch(r"-?\d+(\.\d+)?", cell):
                assert float(cell) == defaults[name], f"{name}: docs/configuration.md says {cell}, the code {defaults[name]:g}"
                checked += 1
    assert checked >= 20  # most rows are numeric: a table the parser no longer reads fails here


def test_the_high_availability_paragraph_gives_the_codes_timings() -> None:
    c = Config()
    ha = OPERATIONS[OPERATIONS.index("**High availability.**"):]
    ha = ha[:ha.index("\n\n")]
    for figure in (f"{c.lease_duration_seconds:g} s lease", f"{c.renew_deadline_seconds:g} s renew deadline",
                   f"{c.retry_period_seconds:g} s retry", f"every {c.standby_poll_seconds:g} s",
                   # a killed leader: seen at most one poll late, its expiry at most one poll late (+20 % each)
                   f"≤ {c.lease_duration_seconds:g} s + {2 * c.standby_poll_seconds * 1.2:g} s",
                   f"up to {ERROR_BACKOFF_CAP:g} s apart"):
        assert figure in " ".join(ha.split()), figure
    assert JITTER_FACTOR == 1.2  # client-go's: the standby's own poll uses 20 %, the retry period 120 %
