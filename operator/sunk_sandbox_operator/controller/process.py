"""How the operator process is tuned: what it imports, how its heap and its garbage collector behave.

Three settings, each called once from the start-up path (`__main__._run`, `lifecycle.start`), all of
them for the start's memory and CPU (docs/scale.md: what each saved) and none changing what the
operator does:

- `import_kopf`: kopf without the kubernetes client (kopf imports it only to recognise the client's
  model objects, which the operator never hands it);
- `limit_malloc_arenas`: glibc's per-thread malloc arenas capped, before any thread starts;
- `pause_gc` / `resume_gc_after`: the cyclic GC off while the initial LISTs come in (bounded), then
  what they cached frozen out of later full collections and the freed heap handed back to the OS.

glibc is optional: where it is absent (musl, macOS) the heap calls are no-ops.
"""

from __future__ import annotations

import asyncio
import ctypes
import gc
import sys
from typing import Any, Awaitable, Callable, Iterable

M_ARENA_MAX = -8  # glibc mallopt parameter
LIST_GC_PAUSE_LIMIT = 120.0  # seconds the cyclic GC may stay paused for the initial LISTs


def import_kopf() -> Any:
    """kopf, without the kubernetes client: the client's models are the largest part of a start that
    imports them, and the run path needs none (a plain kopf registry, adapters/kubeconfig.py and
    core/units.py read what the client would). Hidden while kopf is imported, importable again
    afterwards (adapters/kubeconfig.py imports it for an exec-plugin kubeconfig)."""
    hide = "kubernetes" not in sys.modules
    if hide:
        sys.modules["kubernetes"] = None  # type: ignore[assignment]  # the import system's "not installed"
    try:
        import kopf
    finally:
        if hide:
            del sys.modules["kubernetes"]
    return kopf


def limit_malloc_arenas(arenas: int = 2) -> None:
    """glibc gives each thread (kopf's executor's, for one) its own malloc arena, each keeping freed
    memory as RSS; two arenas are plenty for one event loop. Call before any thread starts."""
    try:
        ctypes.CDLL("libc.so.6").mallopt(M_ARENA_MAX, arenas)
    except (OSError, AttributeError):
        pass


def return_free_memory() -> None:
    """Hand the heap's free pages back to the OS (glibc's malloc_trim)."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def pause_gc() -> None:
    """The cyclic GC off until `resume_gc_after`: each LIST page's objects outlive the young
    collections, so with the GC on every page made a full collection walk every record cached so far."""
    gc.disable()


async def resume_gc_after(listed: Iterable[asyncio.Event], sleep: Callable[[float], Awaitable[None]],
                          limit: float = LIST_GC_PAUSE_LIMIT) -> None:
    """Once every event in `listed` is set (the informers' initial LISTs are in), or after `limit`
    seconds of `sleep` (a LIST that cannot finish does not keep the GC off): the records cached by
    then, which live as long as the process, are frozen out of the GC's full collections (each would
    walk them all), the GC is on again and the freed heap goes back to the OS."""
    waited = asyncio.ensure_future(asyncio.gather(*(event.wait() for event in listed)))
    bound = asyncio.ensure_future(sleep(limit))
    try:
        await asyncio.wait((waited, bound), return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiting in (waited, bound):
            waiting.cancel()
        gc.freeze()
        gc.enable()
        return_free_memory()
