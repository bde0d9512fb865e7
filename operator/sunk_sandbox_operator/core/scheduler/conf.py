"""Where the SUNK Pod Scheduler states its name and kill-wait: pure parsers.

SUNK 8: a `scheduler.conf` YAML in a ConfigMap; SUNK 7: the `--scheduler-name` /
`--slurm-kill-wait` arguments of the container named `scheduler`; SUNK 8.2 drops the kill-wait
flag, so Slurm's own `KillWait` in slurm.conf is the source (domain.md step 1; its parser is
`slurm_conf.py`). Durations are Go's (`units.parse_go_duration`). Nothing here talks to a server
or reads a clock.

All of it is tenant-written, so every parser here is in `tenant_text.PARSERS` with its bound:
scheduler.conf goes through `untrusted` (no aliases, bounded size and work), args through `argv`
(bounded `$(VAR)` expansion). What cannot be read is an error in the result, never an exception; what passes a bound, or a scheduler name
Kubernetes would refuse, is a refusal (`refused`, naming the argument or field) and the rest of
the object is still read.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from .. import untrusted
from . import argv
from ..redact import describe
from ..tenant_text import Refused, dns_subdomain_problem, printable, shown
from ..units import MAX_DURATION_CHARS, parse_go_duration

SCHEDULER_CONTAINER = "scheduler"
SCHEDULER_CONF_KEY = "scheduler.conf"


def _seconds(value: Any, what: str) -> tuple[int | None, str | None]:
    """A kill-wait given as int seconds, digit string or Go duration -> whole seconds; Refused when
    the text passes the duration bound.

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
        try:  # past MAX_DURATION_CHARS Refused, unread (int() of 30,000 digits is an error only past 4,300)
            seconds = int(text) if text.isdigit() and len(text) <= MAX_DURATION_CHARS else parse_go_duration(text)
        except Refused:
            raise
        except ValueError:
            return None, f"{what}: {printable(value)} is not a duration (e.g. 60s, 1m30s) or whole seconds"
    else:
        return None, f"{what}: expected seconds or a duration, got {printable(value)}"
    if seconds < 0:
        return None, f"{what}: {printable(value)} is negative"
    return math.floor(seconds), None


# ---------------------------------------------------------------- SUNK 8: scheduler.conf


@dataclass(frozen=True)
class SchedulerConf:
    name: str | None = None
    kill_wait_seconds: int | None = None
    scope_type: str | None = None
    error: str | None = None
    refused: tuple[str, ...] = ()  # what was not read (the document, or one value): what, which bound, the fix


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


# A pure function of the text, memoized: every reconcile re-reads scheduler.conf, and with a long
# list of names its parse was most of a no-op resync. At most 4 texts of a ConfigMap's 1 MiB.
@functools.lru_cache(maxsize=4)
def _parse_text(text: str) -> SchedulerConf:
    try:
        doc = untrusted.load(text)  # libyaml: scheduler.conf may hold 10,000 names
    except untrusted.Refused as e:
        return SchedulerConf(refused=(f"scheduler.conf {e}",))
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
    refused: list[str] = []
    name = sched.get("name")
    if name is not None and not (isinstance(name, str) and name.strip()):
        errors.append(f"scheduler.name must be a non-empty string, got {printable(name)}")
        name = None
    elif isinstance(name, str) and (problem := dns_subdomain_problem(name.strip())):
        refused.append(f"scheduler.name {printable(name)} refused: {problem}: set `scheduler.name` in the Slurm "
                       "Helm values to the name sandbox pods use")
        name = None
    kill_wait = None
    for path in _CONF_KILL_WAIT_PATHS:
        node: Any = sched
        for part in path:
            node = node.get(part) if isinstance(node, Mapping) else None
        if node is not None:
            what = "scheduler." + ".".join(path)
            try:
                kill_wait, err = _seconds(node, what)
            except Refused as exc:
                refused.append(f"{what} {exc}")
                err = None
            if err:
                errors.append(err)
            break
    scope_type = None
    scope = sched.get("scope")
    if isinstance(scope, Mapping) and scope.get("type") is not None:
        scope_type = shown(scope["type"])
    elif scope is not None and not isinstance(scope, Mapping):
        errors.append("scheduler.scope must be a mapping")
    return SchedulerConf(
        name=name.strip() if isinstance(name, str) else None,
        kill_wait_seconds=kill_wait,
        scope_type=scope_type,
        error="; ".join(errors) or None,
        refused=tuple(refused),
    )


# ---------------------------------------------------------------- SUNK 7: container args


@dataclass(frozen=True)
class SchedulerArgs:
    name: str | None = None
    kill_wait_seconds: int | None = None
    error: str | None = None
    container_found: bool = True  # False: the object has no `scheduler` container (wrong pods selected?)
    refused: tuple[str, ...] = ()  # arguments (or env values) not read: which, which bound, the fix


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


_SPACE = re.compile(r"\s")


def _tokens(container: Mapping[str, Any]) -> tuple[list[tuple[str, str]], str | None, list[str]]:
    """command + args as argv, each word with the item it came from (`args[3]`); `sh -c "..."`
    strings are split so flags inside are found. Expanded as the kubelet does, within one budget
    per container (`argv`): an item past it is skipped and named in the third value."""
    budget = argv.Budget()
    env, refused = argv.container_env(container, budget)
    out: list[tuple[str, str]] = []
    for part in ("command", "args"):
        items = container.get(part) or []
        if not isinstance(items, list):
            return [], f"container {SCHEDULER_CONTAINER!r} {part} must be a list", refused
        for i, item in enumerate(items):
            if not isinstance(item, str):
                continue
            where = f"{part}[{i}]"
            try:
                item = budget.take(item, env)
            except Refused as exc:
                refused.append(f"{where}: {exc}")
                continue
            if _SPACE.search(item.strip()):
                try:
                    words = argv.shell_words(item)
                except ValueError:
                    words = item.split()
                out.extend((word, where) for word in words)
            else:
                out.append((item, where))
    return out, None, refused


def _flag_values(tokens: list[tuple[str, str]], flag: str) -> tuple[str | None, str | None, str]:
    """Last value of a Go-style flag (`-f=v`, `--f=v`, `-f v`, `--f v`), Go's flag package keeps the
    last, and the item it came from."""
    value, error, where = None, None, ""
    for i, (tok, at) in enumerate(tokens):
        if not tok.startswith("-"):
            continue
        bare = tok[2:] if tok.startswith("--") else tok[1:]
        if bare == flag:
            if i + 1 < len(tokens) and not tokens[i + 1][0].startswith("-"):
                value, error, where = tokens[i + 1][0], None, tokens[i + 1][1]
            else:
                error, where = f"--{flag} has no value", at
        elif bare.startswith(flag + "="):
            value, error, where = bare[len(flag) + 1 :], None, at
    return value, error, where


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
    tokens, err, skipped = _tokens(container)
    if err:
        return SchedulerArgs(error=err)
    errors: list[str] = []
    refused = [f"container {SCHEDULER_CONTAINER!r} {r}" for r in skipped]
    name, name_err, name_at = _flag_values(tokens, "scheduler-name")
    if name_err:
        errors.append(name_err)
    if name is not None and (not name or "$(" in name):
        errors.append(f"--scheduler-name value {printable(name)} is empty or an unresolved variable")
        name = None
    elif name is not None and (problem := dns_subdomain_problem(name)):
        refused.append(f"container {SCHEDULER_CONTAINER!r} {name_at}: --scheduler-name {printable(name)} refused: "
                       f"{problem}: give the scheduler the name sandbox pods use")
        name = None
    kill_wait = None
    raw_kw, kw_err, kw_at = _flag_values(tokens, "slurm-kill-wait")
    if kw_err:
        errors.append(kw_err)
    if raw_kw is not None:
        try:
            kill_wait, kw_err = _seconds(raw_kw, "--slurm-kill-wait")
        except Refused as exc:
            refused.append(f"container {SCHEDULER_CONTAINER!r} {kw_at}: --slurm-kill-wait {exc}")
        if kw_err:
            errors.append(kw_err)
    return SchedulerArgs(name=name, kill_wait_seconds=kill_wait, error="; ".join(errors) or None,
                         refused=tuple(refused))
