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
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Callable

log = logging.getLogger("sunk_sandbox_operator")

NAMES = ("after-policy-intent", "after-policy-write", "after-scope-write", "after-rolebinding-create",
         "after-scheduler-roll", "before-status-flush")
EXIT_CODE = 137  # what a SIGKILL looks like to the kubelet


class Failpoints:
    def __init__(self, spec: str = "", exit: Callable[[int], None] = os._exit) -> None:
        self._armed: dict[str, int] = {}
        self._hits: dict[str, int] = {}
        self._exit = exit
        for item in filter(None, (x.strip() for x in spec.split(","))):
            name, _, nth = item.partition("=")
            if name not in NAMES:
                raise ValueError(f"unknown failpoint {name!r} (known: {', '.join(NAMES)})")
            self._armed[name] = int(nth or 1)

    def hit(self, name: str) -> None:
        if name not in self._armed:
            return
        self._hits[name] = self._hits.get(name, 0) + 1
        if self._hits[name] >= self._armed[name]:
            log.critical("failpoint %s: exiting now", name)
            sys.stderr.flush()
            self._exit(EXIT_CODE)
