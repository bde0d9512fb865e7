"""The reason table of docs/reference.md and api/reasons.py say the same thing; every reason the code can
report is declared there, once."""

from __future__ import annotations

import re
from pathlib import Path

from sunk_sandbox_operator.api import reasons

ROOT = Path(__file__).resolve().parents[2]


def readme_rows() -> list[tuple[str, str, str]]:
    text = (ROOT / "docs" / "reference.md").read_text()
    section = text[text.index("## Conditions, reasons and fixes"):text.index("## Events")]
    rows, condition = [], ""
    for line in section.splitlines():
        m = re.match(r"^\| ([A-Za-z]*) \| `([A-Za-z]+)` \| (.*) \|$", line)
        if m:
            condition = m.group(1) or condition
            rows.append((condition, m.group(2), m.group(3)))
    return rows


def test_readme_table_is_the_reasons_module():
    assert readme_rows() == reasons.table()


def test_every_reason_has_a_fix_and_a_camelcase_name():
    for condition, reason, fix in reasons.table():
        assert re.fullmatch(r"[A-Z][A-Za-z]+", reason), reason
        assert fix.strip(), f"{condition}/{reason} has no fix text"


def test_condition_types_order_and_ready_inputs():
    assert reasons.CONDITION_TYPES[0] == "Ready"
    assert reasons.READY_INPUTS == reasons.CONDITION_TYPES[1:]
    assert set(reasons.BY_CONDITION) == set(reasons.CONDITION_TYPES)


def test_reasons_are_plain_strings_on_the_wire():
    import json

    assert json.dumps({"reason": reasons.PolicySynced.SYNCED}) == '{"reason": "Synced"}'
    assert reasons.ScopeSynced.PENDING == "Pending"


def test_no_reason_is_spelled_outside_the_reasons_module():
    """Condition parts take their reason from an enum member, not a string literal."""
    pkg = ROOT / "operator" / "sunk_sandbox_operator"
    names = {r for _, r, _ in reasons.table()}
    offenders = []
    for path in pkg.rglob("*.py"):
        if path.name == "reasons.py":
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            for literal in re.findall(r'Part\([^)]*?"(?:True|False|Unknown)",\s*"([A-Za-z]+)"', line):
                if literal in names:
                    offenders.append(f"{path.relative_to(ROOT)}:{n}: {literal}")
    assert not offenders, offenders


def events_rows() -> list[tuple[str, str, str]]:
    text = (ROOT / "docs" / "reference.md").read_text()
    section = text[text.index("## Events"):]
    return [m.groups() for line in section.splitlines()
            if (m := re.match(r"^\| `([A-Za-z]+)` \| (Normal|Warning) \| (.*) \|$", line))]


def test_readme_events_table_is_the_event_reasons_module():
    from sunk_sandbox_operator.api import events

    assert events_rows() == events.table()


def test_every_event_the_code_posts_has_a_declared_reason():
    """ctx.event takes an EventReason member (its type comes with it); no bare reason strings."""
    pkg = ROOT / "operator" / "sunk_sandbox_operator"
    offenders = [f"{p.relative_to(ROOT)}:{n}" for p in pkg.rglob("*.py")
                 for n, line in enumerate(p.read_text().splitlines(), 1) if re.search(r'ctx\.event\([^,]+, "', line)]
    assert not offenders, offenders


def test_condition_types_are_named_by_the_enum_outside_api() -> None:
    """Outside api/ a condition type is `ConditionType.X` (mypy holds `Part.condition` and
    `set_condition` to it), never its spelling as a string: a typo there would be a condition no
    table, order or Ready input knows. "Ready" is left out: it is also a Pod's condition
    (core/scheduler/discovery.py reads the scheduler pods') and a reason."""
    import ast

    ours = {t.value for t in reasons.ConditionType} - {"Ready"}
    package = ROOT / "operator" / "sunk_sandbox_operator"
    spelled = [f"{path.relative_to(package)}:{node.lineno}: {node.value}"
               for path in sorted(package.rglob("*.py")) if path.relative_to(package).parts[0] != "api"
               for node in ast.walk(ast.parse(path.read_text()))
               if isinstance(node, ast.Constant) and node.value in ours]
    assert spelled == []
