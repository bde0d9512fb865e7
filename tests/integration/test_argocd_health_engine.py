"""The shipped health check run by Argo CD's own engine, not a stand-in.

`argocd-health` (hack/argocd/main.go, built from the Go module proxy by `make argocd-health`,
cached like helm) is the call path of `argocd admin settings resource-overrides health`: argocd-cm
parsed by Argo CD's SettingsManager, then gitops-engine's GetResourceHealth with util/lua's
overrides, i.e. the gopher-lua state, library set (base, table, package, a safe os; no string) and
timeout the application controller uses. argocd-cm here is what a user gets: a minimal Argo CD
argocd-cm with the manifests/argocd Component applied by `kubectl kustomize`, so the key name, the
Group_Kind spelling and the file content are all checked on the way.

The sample bindings are tests/unit/test_argocd_health.py's (which runs the script on lupa): every
sample there gets the same answer here, and the three states Argo CD shows are pinned.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.unit.test_argocd_health import ARGOCD_KEY, HEALTH_LUA, binding, condition, full_status, run_health

pytestmark = [pytest.mark.integration, pytest.mark.needs_tool("argocd-health")]

ROOT = Path(__file__).resolve().parents[2]
COMPONENT = ROOT / "manifests" / "argocd"

# argocd-cm as Argo CD's install manifest ships it (the Component merges into it).
ARGOCD_CM = {
    "apiVersion": "v1", "kind": "ConfigMap",
    "metadata": {"name": "argocd-cm", "namespace": "argocd",
                 "labels": {"app.kubernetes.io/name": "argocd-cm", "app.kubernetes.io/part-of": "argocd"}},
}


@pytest.fixture(scope="module")
def engine() -> Path:
    from sunk_sandbox_devtools import devcluster

    return devcluster.ensure_argocd_health()


@pytest.fixture(scope="module")
def argocd_cm(tmp_path_factory) -> Path:
    from sunk_sandbox_devtools import devcluster

    work = tmp_path_factory.mktemp("argocd-cm")
    (work / "argocd-cm.yaml").write_text(yaml.safe_dump(ARGOCD_CM))
    (work / "kustomization.yaml").write_text(yaml.safe_dump({
        "resources": ["argocd-cm.yaml"],
        "components": [os.path.relpath(COMPONENT, work)],  # kustomize wants a relative path
    }))
    kubectl = devcluster.ensure_binaries() / "kubectl"
    rendered = subprocess.run([str(kubectl), "kustomize", str(work), "--load-restrictor", "LoadRestrictionsNone"],
                              capture_output=True, text=True, timeout=60)
    assert rendered.returncode == 0, rendered.stderr
    cm = yaml.safe_load(rendered.stdout)
    assert cm["data"][ARGOCD_KEY] == HEALTH_LUA.read_text(), "the Component ships health.lua verbatim"
    path = work / "rendered-argocd-cm.yaml"
    path.write_text(rendered.stdout)
    return path


def assess(engine: Path, argocd_cm: Path, tmp_path: Path, objects: list[dict]) -> list[dict]:
    """Argo CD's verdict on each object (one process for all of them)."""
    paths = []
    for i, obj in enumerate(objects):
        paths.append(tmp_path / f"obj-{i}.yaml")
        paths[-1].write_text(yaml.safe_dump(obj))
    done = subprocess.run([str(engine), "--argocd-cm-path", str(argocd_cm), *map(str, paths)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    results = [json.loads(line) for line in done.stdout.splitlines()]
    assert [r["resource"] for r in results] == list(map(str, paths))
    for r in results:
        assert "error" not in r, f"the script failed in Argo CD: {r['error']}"
        assert r.get("configured", True), "Argo CD found no health check for the binding (key or GroupKind wrong?)"
    return [{"status": r["status"], "message": r["message"]} for r in results]


READY = condition("Ready", "True", "AllSynced", "sandboxes of runner-7f3a go to slurm-scheduler")


def test_healthy_progressing_degraded_as_argocd_shows_them(engine, argocd_cm, tmp_path):
    stale = condition("Ready", "True", "AllSynced", "fine", generation=2)
    unknown = condition("Ready", "Unknown", "Reconciling", "waiting for the scheduler to be found")
    failed = condition("Ready", "False", "RunnerConflict",
                       "binding other/ssb already manages runner runner-7f3a: delete one")
    assert assess(engine, argocd_cm, tmp_path, [
        binding(3, full_status(READY)),
        binding(1, None),
        binding(3, full_status(stale, observed=2)),
        binding(3, full_status(unknown)),
        binding(3, full_status(failed)),
    ]) == [
        {"status": "Healthy", "message": "AllSynced: sandboxes of runner-7f3a go to slurm-scheduler"},
        {"status": "Progressing", "message": "Waiting for the operator to report status"},
        {"status": "Progressing",
         "message": "Waiting for the operator to observe generation 3 (status is for generation 2)"},
        {"status": "Progressing", "message": "Reconciling: waiting for the scheduler to be found"},
        {"status": "Degraded", "message": "RunnerConflict: binding other/ssb already manages runner runner-7f3a: "
                                          "delete one"},
    ]


def samples() -> list[dict]:
    """The unit tests' sample bindings, and a few more shapes a live object takes."""
    out = [binding(1, None), binding(1, {}), binding(3, {"observedGeneration": 3, "conditions": []}),
           binding(3, {"observedGeneration": 3,
                       "conditions": [condition("SchedulerReady", "True", "SchedulerFound", "ok")]})]
    for ready in (READY, condition("Ready", "False", "SchedulerNotFound", ""),
                  condition("Ready", "False", "PolicyRejected", "runner API refused the policy"),
                  condition("Ready", "Unknown", "Reconciling", ""),
                  condition("Ready", "True", "", "", generation=None)):
        for generation, observed in ((3, 3), (3, 2), (3, None), (2, 3)):
            obj = binding(generation, full_status(ready, observed=observed))
            out.append(obj)
    no_generation = binding(3, full_status(READY))
    del no_generation["metadata"]["generation"]
    out.append(no_generation)
    return out


def test_argocd_agrees_with_the_lupa_tests_on_every_sample(engine, argocd_cm, tmp_path):
    """The unit tests run the script on lupa (Lua 5.1 with every library): Argo CD's gopher-lua with
    its own library set and number handling gives the same answer, so those tests stay meaningful."""
    objects = samples()
    assert assess(engine, argocd_cm, tmp_path, objects) == [run_health(obj) for obj in objects]


def test_a_paused_binding_is_suspended_as_argocd_shows_it(engine, argocd_cm, tmp_path):
    """Argo CD's own engine (gopher-lua, its library set) reads the annotation and the Paused reason."""
    from tests.unit.test_argocd_health import PAUSED_READY, paused

    resumed = binding(3, full_status(PAUSED_READY))
    objects = [paused(binding(3, full_status(PAUSED_READY))), paused(binding(3, None)), resumed,
               paused(binding(3, full_status(READY)), "false")]
    assert assess(engine, argocd_cm, tmp_path, objects) == [
        {"status": "Suspended", "message": 'Paused: paused by the annotation sunksandbox.dev/paused="true"'},
        {"status": "Suspended",
         "message": "Paused by the sunksandbox.dev/paused annotation; waiting for the operator to acknowledge"},
        {"status": "Progressing",
         "message": "Resuming: the pause annotation was removed; waiting for the operator to reconcile"},
        {"status": "Healthy", "message": "AllSynced: sandboxes of runner-7f3a go to slurm-scheduler"},
    ]


def test_a_binding_being_deleted_is_progressing_before_the_script_runs(engine, argocd_cm, tmp_path):
    """gitops-engine answers for any object with a deletionTimestamp ("Pending deletion") and never
    calls the script: health.lua's own deletion branch is for other engines (and lupa's tests)."""
    obj = binding(3, full_status(READY))
    obj["metadata"]["deletionTimestamp"] = "2025-01-01T00:00:00Z"
    assert assess(engine, argocd_cm, tmp_path, [obj]) == [{"status": "Progressing", "message": "Pending deletion"}]


def test_without_the_component_argocd_has_no_check_for_bindings(engine, tmp_path):
    """The control: Argo CD ships no built-in check for this kind, so the verdicts above are the script's."""
    bare = tmp_path / "argocd-cm.yaml"
    bare.write_text(yaml.safe_dump(ARGOCD_CM))
    path = tmp_path / "obj.yaml"
    path.write_text(yaml.safe_dump(binding(3, full_status(READY))))
    done = subprocess.run([str(engine), "--argocd-cm-path", str(bare), str(path)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"resource": str(path), "configured": False}
