"""When the scheduler may be rolled again (pure): at most one roll per `scope.minRollInterval`.

Every roll restarts the one component that places Slurm and sandbox pods, so a trickle of new
namespaces (one every few seconds through a busy hour) must not restart it at every list write.
The first change after a quiet interval rolls at once; changes inside the interval wait for its
end, where one roll carries them all. Never two rolls inside an interval; never a change left
unrolled past the interval's end.
"""

from __future__ import annotations

import math
from datetime import datetime, timezone

from .pods import parse_time


def roll_wait(last_roll: float | None, now: float, interval: float) -> float:
    """Seconds until a roll may happen (0: now). `last_roll`: when the last one was made (None: not
    since this process started, which rolls at once)."""
    if interval <= 0 or last_roll is None:
        return 0.0
    return max(0.0, last_roll + interval - now)


def after(now_iso: str, seconds: float) -> str:
    """`now_iso` plus `seconds`, in the same RFC 3339 form (status.scope.nextRollTime)."""
    start = parse_time(now_iso)
    if start is None:
        return now_iso
    return datetime.fromtimestamp(math.ceil(start + seconds), timezone.utc).isoformat().replace("+00:00", "Z")
