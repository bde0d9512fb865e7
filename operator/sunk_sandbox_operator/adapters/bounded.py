"""Many API calls, a bounded few at a time: the one helper for it (RoleBindings, reviews, the doctor)."""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Iterable


async def gather_bounded(calls: Iterable[Awaitable[Any]], limit: int) -> list[Any]:
    """Await `calls` `limit` at a time; each result, or the exception it raised, in order.

    `calls` is consumed as workers free up, so pass a generator: then only `limit` calls exist at
    once (5,000 RoleBinding creates are 16 coroutines alive, not 5,000 tasks). A cancellation is
    not a result: it cancels the whole gather."""
    results: dict[int, Any] = {}
    todo = enumerate(calls)

    async def worker() -> None:
        for i, call in todo:
            try:
                results[i] = await call
            except Exception as exc:  # noqa: BLE001  # returned, as gather(return_exceptions=True) did
                results[i] = exc

    await asyncio.gather(*(worker() for _ in range(max(1, limit))))
    return [results[i] for i in range(len(results))]
