"""status.runner as the binding's state holds it: the proof record for the admitted spec's runner.

Apart from controller/runner_proof.py (which makes the records through runner API calls) so that
the status writer reads it without reaching the runner API client.
"""

from __future__ import annotations

from typing import Any

from .state import BindingState


def current(state: BindingState) -> dict[str, Any]:
    """status.runner for the admitted spec's runner (recorded, else as last written, else untried)."""
    spec = state.admitted_spec
    mine = {"id": spec.runner.id, "apiURL": spec.runner.api_url}
    for record in (state.runner_proof, state.status.get("runner")):
        if isinstance(record, dict) and {k: record.get(k) for k in mine} == mine:
            return record
    return mine


def section(state: BindingState) -> dict[str, Any] | None:
    """What status.runner should say now (None: leave it as it is)."""
    if state.admitted is None:
        return None
    record = current(state)
    return record if record != state.status.get("runner") else None
