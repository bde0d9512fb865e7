"""Kubernetes resource quantities, parsed by the kubernetes client's own parser.

`kubernetes.utils.parse_quantity` is more lenient than apimachinery in three ways that matter
for raw objects: it takes booleans (True → 1), NaN/Infinity, and a space before the suffix
("1 Gi"). The first two are refused here, as the API server would; the third cannot reach us
from the API server, which validates quantities on write.
"""

from __future__ import annotations

from decimal import Decimal
from functools import lru_cache
from typing import Any

from kubernetes.utils.quantity import parse_quantity as _k8s_parse_quantity


def parse_quantity(q: Any) -> Decimal:
    """A quantity ("500m", "1Gi", "1e3", or a JSON number) as a Decimal; ValueError when invalid."""
    if isinstance(q, bool) or not isinstance(q, (str, int, float)):
        raise ValueError(f"invalid quantity {q!r}")
    return _parse(q)


# Tens of thousands of pods carry a handful of distinct quantities ("1", "1Gi"), each parsed up to
# three times per pod event: parsed once each. Bounded (a tenant writing distinct quantities only
# churns it); typed, so 1 and 1.0 stay apart; an invalid one raises every time (never cached).
@lru_cache(maxsize=4096, typed=True)
def _parse(q: str | int | float) -> Decimal:
    value = _k8s_parse_quantity(q)
    if not value.is_finite():
        raise ValueError(f"invalid quantity {q!r}")
    return value
