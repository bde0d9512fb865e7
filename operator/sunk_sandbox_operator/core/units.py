"""Amounts written as text (pure): durations and Kubernetes resource quantities, each read in one
pass and bounded.

Durations follow Go's `time.ParseDuration`. Tenants write them: `--slurm-kill-wait=` in the scheduler's args, a kill-wait string in
scheduler.conf, `spec.resyncInterval` and `spec.scope.minRollInterval` (the CRD bounds those to
32 characters; the other two only the object's size does). The grammar, as Go reads it:

    [+-]? ( "0" | ( <digits> [ "." <digits> ] <unit> )+ )     units: ns us µs μs ms s m h

where either side of the "." may be empty, not both. Read left to right, each character once (a
regex with `\\d+\\.?\\d*` before a unit went back over a run of digits once per digit: quadratic
in the run); and nothing longer than MAX_DURATION_CHARS is read at
all: no duration Go accepts needs that many (Go overflows past 2562047h47m16.854775807s).

Quantities ("500m", "1Gi", "1e3", or a JSON number) are read as Decimals by apimachinery's grammar
(k8s.io/apimachinery/pkg/api/resource/quantity.go), which the API server checks on every write, so
every quantity read from it fits:

    <quantity> ::= <signedNumber><suffix>
    <number>   ::= <digits> | <digits>.<digits> | <digits>. | .<digits>
    <suffix>   ::= Ki | Mi | Gi | Ti | Pi | Ei | e<signedNumber> | E<signedNumber> | n | u | m | "" | k | M | G | T | P | E

Our own parser, not the kubernetes client's: importing `kubernetes.utils` imports the client,
which the operator does not load (`controller/process.import_kopf`: docs/scale.md). Where both accept a
text they agree (tests/unit/test_placement.py checks it against the client's); the client's
leniencies (booleans, NaN and Infinity, spaces, "1_000") are refused here, as by the API server.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from functools import lru_cache

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


# ---------------------------------------------------------------- quantities

_GRAMMAR = re.compile(
    r"(?P<number>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
    r"(?:(?P<binary>[KMGTPE])i|[eE](?P<exponent>[+-]?[0-9]+)|(?P<decimal>[numkMGTPE])?)")
_DECIMAL_EXPONENTS = {"n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY_POWERS = {"K": 10, "M": 20, "G": 30, "T": 40, "P": 50, "E": 60}
_MAX_EXPONENT = 1000  # far beyond any real quantity; bounds the work a hostile "1e999999999" asks for
# Pods are tenant-written (the API server checks the grammar, not the length); no real quantity needs more.
MAX_QUANTITY_CHARS = 128


def parse_quantity(q: object) -> Decimal:
    """A quantity as a Decimal; ValueError when it is not one (never another exception)."""
    if isinstance(q, bool) or not isinstance(q, (str, int, float)):
        raise ValueError(f"invalid quantity {q!r}")
    if isinstance(q, str) and len(q) > MAX_QUANTITY_CHARS:
        raise ValueError(f"invalid quantity: {len(q):,} characters (at most {MAX_QUANTITY_CHARS})")
    return _parse(q)


# Tens of thousands of pods carry a handful of distinct quantities ("1", "1Gi"), each parsed up to
# three times per pod event: parsed once each. Bounded (a tenant writing distinct quantities only
# churns it); typed, so 1 and 1.0 stay apart; an invalid one raises every time (never cached).
@lru_cache(maxsize=4096, typed=True)
def _parse(q: str | int | float) -> Decimal:
    if not isinstance(q, str):
        value = Decimal(q)
        if not value.is_finite():
            raise ValueError(f"invalid quantity {q!r}")
        return value
    m = _GRAMMAR.fullmatch(q)
    if m is None:
        raise ValueError(f"invalid quantity {q!r}: expected a number and a suffix, e.g. 500m, 2, 1Gi or 1e3")
    number = Decimal(m["number"])
    if m["binary"]:
        return number * (1 << _BINARY_POWERS[m["binary"]])
    exponent = int(m["exponent"]) if m["exponent"] else _DECIMAL_EXPONENTS.get(m["decimal"] or "", 0)
    if abs(exponent) > _MAX_EXPONENT:
        raise ValueError(f"invalid quantity {q!r}: exponent out of range")
    try:
        return number.scaleb(exponent)
    except InvalidOperation as exc:  # pragma: no cover - scaleb within the bound does not raise
        raise ValueError(f"invalid quantity {q!r}") from exc
