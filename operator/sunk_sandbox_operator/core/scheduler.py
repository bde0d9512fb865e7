"""Scheduler discovery: pure parsers over the objects the API server returns.

The SUNK Pod Scheduler tells us its name and kill-wait in several places depending on the SUNK
version (domain.md step 1): SUNK 8 a `scheduler.conf` YAML in a ConfigMap labelled
`app.kubernetes.io/component=scheduler`; SUNK 7 the `--scheduler-name` / `--slurm-kill-wait`
arguments of the container named `scheduler`; SUNK 8.2 drops the kill-wait flag, so Slurm's own
`KillWait` in slurm.conf is the source. Nothing here talks to a server or reads a clock.
"""

from __future__ import annotations

import math
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from ..api.keys import SCHEDULER_CONFIGMAP_LABEL
from ..api.reasons import SchedulerReady
from ..api.spec import BindingSpec
from ..api.status import SchedulerStatus
from .selectors import to_label_selector_string

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
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        return SchedulerConf(error=f"scheduler.conf is not valid YAML{where}: {getattr(e, 'problem', None) or e}")
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
            item = _ENV_REF.sub(lambda m: env[m.group(1)] if isinstance(env.get(m.group(1)), str) else m.group(0), item)
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


# ---------------------------------------------------------------- discovery


@dataclass
class Discovery:
    namespace: str
    selector: str  # the pod selector as `kubectl -l` text, for messages
    name: str | None = None
    name_source: str | None = None  # spec | configMap | args
    kill_wait_seconds: int | None = None
    kill_wait_source: str | None = None  # args | configMap | slurmConf | spec | slurmConfDefault
    ready_replicas: int = 0
    pods_found: int = 0
    messages: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    service_account: str = "default"
    configmap_name: str | None = None
    scope_type: str | None = None


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    m = obj.get("metadata")
    return m if isinstance(m, Mapping) else {}


def is_ready(pod: Any) -> bool:
    """Ready=True and not being deleted (a terminating pod is on its way out)."""
    if not isinstance(pod, Mapping) or _meta(pod).get("deletionTimestamp"):
        return False
    status = pod.get("status")
    conds = status.get("conditions") if isinstance(status, Mapping) else None
    return any(
        isinstance(c, Mapping) and c.get("type") == "Ready" and c.get("status") == "True" for c in conds or []
    )


def _data(cm: Mapping[str, Any]) -> Mapping[str, Any]:
    d = cm.get("data")
    return d if isinstance(d, Mapping) else {}


def _scheduler_configmap(spec: BindingSpec, cms: list[Mapping[str, Any]], d: Discovery) -> Mapping[str, Any] | None:
    target = spec.scope.target.config_map
    if spec.scope.target.kind == "SchedulerConfigMap" and target.name:
        # The admin named it for the scope sync; the scheduler reads the same document.
        named = next((cm for cm in cms if _meta(cm).get("name") == target.name), None)
        if named is None:
            d.messages.append(f"ConfigMap {target.name} (spec.scope.target.configMap.name) not found in {d.namespace}")
        return named
    key, value = SCHEDULER_CONFIGMAP_LABEL
    found = sorted(
        (
            cm
            for cm in cms
            if isinstance(_meta(cm).get("labels"), Mapping)
            and _meta(cm)["labels"].get(key) == value
            and SCHEDULER_CONF_KEY in _data(cm)
        ),
        key=lambda cm: str(_meta(cm).get("name", "")),
    )
    if len(found) > 1:
        d.messages.append(
            f"{len(found)} ConfigMaps labelled {key}={value} hold {SCHEDULER_CONF_KEY}; using "
            f"{_meta(found[0]).get('name')} — set spec.scope.target.configMap.name to choose"
        )
    return found[0] if found else None


def _ordered_pods(pods: list[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Ready pods first, newest first: during a rollout the newest Ready pod has the current flags."""
    return sorted(
        pods,
        key=lambda p: (is_ready(p), str(_meta(p).get("creationTimestamp") or ""), str(_meta(p).get("name") or "")),
        reverse=True,
    )


def discover(
    spec: BindingSpec, binding_namespace: str, pods: list[dict], configmaps: list[dict]
) -> Discovery:
    """Resolve the scheduler's name and kill-wait from its pods and its namespace's ConfigMaps."""
    ns = spec.scheduler_namespace(binding_namespace)
    selector = to_label_selector_string(spec.scheduler.pod_selector)
    if selector is None:
        selector = "<spec.scheduler.podSelector>"
    d = Discovery(namespace=ns, selector=selector)
    good_pods = [p for p in pods or [] if isinstance(p, Mapping)]
    cms = [cm for cm in configmaps or [] if isinstance(cm, Mapping)]
    d.pods_found = len(good_pods)
    d.ready_replicas = sum(1 for p in good_pods if is_ready(p))

    # SUNK 8: scheduler.conf
    conf = SchedulerConf()
    cm = _scheduler_configmap(spec, cms, d)
    if cm is not None:
        d.configmap_name = _meta(cm).get("name")
        key = spec.scope.target.config_map.key if spec.scope.target.kind == "SchedulerConfigMap" else SCHEDULER_CONF_KEY
        conf = parse_scheduler_conf(_data(cm).get(key))
        if conf.error:
            d.errors.append(f"ConfigMap {d.configmap_name} key {key}: {conf.error}")
        d.scope_type = conf.scope_type

    # SUNK 7: container args of the most relevant pod
    args = SchedulerArgs()
    ordered = _ordered_pods(good_pods)
    if ordered:
        first = ordered[0]
        pod_name = _meta(first).get("name")
        args = parse_scheduler_args(first)
        if args.error:
            # A missing container is a hint, not broken config: SUNK 8 needs no flags at all.
            (d.errors if args.container_found else d.messages).append(f"pod {pod_name}: {args.error}")
        spec_obj = first.get("spec")
        sa = (spec_obj.get("serviceAccountName") or spec_obj.get("serviceAccount")) if isinstance(spec_obj, Mapping) else None
        d.service_account = sa if isinstance(sa, str) and sa else "default"
        distinct = {(a.name, a.kill_wait_seconds) for a in map(parse_scheduler_args, good_pods) if not a.error}
        if len(distinct) > 1:
            d.messages.append(f"scheduler pods disagree on their flags (rollout in progress?); using pod {pod_name}")

    # Name: spec, configMap, args
    discovered = [(n, src) for n, src in ((conf.name, "configMap"), (args.name, "args")) if n]
    if conf.name and args.name and conf.name != args.name:
        d.messages.append(
            f"scheduler.conf names the scheduler {conf.name!r} but --scheduler-name is {args.name!r}; using {conf.name!r}"
        )
    if spec.scheduler.name:
        d.name, d.name_source = spec.scheduler.name, "spec"
        for found, src in discovered[:1]:
            if found != spec.scheduler.name:
                d.messages.append(
                    f"spec.scheduler.name is {spec.scheduler.name!r} but the scheduler calls itself {found!r} "
                    f"(from {src}); sandbox pods naming {spec.scheduler.name!r} will stay Pending — "
                    "fix spec.scheduler.name or leave it empty to use the discovered name"
                )
    elif discovered:
        d.name, d.name_source = discovered[0]

    # Kill-wait: args, configMap, slurm.conf KillWait, spec, Slurm's default
    slurm_kw, slurm_cm, slurm_default = _slurm_conf(cms, d)
    scheduler_kw = next(
        ((kw, src) for kw, src in ((args.kill_wait_seconds, "args"), (conf.kill_wait_seconds, "configMap")) if kw is not None),
        None,
    )
    if scheduler_kw:
        d.kill_wait_seconds, d.kill_wait_source = scheduler_kw
    elif slurm_kw is not None:
        d.kill_wait_seconds, d.kill_wait_source = slurm_kw, "slurmConf"
    elif spec.scheduler.kill_wait_seconds is not None:
        d.kill_wait_seconds, d.kill_wait_source = spec.scheduler.kill_wait_seconds, "spec"
    elif slurm_default:
        d.kill_wait_seconds, d.kill_wait_source = SLURM_DEFAULT_KILL_WAIT, "slurmConfDefault"
        d.messages.append(
            f"slurm.conf in ConfigMap {slurm_cm} sets no KillWait: assuming Slurm's default "
            f"{SLURM_DEFAULT_KILL_WAIT} s (set spec.scheduler.killWaitSeconds if it is set elsewhere)"
        )
    if scheduler_kw and slurm_kw is not None and scheduler_kw[0] != slurm_kw:
        d.messages.append(
            f"the scheduler's kill-wait is {scheduler_kw[0]} s ({scheduler_kw[1]}) but Slurm's KillWait is {slurm_kw} s "
            f"(ConfigMap {slurm_cm}); they must stay equal — set both to the same value in the Slurm Helm values"
        )
    if (
        spec.scheduler.kill_wait_seconds is not None
        and d.kill_wait_source not in (None, "spec")
        and d.kill_wait_seconds != spec.scheduler.kill_wait_seconds
    ):
        d.messages.append(
            f"spec.scheduler.killWaitSeconds is {spec.scheduler.kill_wait_seconds} but {d.kill_wait_seconds} s was "
            f"discovered ({d.kill_wait_source}); using the discovered value"
        )
    return d


def _slurm_conf(cms: list[Mapping[str, Any]], d: Discovery) -> tuple[int | None, str | None, bool]:
    """(KillWait, ConfigMap name, whether a complete slurm.conf without KillWait was seen)."""
    without: str | None = None
    for cm in sorted(cms, key=lambda c: str(_meta(c).get("name", ""))):
        name = _meta(cm).get("name")
        for key, text in sorted(_data(cm).items()):
            if not str(key).endswith(SLURM_CONF_SUFFIX):
                continue
            kw, err = slurm_kill_wait(text)
            if err:
                d.errors.append(f"ConfigMap {name} key {key}: {err}")
            if kw is not None:
                return kw, name, False
            # An `include` may hold KillWait elsewhere: then Slurm's default is not a safe guess.
            if err is None and isinstance(text, str) and not _sets_include(text) and without is None:
                without = name
    return None, without, without is not None


def scheduler_condition(d: Discovery) -> tuple[str, str, str]:
    """SchedulerReady as (status, reason, message); the message says what to do."""
    sel = f" -l {shlex.quote(d.selector)}" if d.selector else ""
    kubectl = f"kubectl get pods -n {d.namespace}{sel}"
    notes = "".join(f" Note: {m}" for m in d.messages) + "".join(f" Error: {e}" for e in d.errors)
    if d.pods_found == 0:
        return (
            "False",
            SchedulerReady.SCHEDULER_NOT_FOUND,
            f"no SUNK scheduler pods found (`{kubectl}` returns nothing): enable the scheduler with "
            "`scheduler.enabled: true` in the Slurm Helm values, or fix spec.scheduler.namespace / "
            f"spec.scheduler.podSelector.{notes}",
        )
    if d.ready_replicas == 0:
        return (
            "False",
            SchedulerReady.SCHEDULER_NOT_RUNNING,
            f"{d.pods_found} scheduler pod(s) found but none is Ready: check `{kubectl}` and "
            f"`kubectl logs -n {d.namespace}{sel} -c {SCHEDULER_CONTAINER}`.{notes}",
        )
    if not d.name:
        return (
            "False",
            SchedulerReady.NAME_UNKNOWN,
            f"the scheduler runs but its name was not found (no {SCHEDULER_CONF_KEY} ConfigMap labelled "
            f"{SCHEDULER_CONFIGMAP_LABEL[0]}={SCHEDULER_CONFIGMAP_LABEL[1]}, no --scheduler-name argument): "
            f"set spec.scheduler.name.{notes}",
        )
    kw = f"kill-wait {d.kill_wait_seconds} s ({d.kill_wait_source})" if d.kill_wait_seconds is not None else "kill-wait unknown"
    return (
        "True",
        SchedulerReady.SCHEDULER_FOUND,
        f"scheduler {d.name!r} ({d.name_source}) has {d.ready_replicas} Ready pod(s) in {d.namespace}; {kw}.{notes}",
    )


def to_status(d: Discovery) -> SchedulerStatus:
    return SchedulerStatus(
        name=d.name,
        name_source=d.name_source,
        kill_wait_seconds=d.kill_wait_seconds,
        kill_wait_source=d.kill_wait_source,
        ready_replicas=d.ready_replicas,
    )
