"""Failpoints for deterministic crash tests (etcd's gofail is the model).

`SSB_FAILPOINTS=after-policy-write` (comma-separated; `name=N` fires at the Nth hit) makes the
process exit hard — no cleanup, no status flush, like SIGKILL — the moment it reaches that point.
Unset (production), `hit` is one dict lookup. The names:

    after-policy-intent      the ownership record says `pending`; UpdateManagedRunner not sent
    after-policy-write       the runner API accepted the write; the record still says `pending`
    after-scope-write        the list loop: the target holds the new list and ledger; nothing else done
    after-rolebinding-create the grants loop: a grant RoleBinding exists; status does not know
    after-scheduler-roll     the roll loop: the scheduler's pod template is patched (its hash, generation
                             and rolled-at); status does not know
    before-status-flush      everything written; the binding's status not patched

One failpoint stalls instead of exiting: `stall-in-reconcile=SECONDS` holds the main thread, and
the GIL with it, for SECONDS at the first reconcile, as a tenant's text costing a C-level parse
would (the Lease and the probes must not notice: controller/keeper.py).
"""

from __future__ import annotations

import ctypes
import logging
import os
import sys
from typing import Callable

log = logging.getLogger("sunk_sandbox_operator")

NAMES = ("after-policy-intent", "after-policy-write", "after-scope-write", "after-rolebinding-create",
         "after-scheduler-roll", "before-status-flush")
STALLS = ("stall-in-reconcile",)
EXIT_CODE = 137  # what a SIGKILL looks like to the kubelet


class Failpoints:
    def __init__(self, spec: str = "", exit: Callable[[int], None] = os._exit,
                 hold: Callable[[int], None] | None = None) -> None:
        self._armed: dict[str, int] = {}
        self._hits: dict[str, int] = {}
        self._stalls: dict[str, int] = {}
        self._exit = exit
        self._hold = hold or _hold_the_gil
        for item in filter(None, (x.strip() for x in spec.split(","))):
            name, _, nth = item.partition("=")
            if name in STALLS:
                self._stalls[name] = int(nth or 1)
                continue
            if name not in NAMES:
                raise ValueError(f"unknown failpoint {name!r} (known: {', '.join(NAMES + STALLS)})")
            self._armed[name] = int(nth or 1)

    def hit(self, name: str) -> None:
        if name not in self._armed:
            return
        self._hits[name] = self._hits.get(name, 0) + 1
        if self._hits[name] >= self._armed[name]:
            log.critical("failpoint %s: exiting now", name)
            sys.stderr.flush()
            self._exit(EXIT_CODE)

    def stall(self, name: str) -> None:
        """The first hit of an armed stall holds this thread for its seconds; later hits pass."""
        seconds = self._stalls.pop(name, None)
        if seconds:
            log.warning("failpoint %s: holding the main thread for %d s", name, seconds)
            self._hold(seconds)


def _hold_the_gil(seconds: int) -> None:
    """libc's sleep through ctypes.PyDLL, which keeps the GIL (ctypes.CDLL would release it)."""
    ctypes.PyDLL(None).sleep(ctypes.c_uint(seconds))
