"""Registry status writer without a server: coalescing of flush requests."""

from __future__ import annotations

import asyncio

from sunk_sandbox_operator import kube
from sunk_sandbox_operator.config import Config
from sunk_sandbox_operator.runtime import Registry

BODY = {"metadata": {"namespace": "slurm", "name": "b", "uid": "u1", "generation": 1},
        "spec": {"runner": {"id": "r", "tokenSecretRef": {"name": "s"}}, "sandboxNamespaces": {"names": ["ds-*"]}}}


def test_requests_that_change_nothing_are_paced_too(monkeypatch) -> None:
    """Pod churn that changes nothing must not recompute the placement summary per event."""
    writes: list[dict] = []

    async def patch(namespace, name, status_patch):
        writes.append(status_patch)
        return {"status": None}

    monkeypatch.setattr(kube, "patch_binding_status", patch)

    async def main() -> int:
        reg = Registry(Config(status_min_interval_seconds=0.3))
        reg.event_sink = lambda *a: None
        evaluations = 0

        def before_flush(state) -> None:
            nonlocal evaluations
            evaluations += 1

        reg.before_flush = before_flush
        state = reg.ensure(BODY)
        await reg.flush(state)  # the first status, written
        await asyncio.sleep(0.35)
        for _ in range(12):  # ~0.25 s of requests, none of them changing anything
            reg.request_flush(state)
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.05)
        return evaluations

    evaluations = asyncio.run(main())
    assert len(writes) == 1
    assert evaluations <= 2
