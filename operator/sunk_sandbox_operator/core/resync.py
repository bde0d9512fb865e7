"""How often a binding is resynced (pure): its `spec.resyncInterval`, raised to the operator's floor.

Every resync reads the runner policy (a call carrying the token, from a budget the whole process
shares), the scope target and every namespace: its cadence is the operator admin's to bound
(`--min-resync-interval`, default 30 s), not the binding author's. A shorter interval is not an
error (test and demo clusters lower the floor and use 1 s): it is raised, and the binding's Ready
message says so, the same words at every reconcile, so status is written once, not churned.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .units import parse_go_duration

DEFAULT_SECONDS = 300.0          # spec.resyncInterval's default (5m), also for one that does not parse
DEFAULT_MINIMUM_SECONDS = 30.0   # --min-resync-interval's default
HARD_MINIMUM_SECONDS = 1.0       # below any setting: a loop never spins


@dataclass(frozen=True)
class Resync:
    seconds: float
    note: str | None = None      # why it is not what the spec asks (for the Ready message)


def format_seconds(seconds: float) -> str:
    """30 -> 30s, 90 -> 1m30s, 300 -> 5m, 0.5 -> 500ms (how durations are written in the spec)."""
    if seconds < 1:
        return f"{round(seconds * 1000)}ms"
    whole = math.floor(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    frac = seconds - whole
    secs_text = f"{secs + frac:g}s" if secs or frac else ""
    return (f"{hours}h" if hours else "") + (f"{minutes}m" if minutes else "") + secs_text or "0s"


def decide(spec_interval: str | None, minimum: float) -> Resync:
    """The interval a binding is resynced at, and a note when the floor raised it."""
    try:
        asked = parse_go_duration(spec_interval) if spec_interval else DEFAULT_SECONDS
    except ValueError:  # the CRD's pattern refuses it first; this is only schema drift
        asked = DEFAULT_SECONDS
    floor = max(minimum, HARD_MINIMUM_SECONDS)
    if asked >= floor:
        return Resync(asked)
    return Resync(floor, f"spec.resyncInterval {spec_interval} is below the operator's minimum "
                         f"(--min-resync-interval {format_seconds(floor)}): resynced every {format_seconds(floor)}")


def parse_setting(text: str) -> float:
    """`--min-resync-interval` / SSB_MIN_RESYNC_INTERVAL: a duration (30s, 1m) or plain seconds."""
    value = text.strip()
    try:
        seconds = float(value) if value.replace(".", "", 1).isdigit() else parse_go_duration(value)
    except ValueError:
        raise ValueError(f"--min-resync-interval / SSB_MIN_RESYNC_INTERVAL: {text!r} is not a duration "
                         "(e.g. 30s, 1m) or a number of seconds") from None
    if seconds < 0:
        raise ValueError(f"--min-resync-interval / SSB_MIN_RESYNC_INTERVAL: {text!r} is negative")
    return seconds
