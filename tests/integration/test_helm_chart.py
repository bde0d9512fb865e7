"""The Helm chart with the real helm 3 and helm 4 (hack/helm and hack/helm4, built from the Go module
proxy by `make helm helm4`); what runs `helm` runs once per major.

- `helm lint --strict`, with the defaults and with every optional part on;
- `helm template -n sunk-sandbox-operator-system` with the default values renders the objects
  `kubectl kustomize manifests/` renders but its Namespace (which `--create-namespace` stands for:
  tests/integration/test_chart_habits.py renders it with `namespace.create`); same kind, namespace,
  name and content, only Helm's own labels differ (and the CRD's `helm.sh/resource-policy`); and with
  the webhook and monitoring parts on, what the kustomize components add;
- values do what the table says (namespaces bound, tenancy settings, webhook without
  cert-manager, refusals);
- `kubeVersion`: a minor older than the oldest tested (hack/kube-oldest) is refused, a managed
  cluster's pre-release-tagged version of it is not;
- `helm install` into a control plane of its own (the session's holds the kustomize install, and
  its operator watches every namespace; an uninstalled release leaves its Namespace Terminating
  here), Helm 4 with server-side apply; a server-side apply of manifests/ over it has no conflict;
  the operator run as the installed ServiceAccount with the Deployment's environment (no kubelet
  runs the pod), the example binding Ready (with Helm 4: a release of its own, `--wait`, kstatus),
  deleted (its policy restored); `helm upgrade` (Helm 4: `--wait` until the Deployment's rollout,
  which the test reports as the deployment controller would); then `helm uninstall`: nothing the
  chart made is left but the CRD;
- the other way round: Helm 4 takes over a kustomize install (`--take-ownership`, server-side
  apply) without a conflict, and a Helm 3 release moves to server-side apply under Helm 4.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Iterator

import pytest
import yaml

from sunk_sandbox_operator import __version__
from tests.conftest import REPO, TEST_ENV, Kube, wait_for
from tests.integration.conftest import ADMIN_TOKEN, make_scheduler
from tests.integration.test_manifests_kustomize import ids, kustomize_build
from tests.unit.test_manifests import MANIFESTS, OPERATOR_NS, SA

pytestmark = [pytest.mark.integration, pytest.mark.needs_tool("helm")]

CHART = REPO / "charts" / "sunk-sandbox-operator"
RELEASE = "sunk-sandbox-operator"
# Labels Helm charts add that a kustomize install does not have.
HELM_LABELS = {"helm.sh/chart", "app.kubernetes.io/managed-by", "app.kubernetes.io/instance", "app.kubernetes.io/version"}
KUSTOMIZE_LABELS = {"app.kubernetes.io/name", "app.kubernetes.io/part-of"}  # manifests/kustomization.yaml `labels:`
# The README's install: the operator in the release's namespace, which Helm creates.
INSTALL = ["--namespace", OPERATOR_NS, "--create-namespace"]
ALL_ON = ["--set", "webhook.enabled=true", "--set", "metrics.serviceMonitor.enabled=true",
          "--set", "monitoring.prometheusRule.enabled=true", "--set", "monitoring.dashboard.enabled=true"]
# The tests that run helm run once per major; helm 4 is built after helm 3 in the background lane.
MAJORS = [pytest.param(3, id="helm3"), pytest.param(4, id="helm4", marks=pytest.mark.needs_tool("helm4"))]
DEPLOYMENT = ("sunk-sandbox-operator", OPERATOR_NS)


def helm_binary(major: int = 3) -> str:
    from sunk_sandbox_devtools import devcluster

    return str(devcluster.ensure_helm() if major == 3 else devcluster.ensure_helm4())


def helm(*args: str, kubeconfig: Path | None = None, check: bool = True, major: int = 3) -> subprocess.CompletedProcess:
    cmd = [helm_binary(major), *(["--kubeconfig", str(kubeconfig)] if kubeconfig else []), *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    if check:
        assert done.returncode == 0, f"helm {major} {' '.join(args)}: {done.stderr}"
    return done


def render(*args: str, major: int = 3) -> list[dict]:
    out = helm("template", RELEASE, str(CHART), "--namespace", OPERATOR_NS, "--skip-tests", *args, major=major).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def by_id(docs: list[dict]) -> dict[tuple, dict]:
    return {(d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"]): d for d in docs}


def without_labels(doc: dict, drop: set[str]) -> dict:
    doc = copy.deepcopy(doc)
    labels = {k: v for k, v in (doc["metadata"].get("labels") or {}).items() if k not in drop}
    doc["metadata"]["labels"] = labels
    if not labels:
        del doc["metadata"]["labels"]
    return doc


def assert_same_objects(helm_docs: list[dict], kustomize_docs: list[dict]) -> None:
    ours, theirs = by_id(helm_docs), by_id(kustomize_docs)
    assert set(ours) == set(theirs), (sorted(set(ours) - set(theirs)), sorted(set(theirs) - set(ours)))
    for key, doc in ours.items():
        for label in HELM_LABELS - {"app.kubernetes.io/instance", "app.kubernetes.io/managed-by"}:
            assert label in doc["metadata"]["labels"], (key, label)
        assert without_labels(without_keep(doc), HELM_LABELS) == without_labels(theirs[key], HELM_LABELS), key


def without_keep(doc: dict) -> dict:
    """The CRD without `helm.sh/resource-policy: keep` (crds.keep), Helm's own annotation."""
    if doc["kind"] != "CustomResourceDefinition":
        return doc
    doc = copy.deepcopy(doc)
    assert doc["metadata"].pop("annotations") == {"helm.sh/resource-policy": "keep"}
    return doc


def but_the_namespace(kustomize_docs: list[dict]) -> list[dict]:
    """manifests/ makes the operator's Namespace; the chart installs into the release's (`--create-namespace`)."""
    return [d for d in kustomize_docs if (d["kind"], d["metadata"]["name"]) != ("Namespace", OPERATOR_NS)]


def overlay(tmp_path: Path, *components: str) -> Path:
    here = tmp_path / "overlay"
    here.mkdir()
    (here / "kustomization.yaml").write_text(yaml.safe_dump({
        "resources": [os.path.relpath(MANIFESTS, here)],
        "components": [os.path.relpath(MANIFESTS / c, here) for c in components]}))
    return here


# ---------------------------------------------------------------- lint and template (no cluster)


@pytest.mark.parametrize("major", MAJORS)
@pytest.mark.parametrize("extra", [[], ALL_ON, ["--set", "webhook.enabled=true",
                                                "--set", "webhook.certManager.enabled=false",
                                                "--set", "webhook.caBundle=Y2E="]],
                         ids=["defaults", "everything on", "webhook with a provided CA"])
def test_helm_lint(extra, major):
    done = helm("lint", "--strict", str(CHART), *extra, major=major)
    assert "1 chart(s) linted, 0 chart(s) failed" in done.stdout, done.stdout


@pytest.mark.parametrize("major", MAJORS)
def test_kube_version_is_the_oldest_tested_minor(major):
    """Chart.yaml's kubeVersion admits the oldest minor tests/integration/test_oldest_kubernetes.py
    runs on and nothing older; `-0` admits the pre-release-tagged versions managed clusters report."""
    from sunk_sandbox_devtools import devcluster

    oldest = devcluster.oldest_kube_version().lstrip("v").split(".")
    older = f"v1.{int(oldest[1]) - 1}.99"
    done = helm("template", RELEASE, str(CHART), "--kube-version", older, check=False, major=major)
    assert done.returncode != 0, done.stdout[:200]
    assert f"requires kubeVersion: >={oldest[0]}.{oldest[1]}.0-0" in done.stderr, done.stderr
    for accepted in (f"v{oldest[0]}.{oldest[1]}.0", f"v{oldest[0]}.{oldest[1]}.5-eks-113cf36", "v1.37.2"):
        helm("template", RELEASE, str(CHART), "--kube-version", accepted, major=major)


@pytest.mark.parametrize("major", MAJORS)
def test_default_values_render_the_kustomize_install(major):
    docs = render(major=major)
    assert_same_objects(docs, but_the_namespace(kustomize_build(MANIFESTS)))
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == \
        f"ghcr.io/sunksandbox/sunk-sandbox-operator:{__version__}"
    (crd,) = [d for d in docs if d["kind"] == "CustomResourceDefinition"]
    assert without_labels(without_keep(crd), HELM_LABELS | KUSTOMIZE_LABELS) == \
        yaml.safe_load((REPO / "crds" / "sunksandboxbindings.yaml").read_text())


def test_the_optional_parts_render_the_kustomize_components(tmp_path):
    assert_same_objects(render(*ALL_ON), but_the_namespace(kustomize_build(overlay(tmp_path, "webhook", "monitoring"))))


def container(docs: list[dict]) -> dict:
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    return deployment["spec"]["template"]["spec"]["containers"][0]


def env(docs: list[dict]) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in container(docs)["env"]}


def test_slurm_namespaces_get_both_role_bindings_and_only_they():
    docs = by_id(render("--set", "slurmNamespaces={slurm-a,slurm-b}"))
    bindings = {(ns, name) for kind, ns, name in docs if kind == "RoleBinding" and name != SA}
    assert bindings == {(ns, name) for ns in ("slurm-a", "slurm-b")
                        for name in ("sunk-sandbox-operator-secrets", "sunk-sandbox-operator-targets")}
    for (kind, ns, name), doc in docs.items():
        if kind == "RoleBinding" and name != SA:
            assert doc["roleRef"]["name"] in {"sunk-sandbox-operator-secret-reader", "sunk-sandbox-operator-targets"}
            assert doc["subjects"] == [{"kind": "ServiceAccount", "name": SA, "namespace": OPERATOR_NS}]
    assert not [k for k in docs if k[0] == "ClusterRoleBinding" and k[2] != "sunk-sandbox-operator"]


def test_tenancy_and_leader_election_values_reach_the_operator_environment():
    docs = render("--set", "tenancy.allowedApiUrls={https://api.coreweave.com,http://127.0.0.1:*}",
                  "--set", "tenancy.allowedReach.tenant-slurm={argocd,slurm-*}",
                  "--set", "tenancy.allowedReach.team-*={shared}",
                  "--set", "tenancy.grantRoles={sunk-scheduler-sandbox,my-scheduler-role}",
                  "--set", "tenancy.sandboxNamespaceSelector=sunk.coreweave.com/sandbox=true",
                  "--set", "tenancy.minResyncInterval=1m", "--set", "tenancy.allowMatchAll=true",
                  "--set", "leaderElection.leaseDurationSeconds=30", "--set", "logFormat=plain",
                  "--set", "verbose=true", "--set", "image.tag=dev")
    got = env(docs)
    assert got["SSB_ALLOWED_API_URLS"] == "https://api.coreweave.com,http://127.0.0.1:*"
    assert got["SSB_ALLOWED_REACH"] == "team-*=shared;tenant-slurm=argocd,slurm-*"
    assert got["SSB_ALLOWED_GRANT_ROLES"] == "sunk-scheduler-sandbox,my-scheduler-role"
    assert got["SSB_SANDBOX_NAMESPACE_SELECTOR"] == "sunk.coreweave.com/sandbox=true"
    assert got["SSB_MIN_RESYNC_INTERVAL"] == "1m" and got["SSB_ALLOW_MATCH_ALL"] == "true"
    assert got["SSB_LEASE_DURATION_SECONDS"] == "30"
    assert "SSB_RENEW_DEADLINE_SECONDS" not in got  # unset: the operator's default
    assert {"--log-format=plain", "--verbose"} <= set(container(docs)["args"])
    assert container(docs)["image"].endswith(":dev")
    (role,) = [d for d in docs if d["kind"] == "ClusterRole" and d["metadata"]["name"] == "sunk-sandbox-operator"]
    (bind,) = [r for r in role["rules"] if r["verbs"] == ["bind", "get"]]
    assert bind["resourceNames"] == ["sunk-scheduler-sandbox", "my-scheduler-role"]


def test_the_settings_the_operator_parses_are_accepted_by_it():
    """What the chart renders into the environment is what `run` reads (a bad value fails at start)."""
    from sunk_sandbox_operator.controller import config

    got = env(render("--set", "tenancy.allowedReach.tenant-slurm={argocd}",
                     "--set", "tenancy.grantRoles={a,b}", "--set", "leaderElection.retryPeriodSeconds=3",
                     "--set", "tenancy.sandboxNamespaceSelector=sunk.coreweave.com/sandbox=true",
                     "--set", "tenancy.minResyncInterval=1m", "--set", "tenancy.allowMatchAll=true"))
    saved = dict(os.environ)
    try:
        os.environ.update({k: v for k, v in got.items() if v is not None})
        loaded = config.load()
    finally:
        os.environ.clear()
        os.environ.update(saved)
    assert loaded.allowed_reach == {"tenant-slurm": ("argocd",)}
    assert loaded.allowed_grant_roles == ("a", "b") and loaded.retry_period_seconds == 3.0
    assert loaded.sandbox_namespace_selector == "sunk.coreweave.com/sandbox=true"
    assert loaded.min_resync_seconds == 60.0 and loaded.allow_match_all is True
    loaded.tenancy()  # the selector parses


def test_webhook_with_a_provided_ca_bundle_needs_no_cert_manager():
    docs = by_id(render("--set", "webhook.enabled=true", "--set", "webhook.certManager.enabled=false",
                        "--set", "webhook.caBundle=Y2E=", "--set", "webhook.certSecretName=my-tls"))
    assert not [k for k in docs if k[0] in ("Issuer", "Certificate")]
    vwc = docs[("ValidatingWebhookConfiguration", None, "sunk-sandbox-operator")]
    assert "annotations" not in vwc["metadata"]
    assert vwc["webhooks"][0]["clientConfig"]["caBundle"] == "Y2E="
    deployment = docs[("Deployment", OPERATOR_NS, "sunk-sandbox-operator")]
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    assert volumes["webhook-cert"]["secret"]["secretName"] == "my-tls"


@pytest.mark.parametrize(("args", "message"), [
    (["--set", "webhook.enabled=true", "--set", "webhook.certManager.enabled=false"], "webhook.caBundle"),
    (["--set", "tenancy.grantRoles=null"], "tenancy.grantRoles must name at least one ClusterRole"),
], ids=["webhook without a CA", "no grant role"])
def test_refused_values(args, message):
    done = helm("template", RELEASE, str(CHART), *args, check=False)
    assert done.returncode != 0 and message in done.stderr, done.stderr


def test_another_namespace_and_parts_off():
    docs = by_id(render("--set", "namespace.name=ops", "--set", "namespace.create=false",
                        "--set", "networkPolicy.enabled=false", "--set", "podDisruptionBudget.enabled=false",
                        "--set", "schedulerRole.create=false"))
    kinds = {k[0] for k in docs}
    assert not kinds & {"Namespace", "NetworkPolicy", "PodDisruptionBudget"}
    assert ("ClusterRole", None, "sunk-scheduler-sandbox") not in docs
    assert {ns for _, ns, _ in docs if ns and ns != "tenant-slurm"} == {"ops"}
    for (kind, _, _), doc in docs.items():
        for subject in doc.get("subjects", []):
            assert subject["namespace"] == "ops", kind


# ---------------------------------------------------------------- install, a binding, upgrade, uninstall


@pytest.fixture
def fresh_cluster() -> Iterator:
    """A control plane per test: the session's holds the kustomize install (its operator watches
    every namespace), and an uninstalled release leaves its Namespace Terminating (no namespace
    controller here), so no second install fits in the same one."""
    from sunk_sandbox_devtools import devcluster

    c = devcluster.temp_cluster()
    try:
        yield c
    finally:
        c.stop()


def managers(kube: Kube, kind: str, name: str, ns: str | None = None) -> dict[str, str]:
    """Field manager -> operation (Apply: server-side apply; Update: a client-side write)."""
    got = json.loads(kube.kubectl("get", kind, name, *(["-n", ns] if ns else []), "-o", "json",
                                  "--show-managed-fields").stdout)
    return {f["manager"]: f["operation"] for f in got["metadata"].get("managedFields", [])}


def apply_manifests(kube: Kube) -> subprocess.CompletedProcess:
    """`kubectl apply --server-side -k manifests/`, never forcing: a conflict fails it."""
    return kube.kubectl("apply", "--server-side", "-k", str(MANIFESTS), check=False)


def binding_chart(tmp_path: Path, binding: dict) -> Path:
    """A chart holding one binding: how a team ships its bindings with Helm (the release waits on it)."""
    chart = tmp_path / "bindings"
    (chart / "templates").mkdir(parents=True, exist_ok=True)
    (chart / "Chart.yaml").write_text(yaml.safe_dump({"apiVersion": "v2", "name": "bindings", "version": "0.1.0"}))
    (chart / "templates" / "binding.yaml").write_text(yaml.safe_dump(binding))
    return chart


def ready(kube: Kube, ns: str, name: str) -> dict | None:
    return kube.condition(ns, name, "Ready")


def readyz(operator) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{operator.liveness_port}/readyz", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


def report_rollout_done(kube: Kube) -> None:
    """What the deployment controller writes once the new ReplicaSet's pods are all Ready and available
    (no kube-controller-manager runs here; the pod is the operator process, Ready by its /readyz)."""
    name, ns = DEPLOYMENT
    deployment = kube.apps.read_namespaced_deployment(name, ns)
    n = deployment.spec.replicas
    kube.apps.patch_namespaced_deployment_status(name, ns, {"status": {
        "observedGeneration": deployment.metadata.generation, "replicas": n, "updatedReplicas": n,
        "readyReplicas": n, "availableReplicas": n,
        "conditions": [{"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable"},
                       {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable"}]}})


def upgrade_waiting_for_the_rollout(kube: Kube, operator, *args: str) -> None:
    """`helm upgrade --wait` of Helm 4 (kstatus): it returns only once every object of the chart is
    Current; the Deployment is the one object that needs a controller, whose part the test plays."""
    name, ns = DEPLOYMENT
    generation = kube.apps.read_namespaced_deployment(name, ns).metadata.generation
    proc = subprocess.Popen([helm_binary(4), "--kubeconfig", str(kube.cluster.kubeconfig), "upgrade", RELEASE,
                             str(CHART), "--namespace", OPERATOR_NS, "--wait", "--timeout", "90s", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: kube.apps.read_namespaced_deployment(name, ns).metadata.generation > generation, 60,
                 lambda: f"the upgrade never reached the Deployment; helm: {proc.poll()}")
        wait_for(lambda: readyz(operator), 30, lambda: "the operator's /readyz")
        time.sleep(1.0)
        assert proc.poll() is None, f"helm 4 returned before the rollout was reported: {proc.communicate()}"
        report_rollout_done(kube)
        out, err = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert "STATUS: deployed" in out, out


@pytest.mark.parametrize("major", MAJORS)
def test_install_a_working_binding_upgrade_and_uninstall_leaves_only_the_crd(fresh_cluster, emulator, tmp_path,
                                                                            major):
    from sunk_sandbox_devtools.devcluster import OperatorProcess

    kube = Kube(fresh_cluster)
    kube.create_namespace("tenant-slurm")  # the documented prerequisite
    cfg = fresh_cluster.kubeconfig
    values = ["--set", "tenancy.allowedApiUrls={http://127.0.0.1:*}"]
    done = helm("install", RELEASE, str(CHART), *INSTALL, *values, kubeconfig=cfg, major=major)
    assert "STATUS: deployed" in done.stdout, done.stdout
    made = [d for d in yaml.safe_load_all(helm("get", "manifest", RELEASE, "-n", OPERATOR_NS, kubeconfig=cfg,
                                               major=major).stdout) if d]
    assert ids(made) == ids(render(*values))
    crd = kube.ext.read_custom_resource_definition("sunksandboxbindings.sunksandbox.dev")
    assert any(c.type == "Established" and c.status == "True" for c in crd.status.conditions)
    # Helm 4 applies server-side by default, Helm 3 writes client-side (a three-way merge patch).
    assert managers(kube, "deployment", *DEPLOYMENT) == {"helm": "Apply" if major == 4 else "Update"}

    # A server-side apply of manifests/ over the release: the same objects, so no field conflicts
    # (fieldRef, an atomic struct whose apiVersion the API server defaults, did before it was spelled out).
    applied = apply_manifests(kube)
    assert applied.returncode == 0, applied.stderr
    assert managers(kube, "deployment", *DEPLOYMENT)["kubectl"] == "Apply"

    # The Deployment's pod as far as this control plane can run it: the operator with a token of the
    # installed ServiceAccount and the environment the Deployment declares.
    (deployment,) = [d for d in made if d["kind"] == "Deployment"]
    declared = {e["name"]: e.get("value") for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    process_env = {**{k: v for k, v in declared.items() if v is not None}, "POD_NAMESPACE": OPERATOR_NS,
                   "POD_NAME": "sunk-sandbox-operator-0",
                   **{k: v for k, v in TEST_ENV.items() if k != "SSB_ALLOWED_API_URLS"}}
    assert declared["SSB_ALLOWED_API_URLS"] == "http://127.0.0.1:*"
    token_config = fresh_cluster.service_account_kubeconfig(OPERATOR_NS, SA, tmp_path / "operator.kubeconfig")
    operator = OperatorProcess(token_config, tmp_path / "operator.log", env=process_env, args=("--log-format=json",))
    try:
        with emulator.state.lock:
            emulator.state.add_runner("runner-7f3a", {"constraints": {"network": {"egress": {"allow": ["pypi.org"]}}}})
        kube.core.create_namespaced_secret("tenant-slurm", {"metadata": {"name": "coreweave-api"},
                                                            "stringData": {"token": ADMIN_TOKEN}})
        make_scheduler(kube, "tenant-slurm")
        binding = yaml.safe_load((MANIFESTS / "examples" / "binding.yaml").read_text())
        binding["spec"]["runner"]["apiURL"] = emulator.url
        if major == 4:
            binding_is_waited_for_by_helm4(kube, emulator, binding, tmp_path)
        else:
            binding_with_kubectl(kube, emulator, binding, operator)
        assert not [rb for rb in kube.rbac.list_namespaced_role_binding("tenant-slurm").items
                    if rb.role_ref.name == "sunk-scheduler-sandbox"]

        upgrade = [*values, "--set", "tenancy.minResyncInterval=1m"]
        if major == 4:
            upgrade_waiting_for_the_rollout(kube, operator, *upgrade)
        else:
            done = helm("upgrade", RELEASE, str(CHART), "--namespace", OPERATOR_NS, *upgrade, kubeconfig=cfg, major=3)
            assert "STATUS: deployed" in done.stdout, done.stdout
        live = kube.apps.read_namespaced_deployment(*DEPLOYMENT).spec.template.spec.containers[0].env
        assert {e.name: e.value for e in live}["SSB_MIN_RESYNC_INTERVAL"] == "1m"
        assert "REVISION: 2" in helm("status", RELEASE, "-n", OPERATOR_NS, kubeconfig=cfg, major=major).stdout
    finally:
        operator.stop()

    done = helm("uninstall", RELEASE, "--namespace", OPERATOR_NS, kubeconfig=cfg, major=major)
    assert "uninstalled" in done.stdout
    assert_only_the_crd_is_left(kube, made)


def binding_with_kubectl(kube: Kube, emulator, binding: dict, operator) -> None:
    kube.apply(binding)
    out = kube.kubectl("wait", "--for=condition=Ready", "ssb/cpu-sandboxes", "-n", "tenant-slurm",
                       "--timeout=60s", check=False)
    assert out.returncode == 0, (out.stderr, json.dumps(kube.binding("tenant-slurm", "cpu-sandboxes")
                                                        .get("status"), indent=1), operator.logs()[-3000:])
    policy = emulator.state.runners["runner-7f3a"]["policy"]
    assert policy["base"]["spec"]["schedulerName"] == "slurm-scheduler"
    grants = kube.rbac.list_namespaced_role_binding("tenant-slurm").items
    assert any(rb.role_ref.name == "sunk-scheduler-sandbox" for rb in grants), "the chart's bind rule"
    kube.kubectl("delete", "ssb", "-n", "tenant-slurm", "cpu-sandboxes", "--timeout=60s")
    policy = emulator.state.runners["runner-7f3a"]["policy"]
    assert "schedulerName" not in (policy.get("base") or {}).get("spec", {})


def binding_is_waited_for_by_helm4(kube: Kube, emulator, binding: dict, tmp_path: Path) -> None:
    """Helm 4's `--wait` is kstatus: a binding is Current once its status has observed the current
    generation (status.observedGeneration, -1 until the operator's first write: the CRD's default)
    and Ready is True. So helm returns with the policy merged, and after an upgrade of the binding,
    with the new spec applied; `uninstall --wait` returns once the finalizer restored the policy."""
    cfg, ns = kube.cluster.kubeconfig, "tenant-slurm"
    chart = binding_chart(tmp_path, binding)
    helm("install", "bindings", str(chart), "-n", ns, "--wait", "--timeout", "60s", kubeconfig=cfg, major=4)
    cond = ready(kube, ns, "cpu-sandboxes")
    assert cond and cond["status"] == "True", kube.binding(ns, "cpu-sandboxes").get("status")
    annotations = emulator.state.runners["runner-7f3a"]["policy"]["base"]["metadata"]["annotations"]
    assert annotations["sunk.coreweave.com/qos"] == "normal"
    assert any(rb.role_ref.name == "sunk-scheduler-sandbox" for rb in kube.rbac.list_namespaced_role_binding(ns).items)

    binding["spec"]["slurm"]["qos"] = "high"
    binding_chart(tmp_path, binding)
    helm("upgrade", "bindings", str(chart), "-n", ns, "--wait", "--timeout", "60s", kubeconfig=cfg, major=4)
    status = kube.binding(ns, "cpu-sandboxes")["status"]
    assert status["observedGeneration"] == 2 and ready(kube, ns, "cpu-sandboxes")["status"] == "True", status
    annotations = emulator.state.runners["runner-7f3a"]["policy"]["base"]["metadata"]["annotations"]
    assert annotations["sunk.coreweave.com/qos"] == "high"

    helm("uninstall", "bindings", "-n", ns, "--wait", "--timeout", "60s", kubeconfig=cfg, major=4)
    assert not kube.binding_exists(ns, "cpu-sandboxes")
    policy = emulator.state.runners["runner-7f3a"]["policy"]
    assert "schedulerName" not in (policy.get("base") or {}).get("spec", {})


def assert_only_the_crd_is_left(kube: Kube, made: list[dict]) -> None:
    left = []
    for doc in made:
        kind, ns, name = doc["kind"], doc["metadata"].get("namespace"), doc["metadata"]["name"]
        got = kube.kubectl("get", kind, name, *(["-n", ns] if ns else []), "-o", "json", check=False)
        if got.returncode == 0:
            left.append((kind, ns, name, json.loads(got.stdout)["metadata"]))
        else:
            assert "NotFound" in got.stderr, got.stderr
    # The CRD is kept (crds.keep); the namespace is Helm's `--create-namespace`, not the release's, so it
    # stays with what the operator wrote at run time (its released Lease).
    assert [(k, ns, n) for k, ns, n, _ in left] == [("CustomResourceDefinition", None, "sunksandboxbindings.sunksandbox.dev")]
    assert not left[0][3].get("deletionTimestamp")
    remaining = set()
    for resource in ("configmaps", "leases.coordination.k8s.io", "secrets", "serviceaccounts", "roles",
                     "rolebindings", "services", "deployments", "poddisruptionbudgets", "networkpolicies"):
        names = kube.kubectl("get", resource, "-n", OPERATOR_NS, "-o", "name").stdout.split()
        remaining.update(names)
    assert remaining <= {"lease.coordination.k8s.io/sunk-sandbox-operator",
                         "configmap/sunk-sandbox-operator-settings"}, remaining
    assert not kube.kubectl("get", "secrets", "-n", OPERATOR_NS, "-l", "owner=helm", "-o", "name").stdout.strip()
    for kind in ("clusterroles", "clusterrolebindings", "validatingwebhookconfigurations"):
        managed = kube.kubectl("get", kind, "-l", "app.kubernetes.io/managed-by=Helm", "-o", "name").stdout.strip()
        assert not managed, managed
    for ns in ("tenant-slurm", OPERATOR_NS):
        managed = kube.kubectl("get", "rolebindings,serviceaccounts,configmaps", "-n", ns,
                               "-l", "app.kubernetes.io/managed-by=Helm", "-o", "name").stdout.strip()
        assert not managed, managed
    crd = kube.ext.read_custom_resource_definition("sunksandboxbindings.sunksandbox.dev")
    assert crd.metadata.deletion_timestamp is None, "crds.keep: helm.sh/resource-policy keep"


# ---------------------------------------------------------------- server-side apply, the other way round


@pytest.mark.needs_tool("helm4")
def test_helm4_takes_over_a_kustomize_install_without_a_conflict(fresh_cluster):
    """A kustomize install (`kubectl apply --server-side -k manifests/`) moved to the chart: Helm 4
    adopts the objects (`--take-ownership`) with a server-side apply that does not force, so any
    field whose value differs between the two would fail it; both keep applying afterwards."""
    kube = Kube(fresh_cluster)
    cfg = fresh_cluster.kubeconfig
    kube.create_namespace("tenant-slurm")
    applied = apply_manifests(kube)
    assert applied.returncode == 0, applied.stderr
    assert managers(kube, "deployment", *DEPLOYMENT) == {"kubectl": "Apply"}

    done = helm("install", RELEASE, str(CHART), *INSTALL, "--take-ownership", kubeconfig=cfg, major=4)
    assert "STATUS: deployed" in done.stdout, done.stdout
    for kind, ns, name in ids(render()):
        assert managers(kube, kind, name, ns).get("helm") == "Apply", (kind, ns, name)
    annotations = kube.apps.read_namespaced_deployment(*DEPLOYMENT).metadata.annotations
    assert annotations["meta.helm.sh/release-name"] == RELEASE

    applied = apply_manifests(kube)  # and kustomize again over the release
    assert applied.returncode == 0, applied.stderr
    done = helm("upgrade", RELEASE, str(CHART), "--namespace", OPERATOR_NS, "--set", "tenancy.minResyncInterval=1m",
                kubeconfig=cfg, major=4)
    assert "STATUS: deployed" in done.stdout, done.stdout
    live = kube.apps.read_namespaced_deployment(*DEPLOYMENT).spec.template.spec.containers[0].env
    assert {e.name: e.value for e in live}["SSB_MIN_RESYNC_INTERVAL"] == "1m"


@pytest.mark.needs_tool("helm4")
def test_a_helm3_release_moves_to_server_side_apply_under_helm4(fresh_cluster):
    """A Helm 3 release upgraded by Helm 4: by default (`--server-side=auto`) it keeps the release's
    client-side apply; `--server-side=true` moves it, Helm 4 turning Helm 3's field ownership into
    its own applied set, without a conflict (kustomize's applied fields beside it included)."""
    kube = Kube(fresh_cluster)
    cfg = fresh_cluster.kubeconfig
    kube.create_namespace("tenant-slurm")
    helm("install", RELEASE, str(CHART), *INSTALL, kubeconfig=cfg, major=3)
    applied = apply_manifests(kube)
    assert applied.returncode == 0, applied.stderr

    helm("upgrade", RELEASE, str(CHART), "--namespace", OPERATOR_NS, kubeconfig=cfg, major=4)
    assert managers(kube, "deployment", *DEPLOYMENT)["helm"] == "Update"
    done = helm("upgrade", RELEASE, str(CHART), "--namespace", OPERATOR_NS, "--server-side=true",
                "--set", "tenancy.minResyncInterval=1m", kubeconfig=cfg, major=4)
    assert "STATUS: deployed" in done.stdout, done.stdout
    assert managers(kube, "deployment", *DEPLOYMENT) == {"helm": "Apply", "kubectl": "Apply"}
    live = kube.apps.read_namespaced_deployment(*DEPLOYMENT).spec.template.spec.containers[0].env
    assert {e.name: e.value for e in live}["SSB_MIN_RESYNC_INTERVAL"] == "1m"
    # `auto` now applies (the release's method), and a value dropped is a field helm no longer applies:
    # removed, as helm was its only owner.
    helm("upgrade", RELEASE, str(CHART), "--namespace", OPERATOR_NS, "--reset-values", kubeconfig=cfg, major=4)
    assert managers(kube, "deployment", *DEPLOYMENT) == {"helm": "Apply", "kubectl": "Apply"}
    env = {e.name for e in kube.apps.read_namespaced_deployment(*DEPLOYMENT).spec.template.spec.containers[0].env}
    assert "SSB_MIN_RESYNC_INTERVAL" not in env
