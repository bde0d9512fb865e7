"""Durations written as text (pure): Go's `time.ParseDuration` grammar, read in one pass.

Tenants write durations: `--slurm-kill-wait=` in the scheduler's args, a kill-wait string in
scheduler.conf, `spec.resyncInterval` and `spec.scope.minRollInterval` (the CRD bounds those to
32 characters; the other two only the object's size does). The grammar, as Go reads it:

    [+-]? ( "0" | ( <digits> [ "." <digits> ] <unit> )+ )     units: ns us µs μs ms s m h

where either side of the "." may be empty, not both. Read left to right, each character once (a
regex with `\\d+\\.?\\d*` before a unit went back over a run of digits once per digit: quadratic
in the run); and nothing longer than MAX_DURATION_CHARS is read at
all: no duration Go accepts needs that many (Go overflows past 2562047h47m16.854775807s).
"""

from __future__ import annotations

import re

from .untrusted import Refused

MAX_DURATION_CHARS = 64

GO_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
# One character class each, never two quantifiers over the same characters: a run is matched once.
_DIGITS = re.compile(r"[0-9]*")
_UNIT = re.compile(r"[^0-9.]*")


def parse_go_duration(s: object) -> float:
    """Seconds in a Go `time.ParseDuration` string (30s, 1m30s, 1.5s, 500ms, -2h, 0).

    Raises ValueError on anything Go would reject (missing unit, empty, junk), and `Refused` (a
    ValueError) on text longer than MAX_DURATION_CHARS, without reading it.
    """
    if not isinstance(s, str):
        raise ValueError(f"duration must be a string, got {type(s).__name__}")
    if len(s) > MAX_DURATION_CHARS:
        raise Refused(f"refused as untrusted input: a duration of {len(s):,} characters (at most "
                      f"{MAX_DURATION_CHARS}): write it as Go does, e.g. 60s or 1m30s")
    text = s.strip()
    sign = 1.0
    if text[:1] in ("+", "-"):
        sign = -1.0 if text[0] == "-" else 1.0
        text = text[1:]
    if text == "0":
        return 0.0
    if not text:
        raise ValueError(f"invalid duration {s!r}")
    return sign * _sum(text, s)


def _sum(text: str, original: str) -> float:
    """The parts of an unsigned duration, summed; one pass."""
    pos, total, n = 0, 0.0, len(text)
    while pos < n:
        start = pos
        pos = _DIGITS.match(text, pos).end()  # type: ignore[union-attr]  # `*` always matches
        digits = pos > start
        if pos < n and text[pos] == ".":
            frac_start = pos + 1
            pos = _DIGITS.match(text, frac_start).end()  # type: ignore[union-attr]
            digits = digits or pos > frac_start
        number_end = pos
        pos = _UNIT.match(text, pos).end()  # type: ignore[union-attr]
        unit = text[number_end:pos]
        if not digits or unit not in GO_UNITS:
            raise ValueError(f"invalid duration {original!r}: expected <number><unit> (ns, us, ms, s, m, h) at "
                             f"{text[start:]!r}")
        total += float(text[start:number_end]) * GO_UNITS[unit]
    return total
