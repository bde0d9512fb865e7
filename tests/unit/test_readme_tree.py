"""The module tree of docs/development.md names every module of the package, and no module that is
gone: a newcomer reads the tree to find where a thing lives, so a module missing from it is one
they will not find, and a stale one sends them to nothing."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "operator" / "sunk_sandbox_operator"

MODULE = re.compile(r"\b([a-z_][a-z0-9_]*\.py)\b")
PACKAGE_LINE = re.compile(r"^    ([a-z_]+)/")            # "    core/    compose.py ..." opens core/
SUB_PACKAGE = re.compile(r"^ {5,}([a-z_]+)/ ")           # "             runnerapi/  client.py ...": that line only


def readme_tree() -> str:
    text = (ROOT / "docs" / "development.md").read_text()
    section = text[text.index("## Layout"):]
    block = section[section.index("```\n") + 4:]
    block = block[:block.index("```")]
    return block[block.index("  sunk_sandbox_operator/"):block.index("  sunk_sandbox_devtools/")]


def named_in_readme(tree: str) -> set[str]:
    """Each module named in the tree, as its path in the package: the package a line belongs to is
    the one the last package line opened (none for the lines at the top level). A sub-package line
    that names modules is that sub-package for that line only (`runnerapi/  client.py ...`); one that
    names none opens a block: the lines indented deeper are its modules (`scope/` and its files)."""
    named, package, block, block_indent = set(), "", "", -1
    for line in tree.splitlines()[1:]:
        indent = len(line) - len(line.lstrip())
        if block and indent <= block_indent:
            block = ""
        opened = PACKAGE_LINE.match(line)
        if opened:
            package, block = opened.group(1) + "/", ""
        elif re.match(r"^    \S", line):  # a top-level module
            package, block = "", ""
        sub = SUB_PACKAGE.match(line)
        if sub and not MODULE.findall(line):
            block, block_indent = sub.group(1) + "/", indent
            continue
        where = package + (sub.group(1) + "/" if sub else block)
        named |= {where + name for name in MODULE.findall(line) if name != "__init__.py"}
    return named


def in_the_package() -> set[str]:
    return {p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*.py")
            if p.name != "__init__.py" and "__pycache__" not in p.parts}


def test_the_readme_module_tree_is_the_package() -> None:
    named, present = named_in_readme(readme_tree()), in_the_package()
    assert sorted(present - named) == [], "modules the tree of docs/development.md does not name"
    assert sorted(named - present) == [], "modules the tree of docs/development.md names that do not exist"


def test_the_tree_reader_places_each_name_in_its_package() -> None:
    """The reader itself: a name counts for the package its line is under, a sub-package line for
    that sub-package, a top-level line for the top level."""
    tree = ("  sunk_sandbox_operator/       the product\n"
            "    __main__.py                CLI\n"
            "    api/     keys.py           keys\n"
            "             spec.py status.py models (base.py)\n"
            "    adapters/ kube.py          calls\n"
            "             runnerapi/        client.py, errors.py\n"
            "             metrics.py        metrics\n"
            "             scope/            the scope wing (controller/scope/ runs it):\n"
            "               __init__.py     its signals\n"
            "               plan.py         the list\n"
            "                               (continued)\n"
            "             events.py         events\n"
            "    render.py                  render-policy\n")
    assert named_in_readme(tree) == {"__main__.py", "api/keys.py", "api/spec.py", "api/status.py", "api/base.py",
                                     "adapters/kube.py", "adapters/runnerapi/client.py",
                                     "adapters/runnerapi/errors.py", "adapters/metrics.py", "adapters/scope/plan.py",
                                     "adapters/events.py", "render.py"}
