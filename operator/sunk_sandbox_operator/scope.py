"""Scope sync (imperative shell around scope_core): placeholder until the scope issue lands."""

from __future__ import annotations

from . import kube
from .namespaces import NAMESPACES
from .runtime import BindingState, Registry
from .status import Part


async def startup(registry: Registry) -> None:
    NAMESPACES.load(await kube.list_namespaces())


async def shutdown(registry: Registry) -> None:
    pass


async def sync(registry: Registry, state: BindingState, discovery) -> Part:
    return Part("ScopeSynced", "Unknown", "NotReconciled", "scope sync is not implemented yet")


async def restore(registry: Registry, state: BindingState) -> None:
    pass


def on_namespace(registry: Registry, event_type: str | None, body: dict) -> None:
    NAMESPACES.apply(event_type, body)


def on_sandbox_pod(registry: Registry, state: BindingState, body: dict) -> None:
    pass
