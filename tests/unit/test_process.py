"""controller/process.py: the process's tuning (the GC paused for the initial LISTs, bounded; kopf
imported without the kubernetes client: tests/unit/test_kubeconfig.py runs the operator's imports)."""

from __future__ import annotations

import asyncio
import gc

import pytest

from sunk_sandbox_operator.controller import process

from tests.unit.fakes import FakeClock, settle


@pytest.mark.parametrize("lists_finish", [True, False])
async def test_the_gc_is_paused_for_the_initial_lists_and_never_past_the_limit(lists_finish: bool) -> None:
    """The cyclic GC is off while the initial LISTs come in (each page's objects made a full
    collection walk every record cached so far), back on once they are in, or at the limit if one
    never finishes; what is cached by then is frozen out of later full collections."""
    clock = FakeClock()
    ready = [asyncio.Event(), asyncio.Event()]
    frozen = gc.get_freeze_count()
    process.pause_gc()
    try:
        task = asyncio.ensure_future(process.resume_gc_after(ready, clock.sleep, limit=120.0))
        ready[0].set()
        await clock.advance(119.0)
        assert not gc.isenabled() and not task.done()  # one LIST still going, the limit not reached
        if lists_finish:
            ready[1].set()
        else:
            await clock.advance(1.0)
        await settle()
        assert task.done() and gc.isenabled()
        assert gc.get_freeze_count() > frozen
    finally:
        gc.enable()
        gc.unfreeze()
