"""Scheduler discovery (pure): which pods, which ConfigMaps, and the name and kill-wait they give.

`discover` runs over what the API server returned for the scheduler namespace and picks the
sources in order (spec, `scheduler.conf`, container args; kill-wait from Slurm's KillWait in a
slurm.conf ConfigMap first — SUNK 8.2 dropped `--slurm-kill-wait` and reads it there — unless an
older scheduler's own, from args or scheduler.conf, is lower; then the spec); the parsers are in `conf.py`. `scheduler_condition` is SchedulerReady
with what to do (a scheduler in CrashLoopBackOff: SUNK's upgrade-order hazard named).
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


from ...api.keys import SCHEDULER_CONFIGMAP_LABEL
from ...api.reasons import SchedulerReady
from ...api.scope_spec import DEFAULT_SCOPE_PATH
from ...api.spec import BindingSpec
from ...api.status import SchedulerStatus
from ..conditions import Status
from .conf import SCHEDULER_CONF_KEY, SCHEDULER_CONTAINER, SchedulerArgs, SchedulerConf, parse_scheduler_args, parse_scheduler_conf
from .slurm_conf import SLURM_CONF_SUFFIX, SLURM_DEFAULT_KILL_WAIT, slurm_conf
from ..selectors import to_label_selector_string
from ..scope.target_ref import CONFIGMAP, locate
from ..tenant_text import Refused

# ---------------------------------------------------------------- discovery


@dataclass
class Discovery:
    namespace: str
    selector: str  # the pod selector as `kubectl -l` text, for messages
    name: str | None = None
    name_source: str | None = None  # spec | configMap | args
    discovered_name: str | None = None  # what the scheduler calls itself (configMap, then args), whatever the spec says
    kill_wait_seconds: int | None = None
    kill_wait_source: str | None = None  # args | configMap | slurmConf | spec | slurmConfDefault
    ready_replicas: int = 0
    pods_found: int = 0
    messages: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    # Tenant-written text not read (past a bound, or a name Kubernetes refuses), each naming the object and
    # key or argument: SchedulerReady=False InputRefused; everything else found is still used.
    refused: list[str] = field(default_factory=list)
    forbidden: str | None = None  # the scheduler namespace could not be read (RBAC): what was denied and the fix
    service_account: str = "default"
    configmap_name: str | None = None
    scope_type: str | None = None
    slurm_configmaps: tuple[str, ...] = ()  # ConfigMaps holding a slurm.conf key (their edits concern us)
    # Both sides of "the scheduler's kill-wait equals Slurm's KillWait", before one is chosen above:
    # the scheduler's own (seconds, args | configMap) and Slurm's (seconds, where it was read).
    scheduler_kill_wait: tuple[int, str] | None = None
    slurm_kill_wait: tuple[int, str] | None = None
    crash_looping: tuple[str, ...] = ()  # pods a container of which waits in CrashLoopBackOff (a few, by name)


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


def crash_looping(pod: Any) -> bool:
    """Does a container of this pod wait in CrashLoopBackOff (and the pod is not Ready)?"""
    status = pod.get("status") if isinstance(pod, Mapping) else None
    statuses = status.get("containerStatuses") if isinstance(status, Mapping) else None
    if is_ready(pod) or not isinstance(statuses, list):
        return False
    for c in statuses:
        state = c.get("state") if isinstance(c, Mapping) else None
        waiting = state.get("waiting") if isinstance(state, Mapping) else None
        if isinstance(waiting, Mapping) and waiting.get("reason") == "CrashLoopBackOff":
            return True
    return False


# SUNK's documented upgrade order: the sunk chart (operator, CRDs) before the Slurm chart.
UPGRADE_ORDER = ("after a Slurm chart upgrade this is SUNK's known upgrade-order hazard: upgrade the `sunk` chart "
                 "(operator and CRDs) to the matching release first, then the Slurm chart again")


def _data(cm: Mapping[str, Any]) -> Mapping[str, Any]:
    d = cm.get("data")
    return d if isinstance(d, Mapping) else {}


def scheduler_conf_location(spec: BindingSpec, binding_namespace: str) -> tuple[str, str, str]:
    """(ConfigMap name, key, path of the list) of the scheduler's own scheduler.conf as the spec gives
    them: a SchedulerConfigMap target's, as the scheduler reads the same document; else SUNK's
    defaults. Name "" when the spec names none (found by label then)."""
    target = locate(spec, binding_namespace)
    if target.kind == CONFIGMAP and target.key is not None:
        return target.name, target.key, target.path
    return "", SCHEDULER_CONF_KEY, DEFAULT_SCOPE_PATH


def _scheduler_configmap(name: str, cms: Sequence[Mapping[str, Any]], d: Discovery) -> Mapping[str, Any] | None:
    if name:
        # The admin named it for the scope list; the scheduler reads the same document.
        named = next((cm for cm in cms if _meta(cm).get("name") == name), None)
        if named is None:
            d.messages.append(f"ConfigMap {name} (spec.scope.target.configMap.name) not found in {d.namespace}")
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


def _ordered_pods(pods: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Ready pods first, newest first: during a rollout the newest Ready pod has the current flags."""
    return sorted(
        pods,
        key=lambda p: (is_ready(p), str(_meta(p).get("creationTimestamp") or ""), str(_meta(p).get("name") or "")),
        reverse=True,
    )


def discover(
    spec: BindingSpec, binding_namespace: str, pods: list[dict[str, Any]], configmaps: list[dict[str, Any]]
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
    d.crash_looping = tuple(sorted(str(_meta(p).get("name") or "") for p in good_pods if crash_looping(p))[:3])

    # SUNK 8: scheduler.conf
    conf = SchedulerConf()
    cm_name, key, _ = scheduler_conf_location(spec, binding_namespace)
    cm = _scheduler_configmap(cm_name, cms, d)
    if cm is not None:
        d.configmap_name = _meta(cm).get("name")
        conf = parse_scheduler_conf(_data(cm).get(key))
        where = f"ConfigMap {d.namespace}/{d.configmap_name} key {key}"
        if conf.error:
            d.errors.append(f"{where}: {conf.error}")
        d.refused.extend(f"{where}: {r}" for r in conf.refused)
        d.scope_type = conf.scope_type

    # SUNK 7: container args of the most relevant pod
    args = SchedulerArgs()
    ordered = _ordered_pods(good_pods)
    if ordered:
        first = ordered[0]
        pod_name = _meta(first).get("name")
        parsed = [parse_scheduler_args(p) for p in ordered]  # each pod once; the one used first
        args = parsed[0]
        if args.error:
            # A missing container is a hint, not broken config: SUNK 8 needs no flags at all.
            (d.errors if args.container_found else d.messages).append(f"pod {pod_name}: {args.error}")
        # Every matching pod's text was read, so every refusal is told, the pod used first.
        d.refused.extend(f"pod {d.namespace}/{_meta(p).get('name')} {r}" for p, a in zip(ordered, parsed)
                         for r in a.refused)
        spec_obj = first.get("spec")
        sa = (spec_obj.get("serviceAccountName") or spec_obj.get("serviceAccount")) if isinstance(spec_obj, Mapping) else None
        d.service_account = sa if isinstance(sa, str) and sa else "default"
        distinct = {(a.name, a.kill_wait_seconds) for a in parsed if not a.error}
        if len(distinct) > 1:
            d.messages.append(f"scheduler pods disagree on their flags (rollout in progress?); using pod {pod_name}")

    # Name: spec, configMap, args
    discovered = [(n, src) for n, src in ((conf.name, "configMap"), (args.name, "args")) if n]
    if conf.name and args.name and conf.name != args.name:
        d.messages.append(
            f"scheduler.conf names the scheduler {conf.name!r} but --scheduler-name is {args.name!r}; using {conf.name!r}"
        )
    d.discovered_name = discovered[0][0] if discovered else None
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

    # Kill-wait: Slurm's KillWait in slurm.conf first (SUNK 8.2 has no flag of its own: it reads
    # Slurm's), unless an older scheduler's own (args, configMap) is lower: it waits that long only
    # (the difference is noted); then the spec, Slurm's default
    d.slurm_configmaps = tuple(sorted(str(_meta(cm).get("name") or "") for cm in cms
                                      if any(str(key).endswith(SLURM_CONF_SUFFIX) for key in _data(cm))))
    slurm_kw, slurm_cm, slurm_default = _slurm_conf(cms, d)
    scheduler_kw = next(
        ((kw, src) for kw, src in ((args.kill_wait_seconds, "args"), (conf.kill_wait_seconds, "configMap")) if kw is not None),
        None,
    )
    d.scheduler_kill_wait = scheduler_kw
    d.slurm_kill_wait = ((slurm_kw, f"slurm.conf in ConfigMap {slurm_cm}") if slurm_kw is not None else
                         (SLURM_DEFAULT_KILL_WAIT, f"Slurm's default: slurm.conf in ConfigMap {slurm_cm} sets none")
                         if slurm_default else None)
    if slurm_kw is not None and (scheduler_kw is None or slurm_kw <= scheduler_kw[0]):
        d.kill_wait_seconds, d.kill_wait_source = slurm_kw, "slurmConf"
    elif scheduler_kw:
        d.kill_wait_seconds, d.kill_wait_source = scheduler_kw
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


def _slurm_conf(cms: Sequence[Mapping[str, Any]], d: Discovery) -> tuple[int | None, str | None, bool]:
    """(KillWait, ConfigMap name, whether a complete slurm.conf without KillWait was seen). A refused
    key is skipped and named; it may set KillWait, so Slurm's default is not assumed after one."""
    without: str | None = None
    refused = False
    for cm in sorted(cms, key=lambda c: str(_meta(c).get("name", ""))):
        name = _meta(cm).get("name")
        for key, text in sorted(_data(cm).items()):
            if not str(key).endswith(SLURM_CONF_SUFFIX):
                continue
            try:
                conf = slurm_conf(text)
            except Refused as exc:
                d.refused.append(f"ConfigMap {d.namespace}/{name} key {key}: {exc}")
                refused = True
                continue
            if conf.error:
                d.errors.append(f"ConfigMap {name} key {key}: {conf.error}")
            if conf.kill_wait is not None:
                return conf.kill_wait, name, False
            # An `include` may hold KillWait elsewhere: then Slurm's default is not a safe guess.
            if conf.error is None and not conf.includes and without is None:
                without = name
    return None, without, without is not None and not refused


def scheduler_condition(d: Discovery) -> tuple[Status, str, str]:
    """SchedulerReady as (status, reason, message); the message says what to do."""
    sel = f" -l {shlex.quote(d.selector)}" if d.selector else ""
    kubectl = f"kubectl get pods -n {d.namespace}{sel}"
    notes = "".join(f" Note: {m}" for m in d.messages) + "".join(f" Error: {e}" for e in d.errors)
    unread = "".join(f" Refused: {r}" for r in d.refused[:3])  # for the reasons that come before InputRefused
    if d.forbidden:
        return "False", SchedulerReady.FORBIDDEN, d.forbidden
    if d.pods_found == 0:
        return (
            "False",
            SchedulerReady.SCHEDULER_NOT_FOUND,
            f"no SUNK scheduler pods found (`{kubectl}` returns nothing): enable the scheduler with "
            "`scheduler.enabled: true` in the Slurm Helm values, or fix spec.scheduler.namespace / "
            f"spec.scheduler.podSelector.{notes}{unread}",
        )
    if d.ready_replicas == 0:
        crash = (f" {', '.join(d.crash_looping)} in CrashLoopBackOff: {UPGRADE_ORDER} (`kubectl logs --previous` "
                 "says why it exits)." if d.crash_looping else "")
        return (
            "False",
            SchedulerReady.SCHEDULER_NOT_RUNNING,
            f"{d.pods_found} scheduler pod(s) found but none is Ready: check `{kubectl}` and "
            f"`kubectl logs -n {d.namespace}{sel} -c {SCHEDULER_CONTAINER}`.{crash}{notes}{unread}",
        )
    if d.refused:
        found = (f"scheduler {d.name!r} ({d.name_source})" if d.name else "no scheduler name") + (
            f", kill-wait {d.kill_wait_seconds} s ({d.kill_wait_source})" if d.kill_wait_seconds is not None else "")
        return (
            "False",
            SchedulerReady.INPUT_REFUSED,
            f"not read, as tenant-written text past the operator's bounds: {'; '.join(d.refused[:3])}"
            + (f" (and {len(d.refused) - 3} more)" if len(d.refused) > 3 else "")
            + f". Found without it: {found}.{notes}",
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
