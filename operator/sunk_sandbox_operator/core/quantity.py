"""Kubernetes resource quantities ("500m", "1Gi", "1e3", or a JSON number) as Decimals.

apimachinery's grammar (k8s.io/apimachinery/pkg/api/resource/quantity.go), which the API server
checks on every write, so every quantity read from it fits:

    <quantity> ::= <signedNumber><suffix>
    <number>   ::= <digits> | <digits>.<digits> | <digits>. | .<digits>
    <suffix>   ::= Ki | Mi | Gi | Ti | Pi | Ei | e<signedNumber> | E<signedNumber> | n | u | m | "" | k | M | G | T | P | E

Our own parser, not the kubernetes client's: importing `kubernetes.utils` imports the client,
which the operator no longer loads (0.17 CPU-s and 10 MiB of its start, `__main__.import_kopf`). Where both accept a
text they agree (tests/unit/test_placement.py checks it against the client's); the client's
leniencies (booleans, NaN and Infinity, spaces, "1_000") are refused here, as by the API server.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from functools import lru_cache

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
