"""`why`'s reads: one pod (or namespace), the binding matching it and every fact of the chain, into one
core.why Observation.

Reads only: the Kube it is handed has its write gate shut, SubjectAccessReviews are answered and
forgotten. Only facts recorded in the cluster or asked of the systems themselves — the bindings and
their status, the scope target's list and ledger, the scheduler's pod template (scope hash,
generation, rolled-at) and pods, our labelled RoleBindings, a SubjectAccessReview, the pod — never
the operator's memory, so it answers with the operator stopped. The operator's tenancy rules hold
as in `doctor` (adapters/doctor.py, whose reads of the runner policy and of Secrets this reuses): a
binding they refuse matches nothing and nothing is read for it; the runner token goes only to an
allowed API URL (else the binding's status.policy.owned stands in for the policy), the Slurm JWT
only to an allowed slurmrestd, in one GET of the job list.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Literal

from ..api.keys import FIELD_MANAGER, SANDBOX_ID_LABEL
from ..api.spec import BindingSpec, parse_spec
from ..api.status import OwnedPath
from ..core.scope import grants as cg
from ..core import tenancy
from ..core.scope import doc as scope_doc
from ..core.scope import managers
from ..core.scope import membership as sc
from ..core.slurm import facts as slurm
from ..core.pods import decode_pod
from ..core.policy.paths import ANNOTATIONS_PATH, SCHEDULER_NAME_PATH, annotation_path, format_path
from ..core.units import parse_quantity
from ..core.redact import describe
from ..core.scheduler.discovery import Discovery, discover, scheduler_conf_location
from ..core.slurm.jobs import job_names
from ..core.scope.target_ref import CONFIGMAP, FLUX, locate
from ..core.why_facts import Access, Candidate, Jobs, Observation, Policy, Scheduler, TargetList
from . import doctor as dg
from . import grants, kube as k
from . import scheduler as sched
from . import slurmrest as sr
from . import targets


class PodNotFound(Exception):
    """The pod asked about does not exist (one line, exit 1)."""


@dataclass(frozen=True)
class Ask:
    namespace: str
    pod: str | None = None             # None: `why namespace`
    pending_seconds: float = 60.0      # a pending reason or a missing job counts after this long


def _denied(what: str, exc: Exception) -> str:
    return f"these credentials may not {what}: {describe(exc)}"


def _meta(obj: Any) -> dict:
    return (obj.get("metadata") or {}) if isinstance(obj, dict) else {}


def _match(bodies: list[dict], info: sc.NamespaceInfo, policy: tenancy.TenancyPolicy, scheduler_name: str | None
           ) -> tuple[list[Candidate], list[str]]:
    """The bindings whose sandboxNamespaces match the namespace, as the operator matches them; the one
    whose scheduler is the pod's first, then the oldest. A binding the settings refuse matches nothing."""
    found: list[tuple[tuple[int, str, str], Candidate]] = []
    refused: list[str] = []
    for body in bodies:
        meta = _meta(body)
        ns, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
        try:
            spec = parse_spec(body.get("spec") or {})
        except ValueError:
            continue  # the operator judges no invalid spec either (InvalidSpec)
        bad = tenancy.violations(spec, ns, policy)
        if bad:
            refused.append(f"{ns}/{name}: {bad[0].text()}")
            continue
        matcher = sc.compile_matcher(spec.sandbox_namespaces, policy.system, bound=policy.namespace_bound, own=ns)
        if info.terminating or not matcher(info.name, info.labels):
            continue
        raw = body.get("status")
        status: dict = raw if isinstance(raw, dict) else {}
        found_scheduler = status.get("scheduler")
        theirs = (found_scheduler.get("name") if isinstance(found_scheduler, dict) else None) or spec.scheduler.name
        rank = 1 if scheduler_name is None or not theirs else 0 if theirs == scheduler_name else 2  # 1: not known yet
        key = (rank, str(meta.get("creationTimestamp") or ""), f"{ns}/{name}")
        found.append((key, Candidate(f"{ns}/{name}", ns, spec, str(meta.get("uid") or ""), status)))
    return [c for _, c in sorted(found, key=lambda x: x[0])], refused


def _written_at(meta: dict) -> str | None:
    times = [str(e["time"]) for e in meta.get("managedFields") or []
             if isinstance(e, dict) and e.get("manager") == FIELD_MANAGER and e.get("time")]
    return max(times) if times else None


async def _target(kube: k.KubeAPI, spec: BindingSpec, binding_ns: str, d: Discovery) -> TargetList:
    ref = locate(spec, binding_ns, d.configmap_name)
    renders = f"{ref.namespace}/{ref.helm_release if ref.kind == FLUX else ref.name}" if ref.kind != CONFIGMAP else None
    try:
        target = targets.build(kube, ref)
        got = await target.read()
    except targets.TargetFailed as exc:
        kind, tns, name = ref.writes
        return TargetList(f"{kind} {tns}/{name or '(not found)'}", ref.kind, None, None, d.namespace, error=str(exc),
                          renders=renders)
    meta = _meta(got.obj)
    field = ("data", ref.key or "") if ref.key is not None else ("spec",)
    values = tuple(got.list.values) if got.list.values is not None else None
    return TargetList(target.describe(), ref.kind, values, got.list.scope_type, d.namespace, got.list.error,
                      got.ledger, managers.last_foreign_change(meta, field, ours=""), _written_at(meta), renders)


async def _scheduler(kube: k.KubeAPI, spec: BindingSpec, binding_ns: str, d: Discovery, pods: list[dict],
                     cms: list[dict]) -> Scheduler:
    try:
        workloads: tuple[dict, ...] | None = tuple(await sched.list_workloads(kube, d.namespace))
        error = None
    except k.Forbidden as exc:
        workloads, error = None, _denied(f"list Deployments and StatefulSets in {d.namespace}", exc)
    out = Scheduler(workloads, error, tuple(pods))
    if locate(spec, binding_ns).kind == CONFIGMAP or not d.configmap_name:
        return out
    # Argo CD / Flux render the chart: the scheduler reads its own scheduler.conf, not the target.
    _, key, path = scheduler_conf_location(spec, binding_ns)
    cm = next((c for c in cms if _meta(c).get("name") == d.configmap_name), {})
    read = scope_doc.read_list(str((cm.get("data") or {}).get(key) or ""), path)
    return Scheduler(workloads, error, tuple(pods), f"ConfigMap {d.namespace}/{d.configmap_name} key {key}",
                     tuple(read.values) if read.values is not None else None, read.scope_type,
                     managers.last_foreign_change(_meta(cm), ("data", key), ours=""))


async def _access(kube: k.KubeAPI, b: Candidate, d: Discovery, namespace: str) -> Access:
    sa = (d.namespace, d.service_account)
    who = f"{sa[0]}/{sa[1]}"
    (answer,) = await grants.scheduler_permitted(kube, sa, [namespace])
    if isinstance(answer, Exception):
        return Access(who, None, _denied("create SubjectAccessReviews", answer))
    try:
        ours = [cg.grant_of(rb) for rb in await grants.list_ours(kube, cg.selector(b.namespace, b.ref.partition("/")[2]))]
    except k.Forbidden:
        ours = []
    legacy = cg.legacy_rolebinding_name(b.namespace, b.ref.partition("/")[2])
    return Access(who, answer, grants=tuple(g for g in ours if g.namespace == namespace and cg.is_ours(g, b.uid, legacy)))


def _policy_values(doc: Any) -> dict[str, str]:
    """The policy's schedulerName and base annotations, by formatted path."""
    base = doc.get("base") if isinstance(doc, dict) else None
    out: dict[str, str] = {}
    name = ((base or {}).get("spec") or {}).get("schedulerName") if isinstance(base, dict) else None
    if isinstance(name, str):
        out[format_path(SCHEDULER_NAME_PATH)] = name
    node: Any = base
    for part in ANNOTATIONS_PATH[1:]:
        node = node.get(part) if isinstance(node, dict) else None
    for key, value in (node or {}).items() if isinstance(node, dict) else ():
        if isinstance(value, str):
            out[annotation_path(str(key))] = value
    return out


async def _policy(kube: k.KubeAPI, b: Candidate, policy: tenancy.TenancyPolicy, make: dg.RunnerFactory) -> Policy:
    ref = b.spec.runner.token_secret_ref
    raw = b.status.get("policy")
    pol: dict = raw if isinstance(raw, dict) else {}
    applied = pol.get("lastAppliedTime")
    runner = await dg._runner(kube, dg.Target(b.spec, b.namespace, b.ref, (b.namespace, ref.name, ref.key)), policy, make)
    if runner is not None and runner.outcome == "ok":
        return Policy("runner", _policy_values(runner.policy), applied_at=applied)
    why = (f"{runner.code} {runner.message}".strip() if runner is not None else "") or "no token"
    owned = [OwnedPath.model_validate(o) for o in pol.get("owned") or [] if isinstance(o, dict)]
    if not owned:
        return Policy("", {}, why, applied)
    return Policy("status", {o.path: o.value for o in owned}, why, applied)


async def _jobs(kube: k.KubeAPI, b: Candidate, pod: dict, policy: tenancy.TenancyPolicy, make: dg.SlurmFactory,
                now: float) -> Jobs | None:
    rest = b.spec.slurm.rest_api
    if rest is None:
        return None
    where = f"slurmrestd at {rest.url} (user {rest.user})"
    if not tenancy.url_allowed(rest.url, policy, policy.allowed_slurm_urls):
        return Jobs(where, f"{rest.url} is not a slurmrestd URL the operator allows: nothing was sent")
    value, missing = await dg._secret(kube, (b.namespace, rest.token_secret_ref.name, rest.token_secret_ref.key))
    problem = missing or slurm.header_problem(value) or slurm.token_problem(value, rest.user, now)
    if problem:
        return Jobs(where, problem)
    names = tuple(n for n in job_names(rest.job_name_templates, decode_pod(pod, parse_quantity)) if n)

    async def token() -> str:
        return value
    client = make(rest.url.rstrip("/"), rest.api_version)
    try:
        page = await client.jobs(rest.user, token)
    except sr.SlurmError as exc:
        return Jobs(where, describe(exc), names)
    finally:
        await client.aclose()
    body = page.body if page is not None else {}
    parsed = slurm.parse_jobs(body)
    found = next((parsed[n] for n in names if n in parsed), None)
    raw = next((j for j in body.get("jobs") or [] if isinstance(j, dict) and found is not None
                and slurm.number(j.get("job_id")) == found.job_id), {})
    submitted = slurm.number(raw.get("submit_time"))
    return Jobs(where, None, names, found, float(submitted) if submitted is not None else None)


async def gather(kube: k.KubeAPI, ask: Ask, policy: tenancy.TenancyPolicy, *,
                 make_runner: dg.RunnerFactory = dg.runner_client, make_slurm: dg.SlurmFactory = dg.slurm_client,
                 now: Callable[[], float] = time.time) -> Observation:
    kube.writable = lambda: False  # reads only: every write of Kube checks this gate first
    ns = ask.namespace
    kind: Literal["pod", "namespace"] = "pod" if ask.pod else "namespace"
    base = Observation(kind, ns, now(), ask.pod, pending_seconds=ask.pending_seconds)
    pod: dict | None = None
    if ask.pod:
        try:
            pod = await kube.get_pod(ns, ask.pod)
        except k.NotFound:
            raise PodNotFound(f"pod {ns}/{ask.pod} not found") from None
        base = Observation(kind, ns, base.now, ask.pod, pod=decode_pod(pod, parse_quantity),
                           pending_seconds=ask.pending_seconds)
    try:
        info = sc.NamespaceInfo.from_object(await kube.get_namespace(ns))
    except k.NotFound:
        return base
    except k.Forbidden as exc:
        return _with(base, namespace_labels={}, bindings_error=_denied(f"read namespace {ns}", exc))
    base = _with(base, namespace_labels=info.labels, namespace_terminating=info.terminating)
    try:
        bodies = await kube.list_bindings()
    except k.Forbidden as exc:
        return _with(base, bindings_error=_denied("list SunkSandboxBindings", exc))
    candidates, refused = _match(bodies, info, policy, base.pod.scheduler_name if base.pod else None)
    base = _with(base, candidates=tuple(candidates), refused=tuple(refused))
    if not candidates or info.terminating:
        return base
    b = candidates[0]
    objs = await sched.read(kube, b.spec.scheduler_namespace(b.namespace), b.spec.scheduler.pod_selector)
    d = discover(b.spec, b.namespace, objs.pods, objs.configmaps)
    if objs.error:  # its wording names the operator's RoleBindings: `why` runs with other credentials
        return _with(base, discovery=d, scheduler_error=f"these credentials may not list pods and ConfigMaps in "
                     f"{objs.namespace}")
    grace = None
    if pod is None:
        try:
            grace = max((decode_pod(p, parse_quantity).grace for p in await kube.list_pods(ns, SANDBOX_ID_LABEL)),
                        default=None)
        except k.Forbidden:
            grace = None
    return _with(base, discovery=d, target=await _target(kube, b.spec, b.namespace, d),
                 scheduler=await _scheduler(kube, b.spec, b.namespace, d, objs.pods, objs.configmaps),
                 access=await _access(kube, b, d, ns) if d.pods_found else None,
                 policy=await _policy(kube, b, policy, make_runner), sandbox_grace=grace,
                 jobs=await _jobs(kube, b, pod, policy, make_slurm, base.now) if pod is not None else None)


def _with(obs: Observation, **changes: Any) -> Observation:
    return replace(obs, **changes)
