"""`why`'s roll link: does the running scheduler read the list that holds the namespace (pure)?

With a SchedulerConfigMap target the operator rolls the scheduler itself and records it on the pod
template (scope hash, ledger generation, rolled-at): the template is compared with the list as the
operator's own roll decision compares them (core/scope.py `decide_roll`), then the Ready pods with
the template (a rollout that has not finished). With Argo CD or Flux the chart is rendered into the
scheduler's own scheduler.conf, which is read instead. Without a hash to compare (the operator never
wrote the list, or does not restart the scheduler), the Ready pods' start is compared with the list's
last change (managedFields times).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from ..api.keys import SCOPE_GENERATION_ANNOTATION, SCOPE_HASH_ANNOTATION, SCOPE_ROLLED_AT_ANNOTATION
from ..api.reasons import ConditionType
from .pods import parse_time
from .scheduler.discovery import is_ready
from .scope.template import decide_roll, scheduler_workload, scope_hash
from .scope.target_ref import APPLICATION, CONFIGMAP
from .why_facts import (WAITS, Candidate, Done, Link, Observation, TargetList, condition_note, holds, iso,
                        link_broken, link_ok, link_skipped, link_unknown, scheduler_list)


def rolled(obs: Observation, done: Done) -> Link:
    id_, n = "rolled", "the running scheduler reads that list"
    b, t, d, s = obs.binding, obs.target, obs.discovery, obs.scheduler
    if b is None or t is None or d is None or not holds(done, "listed"):
        return link_skipped(id_, n, WAITS.format("listed in the scope target"))
    if t.scope_type == "cluster":
        return link_ok(id_, n, "cluster scope: a list change does not change what it watches")
    if t.kind != CONFIGMAP:
        return _rendered(obs, b, t)
    if s.workloads is None:
        return link_unknown(id_, n, f"the scheduler's Deployments and StatefulSets in {d.namespace} were not read: "
                            f"{s.workloads_error}", "run it with credentials that may list them")
    values = scheduler_list(t, t.values)
    selector = b.spec.scheduler.pod_selector
    dep = scheduler_workload(s.workloads, selector)
    template = dict((((dep or {}).get("spec") or {}).get("template") or {}).get("metadata") or {})
    ann = template.get("annotations") or {}
    wrote = t.ledger.generation > 0
    if dep is None or not b.spec.scope.restart_scheduler or (ann.get(SCOPE_HASH_ANNOTATION) is None and not wrote):
        return _started_after(obs, t.changed_at, f"{t.where} holds the list", restart=True)
    want, what = scope_hash(values), f"{dep.get('kind', 'Deployment')} {d.namespace}/{dep['metadata']['name']}"
    roll = decide_roll(s.workloads, selector, d.namespace, values, wrote=wrote, hash_annotation=SCOPE_HASH_ANNOTATION,
                       generation=t.ledger.generation, generation_annotation=SCOPE_GENERATION_ANNOTATION)
    at = ann.get(SCOPE_ROLLED_AT_ANNOTATION)
    if roll.workload is not None:
        last = f"rolled at {at}" if at else "never rolled by the operator"
        nxt = (b.status.get("scope") or {}).get("nextRollTime") if isinstance(b.status.get("scope"), Mapping) else None
        due = parse_time(nxt)
        fix = (f"the operator rolls it at {nxt} (spec.scope.minRollInterval {b.spec.scope.min_roll_interval} folds "
               "list changes into one restart)" if due is not None and due > obs.now else
               "the operator rolls it at its next sync: check that it runs; or restart it yourself: "
               f"kubectl -n {d.namespace} rollout restart {what.split()[0].lower()}/{dep['metadata']['name']}")
        return link_broken(id_, n, f"{what}'s pod template carries scope-hash {ann.get(SCOPE_HASH_ANNOTATION) or 'none'} "
                           f"(generation {ann.get(SCOPE_GENERATION_ANNOTATION) or 'none'}, {last}) but the list hashes to "
                           f"{want} (ledger generation {t.ledger.generation}): the running scheduler predates the list",
                           fix + condition_note(b, ConditionType.SCOPE_SYNCED))
    running = [p for p in s.pods if is_ready(p) and
               (((p.get("metadata") or {}).get("annotations") or {}).get(SCOPE_HASH_ANNOTATION)) == want]
    rolled_at = f" at {at}" if at else ""
    if running:
        return link_ok(id_, n, f"{what} was rolled onto it{rolled_at} (scope-hash {want}, generation "
                       f"{ann.get(SCOPE_GENERATION_ANNOTATION) or 'none'}); {len(running)} Ready scheduler pod(s) run it")
    return link_broken(id_, n, f"{what} was rolled onto it{rolled_at} (scope-hash {want}) but no Ready scheduler pod "
                       "carries that hash yet: the rollout has not finished",
                       f"kubectl -n {d.namespace} rollout status {what.split()[0].lower()}/{dep['metadata']['name']}; the "
                       "new pod's events and logs say why it is not Ready")


def _rendered(obs: Observation, b: Candidate, t: TargetList) -> Link:
    """Argo CD / Flux render the chart from the target: the scheduler reads its own scheduler.conf."""
    id_, n, s, ns = "rolled", "the running scheduler reads that list", obs.scheduler, obs.namespace
    tool = "Argo CD" if t.kind == APPLICATION else "Flux"
    if s.rendered_where is None:
        return link_unknown(id_, n, f"no scheduler.conf ConfigMap of the scheduler was found: what {tool} rendered for it "
                            "cannot be read")
    if s.rendered_type != "cluster" and ns not in scheduler_list(t, s.rendered):
        ns_, _, name = (t.renders or "NAMESPACE/NAME").partition("/")
        fix = (f"sync the Application (argocd app sync {ns_}/{name})" if t.kind == APPLICATION else
               f"reconcile the HelmRelease (flux reconcile helmrelease {name} -n {ns_})")
        return link_broken(id_, n, f"{tool} has not rendered it into the scheduler's own {s.rendered_where} yet "
                           f"({len(scheduler_list(t, s.rendered))} namespace(s) there)", fix + "; the chart's checksum "
                           "annotation then rolls the scheduler")
    return _started_after(obs, s.rendered_changed_at, f"{tool} rendered it into {s.rendered_where}", restart=False)


def _started_after(obs: Observation, changed_at: str | None, lead: str, *, restart: bool) -> Link:
    """No scope hash to compare: did the Ready scheduler pods start after the list last changed? Both times
    are in whole seconds: a start in the same second counts as after (the order inside it is not recorded)."""
    id_, n = "rolled", "the running scheduler reads that list"
    ready = [p for p in obs.scheduler.pods if is_ready(p)]
    starts = [t for p in ready if (t := parse_time((p.get("metadata") or {}).get("creationTimestamp"))) is not None]
    changed = parse_time(changed_at)
    if not starts or changed is None:
        return link_unknown(id_, n, f"{lead}; when it last changed or when the scheduler started is not recorded")
    oldest = min(starts)
    if oldest >= math.floor(changed):
        return link_ok(id_, n, f"{lead}; the Ready scheduler pod(s) started at {iso(oldest)}, not before its last change "
                       f"at {changed_at}")
    how = " — or let the operator: spec.scope.restartScheduler: true" if restart else ""
    return link_unknown(id_, n, f"{lead}, but the oldest Ready scheduler pod started at {iso(oldest)}, before its last "
                        f"change at {changed_at}: whether the scheduler re-reads its config without a restart is unknown",
                        f"restart the scheduler if it reads its config only at start (kubectl rollout restart){how}")
