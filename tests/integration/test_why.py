"""`kubectl ssb why` as the on-call runs it: the plugin's console scripts, the admin's kubeconfig, against
the real control plane, the runner API emulator and the real Slurm (slurmrestd, JWT). Each broken link
is met once and named, with its fix; a healthy pod is "placeable". Most set-ups have no operator acting
on them (their bindings are in Observe mode, or no operator runs): `why` reads only what the cluster
records. The operator runs where its own facts are the point: the list it wrote and the roll it made
(or folded). There is no kubelet or controller-manager: the tests play the runner (sandbox pods), the
ReplicaSet (a new scheduler pod from the rolled template) and the SUNK scheduler (placeholder jobs)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import tomllib
import uuid
from pathlib import Path

import pytest
import yaml

from sunk_sandbox_operator.core.slurm.facts import job_state, number  # each Slurm's shape of these fields
from tests.conftest import SECRET_VALUES, wait_for
from tests.integration.conftest import (calls, create_token_secret, grant_operator, make_scheduler, new_runner,
                                        set_pod_ready, writes)

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
ALLOW = ["--allowed-api-url", "http://127.0.0.1:*", "--allowed-slurm-url", "http://127.0.0.1:*"]
SCHED, PARTITION = "slurm-scheduler", "sandboxes"
ROUTED = {"base": {"spec": {"schedulerName": SCHED},
                   "metadata": {"annotations": {"sunk.coreweave.com/partition": PARTITION}}}}
SCHED_LABELS = {"app.kubernetes.io/name": "sunk-scheduler"}


def uniq(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


@pytest.fixture(scope="module")
def bindir(tmp_path_factory) -> Path:
    """The console scripts pyproject.toml declares, as pip writes them, running this tree's code (the
    shared venv's own scripts are those of the tree it was installed from)."""
    d = tmp_path_factory.mktemp("bin")
    for name, ref in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"].items():
        module, func = ref.split(":")
        (d / name).write_text(f"#!{sys.executable}\nimport sys\nsys.path.insert(0, {str(ROOT / 'operator')!r})\n"
                              f"from {module} import {func}\nsys.exit({func}())\n")
        (d / name).chmod(0o755)
    return d


def run(kube, bindir: Path, *args: str, allow: bool = True) -> subprocess.CompletedProcess[str]:
    """`kubectl ssb ARGS` as a user runs it: KUBECONFIG, nothing of the test process's settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SSB_") and k != "KUBERNETES_SERVICE_HOST"}
    env.update(KUBECONFIG=str(kube.cluster.kubeconfig), PATH=f"{bindir}:{env.get('PATH', '')}")
    started = time.monotonic()
    out = subprocess.run([str(bindir / "kubectl-ssb"), *args, *(ALLOW if allow else [])], env=env,
                         capture_output=True, text=True, timeout=120)
    print(f"$ kubectl ssb {' '.join(args)} (exit {out.returncode}, {time.monotonic() - started:.2f} s)\n"
          f"{out.stdout}{out.stderr}")
    return out


def why(kube, bindir: Path, *args: str) -> tuple[int, dict]:
    out = run(kube, bindir, "why", *args, "-o", "json")
    assert out.returncode in (0, 1), out.stderr
    return out.returncode, json.loads(out.stdout)


def broken(doc: dict) -> dict:
    link = next(x for x in doc["links"] if x["id"] == doc["brokenLink"])
    assert doc["placeable"] is False and doc["verdict"].startswith(f"not placeable: {link['name']} — fix: ")
    return link


class World:
    """A Slurm namespace (the scheduler, its list, the runner token), a sandbox namespace and a binding."""

    def __init__(self, kube, emulator, ns: str, *, listed: bool = True, permitted: bool = True, mode: str = "Observe",
                 policy: dict | None = None, slurm=None, **spec) -> None:
        self.kube, self.ns, self.sbx = kube, ns, uniq("why")
        kube.create_namespace(self.sbx)
        grant_operator(kube, ns)
        create_token_secret(kube, ns)
        make_scheduler(kube, ns, scope_namespaces=[ns, self.sbx] if listed else [ns], permitted=permitted)
        self.runner = new_runner(emulator, ROUTED if policy is None else policy)
        body = {"runner": {"id": self.runner, "apiURL": emulator.url, "tokenSecretRef": {"name": "coreweave-api"}},
                "partition": PARTITION, "sandboxNamespaces": {"names": [self.sbx]}, "mode": mode, **spec}
        if slurm is not None:
            token = slurm.token()
            SECRET_VALUES.append(token)
            kube.core.create_namespaced_secret(ns, {"metadata": {"name": "slurm-jwt"}, "stringData": {"token": token}})
            body["slurm"] = {"restAPI": {"url": slurm.url, "user": slurm.api_user, "tokenSecretRef": {"name": "slurm-jwt"}}}
        kube.create_binding(ns, "b", body)

    def pod(self, name: str = "sbx-1", *, scheduler: str = SCHED, grace: int = 30, ns: str | None = None) -> str:
        """A sandbox pod as the runner creates it under the policy."""
        self.kube.core.create_namespaced_pod(ns or self.sbx, {
            "metadata": {"name": name, "labels": {"sandbox.coreweave.com/sandbox-id": uuid.uuid4().hex[:8]},
                         "annotations": {"sunk.coreweave.com/partition": PARTITION}},
            "spec": {"schedulerName": scheduler, "terminationGracePeriodSeconds": grace, "containers": [
                {"name": "sandbox", "image": "sandbox", "resources": {"requests": {"cpu": "500m", "memory": "512Mi"},
                                                                      "limits": {"cpu": "1", "memory": "1Gi"}}}]}})
        return f"{ns or self.sbx}/{name}"

    def roll_out(self) -> None:
        """The ReplicaSet's part after a roll: the old scheduler pod goes, one from the new template comes, Ready."""
        dep = self.kube.apps.read_namespaced_deployment("slurm-scheduler", self.ns)
        template = self.kube.api.sanitize_for_serialization(dep.spec.template)
        for p in self.kube.core.list_namespaced_pod(self.ns, label_selector="app.kubernetes.io/name=sunk-scheduler").items:
            self.kube.core.delete_namespaced_pod(p.metadata.name, self.ns, grace_period_seconds=0)
        name = uniq("slurm-scheduler")
        self.kube.core.create_namespaced_pod(self.ns, {"metadata": {**template["metadata"], "name": name},
                                                       "spec": template["spec"]})
        set_pod_ready(self.kube, self.ns, name, True)


def listed(kube, ns: str) -> str:
    return kube.core.read_namespaced_config_map("slurm-scheduler-config", ns).data["scheduler.conf"]


def hash_of(kube, ns: str) -> str | None:
    dep = kube.apps.read_namespaced_deployment("slurm-scheduler", ns)
    return (dep.spec.template.metadata.annotations or {}).get("sunksandbox.dev/scope-hash")


def snapshot(kube, *namespaces: str) -> dict:
    """Every object's resourceVersion in these namespaces (and the events there): what a write would change.
    A binding's generation (its status is the running operator's to write)."""
    out = {}
    for ns in namespaces:
        for kind, items in (("cm", kube.core.list_namespaced_config_map(ns).items),
                            ("pod", kube.core.list_namespaced_pod(ns).items),
                            ("secret", kube.core.list_namespaced_secret(ns).items),
                            ("event", kube.core.list_namespaced_event(ns).items),
                            ("deploy", kube.apps.list_namespaced_deployment(ns).items),
                            ("rb", kube.rbac.list_namespaced_role_binding(ns).items)):
            out.update({(kind, ns, o.metadata.name): o.metadata.resource_version for o in items})
        for b in kube.custom.list_namespaced_custom_object("sunksandbox.dev", "v1alpha1", ns, "sunksandboxbindings")["items"]:
            out[("ssb", ns, b["metadata"]["name"])] = b["metadata"]["generation"]
    return out


# ---------------------------------------------------------------- no operator acting: what the cluster records


def test_an_unlisted_namespace_and_one_no_binding_matches(installed, emulator, ns, bindir) -> None:
    w = World(installed, emulator, ns, listed=False)
    code, doc = why(installed, bindir, "pod", w.pod())
    link = broken(doc)
    assert code == 1 and link["id"] == "listed" and f"does not list {w.sbx}" in link["detail"]
    assert "Observe mode" in link["fix"]
    stray = uniq("why-stray")
    installed.create_namespace(stray)
    code, doc = why(installed, bindir, "pod", w.pod(ns=stray))
    link = broken(doc)
    assert code == 1 and link["id"] == "binding" and f"matches namespace {stray}" in link["detail"]
    assert [x["ok"] for x in doc["links"][1:]] == [None] * (len(doc["links"]) - 1)


def test_rbac_missing_for_the_schedulers_service_account(installed, emulator, ns, bindir) -> None:
    w = World(installed, emulator, ns, permitted=False)
    code, doc = why(installed, bindir, "namespace", w.sbx)
    link = broken(doc)
    assert code == 1 and link["id"] == "rbac"
    assert f"ServiceAccount {ns}/slurm-scheduler may not watch pods and create pods/binding in {w.sbx}" in link["detail"]
    assert "spec.scope.grantClusterRole" in link["fix"]


def test_a_pod_with_another_scheduler(installed, emulator, ns, bindir) -> None:
    w = World(installed, emulator, ns)
    pod = w.pod(scheduler="default-scheduler")
    before = snapshot(installed, ns, w.sbx)
    text = run(installed, bindir, "why", "pod", pod)
    lines = text.stdout.splitlines()
    assert text.returncode == 1 and lines[-1].startswith("not placeable: the pod carries the policy — fix: ")
    assert "✗ the pod carries the policy: spec.schedulerName is 'default-scheduler', expected 'slurm-scheduler' — fix:" \
        in text.stdout and sum(line.startswith("✗") for line in lines) == 1
    assert snapshot(installed, ns, w.sbx) == before  # nothing written
    code, doc = why(installed, bindir, "pod", pod)
    link = broken(doc)
    assert code == 1 and link["id"] == "pod"
    assert link["detail"] == "spec.schedulerName is 'default-scheduler', expected 'slurm-scheduler'"
    assert next(x for x in doc["links"] if x["id"] == "policy")["ok"] is True  # the policy is right: the pod is not
    assert "start a new one" in link["fix"]


def test_a_grace_too_long_for_kill_wait(installed, emulator, ns, bindir) -> None:
    w = World(installed, emulator, ns)
    code, doc = why(installed, bindir, "pod", w.pod(grace=300))
    link = broken(doc)
    assert code == 1 and link["id"] == "grace" and "terminationGracePeriodSeconds is 300 s; kill-wait is 60 s" in \
        link["detail"]
    assert "at least 306 (330 suggested)" in link["detail"] and "KillWait" in link["fix"]


def test_a_job_pending_for_a_persistent_reason(installed, emulator, slurm, ns, bindir) -> None:
    w = World(installed, emulator, ns, slurm=slurm)
    pod = w.pod()
    held = slurm.submit(pod, partition=PARTITION, hold=True)
    code, doc = why(installed, bindir, "pod", pod)  # the operator's 60 s: not persistent yet
    job = next(x for x in doc["links"] if x["id"] == "job")
    assert code == 0 and job["ok"] is None and job.get("unknown") and "JobHeldUser" in job["detail"]
    assert doc["verdict"].startswith("no broken link found, but not told: its placeholder job in Slurm")
    wait_for(lambda: time.time() - (number(slurm.job(held)["submit_time"]) or 0) >= 2, 10, lambda: "two seconds of pending")
    code, doc = why(installed, bindir, "pod", pod, "--pending-seconds", "2")
    link = broken(doc)
    assert code == 1 and link["id"] == "job" and f"job {held} ({pod}) PENDING for JobHeldUser" in link["detail"]
    assert link["fix"] == f"the job is held: `scontrol release {held}`"


def test_a_job_missing(installed, emulator, slurm, ns, bindir) -> None:
    w = World(installed, emulator, ns, slurm=slurm)
    pod = w.pod()
    code, doc = why(installed, bindir, "pod", pod, "--pending-seconds", "0")
    link = broken(doc)
    assert code == 1 and link["id"] == "job" and f"job names tried: {pod}" in link["detail"]
    assert "jobNameTemplates" in link["fix"]


# ---------------------------------------------------------------- the operator's own facts: the list it wrote, the roll it made
# (last: the tests above run with no operator process at all when this module runs alone)


def test_a_healthy_pod_is_placeable_with_the_list_the_operator_wrote_and_the_roll_it_made(
        installed, operator, emulator, slurm, ns, bindir) -> None:
    w = World(installed, emulator, ns, listed=False, mode="Enforce", policy={}, slurm=slurm,
              scope={"minRollInterval": "0s"})
    installed.wait_condition(ns, "b", "PolicySynced", "True", timeout=60)
    installed.wait_condition(ns, "b", "ScopeSynced", "True", timeout=60)
    wait_for(lambda: hash_of(installed, ns), 30, lambda: "the operator's roll")
    w.roll_out()
    pod = w.pod()
    job = slurm.submit(pod, partition=PARTITION)
    wait_for(lambda: job_state(slurm.job(job)["job_state"]) == "RUNNING", 30,
             lambda: f"job {job}: {slurm.job(job)['job_state']}")
    before, updates = snapshot(installed, ns, w.sbx), len(writes(emulator, w.runner))
    text = run(installed, bindir, "why", "pod", pod)
    assert text.returncode == 0, text.stdout + text.stderr
    lines = text.stdout.splitlines()
    assert lines[0] == f"kubectl ssb why: pod {pod} (binding {ns}/b)" and lines[-1] == "placeable"
    assert all(line.startswith("✓") for line in lines[1:-1]) and len(lines) == 11, text.stdout
    assert f"added by the operator for {ns}/b" in text.stdout and "Ready scheduler pod(s) run it" in text.stdout
    assert f"job {job} ({pod}) RUNNING" in text.stdout
    code, doc = why(installed, bindir, "pod", pod)
    assert code == 0 and doc["placeable"] is True and doc["brokenLink"] is None and doc["binding"] == f"{ns}/b"
    as_yaml = run(installed, bindir, "why", "namespace", w.sbx, "-o", "yaml")
    assert as_yaml.returncode == 0 and yaml.safe_load(as_yaml.stdout)["verdict"] == "placeable"
    assert snapshot(installed, ns, w.sbx) == before  # `why` wrote nothing (no event, no update)
    assert len(writes(emulator, w.runner)) == updates and calls(emulator, w.runner, "GetManagedRunner")


def test_a_scheduler_not_rolled_onto_the_list_waits_for_the_folded_roll(installed, operator, emulator, ns,
                                                                         bindir) -> None:
    w = World(installed, emulator, ns, listed=False, mode="Enforce", scope={"minRollInterval": "1h"},
              sandboxNamespaces={"names": ["why-late-*"]})
    first, late = uniq("why-late"), uniq("why-late")
    installed.wait_condition(ns, "b", "ScopeSynced", "True", timeout=60)
    installed.create_namespace(first)
    wait_for(lambda: first in listed(installed, ns) and hash_of(installed, ns), 30, lambda: "the first list and roll")
    w.roll_out()  # the first change rolled at once
    installed.create_namespace(late)  # listed at once, its roll folded into the interval's end
    scope = lambda: installed.binding(ns, "b").get("status", {}).get("scope") or {}  # noqa: E731
    wait_for(lambda: late in listed(installed, ns) and scope().get("nextRollTime"), 30, lambda: f"scope: {scope()}")
    code, doc = why(installed, bindir, "pod", w.pod(ns=late))
    link = broken(doc)
    assert code == 1 and link["id"] == "rolled" and "the running scheduler predates the list" in link["detail"]
    assert "the operator rolls it at" in link["fix"] and "minRollInterval 1h" in link["fix"]
    assert why(installed, bindir, "pod", w.pod(ns=first))[1]["brokenLink"] == "rolled"  # one list, one roll owed


# ---------------------------------------------------------------- the plugin


def test_a_pod_or_binding_not_found_is_one_line_and_exit_1(installed, ns, bindir) -> None:
    out = run(installed, bindir, "why", "pod", f"{ns}/nope")
    assert (out.returncode, out.stdout, out.stderr) == (1, "", f"kubectl ssb why: pod {ns}/nope not found\n")
    out = run(installed, bindir, "doctor", f"{ns}/nope")
    assert (out.returncode, out.stdout, out.stderr) == (1, "", f"kubectl ssb doctor: binding {ns}/nope not found\n")


def test_kubectl_completes_the_plugin_through_kubectl_complete_ssb(installed, emulator, ns, bindir) -> None:
    """What kubectl's bash and zsh completion run: `kubectl __complete ssb …`, which calls kubectl_complete-ssb."""
    w = World(installed, emulator, ns)
    w.pod("sbx-tab")
    env = {**os.environ, "KUBECONFIG": str(installed.cluster.kubeconfig), "PATH": f"{bindir}:{os.environ['PATH']}"}

    def complete(*words: str) -> list[str]:
        out = subprocess.run([str(installed.cluster.kubectl), "__complete", "ssb", *words], env=env,
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        return out.stdout.splitlines()

    assert complete("")[:3] == ["doctor\tcheck the runbook against the cluster", "why\twhy is a sandbox pod not placed",
                                 "version\tprint the plugin's version"]
    assert complete("why", "pod", f"{w.sbx}/")[:-1] == [f"{w.sbx}/sbx-tab"]
    assert complete("why", "namespace", w.sbx[:-2])[:-1] == [w.sbx]
    assert complete("doctor", f"{ns}/")[:-1] == [f"{ns}/b"]
