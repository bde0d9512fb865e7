"""Where the SUNK Pod Scheduler states its name and kill-wait: pure parsers.

SUNK 8: a `scheduler.conf` YAML in a ConfigMap; SUNK 7: the `--scheduler-name` /
`--slurm-kill-wait` arguments of the container named `scheduler`; SUNK 8.2 drops the kill-wait
flag, so Slurm's own `KillWait` in slurm.conf is the source (domain.md step 1). Durations are
Go's (`time.ParseDuration`). Nothing here talks to a server or reads a clock. scheduler.conf is
tenant-written: it is parsed through `untrusted` (no aliases, bounded size and work), and what cannot
be read is an error in the result, never an exception.
"""

from __future__ import annotations

import functools
import math
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from . import untrusted
from .redact import describe

SCHEDULER_CONTAINER = "scheduler"
SCHEDULER_CONF_KEY = "scheduler.conf"
SLURM_CONF_SUFFIX = "slurm.conf"
# Slurm's built-in KillWait when slurm.conf does not set it (slurm.conf(5)).
SLURM_DEFAULT_KILL_WAIT = 30

# ---------------------------------------------------------------- Go durations

_GO_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_GO_PART = re.compile(r"(\d+\.?\d*|\.\d+)(ns|us|µs|μs|ms|s|m|h)")


def parse_go_duration(s: str) -> float:
    """Seconds in a Go `time.ParseDuration` string (30s, 1m30s, 1.5s, 500ms, -2h, 0).

    Raises ValueError on anything Go would reject (missing unit, empty, junk).
    """
    if not isinstance(s, str):
        raise ValueError(f"duration must be a string, got {type(s).__name__}")
    text = s.strip()
    sign = 1.0
    if text[:1] in ("+", "-"):
        sign = -1.0 if text[0] == "-" else 1.0
        text = text[1:]
    if text == "0":
        return 0.0
    if not text:
        raise ValueError(f"invalid duration {s!r}")
    pos, total = 0, 0.0
    while pos < len(text):
        m = _GO_PART.match(text, pos)
        if not m:
            raise ValueError(f"invalid duration {s!r}: expected <number><unit> (ns, us, ms, s, m, h) at {text[pos:]!r}")
        total += float(m.group(1)) * _GO_UNITS[m.group(2)]
        pos = m.end()
    return sign * total


def _seconds(value: Any, what: str) -> tuple[int | None, str | None]:
    """A kill-wait given as int seconds, digit string or Go duration -> whole seconds.

    Fractions round down: a shorter kill-wait is the safe side of the grace rule.
    """
    if isinstance(value, bool):  # bool is an int in Python; `true` is never a kill-wait
        return None, f"{what}: expected seconds or a duration, got {value!r}"
    if isinstance(value, int):
        seconds: float = value
    elif isinstance(value, float) and math.isfinite(value):
        seconds = value
    elif isinstance(value, str):
        text = value.strip()
        try:
            seconds = int(text) if text.isdigit() else parse_go_duration(text)
        except ValueError:
            return None, f"{what}: {value!r} is not a duration (e.g. 60s, 1m30s) or whole seconds"
    else:
        return None, f"{what}: expected seconds or a duration, got {value!r}"
    if seconds < 0:
        return None, f"{what}: {value!r} is negative"
    return math.floor(seconds), None


# ---------------------------------------------------------------- SUNK 8: scheduler.conf


@dataclass(frozen=True)
class SchedulerConf:
    name: str | None = None
    kill_wait_seconds: int | None = None
    scope_type: str | None = None
    error: str | None = None


# Where a kill-wait may live in scheduler.conf; no public schema pins it, so accept the plausible spellings.
_CONF_KILL_WAIT_PATHS = (
    ("slurmKillWait",),
    ("killWait",),
    ("slurmKillWaitSeconds",),
    ("killWaitSeconds",),
    ("slurm", "killWait"),
    ("slurm", "kill_wait"),
    ("slurm_kill_wait",),
    ("kill_wait",),
)


def parse_scheduler_conf(text: Any) -> SchedulerConf:
    """Name, kill-wait and scope type from a SUNK 8 `scheduler.conf` YAML document."""
    if not isinstance(text, str):
        return SchedulerConf(error=f"scheduler.conf must be text, got {type(text).__name__}")
    return _parse_text(text)


# A pure function of the text, memoized: every reconcile re-reads scheduler.conf, whose list of
# 5,000 names made its parse a third of a no-op resync. At most 4 texts of a ConfigMap's 1 MiB.
@functools.lru_cache(maxsize=4)
def _parse_text(text: str) -> SchedulerConf:
    try:
        doc = untrusted.load(text)  # libyaml: scheduler.conf may hold 10,000 names
    except untrusted.Refused as e:
        return SchedulerConf(error=f"scheduler.conf {describe(e)}")
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        return SchedulerConf(error=f"scheduler.conf is not valid YAML{where}: {getattr(e, 'problem', None) or describe(e)}")
    except Exception as e:  # noqa: BLE001 - e.g. `2024-13-45` (a date?) raises ValueError, a base-60 float OverflowError
        return SchedulerConf(error=f"scheduler.conf is not valid YAML: {describe(e)}")
    if doc is None:
        return SchedulerConf(error="scheduler.conf is empty")
    if not isinstance(doc, Mapping):
        return SchedulerConf(error=f"scheduler.conf must be a YAML mapping, got {type(doc).__name__}")
    sched = doc.get("scheduler")
    if sched is None:
        return SchedulerConf(error="scheduler.conf has no `scheduler:` section")
    if not isinstance(sched, Mapping):
        return SchedulerConf(error="scheduler.conf `scheduler:` must be a mapping")

    errors: list[str] = []
    name = sched.get("name")
    if name is not None and not (isinstance(name, str) and name.strip()):
        errors.append(f"scheduler.name must be a non-empty string, got {name!r}")
        name = None
    kill_wait = None
    for path in _CONF_KILL_WAIT_PATHS:
        node: Any = sched
        for part in path:
            node = node.get(part) if isinstance(node, Mapping) else None
        if node is not None:
            kill_wait, err = _seconds(node, "scheduler." + ".".join(path))
            if err:
                errors.append(err)
            break
    scope_type = None
    scope = sched.get("scope")
    if isinstance(scope, Mapping) and scope.get("type") is not None:
        scope_type = str(scope["type"])
    elif scope is not None and not isinstance(scope, Mapping):
        errors.append("scheduler.scope must be a mapping")
    return SchedulerConf(
        name=name.strip() if isinstance(name, str) else None,
        kill_wait_seconds=kill_wait,
        scope_type=scope_type,
        error="; ".join(errors) or None,
    )


# ---------------------------------------------------------------- SUNK 7: container args


@dataclass(frozen=True)
class SchedulerArgs:
    name: str | None = None
    kill_wait_seconds: int | None = None
    error: str | None = None
    container_found: bool = True  # False: the object has no `scheduler` container (wrong pods selected?)


def _containers(obj: Any) -> list[Any] | None:
    """Containers of a Pod, a pod-template owner (Deployment, StatefulSet) or a bare PodSpec."""
    if not isinstance(obj, Mapping):
        return None
    if "containers" in obj:
        return obj["containers"] if isinstance(obj["containers"], list) else None
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        return None
    template = spec.get("template")
    if isinstance(template, Mapping):
        spec = template.get("spec")
        if not isinstance(spec, Mapping):
            return None
    containers = spec.get("containers")
    return containers if isinstance(containers, list) else None


_ENV_REF = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def _tokens(container: Mapping[str, Any]) -> tuple[list[str], str | None]:
    """command + args as argv; `sh -c "..."` strings are split so flags inside are found."""
    raw_env = container.get("env")
    env = {
        e["name"]: e.get("value")
        for e in (raw_env if isinstance(raw_env, list) else [])
        if isinstance(e, Mapping) and isinstance(e.get("name"), str)
    }
    out: list[str] = []
    for part in ("command", "args"):
        items = container.get(part) or []
        if not isinstance(items, list):
            return [], f"container {SCHEDULER_CONTAINER!r} {part} must be a list"
        for item in items:
            if not isinstance(item, str):
                continue
            # Kubernetes expands $(VAR) from the container's literal env before exec.
            item = _ENV_REF.sub(lambda m: v if isinstance(v := env.get(m.group(1)), str) else m.group(0), item)
            if any(c.isspace() for c in item.strip()):
                try:
                    out.extend(shlex.split(item))
                except ValueError:
                    out.extend(item.split())
            else:
                out.append(item)
    return out, None


def _flag_values(tokens: list[str], flag: str) -> tuple[str | None, str | None]:
    """Last value of a Go-style flag (`-f=v`, `--f=v`, `-f v`, `--f v`); Go's flag package keeps the last."""
    value, error = None, None
    for i, tok in enumerate(tokens):
        if not tok.startswith("-"):
            continue
        bare = tok[2:] if tok.startswith("--") else tok[1:]
        if bare == flag:
            if i + 1 < len(tokens) and not tokens[i + 1].startswith("-"):
                value, error = tokens[i + 1], None
            else:
                error = f"--{flag} has no value"
        elif bare.startswith(flag + "="):
            value, error = bare[len(flag) + 1 :], None
    return value, error


def parse_scheduler_args(obj: Any) -> SchedulerArgs:
    """`--scheduler-name` and `--slurm-kill-wait` from the container named `scheduler`."""
    containers = _containers(obj)
    if containers is None:
        return SchedulerArgs(error="not a Pod, pod template owner or PodSpec: no containers list")
    container = next(
        (c for c in containers if isinstance(c, Mapping) and c.get("name") == SCHEDULER_CONTAINER), None
    )
    if container is None:
        names = [c.get("name") for c in containers if isinstance(c, Mapping)]
        return SchedulerArgs(error=f"no container named {SCHEDULER_CONTAINER!r} (found {names})", container_found=False)
    tokens, err = _tokens(container)
    if err:
        return SchedulerArgs(error=err)
    errors: list[str] = []
    name, name_err = _flag_values(tokens, "scheduler-name")
    if name_err:
        errors.append(name_err)
    if name is not None and (not name or "$(" in name):
        errors.append(f"--scheduler-name value {name!r} is empty or an unresolved variable")
        name = None
    kill_wait = None
    raw_kw, kw_err = _flag_values(tokens, "slurm-kill-wait")
    if kw_err:
        errors.append(kw_err)
    if raw_kw is not None:
        kill_wait, kw_err = _seconds(raw_kw, "--slurm-kill-wait")
        if kw_err:
            errors.append(kw_err)
    return SchedulerArgs(name=name, kill_wait_seconds=kill_wait, error="; ".join(errors) or None)


# ---------------------------------------------------------------- slurm.conf


def slurm_kill_wait(text: Any) -> tuple[int | None, str | None]:
    """(KillWait seconds or None, error) from slurm.conf text; the last setting wins, as in Slurm."""
    if not isinstance(text, str):
        return None, f"slurm.conf must be text, got {type(text).__name__}"
    value, error = None, None
    for lineno, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0]
        # Slurm allows several Key=Value pairs on a line; normalise spaces around '='.
        for tok in re.sub(r"\s*=\s*", "=", line).split():
            key, sep, raw = tok.partition("=")
            if sep and key.lower() == "killwait":
                if raw.isdigit():
                    value, error = int(raw), None
                else:
                    error = f"slurm.conf line {lineno}: KillWait={raw!r} is not whole seconds"
    return value, error


def parse_slurm_kill_wait(slurm_conf_text: Any) -> int | None:
    """Slurm's KillWait in seconds, or None when unset or unreadable."""
    return slurm_kill_wait(slurm_conf_text)[0]


def _sets_include(text: str) -> bool:
    return any(line.split("#", 1)[0].strip().lower().startswith("include") for line in text.splitlines())
