"""`doctor`'s reads: the cluster, the runner API and Slurm, into one core.doctor Observation.

Reads only. The Kube it is handed has its write gate shut (`writable` False), so no write can
leave this process whatever a bug does; SubjectAccessReviews are answered and forgotten by the API
server (nothing is stored). For a binding the operator's settings refuse (core/tenancy.py), nothing
is read beyond the binding itself, as the operator reads nothing for it: no Secret, no namespace the
refused spec names, no request to any URL. The runner token is read from its Secret, checked like the
operator checks it (an empty value is not sent) and sent only to an API URL the operator's settings
allow, in one GetManagedRunner; the Slurm JWT likewise (checked offline first, as the
operator does, then one GET of the partition, or a ping) only to an allowed slurmrestd URL; neither
appears in any message. Everything the checks decide is in core/doctor.py; nothing here decides.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from ..api.keys import SANDBOX_ID_LABEL
from ..api.spec import BindingSpec
from ..core import doctor_facts as f
from ..core import node_room as room
from ..core import scope as sc
from ..core import scope_doc, slurm, tenancy
from ..core.pods import decode_pod
from ..core.redact import describe
from ..core.scheduler import Discovery, discover, scheduler_conf_location
from . import grants, kube as k
from . import scheduler as sched
from .bounded import gather_bounded
from . import slurmrest as sr
from ..core.quantity import parse_quantity
from .runnerapi import client as rc

CONCURRENCY = 8
# A sandbox pod when none is seen and no --sandbox-requests is given: the seed's example requests.
DEFAULT_SANDBOX_REQUEST = room.Resources(parse_quantity("500m"), parse_quantity("512Mi"))


@dataclass(frozen=True)
class Target:
    """What to check: a binding's spec, or (prerequisites) one the flags make up."""

    spec: BindingSpec
    namespace: str                            # the binding's (prerequisites: the scheduler's)
    binding: str | None = None                # namespace/name; None: prerequisites
    token: tuple[str, str, str] | None = None  # (namespace, name, key) of the runner token; None: no runner check
    nodesets: tuple[str, ...] = ()            # only these NodeSets (empty: every one found)
    sandbox_request: room.Resources | None = None  # what a sandbox pod needs (None: the largest seen)
    slurm_token: tuple[str, str, str] | None = None  # (namespace, name, key) of the Slurm JWT (spec.slurm.restAPI)


RunnerFactory = Callable[[str, Callable[[], Awaitable[str]]], Any]
SlurmFactory = Callable[[str, "str | None"], Any]


def runner_client(url: str, token: Callable[[], Awaitable[str]]) -> rc.RunnerClient:
    """One attempt and a retry, a short timeout: the doctor is run by a person waiting for it."""
    return rc.RunnerClient(url, token, timeout=10.0, max_retries=1, backoff_max=1.0)


def slurm_client(url: str, api_version: str | None) -> sr.SlurmClient:
    return sr.SlurmClient(url, api_version, timeout=10.0)


def _denied(what: str, exc: Exception) -> str:
    return f"these credentials may not {what}: {describe(exc)}"


async def _scheduler(kube: k.KubeAPI, t: Target) -> tuple[Discovery, list[dict], str | None]:
    """Discovery over the scheduler namespace's pods and ConfigMaps (and those ConfigMaps), read and
    parsed as the operator reads and parses them (adapters/scheduler.py, core/scheduler.py)."""
    objs = await sched.read(kube, t.spec.scheduler_namespace(t.namespace), t.spec.scheduler.pod_selector)
    if objs.error:  # its wording names the operator's RoleBindings: the doctor runs with other credentials
        denied = f"these credentials may not list pods and ConfigMaps in {objs.namespace}"
        return discover(t.spec, t.namespace, [], []), [], denied
    return discover(t.spec, t.namespace, objs.pods, objs.configmaps), objs.configmaps, None


def _scope(t: Target, d: Discovery, cms: list[dict]) -> f.Scope | None:
    """The watched list in the scheduler's own scheduler.conf (what it runs with, whoever renders it)."""
    if not d.configmap_name:
        return None
    _, key, path = scheduler_conf_location(t.spec, t.namespace)
    cm = next((c for c in cms if (c.get("metadata") or {}).get("name") == d.configmap_name), {})
    where = f"{key} of ConfigMap {d.namespace}/{d.configmap_name}"
    text = (cm.get("data") or {}).get(key)
    if not isinstance(text, str):
        return f.Scope(where, None, None, f"no key {key}")
    read = scope_doc.read_list(text, path)
    return f.Scope(where, read.scope_type, tuple(read.values) if read.values is not None else None, read.error)


@dataclass(frozen=True, slots=True)
class _Pod:
    """What is kept of one sandbox pod while 50,000 are listed."""

    namespace: str
    ref: str
    grace: int
    need: room.Resources


def _pod(pod: dict) -> _Pod:
    rec = decode_pod(pod, parse_quantity)
    return _Pod(rec.namespace, rec.ref, rec.grace, room.pod_requests(pod, parse_quantity))


def _fold_pods(pods: list[_Pod]) -> f.SandboxPods:
    graces: Counter[int] = Counter()
    example: dict[int, str] = {}
    largest: room.Resources | None = None
    for p in pods:
        graces[p.grace] += 1
        example.setdefault(p.grace, p.ref)
        largest = p.need if largest is None else largest.largest(p.need)
    return f.SandboxPods(len(pods), dict(graces), example, largest)


async def _sandbox(kube: k.KubeAPI, t: Target, policy: tenancy.TenancyPolicy
                   ) -> tuple[frozenset[str], str, list[_Pod], str | None]:
    """The sandbox namespaces, how they were found, and the sandbox pods in them."""
    try:
        pods: list[_Pod] = await kube.list_pods_everywhere(SANDBOX_ID_LABEL, each=_pod)
    except k.Forbidden as exc:
        return frozenset(), "sandbox namespaces", [], _denied("list pods in every namespace", exc)
    sn = t.spec.sandbox_namespaces
    if not t.binding and not sn.names and sn.selector is None:  # prerequisites, nothing named: where pods are
        return (frozenset(p.namespace for p in pods),
                "sandbox namespaces (holding sandbox pods)", pods, None)
    try:
        infos = [sc.NamespaceInfo.from_object(o) for o in await kube.list_namespaces()]
    except k.Forbidden as exc:
        return frozenset(), "sandbox namespaces", [], _denied("list namespaces", exc)
    matcher = sc.compile_matcher(sn, policy.system, bound=policy.namespace_bound,
                                 own=t.namespace if t.binding else None)
    matched = sc.sandbox_namespaces(matcher, infos)
    how = ("sandbox namespaces (spec.sandboxNamespaces)" if t.binding
           else "sandbox namespaces (--sandbox-namespaces / --sandbox-selector)")
    return frozenset(matched), how, [p for p in pods if p.namespace in matched], None


async def _access(kube: k.KubeAPI, d: Discovery, namespaces: frozenset[str]) -> f.Access | None:
    if not d.pods_found:
        return None
    sa = (d.namespace, d.service_account)
    who = f"ServiceAccount {sa[0]}/{sa[1]}"
    (everywhere,) = await grants.scheduler_permitted(kube, sa, [""])
    if isinstance(everywhere, Exception):
        return f.Access(who, None, error=_denied("create SubjectAccessReviews", everywhere))
    if everywhere:
        return f.Access(who, True)
    todo = sorted(namespaces)
    answers = await grants.scheduler_permitted(kube, sa, todo)
    errors = [a for a in answers if isinstance(a, Exception)]
    if errors:
        return f.Access(who, False, error=_denied("create SubjectAccessReviews", errors[0]))
    return f.Access(who, False, tuple(ns for ns, ok in zip(todo, answers) if ok is not True))


def _is_sandbox(pod: Any) -> bool:
    return SANDBOX_ID_LABEL in ((pod.get("metadata") or {}).get("labels") or {})


async def _node_room(kube: k.KubeAPI, name: str) -> room.NodeRoom:
    node, error = None, None
    try:
        node = await kube.get_node(name)
    except (k.NotFound, k.Forbidden) as exc:
        error = f"Node {name}: {describe(exc)}"
    try:
        pods = await kube.list_pods_everywhere(field_selector=f"spec.nodeName={name}")
    except k.Forbidden as exc:
        pods, error = [], error or _denied(f"list pods on Node {name}", exc)
    return room.node_room(name, node, pods, parse_quantity, is_sandbox=_is_sandbox, error=error)


async def _nodes(kube: k.KubeAPI, t: Target) -> tuple[tuple[room.NodeRoom, ...], int, str | None]:
    """The Nodes of the shared NodeSets' slurmd pods (in the scheduler's namespace, where SUNK runs them)."""
    ns = t.spec.scheduler_namespace(t.namespace)
    try:
        pods = [p for p in await kube.list_pods(ns, None) if room.is_slurmd(p)]
    except k.Forbidden as exc:
        return (), 0, _denied(f"list pods in {ns}", exc)
    if t.nodesets:
        pods = [p for p in pods if room.nodeset_of(p) in t.nodesets]
    nodes = sorted({room.node_of(p) for p in pods} - {""})
    found = await gather_bounded((_node_room(kube, n) for n in nodes), CONCURRENCY)
    rooms = [r for r in found if isinstance(r, room.NodeRoom)]
    failed = next((r for r in found if isinstance(r, Exception)), None)
    return tuple(rooms), len(pods), describe(failed) if failed is not None else None


async def _runner(kube: k.KubeAPI, t: Target, policy: tenancy.TenancyPolicy, make: RunnerFactory) -> f.Runner | None:
    if t.token is None:
        return None
    ns, name, key = t.token
    url, runner_id = t.spec.runner.api_url, t.spec.runner.id
    where = f"Secret {ns}/{name} key {key}"

    def runner(outcome: str, message: str = "", code: str = "", policy_: Any = None, etag: str = "") -> f.Runner:
        return f.Runner(runner_id, url, where, outcome, code, message, policy_, etag)

    if not tenancy.url_allowed(url, policy):
        return runner("not_allowed", f"{url} is not an API URL the operator allows (allowed: "
                      f"{', '.join(policy.allowed_api_urls)}; --allowed-api-url / SSB_ALLOWED_API_URLS)")
    value, missing = await _secret(kube, t.token)
    if missing:
        return runner("credentials", missing)

    async def token() -> str:
        return value
    client = make(url, token)
    try:
        got = await client.get_managed_runner(runner_id)
    except rc.RunnerAPIError as exc:
        return runner("error", exc.message, exc.code)
    finally:
        await client.aclose()
    return runner("ok", policy_=got.policy, etag=got.etag)


async def _secret(kube: k.KubeAPI, ref: tuple[str, str, str]) -> tuple[str, str]:
    """(the value, "") or ("", what is wrong): never sent when empty or unreadable."""
    ns, name, key = ref
    try:
        value = (await kube.read_secret_key(ns, name, key)).strip()
    except k.NotFound:
        return "", f"Secret {ns}/{name} not found"
    except KeyError:
        return "", f"Secret {ns}/{name} has no key {key!r}"
    except k.Forbidden as exc:
        return "", _denied(f"read Secret {ns}/{name}", exc)
    return (value, "") if value else ("", f"key {key!r} of Secret {ns}/{name} is empty")


async def _slurm(kube: k.KubeAPI, t: Target, policy: tenancy.TenancyPolicy, make: SlurmFactory,
                 now: Callable[[], float]) -> tuple[slurm.SlurmObservation | None, str | None, int | None]:
    """The binding's own request to slurmrestd, as the operator makes it (controller/slurm.py): its
    partition, or a ping, at the spec's API version or a negotiated one; (None, why) when the URL is
    not one the operator allows. Third: the token's `exp`, whatever it says (the slurm-token check)."""
    rest = t.spec.slurm.rest_api
    if rest is None or t.slurm_token is None:
        return None, None, None
    url, partition = rest.url.rstrip("/"), t.spec.partition
    if not tenancy.url_allowed(rest.url, policy, policy.allowed_slurm_urls):
        return None, (f"{rest.url} is not a slurmrestd URL the operator allows (allowed: "
                      f"{', '.join(policy.allowed_slurm_urls) or 'none'}; --allowed-slurm-url / SSB_ALLOWED_SLURM_URLS)"), None
    ns, name, key = t.slurm_token
    where = f"Secret {ns}/{name} key {key}"

    def seen(client: Any = None, **kw: Any) -> slurm.SlurmObservation:
        versioned = {} if client is None else {"api_version": client.api_version, "negotiated": client.negotiated,
                                               "release": client.release}
        return slurm.SlurmObservation(url, rest.user, partition, token_where=where, **versioned, **kw)

    value, missing = await _secret(kube, t.slurm_token)
    if missing:
        return seen(error="credentials", detail=missing), None, None
    unsendable = slurm.header_problem(value)
    if unsendable is not None:
        return seen(error="credentials", detail=f"the value of {where} cannot be sent: {unsendable}"), None, None
    problem = slurm.token_problem(value, rest.user, now())
    if problem is not None:
        return seen(error="token", detail=f"{problem} ({where})"), None, None
    exp = slurm.token_expiry(value)
    soon = exp if slurm.expiring(exp, now()) else None

    async def token() -> str:
        return value
    client = make(url, rest.api_version)
    try:
        answer = await (client.partition(partition, rest.user, token) if partition is not None
                        else client.ping(rest.user, token))
    except sr.SlurmError as exc:
        return seen(client, error=sr.kind(exc), detail=describe(exc), token_expires=soon), None, exp
    finally:
        await client.aclose()
    return seen(client, answer=answer, token_expires=soon), None, exp


async def gather(kube: k.KubeAPI, t: Target, policy: tenancy.TenancyPolicy, *,
                 make_runner: RunnerFactory = runner_client, make_slurm: SlurmFactory = slurm_client,
                 now: Callable[[], float] = time.time) -> f.Observation:
    kube.writable = lambda: False  # reads only: every write of Kube checks this gate first
    spec = t.spec
    violations = tuple(v.text() for v in tenancy.violations(spec, t.namespace, policy)) if t.binding else ()
    if violations:  # the operator reads, asks and sends nothing for a binding it refuses: neither does the doctor
        return f.Observation(binding=t.binding, scheduler_namespace=spec.scheduler_namespace(t.namespace),
                             discovery=None, violations=violations)
    d, cms, sched_error = await _scheduler(kube, t)
    names, how, pods, pods_error = await _sandbox(kube, t, policy)
    folded = _fold_pods(pods)
    access = await _access(kube, d, names) if sched_error is None else None
    nodes, slurmd, nodes_error = await _nodes(kube, t)
    slurm_obs, slurm_refused, slurm_exp = await _slurm(kube, t, policy, make_slurm, now)
    if t.sandbox_request is not None:
        need, need_how = t.sandbox_request, "--sandbox-requests"
    elif folded.largest is not None:
        need, need_how = folded.largest, f"the largest requests of the {folded.count} sandbox pod(s) seen"
    else:
        need, need_how = DEFAULT_SANDBOX_REQUEST, "no sandbox pod seen: the runbook's example requests"
    return f.Observation(
        binding=t.binding, scheduler_namespace=d.namespace, discovery=d, scheduler_error=sched_error,
        violations=violations, scope=_scope(t, d, cms) if sched_error is None else None,
        sandbox_namespaces=names, sandbox_how=how, pods=folded, pods_error=pods_error,
        expected_grace=spec.expected_grace_period_seconds, access=access, nodes=nodes, slurmd_pods=slurmd,
        nodes_error=nodes_error, sandbox_request=need, sandbox_request_how=need_how,
        client_annotations=tuple(spec.client_annotations),
        runner=await _runner(kube, t, policy, make_runner), partition=spec.partition,
        slurm=slurm_obs, slurm_refused=slurm_refused, slurm_token_exp=slurm_exp, now=now())
