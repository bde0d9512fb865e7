"""The scope ledger: what each binding added to a target's list, carried by the target itself (pure).

The ledger is an annotation on the target object (the scheduler's ConfigMap, the Argo CD
Application), written in the same request as the list, so list and ledger change atomically:
a crash can never leave an entry we added looking like an admin's. It survives losing the
binding's status. Per binding (by namespace/name): the entries it added, and the entries that
were there before its first write (never removed by it). For the target: `generation`, counting
the operator's writes of the list; the scheduler's pod template records the generation it was
rolled for, so a list written again (e.g. put back after a Helm revert) rolls it even when the
names equal those it was last rolled for.

Encoding: JSON; past `COMPRESS_OVER` bytes, `zlib:` + base64 of the zlib-compressed JSON, which
keeps 10,000 names well under the API server's 256 KiB limit for all annotations together.

The annotation is on the tenant's own target, so `decode` reads hostile text (tenant_text.PARSERS):
inflation stops at MAX_DECODED, JSON nested past Python's recursion reads as malformed, and any
value of the wrong type makes the whole annotation unreadable, never an exception: the ledger is
then rebuilt (docs/threat-model.md: an unreadable ledger).
"""

from __future__ import annotations

import base64
import binascii
import json
import zlib
from dataclasses import dataclass, field
from typing import Any, Mapping

from ..tenant_text import load_json

VERSION = 1
COMPRESS_OVER = 16 * 1024
# The annotation is tenant-writable (it lives on the tenant's own target): a few KiB of zlib can
# inflate to gigabytes. 10,000 names take ~0.3 MiB; past this the ledger is refused as unreadable.
MAX_DECODED = 8 * 1024 * 1024
_ZLIB = "zlib:"


@dataclass(frozen=True)
class Entry:
    added: tuple[str, ...] = ()
    preexisting: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Ledger:
    entries: Mapping[str, Entry] = field(default_factory=dict)  # binding namespace/name -> Entry
    error: str | None = None                                      # the annotation was unreadable
    generation: int = 0                                           # list writes by the operator

    def get(self, binding: str) -> Entry | None:
        return self.entries.get(binding)

    def with_entry(self, binding: str, entry: Entry | None) -> "Ledger":
        """A copy with this binding's entry set (None: removed)."""
        entries = dict(self.entries)
        if entry is None:
            entries.pop(binding, None)
        else:
            entries[binding] = entry
        return Ledger(entries, generation=self.generation)

    def next_generation(self) -> "Ledger":
        """A copy for a write that changes the list."""
        return Ledger(self.entries, generation=self.generation + 1)


def decode(text: str | None) -> Ledger:
    """The ledger in an annotation's value; `error` set (and no entries) when it cannot be read."""
    if not text:
        return Ledger()
    try:
        raw: str | bytes = text
        if text.startswith(_ZLIB):
            inflate = zlib.decompressobj()
            raw = inflate.decompress(base64.b64decode(text[len(_ZLIB):]), MAX_DECODED)
            if inflate.unconsumed_tail:
                raise ValueError("it inflates past the bound")
        doc = load_json(raw, MAX_DECODED)  # bytes: json decodes UTF-8 itself (bad UTF-8 is a ValueError)
        bindings = doc.get("bindings")
        return Ledger(_entries({} if bindings is None else bindings), generation=_generation(doc.get("generation", 0)))
    except (ValueError, TypeError, AttributeError, zlib.error, binascii.Error, RecursionError, MemoryError) as exc:
        return Ledger(error=f"the ledger annotation is unreadable ({type(exc).__name__}); it is rebuilt")


def _names(value: Any) -> tuple[str, ...]:
    """A list of names; anything else (a nested list would be printed by str() with recursion) is malformed."""
    if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
        raise TypeError("a ledger entry's names must be a list of strings")
    return tuple(value)


def _entries(bindings: Any) -> dict[str, Entry]:
    if not isinstance(bindings, dict):
        raise TypeError("the ledger's bindings must be a mapping")
    entries = {}
    for binding, e in bindings.items():
        if not isinstance(e, dict):
            raise TypeError("a ledger entry must be a mapping")
        pre = e.get("preexisting")
        entries[binding] = Entry(_names(e.get("added") or []), _names(pre) if pre is not None else None)
    return entries


def _generation(value: Any) -> int:
    return value if type(value) is int and value >= 0 else 0


def encode(ledger: Ledger) -> str | None:
    """The annotation value, or None when no binding has an entry (the annotation is removed)."""
    if not ledger.entries:
        return None
    doc = {"version": VERSION, "generation": ledger.generation, "bindings": {
        b: {"added": sorted(e.added), **({"preexisting": sorted(e.preexisting)} if e.preexisting is not None else {})}
        for b, e in sorted(ledger.entries.items())}}
    text = json.dumps(doc, separators=(",", ":"))
    if len(text) > COMPRESS_OVER:
        return _ZLIB + base64.b64encode(zlib.compress(text.encode(), 6)).decode()
    return text
