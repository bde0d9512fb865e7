"""The reconcile pipeline of one binding: each concern reports a Part, then status is flushed.

Imperative shell: every decision is made by the pure modules (scheduler, policy, scope_core,
placement, grace, conditions, status); this module reads, calls them, writes.
"""

from __future__ import annotations

import logging

from . import scheduler
from .runtime import BindingState, Registry

log = logging.getLogger("sunk_sandbox_operator")


def resync_seconds(state: BindingState) -> float:
    try:
        return max(1.0, scheduler.parse_go_duration(state.spec.resync_interval)) if state.spec else 300.0
    except ValueError:
        return 300.0


async def startup(registry: Registry) -> None:
    pass


async def shutdown(registry: Registry) -> None:
    pass


async def reconcile(registry: Registry, state: BindingState) -> None:
    await registry.flush(state)


async def finalize(registry: Registry, state: BindingState) -> None:
    pass


def on_namespace(registry: Registry, event_type: str | None, body: dict) -> None:
    pass


def on_pod(registry: Registry, event_type: str | None, body: dict) -> None:
    pass
