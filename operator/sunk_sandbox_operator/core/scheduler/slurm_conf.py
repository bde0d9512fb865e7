"""Slurm's own `KillWait` in slurm.conf text: a pure parser (split from scheduler.conf's parsers in
`conf.py`, which read what the SUNK Pod Scheduler states itself).

SUNK 8.2 drops the scheduler's kill-wait flag, so slurm.conf's KillWait is the source (domain.md step
1). slurm.conf is tenant-written and in `tenant_text.PARSERS` with its bound: it is read a line at a
time with str methods; what cannot be read is an error in the result, what passes a bound a refusal.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from itertools import compress, count, repeat
from typing import Any

from ..tenant_text import Refused, printable
from ..units import MAX_DURATION_CHARS

SLURM_CONF_SUFFIX = "slurm.conf"
# Slurm's built-in KillWait when slurm.conf does not set it (slurm.conf(5)).
SLURM_DEFAULT_KILL_WAIT = 30
# A ConfigMap holds at most 1 MiB; Slurm reads lines of any length, but no real slurm.conf line
# comes near 64 KiB (a NodeName line listing a thousand nodes by name is about 16 KiB).
MAX_SLURM_CONF_CHARS = 1 << 20
MAX_SLURM_CONF_LINE = 64 * 1024


@dataclass(frozen=True)
class SlurmConf:
    kill_wait: int | None = None
    error: str | None = None
    includes: bool = False  # an `Include` line: KillWait may be set in a file not seen here


def slurm_conf(text: Any) -> SlurmConf:
    """KillWait (the last setting wins, as in Slurm) and whether another file is included, from
    slurm.conf text; Refused past MAX_SLURM_CONF_CHARS or a line past MAX_SLURM_CONF_LINE."""
    if not isinstance(text, str):
        return SlurmConf(error=f"slurm.conf must be text, got {type(text).__name__}")
    if len(text) > MAX_SLURM_CONF_CHARS:
        raise Refused(f"refused as untrusted input: it is {len(text):,} characters, more than the "
                      f"{MAX_SLURM_CONF_CHARS:,} the operator reads: shorten it")
    return _parse_slurm_conf(text)


# A pure function of the text, memoized like scheduler.conf's: every reconcile reads every slurm.conf key.
# Lines are picked in C (map, compress): only those naming KillWait cost Python work.
@functools.lru_cache(maxsize=8)
def _parse_slurm_conf(text: str) -> SlurmConf:
    lines = text.splitlines()
    if lines and max(map(len, lines)) > MAX_SLURM_CONF_LINE:
        lineno = next(i for i, line in enumerate(lines, 1) if len(line) > MAX_SLURM_CONF_LINE)
        raise Refused(f"refused as untrusted input: line {lineno} is {len(lines[lineno - 1]):,} characters, more "
                      f"than the {MAX_SLURM_CONF_LINE:,} the operator reads: shorten it (Slurm's hostlist form, "
                      "node[001-100], keeps node lists short)")
    low = text.lower().splitlines()
    if len(low) != len(lines):  # lower() never makes or removes a line break; should it ever, line by line
        low = [line.lower() for line in lines]
    # `include` after blanks starts no comment, so the comment need not be cut first.
    includes = any(map(str.startswith, map(str.lstrip, low), repeat("include")))
    value, error = None, None
    for lineno in compress(count(1), map(str.__contains__, low, repeat("killwait"))):
        line = lines[lineno - 1].split("#", 1)[0]
        # Slurm allows several Key=Value pairs on a line, with spaces around '=': drop the spaces next to
        # each '=' (what `re.sub(r"\s*=\s*", "=", line)` did, without going back over a run of spaces).
        parts = line.split("=")
        last = len(parts) - 1
        joined = "=".join(p if last == 0 else p.rstrip() if i == 0 else p.lstrip() if i == last else p.strip()
                          for i, p in enumerate(parts))
        for tok in joined.split():
            key, sep, raw = tok.partition("=")
            if sep and key.lower() == "killwait":
                if len(raw) <= MAX_DURATION_CHARS and raw.isdecimal():  # int() reads exactly the decimals
                    value, error = int(raw), None
                else:
                    error = f"slurm.conf line {lineno}: KillWait={printable(raw)} is not whole seconds"
    return SlurmConf(value, error, includes)


def slurm_kill_wait(text: Any) -> tuple[int | None, str | None]:
    """(KillWait seconds or None, error) from slurm.conf text; Refused past a bound (`slurm_conf`)."""
    conf = slurm_conf(text)
    return conf.kill_wait, conf.error


def parse_slurm_kill_wait(slurm_conf_text: Any) -> int | None:
    """Slurm's KillWait in seconds, or None when unset, unreadable or refused."""
    try:
        return slurm_kill_wait(slurm_conf_text)[0]
    except Refused:
        return None
