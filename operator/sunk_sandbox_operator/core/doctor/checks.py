"""`doctor`: every check of the seed runbook over one observation, pure.

The shell (adapters/doctor.py) reads the cluster, the runner API and Slurm into one `Observation`;
`evaluate` runs `CHECKS` over it, in the runbook's order, and each check says (ok, name, detail,
fix) — cert-manager's `policies.Chain` is the model, except that every check runs (the admin wants
the whole list, not the first failure). `ok` is None when a check does not apply or cannot run
because an earlier one failed (it then says which). The decisions are the operator's own:
discovery (core/scheduler/discovery.py), the grace rule (core/grace.py), the scope list (core/scope/membership.py,
core/scope/doc.py), the policy rules (core/policy/checks.py); the fixes name the Helm value, and
the binding field or the doctor flag that was read. `READS` says what each check reads (the
table in docs/operations.md is kept equal to it by a unit test). The runner API's and slurmrestd's
checks are `remote_checks.py`'s.
"""

from __future__ import annotations

from collections.abc import Callable

from ...api.reasons import Common, GracePeriodSafe
from .. import grace as gr
from .facts import Observation, Result, failing, passed, skipped
from .node_room import NodeRoom
from .remote_checks import partition_exists, policy_fields, runner_token, slurm_token
from ..scheduler.discovery import UPGRADE_ORDER, Discovery
from ..scope.plan import missing_summary, names


def _found(obs: Observation) -> Discovery | None:
    """Discovery when the scheduler's namespace was read and pods were found."""
    d = obs.discovery
    return d if d is not None and obs.scheduler_error is None and d.pods_found else None


NO_SCHEDULER = "not checked: the scheduler was not found (see above)"
CREDENTIALS = "run the doctor with credentials that may read it (the doctor only reads)"

# ---------------------------------------------------------------- the checks, in the runbook's order


def binding_allowed(obs: Observation) -> Result | None:
    n = "binding allowed"
    if obs.binding is None:
        return None
    if obs.violations:
        judged = f" (judged with {obs.settings})" if obs.settings else ""
        return failing("binding", n, f"the operator refuses {obs.binding}: " + "; ".join(obs.violations) + judged,
                       Common.NOT_ALLOWED.fix)
    return passed("binding", n, f"{obs.binding} asks nothing the operator's settings refuse")


def scheduler_running(obs: Observation) -> Result:
    n, d = "scheduler running", obs.discovery
    sel = f"-l {d.selector}" if d is not None and d.selector else ""
    if obs.scheduler_error or d is None:
        return failing("scheduler-running", n, obs.scheduler_error or "not read",
                       CREDENTIALS)
    if not d.pods_found:
        return failing("scheduler-running", n, f"no pods {sel} in {d.namespace}",
                       "enable it: `scheduler.enabled: true` in the Slurm Helm values; or point the doctor at it: "
                       + obs.knob("spec.scheduler.namespace / podSelector", "--scheduler-namespace / --scheduler-selector"))
    if not d.ready_replicas and d.crash_looping:
        old_flag = " (a SUNK 8.2 scheduler has no --slurm-kill-wait flag: drop it from the args; KillWait comes " \
            "from slurm.conf)" if d.scheduler_kill_wait is not None and d.scheduler_kill_wait[1] == "args" else ""
        return failing("scheduler-running", n, f"{d.pods_found} pod(s) {sel} in {d.namespace}, none Ready; "
                       f"{', '.join(d.crash_looping)} in CrashLoopBackOff",
                       f"{UPGRADE_ORDER}{old_flag}; `kubectl logs -n {d.namespace} {sel} -c scheduler --previous` "
                       "says why it exits")
    if not d.ready_replicas:
        return failing("scheduler-running", n, f"{d.pods_found} pod(s) {sel} in {d.namespace}, none Ready",
                       f"see why: `kubectl describe pods -n {d.namespace} {sel}`, `kubectl logs -n {d.namespace} "
                       f"{sel} -c scheduler`")
    return passed("scheduler-running", n, f"{d.ready_replicas} of {d.pods_found} pod(s) {sel} Ready in {d.namespace}")


_NAME_SOURCES = {"configMap": "scheduler.conf `.scheduler.name` (SUNK 8)", "args": "--scheduler-name (SUNK 7)",
                 "spec": "spec.scheduler.name"}


def scheduler_name(obs: Observation) -> Result:
    n, d = "scheduler name", _found(obs)
    if d is None:
        return skipped("scheduler-name", n, NO_SCHEDULER)
    errors = "".join(f"; {e}" for e in d.errors) + "".join(f"; refused: {r}" for r in d.refused)  # InputRefused's
    if d.name is None:
        return failing("scheduler-name", n, f"neither scheduler.conf nor --scheduler-name names it{errors}",
                       "set `scheduler.name` in the Slurm Helm values, or "
                       + obs.knob("spec.scheduler.name", "--scheduler-name"))
    source = _NAME_SOURCES.get(d.name_source or "", d.name_source or "?")
    if d.name_source == "spec" and d.discovered_name and d.discovered_name != d.name:
        return failing("scheduler-name", n, f"{d.name!r} ({source}) but the scheduler calls itself "
                       f"{d.discovered_name!r}: sandbox pods naming {d.name!r} stay Pending",
                       f"set {obs.knob('spec.scheduler.name', '--scheduler-name')} to {d.discovered_name!r}, or "
                       "leave it empty to use the discovered name")
    if errors:
        return failing("scheduler-name", n, f"{d.name!r} from {source}{errors}",
                       "fix the scheduler's config (the error names the object and field)")
    return passed("scheduler-name", n, f"{d.name!r} from {source}")


def _kill_wait_source(d: Discovery) -> str:
    if d.kill_wait_source == "args":
        return "--slurm-kill-wait of the scheduler container"
    if d.kill_wait_source == "configMap":
        return "scheduler.conf"
    if d.kill_wait_source in ("slurmConf", "slurmConfDefault") and d.slurm_kill_wait is not None:
        return f"Slurm's KillWait ({d.slurm_kill_wait[1]}; SUNK 8.2 has no flag of its own)"
    return "spec.scheduler.killWaitSeconds" if d.kill_wait_source == "spec" else str(d.kill_wait_source)


def kill_wait(obs: Observation) -> Result:
    n, d = "kill-wait", obs.discovery
    if d is None or obs.scheduler_error:
        return skipped("kill-wait", n, NO_SCHEDULER)
    if d.kill_wait_seconds is None:
        return failing("kill-wait", n, f"no slurm.conf ConfigMap with KillWait in {d.namespace} (where SUNK 8.2 reads "
                       "it), no --slurm-kill-wait argument (SUNK 8.1 and older), none in scheduler.conf",
                       "set `slurmConfig.KillWait` in the Slurm Helm values (60 for the default 30 s grace), or say "
                       "it: " + obs.knob("spec.scheduler.killWaitSeconds", "--kill-wait-seconds"))
    return passed("kill-wait", n, f"{d.kill_wait_seconds} s from {_kill_wait_source(d)}")


def kill_wait_matches(obs: Observation) -> Result:
    n, d = "kill-wait equals Slurm's KillWait", obs.discovery
    if d is None or obs.scheduler_error:
        return skipped("kill-wait-matches", n, NO_SCHEDULER)
    ours, slurm = d.scheduler_kill_wait, d.slurm_kill_wait
    if ours is None and slurm is not None:
        return passed("kill-wait-matches", n, f"the scheduler sets none of its own: it uses Slurm's KillWait, "
                       f"{slurm[0]} s ({slurm[1]})")
    if ours is None:
        return failing("kill-wait-matches", n, f"neither side found in {d.namespace}",
                       "set `slurmConfig.KillWait` in the Slurm Helm values")
    where = "--slurm-kill-wait" if ours[1] == "args" else "scheduler.conf"
    if slurm is None:
        return failing("kill-wait-matches", n, f"the scheduler's is {ours[0]} s ({where}); Slurm's KillWait was not "
                       f"found (no ConfigMap with a slurm.conf key in {d.namespace}, or it uses Include)",
                       "compare by hand: `scontrol show config | grep KillWait` on a Slurm login node")
    if ours[0] != slurm[0]:
        return failing("kill-wait-matches", n, f"the scheduler's is {ours[0]} s ({where}) but Slurm's KillWait is "
                       f"{slurm[0]} s ({slurm[1]})",
                       "keep them equal: set `slurmConfig.KillWait` in the Slurm Helm values and roll the release "
                       "out so the scheduler's kill-wait follows")
    return passed("kill-wait-matches", n, f"{ours[0]} s on both sides ({where}; {slurm[1]})")


def grace_rule(obs: Observation) -> Result:
    n, d = "grace rule", obs.discovery
    kw = d.kill_wait_seconds if d is not None and not obs.scheduler_error else None
    if kw is None:
        return skipped("grace", n, "not checked: the kill-wait is unknown (see above)")
    if obs.pods_error:
        return failing("grace", n, obs.pods_error, CREDENTIALS)
    p = obs.pods
    status, _, message = gr.grace_condition(obs.expected_grace, p.max_grace, kw)
    seen = f"{p.count} sandbox pod(s) seen" if p.count else "no sandbox pod seen yet"
    unsafe = {g: c for g, c in p.graces.items() if not gr.is_safe(g, kw)}
    if status == "True":
        return passed("grace", n, f"{message} ({seen})")
    worst = max(unsafe) if unsafe else None
    pods = (f"; {sum(unsafe.values())} of {p.count} pod(s) too long, e.g. {p.grace_example[worst]} ({worst} s)"
            if worst is not None and worst in p.grace_example else "")
    return failing("grace", n, f"{message}{pods}", GracePeriodSafe.TOO_LONG.fix)


def scope_coverage(obs: Observation) -> Result:
    n, d, s = "scope covers sandbox namespaces", _found(obs), obs.scope
    want, how = obs.sandbox_namespaces, obs.sandbox_how
    fix = ("set `scheduler.scope.type: cluster` in the Slurm Helm values (new sandbox namespaces are then covered "
           "too), or list them in `scheduler.scope.namespaces`" +
           ("; the binding's ScopeSynced condition says why it has not (Observe mode writes nothing)" if obs.binding
            else "; a SunkSandboxBinding keeps that list in sync as the runner creates namespaces"))
    if s is None:
        if d is None:
            return skipped("scope", n, NO_SCHEDULER)
        return failing("scope", n, f"no scheduler.conf in {d.namespace} (ConfigMap labelled "
                       "app.kubernetes.io/component=scheduler) says what it watches", fix)
    if obs.pods_error:
        return failing("scope", n, obs.pods_error, CREDENTIALS)
    if s.error:
        return failing("scope", n, f"{s.where}: {s.error}", "fix that document; nothing reads a scope from it meanwhile")
    if s.scope_type == "cluster":
        return passed("scope", n, f"type cluster in {s.where}: every namespace, the {len(want)} {how} included")
    listed = set(s.values or ()) or {obs.scheduler_namespace}  # blank: the scheduler's own namespace
    count, first = missing_summary(set(want), listed, 5)
    kind = f"type {s.scope_type or 'namespace'} in {s.where} lists {len(listed)}"
    if count:
        return failing("scope", n, f"{kind}; {count} of the {len(want)} {how} missing: {', '.join(first)}"
                       + (" …" if count > len(first) else ""), fix)
    if not want:
        return passed("scope", n, f"{kind}; no {how} yet, so nothing to cover")
    return passed("scope", n, f"{kind}, every one of the {len(want)} {how}")


def scheduler_rbac(obs: Observation) -> Result:
    n, a = "scheduler RBAC in sandbox namespaces", obs.access
    if a is None or _found(obs) is None:
        return skipped("scheduler-rbac", n, NO_SCHEDULER)
    if a.error:
        return failing("scheduler-rbac", n, a.error, "run the doctor with credentials that may create "
                       "SubjectAccessReviews (authorization.k8s.io)")
    what = f"{a.service_account} may watch pods and create pods/binding"
    if a.cluster:
        return passed("scheduler-rbac", n, f"{what} in every namespace")
    if a.denied:
        want = sorted(obs.sandbox_namespaces)
        return failing("scheduler-rbac", n, f"{what} in only {len(want) - len(a.denied)} of {len(want)} sandbox "
                       f"namespace(s); not in {names(sorted(a.denied), 5)}: its sandboxes there stay Pending",
                       "apply the scope change through the Slurm Helm release (it grants the RBAC with it), or "
                       "let the operator grant it: spec.scope.grantClusterRole: sunk-scheduler-sandbox")
    if not obs.sandbox_namespaces:
        return passed("scheduler-rbac", n, f"no {obs.sandbox_how} yet to check ({what} only where granted, not "
                       "cluster-wide: each new one needs its grant)")
    return passed("scheduler-rbac", n, f"{what} in each of the {len(obs.sandbox_namespaces)} {obs.sandbox_how}")


def _room(r: NodeRoom) -> str:
    if r.allocatable is None or r.error:
        return f"{r.node}: {r.error or 'no allocatable'}"
    free = r.free
    return (f"{r.node} (allocatable {r.allocatable.show()}; slurmd {r.slurmd.show()}; other pods "
            f"{r.others.show()}; left {free.show() if free is not None else '?'})")


def slurmd_room(obs: Observation) -> Result:
    n, need = "room beside slurmd on shared NodeSets", obs.sandbox_request
    if obs.nodes_error:
        return failing("slurmd-room", n, obs.nodes_error, CREDENTIALS)
    if not obs.slurmd_pods:
        of = f" of NodeSet(s) {', '.join(obs.nodeset_filter)}" if obs.nodeset_filter else ""
        return failing("slurmd-room", n, f"no slurmd pod{of} (a container named slurmd) in {obs.scheduler_namespace}",
                       "point the doctor at the Slurm namespace: " + obs.knob("spec.scheduler.namespace",
                                                                               "--scheduler-namespace")
                       + "; --nodeset picks the NodeSets shared with sandboxes")
    tight = [r for r in obs.nodes if r.free is None or not r.free.fits(need)]
    nodesets = sorted({ns for r in obs.nodes for ns in r.nodesets})
    head = f"a sandbox pod needs {need.show()} ({obs.sandbox_request_how})"
    if tight:
        return failing("slurmd-room", n, f"{head}; {len(tight)} of {len(obs.nodes)} Node(s) of NodeSet(s) "
                       f"{', '.join(nodesets)} have no room: " + "; ".join(_room(r) for r in tight[:3])
                       + (" …" if len(tight) > 3 else ""),
                       "lower the slurmd container's resource requests of those NodeSets in the Slurm Helm values "
                       "(SUNK: Manage resources with the SUNK Pod Scheduler), else sandbox pods fail with OutOfcpu / "
                       "OutOfMemory")
    least = min(obs.nodes, key=lambda r: (r.free.cpu, r.free.memory) if r.free is not None else (0, 0))
    return passed("slurmd-room", n, f"{head}; all {len(obs.nodes)} Node(s) of NodeSet(s) {', '.join(nodesets)} have "
                   f"room; the least: {_room(least)}")


Check = Callable[[Observation], "Result | None"]
CHECKS: tuple[Check, ...] = (binding_allowed, scheduler_running, scheduler_name, kill_wait, kill_wait_matches,
                             grace_rule, scope_coverage, scheduler_rbac, slurmd_room, runner_token, policy_fields,
                             slurm_token, partition_exists)

# What each check reads (the table in docs/operations.md; a unit test keeps the two equal). SNS: the scheduler's
# namespace (its pods, ConfigMaps and the NodeSets' slurmd pods live there).
READS: dict[str, str] = {
    "binding": "GET the SunkSandboxBinding (binding mode only); the operator's settings: the doctor's flags / `SSB_*` "
               "variables, else GET ConfigMap sunk-sandbox-operator-settings in the operator's namespace (what the "
               "operator publishes); nothing else when they refuse it",
    "scheduler-running": "LIST pods `-l` podSelector in SNS",
    "scheduler-name": "LIST ConfigMaps in SNS (`scheduler.conf`); the scheduler pods' args",
    "kill-wait": "the same pods and ConfigMaps (args, `scheduler.conf`, `slurm.conf`)",
    "kill-wait-matches": "the same (the scheduler's args or `scheduler.conf` vs `KillWait` in a `slurm.conf` ConfigMap)",
    "grace": "LIST pods `-l sandbox.coreweave.com/sandbox-id` in every namespace (paginated)",
    "scope": "the `scheduler.conf` ConfigMap read above; LIST Namespaces (binding mode, or `--sandbox-namespaces`)",
    "scheduler-rbac": "CREATE SubjectAccessReview ×2 cluster-wide, then ×2 per sandbox namespace if denied (nothing "
                      "is stored)",
    "slurmd-room": "LIST pods in SNS (containers named `slurmd`); per Node of theirs: GET the Node, LIST pods "
                   "`--field-selector spec.nodeName=NODE`",
    "runner-token": "GET the token Secret; POST `GetManagedRunner` (after the URL passed the operator's allow-list)",
    "policy": "nothing more (the `GetManagedRunner` answer)",
    "slurm-token": "the Slurm token Secret read for the next check: its JWT's `exp`, decoded without verifying",
    "partition": "GET the Slurm token Secret; GET `/slurm/VERSION/ping` from the newest version the operator knows "
                 "down until one is served (no `apiVersion`), then `/slurm/VERSION/partition/NAME` (or `/ping` with no "
                 "partition pinned) at slurmrestd, when configured and allowed",
}


REFUSED = "not checked: the operator refuses this binding (see above), so nothing is read or sent for it"


def evaluate(obs: Observation) -> list[Result]:
    """Every check over `obs`; for a binding the operator refuses, only the first says something: the
    shell read nothing else (as the operator reads nothing for it)."""
    results = [r for check in CHECKS if (r := check(obs)) is not None]
    if obs.binding is not None and obs.violations:
        return [r if r.id == "binding" else skipped(r.id, r.name, REFUSED) for r in results]
    return results


def failed(results: list[Result]) -> bool:
    return any(r.ok is False for r in results)
