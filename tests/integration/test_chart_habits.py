"""The chart's Helm habits with the real helm (v3.22), rendered and installed on a real control plane.

- values.schema.json: `helm lint --strict`, `helm template` and `helm install` refuse a wrong type,
  a value outside its enum and a misspelt key, naming it;
- the scheduling and security knobs (affinity, topologySpreadConstraints, priorityClassName,
  podLabels, commonLabels, serviceAccount.annotations, podSecurityContext/securityContext) land where
  Kubernetes reads them, merged with the defaults; a namespace of its own with `namespace.create`;
  `crds.enabled` / `crds.keep`, `rbac.aggregateClusterRoles`;
- on a control plane of its own: `helm install -n NS --create-namespace`; `helm upgrade` applies a
  changed CRD; `helm test`, failing while the operator does not answer /readyz and passing once it
  does; a namespace admin/editor/viewer (a RoleBinding to the built-in admin/edit/view only) gets the
  bindings' rights the tenant ClusterRoles aggregate, asked of the API server's own authorizer
  (SubjectAccessReview) and used (`kubectl --as`); uninstalled and reinstalled with `crds.enabled=false`.

No kubelet and no controller-manager run here, so the tests do their parts, as the other chart tests
do: the test hook's Pod is run as the kubelet would (its command, in the operator's Python, with its
ServiceAccount's token mounted at the in-cluster path in a mount namespace of its own) and its phase
reported; the clusterrole-aggregation controller's merge (each built-in role's rules become the union
of the ClusterRoles its `aggregationRule` selects) is done once after each change. The selectors are
the API server's own bootstrap roles', so a wrong label fails here.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO, Kube, wait_for
from tests.integration.test_helm_chart import CHART, RELEASE, helm
from tests.unit.test_manifests import SA

pytestmark = [pytest.mark.integration, pytest.mark.needs_tool("helm")]

NS = "habits-system"  # any namespace: the release's, made by --create-namespace
CRD = "sunksandboxbindings.sunksandbox.dev"
TEST_POD = "sunk-sandbox-operator-test"
SA_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"


def render(*args: str, tests: bool = False) -> list[dict]:
    out = helm("template", RELEASE, str(CHART), "--namespace", NS, *([] if tests else ["--skip-tests"]), *args).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def one(docs: list[dict], kind: str, name: str | None = None) -> dict:
    (doc,) = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    return doc


# ---------------------------------------------------------------- values.schema.json

BAD = [(["--set", "replicas=abc"], "at '/replicas': got string, want integer"),
       (["--set", "logFormat=xml"], "at '/logFormat': value must be one of 'plain', 'full', 'json'"),
       (["--set", "metrics.serviceMonitr.enabled=true"], "at '/metrics': additional properties 'serviceMonitr' not allowed")]


@pytest.mark.parametrize(("args", "message"), BAD, ids=["replicas=abc", "logFormat=xml", "serviceMonitr"])
def test_lint_and_template_refuse_what_the_schema_refuses(args, message):
    lint = helm("lint", "--strict", str(CHART), *args, check=False)
    assert lint.returncode != 0 and message in lint.stdout + lint.stderr, (lint.stdout, lint.stderr)
    template = helm("template", RELEASE, str(CHART), *args, check=False)
    assert template.returncode != 0 and message in template.stderr, template.stderr


# ---------------------------------------------------------------- rendering the knobs


def test_scheduling_and_security_knobs_reach_the_pods_merged_with_the_defaults():
    docs = render("--set", "priorityClassName=system-cluster-critical", "--set", "podLabels.team=ml",
                  "--set-string", "commonLabels.cost-center=42",
                  "--set", "serviceAccount.annotations.iam\\.example/role=operator",
                  "--set", "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
                           ".nodeSelectorTerms[0].matchExpressions[0].key=pool",
                  "--set", "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
                           ".nodeSelectorTerms[0].matchExpressions[0].operator=Exists",
                  "--set", "topologySpreadConstraints[0].maxSkew=1",
                  "--set", "topologySpreadConstraints[0].topologyKey=topology.kubernetes.io/zone",
                  "--set", "topologySpreadConstraints[0].whenUnsatisfiable=ScheduleAnyway",
                  "--set", "podSecurityContext.fsGroupChangePolicy=OnRootMismatch",
                  "--set", "securityContext.runAsUser=1000", tests=True)
    deployment = one(docs, "Deployment")
    pod = deployment["spec"]["template"]
    assert pod["spec"]["priorityClassName"] == "system-cluster-critical"
    assert pod["metadata"]["labels"]["team"] == "ml"
    assert "team" not in deployment["spec"]["selector"]["matchLabels"], "a selector is immutable: never a value"
    assert set(pod["spec"]["affinity"]) == {"podAntiAffinity", "nodeAffinity"}, "yours merged into the default"
    assert pod["spec"]["topologySpreadConstraints"][0]["topologyKey"] == "topology.kubernetes.io/zone"
    assert pod["spec"]["securityContext"]["fsGroupChangePolicy"] == "OnRootMismatch"
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True, "merged key by key"
    for container in (pod["spec"]["containers"][0], one(docs, "Pod", TEST_POD)["spec"]["containers"][0]):
        assert container["securityContext"]["runAsUser"] == 1000
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert one(docs, "ServiceAccount", SA)["metadata"]["annotations"] == {"iam.example/role": "operator"}
    for doc in docs:
        assert doc["metadata"]["labels"]["cost-center"] == "42", (doc["kind"], doc["metadata"]["name"])
    without = render("--set", "affinity.podAntiAffinity=null")
    assert "affinity" not in one(without, "Deployment")["spec"]["template"]["spec"], "null drops the default"


def test_a_label_value_must_be_a_string():
    """`--set` makes 42 a number, which Kubernetes refuses as a label; the schema says so first."""
    done = helm("template", RELEASE, str(CHART), "--set", "commonLabels.cost-center=42", check=False)
    assert done.returncode != 0 and "at '/commonLabels/cost-center': got number, want string" in done.stderr, done.stderr


def test_a_pod_label_cannot_take_the_selectors_key():
    done = helm("template", RELEASE, str(CHART), "--set", "podLabels.app\\.kubernetes\\.io/component=x", check=False)
    assert done.returncode != 0 and "podLabels: app.kubernetes.io/component is the chart's own pod label" in done.stderr


def test_the_operator_namespace_is_the_releases_or_one_of_its_own():
    docs = render()
    assert not [d for d in docs if d["kind"] == "Namespace"], "--create-namespace makes the release's"
    assert {d["metadata"].get("namespace") for d in docs} - {None, "tenant-slurm"} == {NS}
    own = render("--set", "namespace.name=ops", "--set", "namespace.create=true")
    namespace = one(own, "Namespace")
    assert namespace["metadata"]["name"] == "ops"
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    assert one(own, "Deployment")["metadata"]["namespace"] == "ops"
    for args, message in ((["--set", "namespace.create=true"], "namespace.create needs namespace.name"),
                          (["--set", "namespace.create=true", "--set", f"namespace.name={NS}"],
                           f"namespace.create: {NS} is the release's namespace")):
        done = helm("template", RELEASE, str(CHART), "--namespace", NS, *args, check=False)
        assert done.returncode != 0 and message in done.stderr, done.stderr


def test_crds_and_tenant_roles_follow_their_values():
    crd = one(render(), "CustomResourceDefinition")
    assert crd["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
    assert "annotations" not in one(render("--set", "crds.keep=false"), "CustomResourceDefinition")["metadata"]
    assert not [d for d in render("--set", "crds.enabled=false") if d["kind"] == "CustomResourceDefinition"]
    aggregated = {d["metadata"]["name"] for d in render() if d["kind"] == "ClusterRole"
                  and any(k.startswith("rbac.authorization.k8s.io/aggregate-to-") for k in d["metadata"]["labels"])}
    assert aggregated == {"sunk-sandbox-operator-view", "sunk-sandbox-operator-edit"}
    assert not [d for d in render("--set", "rbac.aggregateClusterRoles=false")
                if d["metadata"]["name"] in aggregated]


def test_the_test_hook_asks_the_operator_pods_and_the_crd():
    docs = [d for d in render("--set", "healthPort=9999", tests=True)
            if d["metadata"].get("annotations", {}).get("helm.sh/hook") == "test"]
    assert {(d["kind"], d["metadata"]["name"]) for d in docs} == {
        (kind, TEST_POD) for kind in ("ServiceAccount", "Role", "RoleBinding", "Pod")}
    pod = one(docs, "Pod")
    assert pod["spec"]["containers"][0]["command"][4:] == [
        NS, "app.kubernetes.io/component=operator,app.kubernetes.io/name=sunk-sandbox-operator", "9999",
        "sunksandbox.dev/v1alpha1", "sunksandboxbindings"]
    assert one(docs, "Role")["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]


# ---------------------------------------------------------------- on a control plane


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    """The chart (a copy this module may change) installed the README's way into a control plane of its own."""
    from sunk_sandbox_devtools import devcluster

    cluster = devcluster.temp_cluster()
    try:
        kube = Kube(cluster)
        kube.create_namespace("tenant-slurm")  # the documented prerequisite
        chart = tmp_path_factory.mktemp("chart") / "sunk-sandbox-operator"
        shutil.copytree(CHART, chart)
        for args, message in BAD:
            done = helm("install", RELEASE, str(chart), "-n", NS, "--create-namespace", *args,
                        kubeconfig=cluster.kubeconfig, check=False)
            assert done.returncode != 0 and message in done.stderr, done.stderr
        done = helm("install", RELEASE, str(chart), "-n", NS, "--create-namespace",
                    "--set", f"healthPort={devcluster.free_port()}", kubeconfig=cluster.kubeconfig)
        assert "STATUS: deployed" in done.stdout, done.stdout
        yield kube, chart
    finally:
        cluster.stop()


def run_test_pod_as_the_kubelet(kube: Kube, tmp: Path) -> tuple[subprocess.CompletedProcess, str]:
    """`helm test`, with the test Pod run here: its command (the image's `python` is this one), its
    ServiceAccount's token at the in-cluster path, the API server as KUBERNETES_SERVICE_*; then its
    phase from the exit code. Returns helm's result and the Pod's output."""
    from kubernetes.client.exceptions import ApiException

    cluster = kube.cluster
    try:
        old = kube.core.read_namespaced_pod(TEST_POD, NS).metadata.uid
    except ApiException:
        old = None
    proc = subprocess.Popen([str(_helm_bin()), "--kubeconfig", str(cluster.kubeconfig), "test", RELEASE, "-n", NS,
                             "--timeout", "90s"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        def created():
            try:
                pod = kube.core.read_namespaced_pod(TEST_POD, NS)
            except ApiException:
                return None
            return pod if pod.metadata.uid != old and not pod.metadata.deletion_timestamp else None
        pod = wait_for(created, timeout=60, describe=lambda: "helm test created no Pod")
        (container,) = pod.spec.containers
        assert container.command[0] == "python" and pod.spec.service_account_name == TEST_POD
        mount = tmp / "serviceaccount"
        shutil.rmtree(mount, ignore_errors=True)
        mount.mkdir(parents=True)
        token = kube.kubectl("create", "token", TEST_POD, "-n", NS, "--audience=https://kubernetes.default.svc").stdout
        (mount / "token").write_text(token.strip())
        (mount / "ca.crt").write_bytes(cluster.ca_file.read_bytes())
        (mount / "namespace").write_text(NS)
        # A mount namespace of its own: the token where a pod has it, for this process only.
        mounted = (f"mount -t tmpfs none /run && mkdir -p {SA_PATH} && mount --bind {mount} {SA_PATH} "
                   '&& exec "$@"')
        env = {"PATH": os.environ["PATH"], "KUBERNETES_SERVICE_HOST": "127.0.0.1",
               "KUBERNETES_SERVICE_PORT": str(cluster.api_port)}
        ran = subprocess.run(["unshare", "--mount", "sh", "-c", mounted, "sh", sys.executable, *container.command[1:]],
                             capture_output=True, text=True, timeout=60, env=env)
        phase = "Succeeded" if ran.returncode == 0 else "Failed"
        kube.core.patch_namespaced_pod_status(TEST_POD, NS, {"status": {"phase": phase}})
        out, err = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err), ran.stdout + ran.stderr


def _helm_bin() -> Path:
    from sunk_sandbox_devtools import devcluster

    return devcluster.ensure_helm()


def operator_pod(kube: Kube) -> dict:
    """The Deployment's pod as a kubelet on this host would report it (IP 127.0.0.1, Running)."""
    deployment = kube.apps.read_namespaced_deployment("sunk-sandbox-operator", NS)
    template = kube.api.sanitize_for_serialization(deployment.spec.template)
    pod = {"apiVersion": "v1", "kind": "Pod", "spec": template["spec"],
           "metadata": {"name": "sunk-sandbox-operator-0", "labels": template["metadata"]["labels"]}}
    kube.core.create_namespaced_pod(NS, pod)
    kube.core.patch_namespaced_pod_status("sunk-sandbox-operator-0", NS, {"status": {
        "phase": "Running", "podIP": "127.0.0.1", "podIPs": [{"ip": "127.0.0.1"}]}})
    return pod


def test_install_into_the_release_namespace_upgrade_the_crd_and_helm_test(release, tmp_path):
    from sunk_sandbox_devtools.devcluster import OperatorProcess

    kube, chart = release
    cfg = kube.cluster.kubeconfig
    made = [d for d in yaml.safe_load_all(helm("get", "manifest", RELEASE, "-n", NS, kubeconfig=cfg).stdout) if d]
    assert not [d for d in made if d["kind"] == "Namespace"]
    assert kube.apps.read_namespaced_deployment("sunk-sandbox-operator", NS).spec.replicas == 2
    assert kube.core.list_namespaced_secret(NS, label_selector="owner=helm").items, "the release record is there too"

    # helm test fails while the operator does not answer its pod's /readyz.
    operator_pod(kube)
    failed, output = run_test_pod_as_the_kubelet(kube, tmp_path)
    assert failed.returncode != 0 and f"{TEST_POD}" in failed.stderr, (failed.stdout, failed.stderr)
    assert "ok   the API server serves sunksandboxbindings in sunksandbox.dev/v1alpha1" in output, output
    assert "FAIL pod sunk-sandbox-operator-0 (127.0.0.1:" in output and "does not answer /readyz" in output, output

    # The operator, as its Deployment runs it, with its ServiceAccount's token.
    (deployment,) = [d for d in made if d["kind"] == "Deployment"]
    declared = {e["name"]: e.get("value") for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    env = {**{k: v for k, v in declared.items() if v is not None},
           "POD_NAMESPACE": NS, "POD_NAME": "sunk-sandbox-operator-0"}
    token_config = kube.cluster.service_account_kubeconfig(NS, SA, tmp_path / "operator.kubeconfig")
    operator = OperatorProcess(token_config, tmp_path / "operator.log", env=env, args=("--log-format=json",))
    try:
        # A newer CRD in the chart (another short name): `helm upgrade` applies it (crds/ would not be).
        crd_template = chart / "templates" / "crd.yaml"
        text = crd_template.read_text()
        assert "    shortNames:\n    - ssb\n" in text
        crd_template.write_text(text.replace("    shortNames:\n    - ssb\n", "    shortNames:\n    - ssb\n    - ssbx\n"))
        done = helm("upgrade", RELEASE, str(chart), "-n", NS, "--reuse-values",
                    "--set", f"healthPort={operator.liveness_port}", kubeconfig=cfg)
        assert "has been upgraded" in done.stdout, done.stdout
        assert kube.ext.read_custom_resource_definition(CRD).spec.names.short_names == ["ssb", "ssbx"]
        wait_for(lambda: "ssbx" in kube.kubectl("api-resources", "--api-group=sunksandbox.dev").stdout, timeout=30)

        passed, output = run_test_pod_as_the_kubelet(kube, tmp_path)
        assert passed.returncode == 0, (passed.stdout, passed.stderr, output, operator.logs()[-2000:])
        assert "Phase:          Succeeded" in passed.stdout, passed.stdout
        assert "ok   pod sunk-sandbox-operator-0 answers /readyz with 200" in output, output
        wait_for(lambda: not kube.core.list_namespaced_pod(NS, field_selector=f"metadata.name={TEST_POD}").items,
                 timeout=30, describe=lambda: "hook-succeeded: a passed test's Pod is deleted")
    finally:
        operator.stop()


def aggregate_built_in_roles(kube: Kube) -> None:
    """What the controller-manager's clusterrole-aggregation controller does: each ClusterRole with an
    aggregationRule gets the rules of every ClusterRole its selectors match. Repeated until nothing
    changes, as that controller requeues (edit aggregates into admin, view into edit)."""
    for _ in range(5):
        changed = False
        for role in kube.rbac.list_cluster_role().items:
            if not role.aggregation_rule:
                continue
            rules: list = []
            for selector in role.aggregation_rule.cluster_role_selectors:
                labels = ",".join(f"{k}={v}" for k, v in (selector.match_labels or {}).items())
                for source in kube.rbac.list_cluster_role(label_selector=labels).items:
                    if source.metadata.name != role.metadata.name:
                        rules += [r for r in source.rules or [] if r not in rules]
            if rules != (role.rules or []):
                kube.rbac.patch_cluster_role(role.metadata.name, {"rules": [kube.api.sanitize_for_serialization(r)
                                                                           for r in rules]})
                changed = True
        if not changed:
            return
    raise AssertionError("the aggregated roles did not settle")


def allowed(kube: Kube, user: str, namespace: str, verb: str, subresource: str = "") -> bool:
    from kubernetes import client

    review = client.AuthorizationV1Api(kube.api).create_subject_access_review({
        "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "spec": {"user": user, "resourceAttributes": {"namespace": namespace, "verb": verb, "group": "sunksandbox.dev",
                                                      "resource": "sunksandboxbindings", "subresource": subresource}}})
    return bool(review.status.allowed)


WRITES = ("create", "update", "patch", "delete")
READS = ("get", "list", "watch")


def test_namespace_admins_editors_and_viewers_get_bindings_through_the_built_in_roles(release, tmp_path):
    kube, chart = release
    cfg = kube.cluster.kubeconfig
    kube.create_namespace("team-a")
    for user, role in (("alice", "admin"), ("erin", "edit"), ("victor", "view")):
        kube.rbac.create_namespaced_role_binding("team-a", {
            "metadata": {"name": user}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                                    "name": role},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]})
    assert not allowed(kube, "alice", "team-a", "get"), "without aggregation, the built-in roles lack bindings"
    aggregate_built_in_roles(kube)

    for user in ("alice", "erin"):
        assert all(allowed(kube, user, "team-a", verb) for verb in READS + WRITES), user
    assert all(allowed(kube, "victor", "team-a", verb) for verb in READS)
    assert not any(allowed(kube, "victor", "team-a", verb) for verb in WRITES)
    for user in ("alice", "erin", "victor"):
        assert not allowed(kube, user, "team-a", "patch", "status"), "status is the operator's report"
        assert not allowed(kube, user, "team-a", "update", "status")
        assert not allowed(kube, user, "default", "get"), "only where they are bound"
        assert not allowed(kube, user, "team-a", "deletecollection")

    # Used, not only asked: the admin creates a binding, the viewer reads it and cannot delete it.
    binding = {"apiVersion": "sunksandbox.dev/v1alpha1", "kind": "SunkSandboxBinding",
               "metadata": {"name": "mine", "namespace": "team-a"},
               "spec": _example_spec()}
    created = kube.kubectl("--as=alice", "create", "-f", "-", input=json.dumps(binding), check=False)
    assert created.returncode == 0, created.stderr
    assert "mine" in kube.kubectl("--as=victor", "get", "ssb", "-n", "team-a", "-o", "name").stdout
    denied = kube.kubectl("--as=victor", "delete", "ssb", "mine", "-n", "team-a", check=False)
    assert denied.returncode != 0 and "forbidden" in denied.stderr, denied.stderr
    assert kube.kubectl("--as=erin", "delete", "ssb", "mine", "-n", "team-a").returncode == 0

    # Off: the roles go, and with the next aggregation the built-in roles lose bindings.
    helm("upgrade", RELEASE, str(chart), "-n", NS, "--reuse-values", "--set", "rbac.aggregateClusterRoles=false",
         kubeconfig=cfg)
    try:
        aggregate_built_in_roles(kube)
        assert not allowed(kube, "alice", "team-a", "create") and not allowed(kube, "victor", "team-a", "get")
    finally:
        helm("upgrade", RELEASE, str(chart), "-n", NS, "--reuse-values", "--set", "rbac.aggregateClusterRoles=true",
             kubeconfig=cfg)


def _example_spec() -> dict:
    return yaml.safe_load((REPO / "manifests" / "examples" / "binding.yaml").read_text())["spec"]


def test_uninstall_keeps_the_crd_and_bindings_and_crds_enabled_false_installs_without_it(release):
    kube, chart = release
    cfg = kube.cluster.kubeconfig
    kube.apply({"apiVersion": "sunksandbox.dev/v1alpha1", "kind": "SunkSandboxBinding",
                "metadata": {"name": "kept", "namespace": "tenant-slurm"}, "spec": _example_spec()})
    helm("uninstall", RELEASE, "-n", NS, kubeconfig=cfg)
    assert kube.ext.read_custom_resource_definition(CRD).metadata.deletion_timestamp is None, "crds.keep"
    assert kube.binding("tenant-slurm", "kept")["metadata"]["name"] == "kept"

    # The CRD installed apart (README: crds.enabled=false), the chart without it.
    kube.kubectl("apply", "--server-side", "--force-conflicts", "-k", str(REPO / "crds"))
    done = helm("install", RELEASE, str(chart), "-n", NS, "--set", "crds.enabled=false", kubeconfig=cfg)
    assert "STATUS: deployed" in done.stdout, done.stdout
    made = [d for d in yaml.safe_load_all(helm("get", "manifest", RELEASE, "-n", NS, kubeconfig=cfg).stdout) if d]
    assert made and not [d for d in made if d["kind"] == "CustomResourceDefinition"]
    assert kube.binding("tenant-slurm", "kept")["metadata"]["name"] == "kept"
    helm("uninstall", RELEASE, "-n", NS, kubeconfig=cfg)
    assert kube.ext.read_custom_resource_definition(CRD).metadata.deletion_timestamp is None, "never the chart's"
