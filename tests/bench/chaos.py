"""Chaos: SIGKILL the operator at random moments under a busy workload, then converge, count, restore.

    PYTHONPATH=operator .venv/bin/python -m tests.bench.chaos [--kills 50] [--seed N] [--lease-seconds 4]

One fresh control plane, the shipped manifests, a SUNK 8 style scheduler in tenant-slurm (its
list starts with an admin's entry), the runner API emulator with one runner holding a policy,
and one binding (Enforce, Restore, names cx-* or label chaos-sandbox=yes, alwaysInclude
tenant-slurm, grantClusterRole). For the whole run, in the background:

- namespaces: matching ones created, others created, unlabelled ones labelled and unlabelled,
  matching ones deleted (they stay terminating: no controller-manager);
- the binding's spec: partition toggled every few seconds;
- another admin: another key of the runner policy (limits.adminCounter) and of scheduler.conf
  (adminCounter), every 1-3 s, and now and then an entry of their own added to the list; the
  last value of each is recorded.

The operator (its ServiceAccount, JSON logs) is SIGKILLed N times, 0.2-4 s after the restarted
process became the leader (a replica that does not lead writes nothing, so killing it tests
nothing), and restarted at once. Then the workload stops and the script measures: time from the
last kill to convergence (the list is exactly matching + alwaysInclude + the admin's entries,
ScopeSynced and PolicySynced True for the current generation, the policy holds our fields), lost
admin edits (the last value of each admin key, every admin entry: must be 0), the ledger
(what it says we added is wanted or gone, never an admin's; nothing ours missing from it), leaked
entries, RoleBindings; then it deletes the binding and checks that Restore is exact.

Figures, not assertions: the exit status is 0 once the table is printed; FAIL lines say what broke.
"""

from __future__ import annotations

import argparse
import copy
import fnmatch
import json
import random
import re
import tempfile
import threading
import time
import traceback
import urllib.request
from pathlib import Path

import yaml
from kubernetes.client.rest import ApiException

from tests.conftest import OPERATOR_NS, OPERATOR_SA, TEST_ENV, Kube, install_manifests, wait_for
from tests.integration.test_crash import add_list_entry, binding_gone
from tests.integration.test_scope import edit_conf

SLURM_NS = "tenant-slurm"
CM = "slurm-scheduler-config"
KEY = "scheduler.conf"
BINDING = "chaos"
REF = f"{SLURM_NS}/{BINDING}"
SCHEDULER_NAME = "slurm-scheduler"
PARTITIONS = ("sandboxes", "sandboxes-b")
PARTITION_KEY = "sunk.coreweave.com/partition"
PARTITION_PATH = f'base.metadata.annotations["{PARTITION_KEY}"]'
GLOB = "cx-*"
LABEL = ("chaos-sandbox", "yes")
GRANT_ROLE = "sunk-scheduler-sandbox"
ADMIN_PRE = "admin-pre"
PRE_POLICY = {
    "base": {"metadata": {"annotations": {"team": "rl"}, "labels": {"env": "prod"}},
             "spec": {"dnsPolicy": "ClusterFirst"}},
    "constraints": {"network": {"egress": {"allow": ["10.0.0.0/8"]}, "ingress": "deny"}},
    "limits": {"maxSandboxes": 40, "adminCounter": 0},
}


def log(msg: str) -> None:
    print(f"[chaos {time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ---------------------------------------------------------------- reading state


def conf_text(kube: Kube) -> str:
    return kube.core.read_namespaced_config_map(CM, SLURM_NS).data[KEY]


def listed(kube: Kube) -> list[str]:
    value = yaml.safe_load(conf_text(kube))["scheduler"]["scope"].get("namespaces") or []
    return [v.strip() for v in value.split(",") if v.strip()] if isinstance(value, str) else list(value)


def ledger_entry(kube: Kube):
    from sunk_sandbox_operator.api.keys import SCOPE_LEDGER_ANNOTATION
    from sunk_sandbox_operator.core.scope import ledger

    annotations = kube.core.read_namespaced_config_map(CM, SLURM_NS).metadata.annotations or {}
    return ledger.decode(annotations.get(SCOPE_LEDGER_ANNOTATION)).get(REF)


def belonging(kube: Kube) -> set[str]:
    out = set()
    for n in kube.core.list_namespace().items:
        if n.metadata.deletion_timestamp is not None:
            continue
        labels = n.metadata.labels or {}
        if fnmatch.fnmatchcase(n.metadata.name, GLOB) or labels.get(LABEL[0]) == LABEL[1]:
            out.add(n.metadata.name)
    return out


def live_namespaces(kube: Kube) -> set[str]:
    return {n.metadata.name for n in kube.core.list_namespace().items if n.metadata.deletion_timestamp is None}


def rolebindings(kube: Kube) -> set[str]:
    from sunk_sandbox_operator.core.scope.grants import selector

    return {rb.metadata.namespace for rb in
            kube.rbac.list_role_binding_for_all_namespaces(label_selector=selector(SLURM_NS, BINDING)).items}


def record_configmaps(kube: Kube) -> list[str]:
    from sunk_sandbox_operator.adapters.ownership import name_for
    from sunk_sandbox_operator.core.scope.grants import selector

    found = {cm.metadata.name for cm in kube.core.list_namespaced_config_map(
        OPERATOR_NS, label_selector=selector(SLURM_NS, BINDING)).items}
    found |= {cm.metadata.name for cm in kube.core.list_namespaced_config_map(OPERATOR_NS).items
              if cm.metadata.name == name_for(REF)}
    return sorted(found)


def synced(kube: Kube) -> bool:
    body = kube.binding(SLURM_NS, BINDING)
    gen = body["metadata"].get("generation")
    conds = {c["type"]: c for c in (body.get("status") or {}).get("conditions") or []}
    return all((conds.get(t) or {}).get("status") == "True" and conds[t].get("observedGeneration") in (None, gen)
               for t in ("ScopeSynced", "PolicySynced"))


def policy_of(emulator, runner: str) -> dict:
    with emulator.state.lock:
        return json.loads(json.dumps(emulator.state.runners[runner]["policy"]))


def policy_ours(pol: dict, partition: str) -> bool:
    base = (pol or {}).get("base") or {}
    return ((base.get("spec") or {}).get("schedulerName") == SCHEDULER_NAME
            and ((base.get("metadata") or {}).get("annotations") or {}).get(PARTITION_KEY) == partition)


class Worker(threading.Thread):
    def __init__(self, name: str, seed: int) -> None:
        super().__init__(daemon=True, name=name)
        self.rng = random.Random(seed)
        self.halt = threading.Event()
        self.errors: list[str] = []
        self.actions = 0

    def run(self) -> None:
        while not self.halt.is_set():
            try:
                self.step()
                self.actions += 1
            except Exception as exc:  # noqa: BLE001 - counted, the workload goes on
                self.errors.append(f"{type(exc).__name__}: {str(exc)[:160]}")
            self.halt.wait(self.pause())

    def step(self) -> None:
        raise NotImplementedError

    def pause(self) -> float:
        raise NotImplementedError


class Namespaces(Worker):
    """Matching and other namespaces created, unlabelled ones (lbl-*) relabelled, matching deleted."""

    def __init__(self, kube: Kube, seed: int) -> None:
        super().__init__("namespaces", seed)
        self.kube = kube
        self.n = 0
        self.matching: list[str] = []
        self.labelled: dict[str, bool] = {}

    def pause(self) -> float:
        return self.rng.uniform(0.05, 0.3)

    def step(self) -> None:
        self.n += 1
        action = self.rng.choices(["match", "other", "lbl", "relabel", "delete"], [3, 1, 1, 3, 1])[0]
        if action == "match" or (action == "delete" and not self.matching):
            name = f"cx-{self.n:05d}"
            self.kube.create_namespace(name)
            self.matching.append(name)
        elif action == "other":
            self.kube.create_namespace(f"other-{self.n:05d}")
        elif action == "lbl" or not self.labelled:
            name = f"lbl-{self.n:05d}"
            on = self.rng.random() < 0.5
            self.kube.create_namespace(name, {LABEL[0]: LABEL[1]} if on else {})
            self.labelled[name] = on
        elif action == "relabel":
            name = self.rng.choice(sorted(self.labelled))
            on = not self.labelled[name]
            self.kube.core.patch_namespace(name, {"metadata": {"labels": {LABEL[0]: LABEL[1] if on else None}}})
            self.labelled[name] = on
        else:  # delete: a matching namespace starts terminating (forever)
            pool = self.matching + [n for n, on in self.labelled.items() if on]
            name = self.rng.choice(pool)
            self.kube.core.delete_namespace(name)
            if name in self.matching:
                self.matching.remove(name)
            else:
                del self.labelled[name]


class SpecEdits(Worker):
    """The binding's spec: the partition toggled."""

    def __init__(self, kube: Kube, seed: int) -> None:
        super().__init__("spec", seed)
        self.kube = kube
        self.partition = PARTITIONS[0]
        self.edits = 0

    def pause(self) -> float:
        return self.rng.uniform(2.0, 6.0)

    def step(self) -> None:
        new = PARTITIONS[1] if self.partition == PARTITIONS[0] else PARTITIONS[0]
        self.kube.custom.patch_namespaced_custom_object("sunksandbox.dev", "v1alpha1", SLURM_NS,
                                                        "sunksandboxbindings", BINDING, {"spec": {"partition": new}})
        self.partition = new
        self.edits += 1


class Admin(Worker):
    """Another admin: limits.adminCounter in the runner policy, adminCounter in scheduler.conf, and
    now and then an entry of their own in the list."""

    def __init__(self, kube: Kube, emulator, runner: str, seed: int) -> None:
        super().__init__("admin", seed)
        self.kube, self.emulator, self.runner = kube, emulator, runner
        self.i = 0
        self.policy_value = 0
        self.conf_value = 0
        self.entries: list[str] = []

    def pause(self) -> float:
        return self.rng.uniform(1.0, 3.0)

    def step(self) -> None:
        self.i += 1
        i = self.i
        state = self.emulator.state
        with state.lock:  # a read-modify-write at one etag: the emulator serialises it with the operator's
            pol = copy.deepcopy(state.runners[self.runner]["policy"])
            pol.setdefault("limits", {})["adminCounter"] = i
            state.write(self.runner, pol, who="other-admin")
        self.policy_value = i
        edit_conf(self.kube, SLURM_NS, lambda t: re.sub(r"(?m)^adminCounter: \S+$", f"adminCounter: {i}", t))
        self.conf_value = i
        if i % 5 == 0:
            entry = f"admin-{i:04d}"
            edit_conf(self.kube, SLURM_NS, lambda t: add_list_entry(t, entry))
            self.entries.append(entry)


# ---------------------------------------------------------------- the operator


def leading(proc) -> bool:
    """The replica holds the Lease (/healthz says so; an operator without leader election: alive)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{proc.liveness_port}/healthz", timeout=1) as r:
            body = r.read().decode()
    except Exception:
        return False
    try:
        doc = json.loads(body)
    except ValueError:
        return True
    return bool(doc.get("leader", True)) if isinstance(doc, dict) else True


class Operators:
    def __init__(self, kubeconfig: Path, work: Path, env: dict[str, str]) -> None:
        self.kubeconfig, self.work, self.env = kubeconfig, work, env
        self.runs: list = []
        self.current = None
        self.self_exits: list[tuple[int, int | None]] = []  # (run, exit code) of a process that died on its own
        self.start_failures = 0

    def start(self):
        from sunk_sandbox_devtools.devcluster import OperatorProcess

        for _ in range(5):
            path = self.work / f"operator-{len(self.runs):03d}.log"
            try:
                proc = OperatorProcess(self.kubeconfig, path, env=self.env, args=("--log-format=json",),
                                       verbose=False)
            except RuntimeError as exc:
                self.start_failures += 1
                log(f"operator start failed: {str(exc)[:300]}")
                self.runs.append(None)
                continue
            self.runs.append(proc)
            self.current = proc
            return proc
        raise RuntimeError("the operator would not start 5 times in a row")

    def kill(self) -> None:
        proc = self.current
        if proc.proc.poll() is not None:
            self.self_exits.append((len(self.runs) - 1, proc.proc.returncode))
        else:
            proc.proc.kill()
            proc.proc.wait()
        proc.stop()  # closes the log

    def tracebacks(self) -> int:
        return sum(p.logs().count("Traceback") for p in self.runs if p is not None)

    def stop(self) -> None:
        if self.current is not None:
            self.current.stop()


# ---------------------------------------------------------------- the run


def install(kube: Kube) -> None:
    install_manifests(kube, SLURM_NS)  # the grant ClusterRole (GRANT_ROLE) ships with them


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.chaos", description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=50, help="SIGKILLs of the operator; default 50")
    parser.add_argument("--seed", type=int, default=None, help="random seed (default: drawn and printed)")
    parser.add_argument("--min-gap", type=float, default=0.2, help="seconds from leading to the kill, at least")
    parser.add_argument("--max-gap", type=float, default=4.0, help="seconds from leading to the kill, at most")
    parser.add_argument("--lease-seconds", type=float, default=4.0,
                        help="leader Lease duration (shipped: 15): a restart after SIGKILL waits for the dead "
                        "leader's Lease to expire; renew deadline and retry period scale with it. 0: the shipped "
                        "settings")
    parser.add_argument("--converge-timeout", type=float, default=180.0)
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)

    from sunk_sandbox_devtools import devcluster
    from sunk_sandbox_operator.adapters.runnerapi.emulator import EmulatorState, running_emulator
    from tests.integration.conftest import (ADMIN_TOKEN, binding_spec, create_token_secret, grant_secret_read,
                                            make_scheduler, new_runner)

    env = dict(TEST_ENV)
    if args.lease_seconds > 0:
        env.update(SSB_LEASE_DURATION_SECONDS=str(args.lease_seconds),
                   SSB_RENEW_DEADLINE_SECONDS=str(round(args.lease_seconds * 0.7, 2)),
                   SSB_RETRY_PERIOD_SECONDS=str(round(min(2.0, args.lease_seconds / 5), 2)))
    wall0 = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="ssb-chaos-"))
    log(f"seed {seed}; logs in {work}; operator env {env}")
    fails: list[str] = []
    cells: dict[str, str] = {"kills": "0", "converge": "not measured", "leaked": "not measured",
                             "lost": "not measured", "restore": "not checked"}
    notes: list[str] = []
    cluster = None
    ops: Operators | None = None
    workers: list[Worker] = []
    try:
        cluster = devcluster.temp_cluster()
        kube = Kube(cluster)
        install(kube)
        with running_emulator(EmulatorState(admin_tokens={ADMIN_TOKEN})) as emulator:
            try:
                grant_secret_read(kube, SLURM_NS)
            except ApiException as exc:  # the shipped manifests may hold it already
                if exc.status != 409:
                    raise
            create_token_secret(kube, SLURM_NS)
            make_scheduler(kube, SLURM_NS, name=SCHEDULER_NAME, scope_namespaces=[ADMIN_PRE],
                           extra_conf="adminCounter: 0\n")
            runner = new_runner(emulator, copy.deepcopy(PRE_POLICY))
            for i in range(5):
                kube.create_namespace(f"cx-pre-{i}")
            kubeconfig = cluster.service_account_kubeconfig(OPERATOR_NS, OPERATOR_SA, work / "operator.kubeconfig")
            ops = Operators(kubeconfig, work, env)
            ops.start()
            spec = binding_spec(runner, emulator, mode="Enforce", deletionPolicy="Restore", partition=PARTITIONS[0],
                                sandboxNamespaces={"names": [GLOB], "selector": {"matchLabels": dict([LABEL])}},
                                scope={"alwaysInclude": [SLURM_NS], "grantClusterRole": GRANT_ROLE})
            kube.create_binding(SLURM_NS, BINDING, spec)
            t = time.monotonic()
            wait_for(lambda: synced(kube), 120, lambda: json.dumps(kube.binding(SLURM_NS, BINDING).get("status")))
            log(f"binding synced in {time.monotonic() - t:.1f}s; starting the workload and the kills")

            names_w = Namespaces(kube, rng.randrange(1 << 30))
            spec_w = SpecEdits(kube, rng.randrange(1 << 30))
            admin_w = Admin(kube, emulator, runner, rng.randrange(1 << 30))
            workers = [names_w, spec_w, admin_w]
            for w in workers:
                w.start()

            never_led = 0
            lead_waits: list[float] = []
            last_kill = time.monotonic()
            for k in range(args.kills):
                t = time.monotonic()
                try:
                    wait_for(lambda: leading(ops.current) or ops.current.proc.poll() is not None, 120, interval=0.05)
                    lead_waits.append(time.monotonic() - t)
                except AssertionError:
                    never_led += 1
                time.sleep(rng.uniform(args.min_gap, args.max_gap))
                ops.kill()
                last_kill = time.monotonic()
                ops.start()
                cells["kills"] = str(k + 1)
                if (k + 1) % 10 == 0:
                    log(f"{k + 1} kills")
            for w in workers:
                w.halt.set()
            for w in workers:
                w.join(30)
            log(f"workload stopped: {names_w.actions} namespace actions, {spec_w.edits} spec edits, "
                f"{admin_w.i} admin rounds; waiting for convergence")
            if lead_waits:
                notes.append(f"restart -> leading: median {sorted(lead_waits)[len(lead_waits) // 2]:.1f}s, "
                             f"max {max(lead_waits):.1f}s; never led before the kill: {never_led}")

            admin_entries = {ADMIN_PRE, *admin_w.entries}
            partition = spec_w.partition

            def expected() -> set[str]:
                return belonging(kube) | {SLURM_NS} | admin_entries

            def converged() -> bool:
                return (set(listed(kube)) == expected() and synced(kube)
                        and policy_ours(policy_of(emulator, runner), partition))
            try:
                wait_for(converged, args.converge_timeout, interval=0.2)
                cells["converge"] = f"{time.monotonic() - last_kill:.1f}s"
            except AssertionError:
                cells["converge"] = f"not within {args.converge_timeout:g}s"
                cur, want = set(listed(kube)), expected()
                fails.append(f"no convergence: list has {len(cur)}, extra {sorted(cur - want)[:10]}, missing "
                             f"{sorted(want - cur)[:10]}; synced={synced(kube)}; policy ours="
                             f"{policy_ours(policy_of(emulator, runner), partition)}")

            # Leaks and the ledger.
            cur = set(listed(kube))
            ours_wanted = belonging(kube) | {SLURM_NS}
            leaked = cur - ours_wanted - admin_entries
            cells["leaked"] = str(len(leaked))
            if leaked:
                fails.append(f"leaked entries (in the list, neither wanted nor an admin's): {sorted(leaked)[:20]}")
            entry = ledger_entry(kube)
            if entry is None:
                fails.append("no ledger entry for the binding")
            else:
                added, pre = set(entry.added), set(entry.preexisting or ())
                bad_added = {a for a in added if a in cur and a not in ours_wanted}
                admins_claimed = added & admin_entries
                unrecorded = (ours_wanted & cur) - added - pre
                pre_ours = pre - admin_entries
                for what, items in (("the ledger says we added these, still listed, not wanted", bad_added),
                                    ("the ledger claims an admin's entry as ours (Restore would remove it)",
                                     admins_claimed),
                                    ("ours in the list but not in the ledger (Restore would leave it)", unrecorded),
                                    ("ledger `preexisting` holds entries that were not there before us", pre_ours)):
                    if items:
                        fails.append(f"{what}: {sorted(items)[:20]}")
                notes.append(f"ledger: {len(added)} added, preexisting {sorted(pre)}")

            # Admin edits.
            lost = []
            pol = policy_of(emulator, runner)
            if (pol.get("limits") or {}).get("adminCounter") != admin_w.policy_value:
                lost.append(f"policy limits.adminCounter={pol.get('limits', {}).get('adminCounter')} "
                            f"(admin's last {admin_w.policy_value})")
            m = re.search(r"(?m)^adminCounter: (\S+)$", conf_text(kube))
            if not m or m.group(1) != str(admin_w.conf_value):
                lost.append(f"scheduler.conf adminCounter={m.group(1) if m else None} (admin's last "
                            f"{admin_w.conf_value})")
            lost += [f"list entry {e}" for e in sorted(admin_entries - cur)]
            if pol.get("constraints") != PRE_POLICY["constraints"] or (pol.get("limits") or {}).get(
                    "maxSandboxes") != 40:
                lost.append("other policy keys changed")
            cells["lost"] = str(len(lost))
            if lost:
                fails.append(f"lost admin edits: {lost}")

            # RoleBindings follow the list (existing, non-terminating namespaces).
            live = live_namespaces(kube)
            want_rbs = {n for n in cur if n in live}
            try:
                wait_for(lambda: rolebindings(kube) == want_rbs, 30)
            except AssertionError:
                have = rolebindings(kube)
                fails.append(f"RoleBindings: extra {sorted(have - want_rbs)[:10]}, missing "
                             f"{sorted(want_rbs - have)[:10]}")
            from sunk_sandbox_operator.adapters.ownership import KEY as RECORD_KEY, name_for
            from sunk_sandbox_operator.core.policy.ownership import from_json
            try:
                rec = from_json(kube.core.read_namespaced_config_map(name_for(REF), OPERATOR_NS).data[RECORD_KEY])
                owned = {o.path: o.value for o in rec.owned}
                if rec.state != "applied" or owned.get(PARTITION_PATH) != partition:
                    fails.append(f"ownership record {rec.state}, partition value {owned.get(PARTITION_PATH)!r} "
                                 f"(the policy holds {partition!r})")
            except ApiException as exc:
                fails.append(f"ownership record unreadable: {exc.status}")

            # Restore.
            before_delete = admin_entries | {SLURM_NS}
            kube.custom.delete_namespaced_custom_object("sunksandbox.dev", "v1alpha1", SLURM_NS,
                                                        "sunksandboxbindings", BINDING)
            problems = []
            try:
                wait_for(lambda: binding_gone(kube, SLURM_NS, BINDING), 120)
            except AssertionError:
                problems.append("the binding was not released in 120s")
            want_policy = copy.deepcopy(PRE_POLICY)
            want_policy["limits"]["adminCounter"] = admin_w.policy_value
            got_policy = policy_of(emulator, runner)
            if got_policy != want_policy:
                from sunk_sandbox_operator.core.policy.merge import diff
                problems.append(f"policy differs from before the binding (+ the admin's edits): "
                                f"{diff(want_policy, got_policy)}")
            if set(listed(kube)) != before_delete:
                problems.append(f"list after Restore: extra {sorted(set(listed(kube)) - before_delete)[:20]}, "
                                f"missing {sorted(before_delete - set(listed(kube)))[:20]}")
            if rolebindings(kube):
                problems.append(f"RoleBindings left in {sorted(rolebindings(kube))[:10]}")
            if record_configmaps(kube):
                problems.append(f"ownership record left: {record_configmaps(kube)}")
            if ledger_entry(kube) is not None:
                problems.append("ledger entry left")
            cells["restore"] = "yes" if not problems else "no"
            fails += [f"restore: {p}" for p in problems]

            for w in workers:
                if w.errors:
                    notes.append(f"{w.name} workload: {len(w.errors)} errors, e.g. {w.errors[0]}")
            notes.append(f"workload: {names_w.actions} namespace actions, {spec_w.edits} partition toggles, "
                         f"{admin_w.i} admin rounds ({len(admin_w.entries)} list entries)")
            if ops.self_exits:
                fails.append(f"operator processes that exited on their own before the kill: {ops.self_exits[:10]}")
            if ops.start_failures:
                fails.append(f"operator start failures: {ops.start_failures}")
            notes.append(f"tracebacks in operator logs: {ops.tracebacks()}")
    except Exception as exc:  # noqa: BLE001 - the table says what was measured
        traceback.print_exc()
        fails.append(f"run aborted: {type(exc).__name__}: {str(exc)[:300]}")
    finally:
        for w in workers:
            w.halt.set()
        if ops is not None:
            ops.stop()
        if cluster is not None:
            cluster.stop()

    wall = time.monotonic() - wall0
    print()
    print(f"chaos: seed {seed}, kills {args.min_gap:g}-{args.max_gap:g} s after leading, lease "
          f"{args.lease_seconds:g}s, logs {work}")
    print()
    print("| kills | convergence after last kill | leaked entries | lost admin edits | restore exact | wall time |")
    print("|---|---|---|---|---|---|")
    print(f"| {cells['kills']} | {cells['converge']} | {cells['leaked']} | {cells['lost']} | {cells['restore']} | "
          f"{wall:.0f}s |")
    print()
    for n in notes:
        print(f"  {n}")
    for f in fails:
        print(f"FAIL {f}")
    if not fails:
        print("no FAIL")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
