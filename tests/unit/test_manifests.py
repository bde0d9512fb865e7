"""The shipped kustomize manifests: RBAC pinned rule by rule, a hardened Deployment, examples
that the API would accept, and kustomizations whose references resolve.

Everything here parses YAML. Running `kubectl kustomize` on them (the pinned kubectl, a Go
build) is in tests/integration/test_manifests_kustomize.py.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlparse

import pytest
import yaml

from sunk_sandbox_operator import api as model

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "manifests"
CRDS = ROOT / "crds"
HEALTH_LUA = ROOT / "manifests" / "argocd" / "health.lua"

OPERATOR_NS = "sunk-sandbox-operator-system"
SA = "sunk-sandbox-operator"
SECRETS_NS = "tenant-slurm"
IMAGE = "ghcr.io/sunksandbox/sunk-sandbox-operator:0.1.0"
ARGOCD_KEY = "resource.customizations.health.sunksandbox.dev_SunkSandboxBinding"

# Files that are deliberately not part of any kustomization (applied elsewhere).
STANDALONE = {MANIFESTS / "examples" / "argocd-application.yaml"}


def _rules(*specs: tuple[str, str, str, tuple[str, ...]]) -> set[tuple]:
    out = set()
    for group, resource, verbs, names in specs:
        for verb in verbs.split():
            for name in names or (None,):
                out.add((group, resource, verb, name))
    return out


# The cluster-wide ClusterRole, one tuple per (apiGroup, resource, verb, resourceName). Changing
# this set is a conscious decision: say why in the commit. No write to anything but the bindings,
# RoleBindings and events: target writes are per namespace (EXPECTED_TARGET_RULES).
EXPECTED_CLUSTER_RULES = _rules(
    (model.GROUP, model.PLURAL, "get list watch patch", ()),
    (model.GROUP, f"{model.PLURAL}/status", "patch", ()),
    (model.GROUP, f"{model.PLURAL}/finalizers", "update", ()),
    ("apiextensions.k8s.io", "customresourcedefinitions", "get list watch", ()),
    ("", "namespaces", "list watch", ()),
    ("", "pods", "list watch", ()),
    ("authorization.k8s.io", "subjectaccessreviews", "create", ()),  # may the scheduler watch/bind pods there?
    ("rbac.authorization.k8s.io", "rolebindings", "list watch create delete", ()),
    # bind: grant it; get: do its rules cover the scheduler's needs (then no review per namespace)?
    ("rbac.authorization.k8s.io", "clusterroles", "bind get", ("sunk-scheduler-sandbox",)),
    ("", "events", "create patch", ()),
    ("events.k8s.io", "events", "create patch", ()),
)
# The scheduler's objects and the scope target: granted per namespace by RoleBindings only
# (manifests/rbac-targets.yaml).
EXPECTED_TARGET_RULES = _rules(
    ("", "configmaps", "get list watch update create", ()),  # create: a FluxHelmRelease target's values ConfigMap
    ("apps", "deployments", "list patch", ()),
    ("apps", "statefulsets", "list patch", ()),  # the scheduler may run as a StatefulSet
    ("argoproj.io", "applications", "get list watch patch", ()),
    ("helm.toolkit.fluxcd.io", "helmreleases", "get list watch", ()),
)
TARGETS_ROLE = "sunk-sandbox-operator-targets"
EXPECTED_SECRET_RULES = _rules(("", "secrets", "get", ()))
# Granted per namespace by RoleBindings only (manifests/rbac-secrets.yaml).
SECRET_READER = "sunk-sandbox-operator-secret-reader"


# ---------------------------------------------------------------- loading


def yaml_files() -> list[Path]:
    return sorted(p for base in (MANIFESTS, CRDS) for p in base.rglob("*.y*ml"))


def is_kustomization(path: Path) -> bool:
    return path.name in {"kustomization.yaml", "kustomization.yml", "Kustomization"}


def load_docs(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


@pytest.fixture(scope="module")
def objects() -> list[tuple[Path, dict]]:
    out = []
    for path in yaml_files():
        if is_kustomization(path):
            continue
        for doc in load_docs(path):
            assert isinstance(doc, dict) and doc.get("kind") and doc.get("apiVersion"), f"{path}: not an object"
            out.append((path, doc))
    return out


def find(objects, kind: str, name: str, namespace: str | None = None) -> dict:
    found = [
        d for _, d in objects
        if d["kind"] == kind and d["metadata"]["name"] == name and d["metadata"].get("namespace") == namespace
    ]
    assert len(found) == 1, f"expected exactly one {kind} {namespace}/{name}, found {len(found)}"
    return found[0]


def flatten(rules: list[dict]) -> set[tuple]:
    out = set()
    for rule in rules:
        assert not rule.get("nonResourceURLs")
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    for name in rule.get("resourceNames") or [None]:
                        out.add((group, resource, verb, name))
    return out


@pytest.fixture(scope="module")
def deployment(objects) -> dict:
    return find(objects, "Deployment", "sunk-sandbox-operator", OPERATOR_NS)


@pytest.fixture(scope="module")
def container(deployment) -> dict:
    (only,) = deployment["spec"]["template"]["spec"]["containers"]
    return only


@pytest.fixture(scope="module")
def example_binding(objects) -> dict:
    found = [d for _, d in objects if d["kind"] == model.KIND]
    assert len(found) == 1
    return found[0]


def test_flatten_expands_every_combination():
    rules = [{"apiGroups": ["", "apps"], "resources": ["a"], "verbs": ["get", "list"], "resourceNames": ["n"]}]
    assert flatten(rules) == {("", "a", "get", "n"), ("", "a", "list", "n"), ("apps", "a", "get", "n"),
                              ("apps", "a", "list", "n")}


# ---------------------------------------------------------------- RBAC


def test_cluster_role_rules_are_exactly_the_expected_set(objects):
    role = find(objects, "ClusterRole", "sunk-sandbox-operator")
    actual = flatten(role["rules"])
    missing = sorted(EXPECTED_CLUSTER_RULES - actual, key=str)
    extra = sorted(actual - EXPECTED_CLUSTER_RULES, key=str)
    assert not missing and not extra, f"missing: {missing}\nextra: {extra}"
    assert not role.get("aggregationRule")


def test_cluster_role_is_bound_to_the_service_account(objects):
    find(objects, "ServiceAccount", SA, OPERATOR_NS)
    binding = find(objects, "ClusterRoleBinding", "sunk-sandbox-operator")
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                  "name": "sunk-sandbox-operator"}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": SA, "namespace": OPERATOR_NS}]


def test_secret_access_is_get_only_in_the_binding_namespace(objects, example_binding):
    reader = find(objects, "ClusterRole", SECRET_READER)
    assert flatten(reader["rules"]) == EXPECTED_SECRET_RULES
    binding = find(objects, "RoleBinding", "sunk-sandbox-operator-secrets", SECRETS_NS)
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                  "name": SECRET_READER}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": SA, "namespace": OPERATOR_NS}]
    # The default install can read the example binding's token.
    assert example_binding["metadata"]["namespace"] == SECRETS_NS


def test_secret_reader_is_never_bound_cluster_wide(objects):
    bindings = [d for _, d in objects if d["kind"] in {"RoleBinding", "ClusterRoleBinding"}
                and d["roleRef"]["name"] == SECRET_READER]
    assert bindings, "the secret reader must be bound in at least the default namespace"
    for binding in bindings:
        assert binding["kind"] == "RoleBinding", "a ClusterRoleBinding would allow reading every Secret"
        assert binding["metadata"]["namespace"]


def test_target_access_is_granted_only_per_namespace_in_tenant_slurm(objects, example_binding):
    from sunk_sandbox_operator.api.keys import TARGETS_CLUSTER_ROLE

    assert TARGETS_CLUSTER_ROLE == TARGETS_ROLE  # the name the Forbidden messages tell admins to bind
    role = find(objects, "ClusterRole", TARGETS_ROLE)
    actual = flatten(role["rules"])
    assert actual == EXPECTED_TARGET_RULES, (f"missing: {sorted(EXPECTED_TARGET_RULES - actual, key=str)}\n"
                                             f"extra: {sorted(actual - EXPECTED_TARGET_RULES, key=str)}")
    assert not role.get("aggregationRule")
    binding = find(objects, "RoleBinding", TARGETS_ROLE, SECRETS_NS)
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                  "name": TARGETS_ROLE}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": SA, "namespace": OPERATOR_NS}]
    # The default install manages the example binding's scheduler (its own namespace).
    spec = model.parse_spec(example_binding["spec"])
    assert spec.scheduler_namespace(example_binding["metadata"]["namespace"]) == SECRETS_NS
    bindings = [d for _, d in objects if d["kind"] in {"RoleBinding", "ClusterRoleBinding"}
                and d["roleRef"]["name"] == TARGETS_ROLE]
    assert bindings == [binding], "granted per namespace only: a ClusterRoleBinding would allow every ConfigMap"


def test_writes_to_workloads_and_targets_are_never_cluster_wide(objects):
    written = {"configmaps", "deployments", "statefulsets", "applications", "helmreleases"}
    for _, doc in objects:
        if doc["kind"] == "ClusterRoleBinding":
            role = find(objects, "ClusterRole", doc["roleRef"]["name"])
            held = {r for _, r, _, _ in flatten(role["rules"])}
            assert not held & written, f"{doc['metadata']['name']} grants {held & written} in every namespace"


def test_no_role_anywhere_grants_more_than_get_on_secrets_or_wildcards(objects):
    roles = [d for _, d in objects if d["kind"] in {"Role", "ClusterRole"}]
    assert len(roles) >= 2
    for role in roles:
        for group, resource, verb, _ in flatten(role.get("rules", [])):
            where = f"{role['kind']} {role['metadata']['name']}"
            assert "*" not in (group, resource, verb), f"{where}: wildcard in RBAC"
            if resource == "secrets" or resource.startswith("secrets/"):
                assert (group, resource, verb) == ("", "secrets", "get"), f"{where}: {verb} on secrets"


def test_no_peering_and_leases_only_in_the_operator_namespace(objects):
    for _, doc in objects:
        if doc["kind"] in {"Role", "ClusterRole"}:
            resources = {r for _, r, _, _ in flatten(doc["rules"])}
            assert not resources & {"clusterkopfpeerings", "kopfpeerings"}
            if "leases" in resources:
                assert doc["kind"] == "Role" and doc["metadata"]["namespace"] == OPERATOR_NS


def test_operator_namespace_role_is_only_configmaps_there(objects):
    role = find(objects, "Role", "sunk-sandbox-operator", OPERATOR_NS)
    assert flatten(role["rules"]) == ({("", "configmaps", verb, None) for verb in ("get", "create", "update", "delete")}
                                      | {("coordination.k8s.io", "leases", verb, None) for verb in ("get", "create", "update")})
    binding = find(objects, "RoleBinding", "sunk-sandbox-operator", OPERATOR_NS)
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "sunk-sandbox-operator"}


def test_grant_cluster_role_of_the_example_is_bindable(objects, example_binding):
    role = find(objects, "ClusterRole", "sunk-sandbox-operator")
    bindable = {n for g, r, v, n in flatten(role["rules"]) if r == "clusterroles" and v == "bind"}
    assert example_binding["spec"]["scope"]["grantClusterRole"] in bindable


def test_rbac_names_the_crd_that_ships(objects):
    crd = find(objects, "CustomResourceDefinition", f"{model.PLURAL}.{model.GROUP}")
    assert crd["spec"]["group"] == model.GROUP
    assert crd["spec"]["names"]["plural"] == model.PLURAL
    assert any(s.get("subresources", {}).get("status") == {} for s in crd["spec"]["versions"])


# ---------------------------------------------------------------- Deployment and Service


def test_deployment_shape(deployment, container):
    spec = deployment["spec"]
    assert spec["replicas"] == 2  # one leader, one warm standby
    assert spec["strategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}}
    pod = spec["template"]["spec"]
    assert pod["serviceAccountName"] == SA
    assert "priorityClassName" not in pod
    assert container["name"] == "operator"
    assert container["args"] == [
        "run", "--standalone", "--all-namespaces", "--liveness=http://0.0.0.0:8081/healthz",
        "--metrics-port=8080", "--log-format=json", "--log-level=info",
    ]
    assert {p["name"]: p["containerPort"] for p in container["ports"]} == {"metrics": 8080, "health": 8081}
    env = {e["name"]: e for e in container["env"]}
    # apiVersion spelled out: the API server defaults it inside fieldRef, an atomic struct, so a
    # server-side apply that omits it conflicts with a manager that owns the defaulted value.
    assert env["POD_NAMESPACE"]["valueFrom"] == {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}
    assert env["POD_NAME"]["valueFrom"] == {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}


def test_pod_disruption_budget_keeps_one_replica(objects, deployment):
    pdb = find(objects, "PodDisruptionBudget", "sunk-sandbox-operator", OPERATOR_NS)
    assert pdb["spec"]["minAvailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]


def test_probes_match_the_liveness_flag(container):
    liveness_arg = next(a for a in container["args"] if a.startswith("--liveness="))
    url = urlparse(liveness_arg.split("=", 1)[1])
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        get = container[probe]["httpGet"]
        assert get["path"] == path and url.path == "/healthz"
        assert get["port"] == url.port == 8081
    metrics_arg = next(a for a in container["args"] if a.startswith("--metrics-port="))
    assert int(metrics_arg.split("=", 1)[1]) == 8080


def test_resources(container):
    # From the scale benchmark (docs/scale.md): ~160 MiB at 10,000 namespaces and 50,000 pods, plus headroom.
    assert container["resources"] == {"requests": {"cpu": "100m", "memory": "192Mi"}, "limits": {"memory": "384Mi"}}


def test_security_context(deployment, container):
    ctx = container["securityContext"]
    assert ctx["runAsNonRoot"] is True
    assert ctx["runAsUser"] == 65532
    assert ctx["readOnlyRootFilesystem"] is True
    assert ctx["allowPrivilegeEscalation"] is False
    assert ctx["capabilities"] == {"drop": ["ALL"]}
    assert ctx["seccompProfile"] == {"type": "RuntimeDefault"}
    assert not ctx.get("privileged")
    pod = deployment["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 65532
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    for forbidden in ("hostNetwork", "hostPID", "hostIPC"):
        assert not pod.get(forbidden)


def test_tmp_is_a_writable_empty_dir(deployment, container):
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert "emptyDir" in volumes[mounts["/tmp"]["name"]]
    assert not mounts["/tmp"].get("readOnly")


def test_selector_matches_template_and_service(objects, deployment):
    template_labels = deployment["spec"]["template"]["metadata"]["labels"]
    selector = deployment["spec"]["selector"]["matchLabels"]
    assert selector.items() <= template_labels.items()
    service = find(objects, "Service", "sunk-sandbox-operator-metrics", OPERATOR_NS)
    assert service["spec"]["type"] == "ClusterIP"
    assert service["spec"]["selector"].items() <= template_labels.items()
    assert service["spec"]["ports"] == [{"name": "metrics", "port": 8080, "targetPort": "metrics", "protocol": "TCP"}]
    annotations = service["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/port"] == "8080"


def test_operator_namespace_enforces_restricted_pod_security(objects):
    ns = find(objects, "Namespace", OPERATOR_NS)
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


# ---------------------------------------------------------------- examples


def test_example_binding_validates(example_binding):
    assert example_binding["apiVersion"] == f"{model.GROUP}/{model.VERSION}"
    spec = model.parse_spec(example_binding["spec"])
    assert spec.runner.id == "runner-7f3a"
    assert spec.runner.token_secret_ref.name == "coreweave-api"
    assert spec.partition == "sandboxes"
    assert spec.sandbox_namespaces.names == ["ds-*"]
    assert spec.scope.always_include == ["tenant-slurm"]
    assert example_binding["metadata"]["namespace"] == "tenant-slurm"


def test_example_binding_validation_can_fail(example_binding):
    from pydantic import ValidationError

    broken = yaml.safe_load(yaml.safe_dump(example_binding["spec"]))
    broken["slurm"]["exclusive"] = "always"
    with pytest.raises(ValidationError):
        model.parse_spec(broken)


def test_example_secret_is_a_marked_template_for_the_binding(objects, example_binding):
    ref = example_binding["spec"]["runner"]["tokenSecretRef"]
    secret = find(objects, "Secret", ref["name"], example_binding["metadata"]["namespace"])
    token = secret["stringData"][ref.get("key", "token")]
    assert "REPLACE" in token
    assert "TEMPLATE" in (MANIFESTS / "examples" / "secret.yaml").read_text()


def test_argocd_application_example(objects):
    app = find(objects, "Application", "sunk-sandbox-operator", "argocd")
    assert app["apiVersion"] == "argoproj.io/v1alpha1"
    assert app["spec"]["source"]["path"] == "manifests"
    assert "ServerSideApply=true" in app["spec"]["syncPolicy"]["syncOptions"]
    assert app["spec"]["destination"]["namespace"] == OPERATOR_NS


# ---------------------------------------------------------------- kustomizations


def kustomizations() -> list[Path]:
    return [p for p in yaml_files() if is_kustomization(p)]


def referenced_files(kustomization: Path) -> set[Path]:
    doc = yaml.safe_load(kustomization.read_text())
    here = kustomization.parent
    out = set()
    for entry in doc.get("resources", []) + doc.get("components", []):
        target = (here / entry).resolve()
        assert target.exists(), f"{kustomization}: {entry} does not exist"
        if target.is_dir():
            assert any((target / n).exists() for n in ("kustomization.yaml", "kustomization.yml", "Kustomization")), \
                f"{kustomization}: {entry} is a directory without a kustomization"
        out.add(target)
    for generator in doc.get("configMapGenerator", []) + doc.get("secretGenerator", []):
        for entry in generator.get("files", []):
            target = (here / entry.split("=", 1)[-1]).resolve()
            assert target.is_file(), f"{kustomization}: {entry} does not exist"
            assert here.resolve() in target.parents, f"{kustomization}: kustomize only loads files under its root"
            out.add(target)
    return out


def test_kustomization_references_exist():
    assert (MANIFESTS / "kustomization.yaml").exists()
    assert (CRDS / "kustomization.yaml").exists()
    for path in kustomizations():
        referenced_files(path)


def test_main_kustomization_lists_the_operator():
    doc = yaml.safe_load((MANIFESTS / "kustomization.yaml").read_text())
    assert set(doc["resources"]) >= {"../crds", "namespace.yaml", "serviceaccount.yaml", "rbac.yaml",
                                     "rbac-secrets.yaml", "rbac-targets.yaml", "rbac-operator.yaml", "deployment.yaml", "pdb.yaml",
                                     "service.yaml"}
    assert "namespace" not in doc, "a kustomize namespace would move the tenant-slurm Secret Role"
    assert doc["images"] == [{"name": "sunk-sandbox-operator", "newName": IMAGE.rsplit(":", 1)[0],
                              "newTag": IMAGE.rsplit(":", 1)[1]}]
    (labels,) = doc["labels"]
    assert labels["pairs"]["app.kubernetes.io/name"] == "sunk-sandbox-operator"
    assert "app.kubernetes.io/part-of" in labels["pairs"]
    assert yaml.safe_load((CRDS / "kustomization.yaml").read_text())["resources"] == ["sunksandboxbindings.yaml"]


def test_every_manifest_file_is_used():
    used = set()
    for path in kustomizations():
        for target in referenced_files(path):
            used.add(target)
            if target.is_dir():
                used.update(target.rglob("*"))
    for path in yaml_files():
        if is_kustomization(path) or path in STANDALONE:
            continue
        assert path.resolve() in used, f"{path.relative_to(ROOT)} is in no kustomization"


def test_the_scheduler_clusterrole_has_what_a_secondary_scheduler_needs_in_a_namespace(objects):
    # kube-scheduler's own role is the reference; the operator binds this one per listed namespace
    # (the only ClusterRole its `bind` rule names), so it must not hold more.
    role = find(objects, "ClusterRole", "sunk-scheduler-sandbox", None)
    assert flatten(role["rules"]) == (
        {("", "pods", verb, None) for verb in ("get", "list", "watch")}
        | {("", "pods/binding", "create", None)}
        | {("", "pods/status", verb, None) for verb in ("patch", "update")}
        | {(group, "events", verb, None) for group in ("", "events.k8s.io") for verb in ("create", "patch", "update")})


# Tenants' access through the built-in roles (manifests/rbac-tenants.yaml): ClusterRole -> the built-in
# roles it aggregates to, and its rules. Never the status subresource (the operator's report).
AGGREGATE = "rbac.authorization.k8s.io/aggregate-to-"
EXPECTED_TENANT_ROLES = {
    "sunk-sandbox-operator-view": ({"view", "edit", "admin"}, _rules((model.GROUP, model.PLURAL, "get list watch", ()))),
    "sunk-sandbox-operator-edit": ({"edit", "admin"},
                                   _rules((model.GROUP, model.PLURAL, "create update patch delete", ()))),
}


def test_tenant_roles_aggregate_bindings_into_the_built_in_roles(objects):
    roles = {d["metadata"]["name"]: d for _, d in objects
             if d["kind"] == "ClusterRole" and any(k.startswith(AGGREGATE) for k in d["metadata"].get("labels", {}))}
    assert set(roles) == set(EXPECTED_TENANT_ROLES)
    for name, (into, rules) in EXPECTED_TENANT_ROLES.items():
        labels = roles[name]["metadata"]["labels"]
        assert {k[len(AGGREGATE):] for k, v in labels.items() if k.startswith(AGGREGATE) and v == "true"} == into, name
        assert flatten(roles[name]["rules"]) == rules, name
        assert "aggregationRule" not in roles[name]
    everything = set().union(*(rules for _, rules in EXPECTED_TENANT_ROLES.values()))
    assert not {r for r in everything if r[1] != model.PLURAL}, "only the bindings: not /status, not /finalizers"
    # view is read-only; what edit adds is every write but deletecollection (one deletion at a time).
    assert {r[2] for r in EXPECTED_TENANT_ROLES["sunk-sandbox-operator-view"][1]} == {"get", "list", "watch"}
