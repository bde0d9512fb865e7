"""slurmrestd's OpenAPI versions and the answers that differ between Slurm releases, pure.

Which data_parser versions a slurmrestd serves depends on its release (measured,
shared/reference/slurm-versions.md): Slurm 22.05 v0.0.36–v0.0.38, 24.11 v0.0.40–v0.0.42, 25.11 (SUNK
8.1 and 8.2) v0.0.41–v0.0.44, 26.05 v0.0.42–v0.0.45; an unknown version is a plain-text 404.

Negotiation probes `GET /slurm/VERSION/ping` from the newest version the operator knows down and
keeps the first one answered with anything but 404: at most len(KNOWN) requests of well under a
kilobyte each, against 0.66–0.9 MB for the `/openapi/v3` document that lists them (which also needs
the token, and would be parsed on the event loop). `probe` is that walk as a pure step.

The rest reads the answers whose shape changed between releases, tolerantly (fields added,
numbers as `{"set","infinite","number"}` objects, `meta.slurm.version.*` as strings in 26.05):
the unchanged job list (304 on 22.05; from 24.11 on a 200 with `jobs: []`, `last_update.number`
0 and a warning), 24.11's refusal of `update_time` at v0.0.40/v0.0.41 (error 9202), the ping's
word for a responding slurmctld (from 24.11 on a refused token is a 200 ping that says "not
responding" too: the client asks again where the HTTP status tells), and the release a `meta` names.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .facts import number as _number  # the one reader of an integer field in either shape

# Newest first: the negotiation's probe order. v0.0.39 (Slurm 23.02) was never measured: not offered.
KNOWN: tuple[str, ...] = ("v0.0.45", "v0.0.44", "v0.0.43", "v0.0.42", "v0.0.41", "v0.0.40", "v0.0.38")
RELEASES = ("Slurm 22.05 serves v0.0.38, 24.11 v0.0.40–v0.0.42, 25.11 (SUNK 8.1 and 8.2) v0.0.41–v0.0.44, "
            "26.05 v0.0.42–v0.0.45")
UPDATE_TIME_REFUSED = 9202     # "Unable to convert Data type": 24.11's v0.0.40/41 on `update_time`
UNCHANGED_WARNING = "No job changes since"
TEXT_MAX = 300


# ---------------------------------------------------------------- negotiation


@dataclass(frozen=True)
class Probe:
    """One step of the negotiation: ask `ask` next, or `chosen` (None with `ask` None: nothing known served)."""

    ask: str | None = None
    chosen: str | None = None


def probe(answered: Sequence[tuple[str, int]]) -> Probe:
    """The next step after the (version, HTTP status) answers so far, asked in KNOWN's order. A 404
    means "not served"; the first answer that is not a 404 is the version (an error other than 404
    is the request's own: the caller raises it)."""
    for version, status in answered:
        if status != 404:
            return Probe(chosen=version)
    left = [v for v in KNOWN if v not in {v for v, _ in answered}]
    return Probe(ask=left[0]) if left else Probe()


def spans(versions: Sequence[str]) -> str:
    """v0.0.40, v0.0.41, v0.0.42 → "v0.0.40–v0.0.42" (runs of consecutive minors joined)."""
    nums = sorted({int(v.rsplit(".", 1)[1]) for v in versions if v.rsplit(".", 1)[-1].isdigit()})
    runs: list[list[int]] = []
    for n in nums:
        if runs and n == runs[-1][-1] + 1:
            runs[-1].append(n)
        else:
            runs.append([n])
    return ", ".join(f"v0.0.{r[0]:02d}" + (f"–v0.0.{r[-1]:02d}" if len(r) > 1 else "") for r in runs) or "none"


# ---------------------------------------------------------------- answers that differ by release


def _texts(body: Any, key: str) -> list[str]:
    """The descriptions of `errors` or `warnings` (either may be absent, null or carry odd items)."""
    items = body.get(key) if isinstance(body, Mapping) else None
    out = []
    for item in items if isinstance(items, list) else []:
        if isinstance(item, Mapping):
            text = item.get("description") or item.get("error")
            if isinstance(text, str) and text:
                out.append(text[:TEXT_MAX])
    return out


def warnings(body: Any) -> str:
    return "; ".join(_texts(body, "warnings"))[:TEXT_MAX]


def unchanged(body: Any) -> bool:
    """Is this 200 answer to `GET /jobs?update_time=T` Slurm 24.11+'s "nothing changed since T"
    (never an empty job list)? `jobs` empty, and `last_update` 0 or the warning saying so."""
    if not isinstance(body, Mapping):
        return False
    jobs = body.get("jobs")
    if jobs not in (None, []):
        return False
    last = body.get("last_update")
    return (last is not None and _number(last) == 0) or any(UNCHANGED_WARNING in w for w in _texts(body, "warnings"))


def update_time_refused(body: Any) -> bool:
    """24.11's v0.0.40/v0.0.41 answer to `?update_time=`: 422 (/jobs) or 500 (/partitions), error 9202."""
    items = body.get("errors") if isinstance(body, Mapping) else None
    for e in items if isinstance(items, list) else []:
        if isinstance(e, Mapping) and (e.get("error_number") == UPDATE_TIME_REFUSED
                                       or "for timestamp failed" in str(e.get("description", ""))[:TEXT_MAX]):
            return True
    return False


def responding(body: Any) -> bool | None:
    """Does the ping say slurmctld responds? `ping: "UP"` (v0.0.38), `pinged: "UP"` (v0.0.40–44),
    `responding: true` (v0.0.42+; v0.0.45 has nothing else). None: the answer does not say."""
    pings = body.get("pings") if isinstance(body, Mapping) else None
    said: list[bool] = []
    for p in pings if isinstance(pings, list) else []:
        if not isinstance(p, Mapping):
            continue
        if isinstance(p.get("responding"), bool):
            said.append(p["responding"])
        else:
            word = p.get("pinged", p.get("ping"))
            if isinstance(word, str):
                said.append(word.upper() == "UP")
    return any(said) if said else None


def ping_status(body: Any) -> str:
    """The first ping's `status` text (26.05 says why slurmctld did not respond: "Protocol
    authentication error" for a refused token), or ""."""
    pings = body.get("pings") if isinstance(body, Mapping) else None
    for p in pings if isinstance(pings, list) else []:
        if isinstance(p, Mapping) and isinstance(p.get("status"), str):
            return str(p["status"])[:TEXT_MAX]
    return ""


def release(body: Any) -> str | None:
    """The Slurm release a `meta` names: `meta.slurm.release` ("24.11.5"; `meta.Slurm` on 22.05), or
    its `version` parts (integers, or strings in 26.05)."""
    meta = body.get("meta") if isinstance(body, Mapping) else None
    slurm = (meta.get("slurm") or meta.get("Slurm")) if isinstance(meta, Mapping) else None
    if not isinstance(slurm, Mapping):
        return None
    named = slurm.get("release")
    if isinstance(named, str) and 0 < len(named) <= 32 and all(c.isalnum() or c in ".-_" for c in named):
        return named
    version = slurm.get("version")
    if isinstance(version, Mapping):
        parts = [version.get(k) for k in ("major", "minor", "micro")]
        if all(isinstance(p, (int, str)) and not isinstance(p, bool) and str(p).isdigit() and len(str(p)) <= 4
               for p in parts):
            major, minor, micro = (str(p) for p in parts)
            return f"{major}.{int(minor):02d}.{micro}"
    return None
