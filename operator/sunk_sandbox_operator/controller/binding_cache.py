"""Every SunkSandboxBinding of the cluster, as compact entries indexed by runner id and scope target.

Fed by one LIST + WATCH of our own (adapters/informer.py, started in every replica: the admission
webhook answers on the standby too). The runner-conflict check of a reconcile and the webhook's
cross-object facts read the few entries they need here, where each reconcile of each binding and
each admission review listed every binding of the cluster. An entry is judged once per (uid,
generation) — allowed by the operator's settings, which runner, which target; a status change (the
runner proof) costs a dict lookup. Only what those checks read is kept: metadata, spec, status.runner.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterator, TypeVar

from ..core import conflicts, tenancy

K = TypeVar("K")
KEPT_METADATA = ("namespace", "name", "uid", "generation", "creationTimestamp", "deletionTimestamp")


@dataclass(frozen=True)
class Entry:
    body: dict[str, Any]          # metadata (KEPT_METADATA), spec, status.runner
    allowed: bool                 # passes the operator's settings (a refused binding claims nothing)
    runner: str | None
    target: tuple[str, ...]
    tier: int                     # conflicts.proof_tier

    @property
    def ref(self) -> str:
        return conflicts.ref(self.body)


def _compact(body: dict[str, Any]) -> dict[str, Any]:
    meta = body.get("metadata") or {}
    out: dict[str, Any] = {"metadata": {k: meta[k] for k in KEPT_METADATA if k in meta}, "spec": body.get("spec") or {}}
    runner = (body.get("status") or {}).get("runner")
    if isinstance(runner, dict):
        out["status"] = {"runner": runner}
    return out


def _discard(index: dict[K, set[str]], key: K, ref: str) -> None:
    refs = index.get(key)
    if refs is not None:
        refs.discard(ref)
        if not refs:
            del index[key]


class BindingCache:
    """`apply` per watch event; `on_runner` / `on_target` for the checks. `changed(runner, ref)` is called
    when the bindings naming a runner, or their proofs, change (the conflicted ones are woken)."""

    def __init__(self, policy: tenancy.TenancyPolicy, changed: Callable[[str, str], None] | None = None) -> None:
        self.policy = policy
        self.changed = changed
        self._entries: dict[str, Entry] = {}
        self._by_runner: dict[str, set[str]] = {}
        self._by_target: dict[tuple[str, ...], set[str]] = {}
        self.listed: Callable[[], bool] = lambda: False  # its informer's first LIST is in

    @property
    def ready(self) -> bool:
        return self.listed()

    def _entry(self, body: dict[str, Any], old: Entry | None) -> Entry:
        compact = _compact(body)
        meta, old_meta = compact["metadata"], (old.body["metadata"] if old is not None else {})
        if old is not None and (meta.get("uid"), meta.get("generation")) == (old_meta.get("uid"),
                                                                          old_meta.get("generation")):
            allowed, target = old.allowed, old.target   # the spec did not change: judged already
        else:
            allowed = tenancy.admissible(compact, self.policy)
            target = conflicts.target_key(compact)
        runner = ((compact["spec"].get("runner") or {}).get("id")) or None
        return Entry(compact, allowed, runner if isinstance(runner, str) else None, target,
                     conflicts.proof_tier(compact))

    def _unindex(self, entry: Entry) -> None:
        if entry.runner is not None:
            _discard(self._by_runner, entry.runner, entry.ref)
        _discard(self._by_target, entry.target, entry.ref)

    def apply(self, event_type: str | None, body: dict[str, Any]) -> None:
        key = conflicts.ref(body)
        old = self._entries.pop(key, None)
        if old is not None:
            self._unindex(old)
        new = None
        if event_type != "DELETED":
            new = self._entries[key] = self._entry(body, old)
            if new.allowed:
                if new.runner is not None:
                    self._by_runner.setdefault(new.runner, set()).add(key)
                self._by_target.setdefault(new.target, set()).add(key)
        if self.changed is None:
            return
        before = (old.runner, old.tier, old.allowed) if old is not None else None
        after = (new.runner, new.tier, new.allowed) if new is not None else None
        if before != after:
            for runner in {s[0] for s in (before, after) if s is not None and s[0] is not None}:
                self.changed(runner, key)

    def _bodies(self, refs: set[str] | None) -> list[dict[str, Any]]:
        # Also read from the webhook's thread while the main loop applies events: an entry removed
        # between the index and the lookup is skipped, never a KeyError.
        entries = [self._entries.get(r) for r in sorted(refs or ())]
        return [e.body for e in entries if e is not None]

    def on_runner(self, runner: str) -> list[dict[str, Any]]:
        """The allowed bindings naming this runner id (compact bodies, status.runner included)."""
        return self._bodies(self._by_runner.get(runner))

    def on_target(self, target: tuple[str, ...]) -> list[dict[str, Any]]:
        """The allowed bindings writing this scope target (`conflicts.target_key`)."""
        return self._bodies(self._by_target.get(target))

    def allowed(self, ref: str) -> bool:
        """Does this binding exist and pass the operator's settings?"""
        entry = self._entries.get(ref)
        return entry is not None and entry.allowed

    def keys(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)
