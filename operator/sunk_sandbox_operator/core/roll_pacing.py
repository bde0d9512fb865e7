"""When the scheduler may be rolled again (pure): at most one roll per `scope.minRollInterval`.

Every roll restarts the one component that places Slurm and sandbox pods, so a trickle of new
namespaces (one every few seconds through a busy hour) must not restart it at every list write.
The first change after a quiet interval rolls at once; changes inside the interval wait for its
end, where one roll carries them all. Never two rolls inside an interval; never a change left
unrolled past the interval's end.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Mapping

from ..api.keys import SCOPE_ROLLED_AT_ANNOTATION
from .pods import parse_time
from .units import parse_go_duration

DEFAULT_INTERVAL = 30.0


def interval_of(text: str) -> float:
    """`scope.minRollInterval` in seconds (the CRD validates its form; the default if it still does not parse)."""
    try:
        return parse_go_duration(text)
    except ValueError:
        return DEFAULT_INTERVAL


def roll_wait(last_roll: float | None, now: float, interval: float) -> float:
    """Seconds until a roll may happen (0: now). `last_roll`: when the last one was made (None: not
    since this process started, which rolls at once)."""
    if interval <= 0 or last_roll is None:
        return 0.0
    return max(0.0, last_roll + interval - now)


def monotonic_of(when_iso: object, now_iso: str, now: float) -> float | None:
    """A recorded wall-clock time (status.scope.lastRollTime) on the monotonic clock, or None; never
    after `now`. Times are recorded in whole seconds, so one is read as the end of its second: a roll
    at 12.5 s, recorded as 12 s, is taken as made at 13 s — never earlier than it was (never two rolls
    inside an interval, across restarts too), the next roll at most a second later for it (and a
    second more for `now_iso`, in whole seconds too)."""
    when, wall = parse_time(when_iso), parse_time(now_iso)
    if when is None or wall is None:
        return None
    return now - max(0.0, wall - (math.floor(when) + 1.0))


def _iso(seconds: int) -> str:
    return datetime.fromtimestamp(seconds, timezone.utc).isoformat().replace("+00:00", "Z")


def after(now_iso: str, seconds: float) -> str:
    """`now_iso` plus `seconds`, in the same RFC 3339 form (status.scope.nextRollTime)."""
    start = parse_time(now_iso)
    if start is None:
        return now_iso
    return _iso(math.ceil(start + seconds))


def rolled_later(workload: Mapping[str, Any] | None, known: str | None, now_iso: str,
                 now: float) -> tuple[float, str] | None:
    """The roll the scheduler's `workload` records (its pod template's rolled-at annotation, set in the
    roll's own patch), on the monotonic clock and in status's whole-second form, when it is in a later
    second than `known` (status.scope.lastRollTime, as memory has it); else None (the same roll, an
    older one, or not a time)."""
    template = ((workload or {}).get("spec") or {}).get("template") or {}
    seen = parse_time(((template.get("metadata") or {}).get("annotations") or {}).get(SCOPE_ROLLED_AT_ANNOTATION))
    before = parse_time(known)
    if seen is None or (before is not None and math.floor(seen) <= math.floor(before)):
        return None
    at = _iso(math.floor(seen))
    mono = monotonic_of(at, now_iso, now)
    return None if mono is None else (mono, at)


@dataclass(frozen=True)
class RollStep:
    """What to do about the scheduler after a sync: roll now, in `wait` seconds, or nothing."""

    now: bool = False
    wait: float = 0.0


def when_to_roll(*, can_roll: bool, restart: bool, observe: bool, roll_due: bool, periodic: bool,
                 burst_goes_on: bool, last_roll: float | None, now: float, interval: float) -> RollStep:
    """When is the scheduler rolled? The one answer.

    - Never in Observe mode, with `restartScheduler: false`, or for a target whose own tool re-renders
      the scheduler (Argo CD, Flux: the chart's checksum annotation rolls it).
    - Not while a burst goes on (more changes already signalled): the burst's last write rolls once.
    - After our write of the list (`roll_due`): at once when `interval` has passed since the last
      roll, else folded into one roll at the interval's end.
    - At a resync with nothing due: checked at once, level-triggered (the template is compared with
      the list); a patch that check finds needed is rationed by `roll_wait` like any other.
    """
    if observe or not can_roll or not restart or burst_goes_on or not (roll_due or periodic):
        return RollStep()
    wait = roll_wait(last_roll, now, interval) if roll_due else 0.0
    return RollStep(wait=wait) if wait > 0 else RollStep(now=True)
