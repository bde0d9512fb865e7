"""`why`: is a sandbox pod (or any pod of a namespace) placeable, and if not, which link is broken (pure).

One observation (core/why_facts.py), one chain of checks in the order a pod travels — a binding
matches its namespace; the namespace is in the scope target's list; the running scheduler was
rolled onto that list; the scheduler's ServiceAccount may watch pods there; the runner policy
routes to the scheduler; the pod carries what the policy sets; its grace is below kill-wait − 5 s;
its placeholder job in Slurm — cert-manager's `policies.Chain` shape, except that every link is
told (the on-call wants the whole chain) and the verdict is the first broken one with its fix.
The judgements are the operator's own: the matcher (core/scope.py), the list's hash and the roll
decision (core/scope.py), the scheduler check (core/scheduler.py), the policy fields
(core/policy.py), the pod check (core/placement.py), the grace rule (core/grace.py), job names
and pending hints (core/slurm_jobs.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..api.reasons import ConditionType, GracePeriodSafe
from . import grace as gr
from .pod_facts import observe_pod
from .pods import parse_time
from .policy.merge import desired_fields
from .policy.paths import PolicyError
from .scheduler.discovery import scheduler_condition
from .slurm.facts import FINISHED, NO_REASON
from .slurm.jobs import hint
from .why_facts import (WAITS, Candidate, Done, Link, Observation, TargetList, condition_note, iso, link_broken,
                        link_ok, link_skipped, link_unknown, scheduler_list)
from .why_roll import rolled

Check = Callable[[Observation, Done], "Link | None"]


# ---------------------------------------------------------------- the links, in the order a pod travels


def binding(obs: Observation, done: Done) -> Link:
    id_, n = "binding", "a binding matches the namespace"
    ns = obs.namespace
    if obs.namespace_labels is None:
        return link_broken(id_, n, f"namespace {ns} not found", "check the name (kubectl get namespace)")
    if obs.namespace_terminating:
        return link_broken(id_, n, f"namespace {ns} is being deleted: it leaves the scheduler's list",
                           "nothing to do: a sandbox in a namespace being deleted is not placed")
    if obs.bindings_error:
        return link_unknown(id_, n, obs.bindings_error, "run it with credentials that may list SunkSandboxBindings")
    refused = f"; refused by the operator's settings (they match nothing): {'; '.join(obs.refused)}" if obs.refused else ""
    b = obs.binding
    if b is None:
        return link_broken(id_, n, f"no SunkSandboxBinding's spec.sandboxNamespaces matches namespace {ns}{refused}",
                           f"add {ns} to a binding's spec.sandboxNamespaces (a name glob matching it, or a selector "
                           "matching its labels); when the operator bounds sandbox namespaces (--sandbox-namespace-"
                           "selector), the namespace must carry that label too")
    sn = b.spec.sandbox_namespaces
    how = ", ".join(([f"names {', '.join(sn.names)}"] if sn.names else []) + (["a selector"] if sn.selector else []))
    mode = "; spec.mode Observe: the operator writes nothing for it" if b.spec.mode == "Observe" else ""
    also = f"; also matched by {', '.join(c.ref for c in obs.candidates[1:])}" if len(obs.candidates) > 1 else ""
    return link_ok(id_, n, f"{b.ref} (spec.sandboxNamespaces: {how}){mode}{also}{refused}")


def scheduler(obs: Observation, done: Done) -> Link:
    id_, n = "scheduler", "the scheduler runs"
    if obs.binding is None:
        return link_skipped(id_, n, WAITS.format("a binding matches the namespace"))
    if obs.scheduler_error or obs.discovery is None:
        return link_unknown(id_, n, obs.scheduler_error or "not read", "run it with credentials that may list pods and "
                            "ConfigMaps in the scheduler's namespace")
    status, reason, message = scheduler_condition(obs.discovery)
    if status == "True":
        return link_ok(id_, n, message)
    return link_broken(id_, n, message, getattr(reason, "fix", ""))


def listed(obs: Observation, done: Done) -> Link:
    id_, n = "listed", "listed in the scope target"
    b, t, ns = obs.binding, obs.target, obs.namespace
    if b is None or t is None:
        return link_skipped(id_, n, WAITS.format("a binding matches the namespace" if b is None else "the scheduler runs"))
    if t.error:
        return link_broken(id_, n, f"{t.where}: {t.error}", "fix the target (nothing is listed there meanwhile)"
                           + condition_note(b, ConditionType.SCOPE_SYNCED))
    if t.scope_type == "cluster":
        return link_ok(id_, n, f"the scheduler watches every namespace (scope type cluster in {t.where})")
    values = scheduler_list(t, t.values)
    if ns in values:
        return link_ok(id_, n, f"{t.where} lists it{_since(t, ns, b)}")
    if b.spec.mode == "Observe":
        fix = f"the binding is in Observe mode, so the operator writes nothing: add {ns} by hand, or set spec.mode: Enforce"
    else:
        fix = ("the operator adds a matching namespace within seconds of its creation: check that it runs, and the "
               f"binding's ScopeSynced condition (kubectl describe ssb -n {b.namespace} {b.ref.partition('/')[2]})"
               + condition_note(b, ConditionType.SCOPE_SYNCED))
    return link_broken(id_, n, f"{t.where} does not list {ns} ({len(values)} namespace(s) listed)", fix)


def _since(t: TargetList, ns: str, b: Candidate) -> str:
    """Who put `ns` there, as the ledger records it, and when the operator last wrote the list."""
    by = sorted(ref for ref, e in t.ledger.entries.items() if ns in e.added)
    mine = t.ledger.get(b.ref)
    if by:
        who = f"added by the operator for {', '.join(by)}"
    elif mine is not None and mine.preexisting is not None and ns in mine.preexisting:
        who = "listed before the operator's first write"
    else:
        who = "an admin's or a tool's entry (not in the operator's ledger)"
    when = f"; the operator last wrote the list at {t.written_at}" if t.written_at else ""
    return f": {who}{when}"


def rbac(obs: Observation, done: Done) -> Link:
    id_, n = "rbac", "the scheduler may watch pods there"
    b, a, ns = obs.binding, obs.access, obs.namespace
    if b is None or a is None:
        return link_skipped(id_, n, WAITS.format("the scheduler runs"))
    if a.allowed is None:
        return link_unknown(id_, n, a.error or "not asked", "run it with credentials that may create SubjectAccessReviews")
    via = "".join(f"; RoleBinding {g.namespace}/{g.name} binds ClusterRole {g.role[2]}" for g in a.grants)
    what = f"ServiceAccount {a.service_account} may watch pods and create pods/binding in {ns} (SubjectAccessReview)"
    if a.allowed:
        return link_ok(id_, n, what + via)
    role = b.spec.scope.grant_cluster_role
    if not role:
        fix = (f"grant it: set spec.scope.grantClusterRole (e.g. sunk-scheduler-sandbox; the operator's --allow-grant "
               f"must cover {ns}), or bind a Role allowing those verbs to ServiceAccount {a.service_account} in {ns}")
    elif not a.grants:
        fix = f"the operator has not granted ClusterRole {role} in {ns}" + (
            condition_note(b, ConditionType.SCOPE_SYNCED) or ": check that it runs and that its --allow-grant covers the namespace")
    else:
        fix = f"ClusterRole {role} lacks watch on pods or create on pods/binding: add those rules to it"
    return link_broken(id_, n, what.replace(" may ", " may not ", 1) + f": its sandboxes there stay Pending{via}", fix)


def _desired(b: Candidate, name: str) -> Mapping[str, str]:
    return desired_fields(b.spec, name).values


def policy(obs: Observation, done: Done) -> Link:
    id_, n = "policy", "the runner policy routes to the scheduler"
    b, d, p = obs.binding, obs.discovery, obs.policy
    if b is None or d is None or not d.name:
        return link_skipped(id_, n, WAITS.format("the scheduler runs"))
    try:
        want = _desired(b, d.name)
    except PolicyError as exc:
        return link_broken(id_, n, str(exc), "fix the binding's spec")
    if p is None or not p.source:
        return link_unknown(id_, n, f"the runner's policy was not read ({p.unread if p else 'not asked'}) and the "
                            "binding's status records no path it owns")
    src = (f"runner {b.spec.runner.id}'s policy" if p.source == "runner" else
           f"the binding's status.policy.owned (the runner's policy was not read: {p.unread})")
    wrong = [f"{path} is {p.values[path]!r}" if path in p.values else f"{path} is unset" for path in want
             if p.values.get(path) != want[path]]
    if wrong:
        fields = ", ".join(f"{path} {v!r}" for path, v in want.items())
        fix = (f"another owner manages the policy (spec.policy.management: Observe): add {fields} to it"
               if b.spec.policy.management == "Observe" or b.spec.mode == "Observe" else
               "the operator writes them at its next reconcile: check that it runs" + condition_note(b, ConditionType.POLICY_SYNCED))
        return link_broken(id_, n, f"{src}: {'; '.join(wrong)} (the binding wants {fields})", fix)
    return link_ok(id_, n, f"{src} sets " + ", ".join(f"{path} {v!r}" for path, v in want.items()))


def pod(obs: Observation, done: Done) -> Link | None:
    id_, n = "pod", "the pod carries the policy"
    b, d, p = obs.binding, obs.discovery, obs.pod
    if obs.kind != "pod" or p is None:
        return None
    if b is None or d is None or not d.name:
        return link_skipped(id_, n, WAITS.format("the scheduler runs"))
    facts = observe_pod(p, scheduler_name=d.name, partition=None, pinned=b.spec.pinned_annotations(), kill_wait=None)
    if facts.mismatch is None:
        pinned = "".join(f", {k} {v!r}" for k, v in sorted(b.spec.pinned_annotations().items()))
        return link_ok(id_, n, f"spec.schedulerName {d.name!r}{pinned}")
    written = obs.policy.applied_at if obs.policy else None
    applied = parse_time(written)
    if applied is not None and p.created_ts is not None and p.created_ts < applied:
        fix = (f"the pod was created at {p.created}, before the policy was last written at {written}: a policy "
               "change reaches new sandboxes only: start a new sandbox")
    else:
        fix = ("a policy change can take a while to reach new sandboxes: start a new one; if new ones still lack it, "
               f"the runner that made this pod is not runner {b.spec.runner.id} (its policy is not this binding's)")
    return link_broken(id_, n, facts.mismatch, fix)


def grace(obs: Observation, done: Done) -> Link:
    id_, n = "grace", "grace below kill-wait − 5 s"
    b, d = obs.binding, obs.discovery
    if b is None or d is None or not d.pods_found:
        return link_skipped(id_, n, WAITS.format("the scheduler runs"))
    kw = d.kill_wait_seconds
    if obs.pod is not None and kw is not None:  # this pod's own grace, whatever the binding expects
        g = obs.pod.grace
        said = f"the pod's terminationGracePeriodSeconds is {g} s; kill-wait is {kw} s ({d.kill_wait_source})"
        if gr.is_safe(g, kw):
            return link_ok(id_, n, f"{said}: {g} < {kw} − {gr.MARGIN_SECONDS}")
        return link_broken(id_, n, f"{said}: Slurm drains the node when it stops; kill-wait must be at least "
                           f"{gr.min_safe_kill_wait(g)} ({gr.suggested_kill_wait(g)} suggested)",
                           GracePeriodSafe.TOO_LONG.fix)
    status, _, message = gr.grace_condition(b.spec.expected_grace_period_seconds, obs.sandbox_grace, kw)
    if status == "True":
        return link_ok(id_, n, message)
    if status == "Unknown":
        return link_unknown(id_, n, message)
    return link_broken(id_, n, message, GracePeriodSafe.TOO_LONG.fix)


def job(obs: Observation, done: Done) -> Link | None:
    id_, n = "job", "its placeholder job in Slurm"
    b, p, j = obs.binding, obs.pod, obs.jobs
    if obs.kind != "pod" or p is None:
        return None
    if b is None:
        return link_skipped(id_, n, WAITS.format("a binding matches the namespace"))
    if b.spec.slurm.rest_api is None:
        return link_skipped(id_, n, "not checked: Slurm is not configured (spec.slurm.restAPI)")
    if p.phase in ("Succeeded", "Failed"):
        return link_skipped(id_, n, f"the pod has finished ({p.phase})")
    if j is None or j.error:
        return link_unknown(id_, n, f"{j.where}: {j.error}" if j else "Slurm was not asked")
    age = obs.now - (p.created_ts or obs.now)
    if j.job is None:
        tried = f"job names tried: {', '.join(j.names)}"
        if age < obs.pending_seconds:
            return link_unknown(id_, n, f"no placeholder job yet ({tried}); the pod is {age:.0f} s old: a job counts as "
                                f"missing after {obs.pending_seconds:.0f} s")
        return link_broken(id_, n, f"no placeholder job in {j.where} {age:.0f} s after the pod's creation ({tried})",
                           "the SUNK scheduler has not submitted one: the links above say whether it watches the "
                           "namespace; the pod's events say whether it rejected the pod (bad annotations); check "
                           "spec.slurm.restAPI.jobNameTemplates against the jobs' names (squeue -o %j)")
    f = j.job
    what = f"job {f.job_id} ({f.name}) {f.state}"
    if f.state == "PENDING" and f.reason not in NO_REASON:
        waited = obs.now - j.submitted if j.submitted is not None else None
        why = f" for {f.reason}" + (f": {f.description}" if f.description and f.description != f.reason else "")
        if waited is not None and waited >= obs.pending_seconds:
            return link_broken(id_, n, f"{what}{why}, since its submission at {iso(j.submitted or 0)} ({waited:.0f} s)",
                               hint(f.reason).replace("ID", str(f.job_id)))
        shown = f"{waited:.0f} s" if waited is not None else "an unknown time"
        return link_unknown(id_, n, f"{what}{why} for {shown}: a reason counts after {obs.pending_seconds:.0f} s")
    if f.state == "PENDING" or f.state in FINISHED:
        return link_unknown(id_, n, f"{what}" + (f" ({f.reason})" if f.reason not in NO_REASON else ""))
    return link_ok(id_, n, what + (f"; the pod is on node {p.node_name}" if p.node_name else ""))


# What each link reads (the table in docs/operations.md is kept equal to it by tests/unit/test_why.py).
READS: dict[str, str] = {
    'binding': 'GET the pod and the Namespace; LIST SunkSandboxBindings',
    'scheduler': 'LIST pods `-l` podSelector and ConfigMaps in its namespace',
    'listed': 'GET the target (ConfigMap, Argo CD Application, Flux HelmRelease + ConfigMap)',
    'rolled': "LIST Deployments and StatefulSets in the scheduler's namespace",
    'rbac': 'CREATE SubjectAccessReview ×2 (nothing is stored); LIST RoleBindings `-l sunksandbox.dev/binding=…`',
    'policy': 'GET the token Secret; POST `GetManagedRunner`',
    'pod': '— (the pod)',
    'grace': '— (the pod); a namespace: LIST pods `-l sandbox.coreweave.com/sandbox-id` there',
    'job': ('GET the Slurm JWT Secret; GET `/slurm/VERSION/jobs` at an allowed slurmrestd (with no `apiVersion`, '
            'the `ping`s that negotiate it first, as the doctor\'s)'),
}

CHAIN: tuple[Check, ...] = (binding, scheduler, listed, rolled, rbac, policy, pod, grace, job)


def evaluate(obs: Observation) -> list[Link]:
    done: dict[str, Link] = {}
    for check in CHAIN:
        link = check(obs, done)
        if link is not None:
            done[link.id] = link
    return list(done.values())


@dataclass(frozen=True)
class Verdict:
    placeable: bool
    broken: Link | None            # the first broken link: the one to fix first
    untold: tuple[Link, ...]       # links that could not be told (no broken one among the rest)

    def text(self, obs: Observation) -> str:
        if self.broken is not None:
            return f"not placeable: {self.broken.name} — fix: {self.broken.fix}"
        if self.untold:
            return "no broken link found, but not told: " + "; ".join(f"{x.name} ({x.detail})" for x in self.untold)
        node = f" (placed on node {obs.pod.node_name})" if obs.pod is not None and obs.pod.node_name else ""
        return f"placeable{node}"


def verdict(links: Sequence[Link]) -> Verdict:
    broken = next((x for x in links if x.ok is False), None)
    untold = tuple(x for x in links if x.unknown)
    return Verdict(broken is None and not untold, broken, untold if broken is None else ())


def wire(obs: Observation, links: Sequence[Link]) -> dict[str, Any]:
    """`-o json|yaml`."""
    v = verdict(links)
    return {"subject": obs.subject, "namespace": obs.namespace, "pod": obs.pod_name,
            "binding": obs.binding.ref if obs.binding else None, "placeable": v.placeable,
            "brokenLink": v.broken.id if v.broken else None, "verdict": v.text(obs),
            "links": [{"id": x.id, "name": x.name, "ok": x.ok, "detail": x.detail, "fix": x.fix,
                       **({"unknown": True} if x.unknown else {})} for x in links]}
