"""A tug-of-war over the runner policy: detect it, stop writing, say what the other owner must carry (pure).

A runner managed with Terraform (`coreweave_sandbox_managed_runner`) has a second owner of its
policy: each `terraform apply` puts its whole policy back with a fresh etag, so nothing conflicts,
the keys the operator merged are simply gone, the operator's drift correction writes them again,
and the two would fight for ever. A removal counts when another writer took our values away (they
are gone or changed, under an etag that is not the one we last wrote). The operator puts them back
`Settings.corrections` times within `Settings.window_seconds`; at the next removal it stops
writing the policy and PolicySynced says what the other owner removed and must carry.

It resumes by itself when the policy holds our keys again (nothing is left to write; what it holds
is then the other owner's, so a later Restore leaves it), or when the reconcile-now annotation
takes a value it did not have when the operator stopped (the admin handed the policy back, e.g.
with `lifecycle { ignore_changes = [policy] }`): counting then starts afresh.

The memory (`PolicyContention`) lives in status.policy, not in the ownership record: it must
survive a restart and a change of leader (else every restart would buy N more rounds of the
fight), and losing it with the status costs at most N more writes before the operator stops
again, whereas a lost ownership record would misattribute values for ever.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any, Sequence

from ..api.spec import BindingSpec
from ..api.status import OwnedPath, PolicyContention
from . import policy_handoff as handoff
from .policy import Desired
from .policy_paths import _MISSING, PolicyError, _get, parse_path
from .resync import format_seconds

DEFAULT_CORRECTIONS = 3
DEFAULT_WINDOW_SECONDS = 24 * 3600.0


@dataclass(frozen=True)
class Settings:
    """`corrections` removals are put back within `window_seconds`; the next one stops the writes.
    A window of 0 never stops (every removal is corrected, as before this existed)."""

    corrections: int = DEFAULT_CORRECTIONS
    window_seconds: float = DEFAULT_WINDOW_SECONDS


@dataclass(frozen=True)
class Verdict:
    write: bool                            # put the keys back (False: stopped, nothing is written)
    memory: PolicyContention | None        # status.policy.contention after this decision (None: unchanged)
    stopped_now: bool = False              # this decision stops the writes (its event is posted once)


def _epoch(iso: str | None) -> float | None:
    if not iso:
        return None
    try:
        return dt.datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def stopped(memory: PolicyContention | None) -> bool:
    return memory is not None and memory.stopped_time is not None


def removed(current: Any, want: Desired, owned: Sequence[OwnedPath]) -> list[str]:
    """The values we wrote and still want that the policy no longer holds: `path removed` or
    `path changed to "x"` (a changed spec is not a removal: its paths are desired differently)."""
    out = []
    for entry in owned:
        if want.values.get(entry.path) != entry.value:
            continue
        try:
            found = _get(current, parse_path(entry.path))
        except PolicyError:
            continue
        if found == entry.value:
            continue
        if found is _MISSING or found is None:
            out.append(f"{entry.path} removed")
        else:
            out.append(f"{entry.path} changed to {handoff.show(found)}")
    return out


def recent(memory: PolicyContention | None, now: str, settings: Settings) -> list[str]:
    """The corrections within the window ending now (all of them when `now` does not parse)."""
    if memory is None:
        return []
    end = _epoch(now)
    if end is None:
        return list(memory.corrections)
    kept = []
    for at in memory.corrections:
        t = _epoch(at)
        if t is not None and end - settings.window_seconds < t <= end:
            kept.append(at)
    return kept


def judge(memory: PolicyContention | None, taken: list[str], request: str | None, now: str,
          settings: Settings) -> Verdict:
    """Enforce, and the policy lacks our keys: put them back, or not (stopped, or stopping now).
    `taken`: what another writer removed (empty: a first write, a spec change); `request`: the
    reconcile-now annotation's value."""
    if stopped(memory):
        assert memory is not None
        if request is not None and request != memory.stopped_request:
            return Verdict(True, PolicyContention())  # handed back: counting starts afresh
        return Verdict(False, None)
    if not taken or settings.window_seconds <= 0:
        return Verdict(True, None)
    kept = recent(memory, now, settings)
    if len(kept) >= settings.corrections:
        return Verdict(False, PolicyContention(corrections=kept, removed=taken, stopped_time=now,
                                               stopped_request=request), stopped_now=True)
    keep = max(settings.corrections, 1)
    return Verdict(True, PolicyContention(corrections=(kept + [now])[-keep:], removed=taken))


def managed_elsewhere(want: Desired, memory: PolicyContention, settings: Settings) -> str:
    """PolicySynced's message while the writes are stopped: what was removed, what to carry, how to resume."""
    times = len(memory.corrections) + 1
    since = memory.corrections[0] if memory.corrections else memory.stopped_time
    return (f"another writer keeps replacing the runner policy: it removed the binding's keys {times} time(s) "
            f"within {format_seconds(settings.window_seconds)} (since {since}; latest: {handoff.listed(memory.removed)}), so the operator "
            f"stopped writing the policy at {memory.stopped_time}. A declarative owner (Terraform's "
            f"{handoff.TERRAFORM_RESOURCE} puts its whole policy back at each apply) must carry these keys in "
            f"its policy: {handoff.carry(want)}; writing resumes by itself once the policy holds them. Or leave the policy to "
            f"the operator ({handoff.IGNORE_POLICY}) and set the annotation sunksandbox.dev/reconcile-requested-at "
            "to a new value to resume writing")


def keys_missing(want: Desired, current: Any) -> str:
    """PolicySynced's message under `spec.policy.management: Observe` when the policy lacks our keys."""
    return ("spec.policy.management is Observe and the runner policy does not hold the binding's keys, so new "
            f"sandboxes are not routed to the SUNK scheduler; nothing is written. Missing: "
            f"{handoff.listed(handoff.missing(current, want))}. Have the policy's owner add them to its policy: "
            f"{handoff.carry(want)}")


def stopped_event(memory: PolicyContention, runner: str) -> str:
    """The Warning event of the stop (short: events are cut at 1 KiB; the condition has the fragment)."""
    return (f"runner {runner}: another writer removed the binding's keys {len(memory.corrections) + 1} time(s) "
            f"({handoff.listed(memory.removed, 3)}); the operator stopped writing the policy: see PolicySynced "
            "for what that owner must carry")


def hands_off(spec: BindingSpec) -> bool:
    """Never write the policy: declared so (`spec.policy.management: Observe`)."""
    return spec.policy.management == "Observe"


def may_restore(spec: BindingSpec, memory: PolicyContention | None) -> bool:
    """Deletion with Restore writes the policy only where the operator manages it: not under
    `management: Observe`, not while another owner holds it (the writes are stopped)."""
    return not hands_off(spec) and not stopped(memory)
