"""RoleBindings of `scope.grantClusterRole`: list ours, create and delete them, a bounded few at a time."""

from __future__ import annotations

from typing import Iterable

from ..core.scope.rbac import SCHEDULER_NEEDS
from . import kube as k
from .bounded import gather_bounded

CONCURRENCY = 16


async def scheduler_permitted(kube: k.KubeAPI, sa: tuple[str, str], namespaces: list[str]) -> list[bool | Exception]:
    """Per namespace ("" = cluster-wide): may the scheduler's ServiceAccount watch and bind pods there?"""
    async def one(ns: str) -> bool:
        for verb, resource, sub in SCHEDULER_NEEDS:
            if not await kube.service_account_may(sa[0], sa[1], verb, resource, ns, sub):
                return False
        return True
    return await gather_bounded((one(ns) for ns in namespaces), CONCURRENCY)


async def list_ours(kube: k.KubeAPI, selector: str) -> list[dict]:
    return await kube.list_rolebindings(selector)


async def delete(kube: k.KubeAPI, items: list[tuple[str, str, str | None]]) -> list[Exception | None]:
    """(namespace, name, uid): with a uid, only that object goes (a replacement under the same name
    is not ours: its 409 counts as done)."""
    results = await gather_bounded((kube.delete_rolebinding(ns, name, uid) for ns, name, uid in items), CONCURRENCY)
    return [r if isinstance(r, Exception) and not isinstance(r, k.Conflict) else None for r in results]


async def create(kube: k.KubeAPI, bodies: Iterable[dict]) -> list[Exception | None]:
    """One result per body taken from `bodies` (a generator may end early: the rest are not made):
    None when created, else the error (409: the name is taken by an object that is not ours, or we
    would have listed it)."""
    async def one(body: dict) -> None:
        # The answer is dropped at once: held until the last create, every created object is memory a
        # batch of thousands pays for nothing (docs/scale.md).
        await kube.create_rolebinding(body["metadata"]["namespace"], body)
    return await gather_bounded((one(b) for b in bodies), CONCURRENCY)
