"""The architecture contract (.importlinter) holds, and modules stay small enough to do one thing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "operator" / "sunk_sandbox_operator"
MAX_LINES = 350  # a module over it is probably doing two jobs: split it along its seam


def test_import_contracts_are_kept():
    env = {**os.environ, "PYTHONPATH": str(ROOT / "operator")}
    out = subprocess.run([sys.executable, "-c", "import sys; from importlinter.cli import lint_imports_command; "
                          "sys.argv=['lint-imports', '--no-cache']; lint_imports_command()"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert "0 broken" in out.stdout


def test_no_module_is_a_grab_bag():
    too_long = {str(p.relative_to(ROOT)): n for p in PACKAGE.rglob("*.py")
                if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not too_long, too_long


def test_handlers_module_holds_decorated_functions_only():
    import ast

    tree = ast.parse((PACKAGE / "handlers.py").read_text())
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            assert node.decorator_list, f"{node.name} in handlers.py is not a kopf handler"
            assert len(node.body) <= 4, f"{node.name} in handlers.py does more than hand over to the controller"
        else:
            assert isinstance(node, (ast.Import, ast.ImportFrom, ast.Expr, ast.Assign)), ast.dump(node)[:80]


def test_delayed_actions_go_through_the_timer_seam():
    """Every delay of the shell sleeps on the injected clock (controller/timers.py): no event-loop
    timers that unit tests could only wait out on the wall clock."""
    offenders = [str(p.relative_to(ROOT)) for p in PACKAGE.rglob("*.py")
                 if any(t in p.read_text() for t in ("call_later(", "call_at("))]
    assert not offenders, offenders


def test_one_shape_of_domain_error():
    """A failure with a reason and a fix is a core.problems.Problem, wherever it is raised: no other
    exception class carries a condition reason."""
    import re

    offenders = [str(p.relative_to(ROOT)) for p in PACKAGE.rglob("*.py") if p.name != "problems.py"
                 and re.search(r"class \w+\((?:\w*Exception|\w*Error)\):(?:(?!\nclass ).)*self\.reason\b", p.read_text(),
                               re.S)]
    assert not offenders, offenders


def test_adapters_raise_transport_errors_only():
    """An adapter says what failed (adapters.kube's typed errors; targets.TargetFailed carrying the
    facts) and the concern's catch point classifies it (core.scope.errors.classify): no adapter
    makes a Problem."""
    offenders = [str(p.relative_to(ROOT)) for p in (PACKAGE / "adapters").rglob("*.py") if "Problem(" in p.read_text()]
    assert not offenders, offenders
