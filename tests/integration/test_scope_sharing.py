"""Scope targets as SUNK is really deployed (real control plane, the operator as its ServiceAccount):
a blank list, several bindings on one target, bindings that disagree, the scheduler's RBAC checked
with SubjectAccessReviews, and a scheduler run by a StatefulSet."""

from __future__ import annotations

import time
import uuid

import pytest
import yaml

from tests.conftest import assert_stays, wait_for
from tests.integration.conftest import (binding_spec, create_token_secret, grant_secret_read, make_scheduler,
                                        new_runner)

pytestmark = pytest.mark.integration

CM = "slurm-scheduler-config"
KEY = "scheduler.conf"
GENERATION = "sunksandbox.dev/scope-generation"


@pytest.fixture
def slurm_ns(installed, ns) -> str:
    grant_secret_read(installed, ns)
    create_token_secret(installed, ns)
    return ns


def listed(kube, ns: str) -> list[str]:
    conf = yaml.safe_load(kube.core.read_namespaced_config_map(CM, ns).data[KEY])
    return sorted(conf["scheduler"]["scope"].get("namespaces") or [])


def namespaces(kube, *suffixes: str) -> str:
    prefix = "dz" + uuid.uuid4().hex[:6]
    for s in suffixes:
        kube.create_namespace(f"{prefix}-{s}")
    return prefix


def bind(kube, emulator, ns: str, name: str, glob: str, **spec) -> None:
    kube.create_binding(ns, name, binding_spec(new_runner(emulator, {}), emulator,
                                               sandboxNamespaces={"names": [glob]}, **spec))


def delete_binding(kube, ns: str, name: str) -> None:
    kube.custom.delete_namespaced_custom_object("sunksandbox.dev", "v1alpha1", ns, "sunksandboxbindings", name)


def test_a_blank_list_keeps_the_scheduler_s_own_namespace(installed, operator, emulator, slurm_ns):
    make_scheduler(installed, slurm_ns)  # scope type namespace, no list: "the scheduler's own namespace"
    assert "namespaces" not in installed.core.read_namespaced_config_map(CM, slurm_ns).data[KEY]
    p = namespaces(installed, "a")
    bind(installed, emulator, slurm_ns, "b", f"{p}-*")
    installed.wait_condition(slurm_ns, "b", "ScopeSynced", "True", timeout=30)
    assert listed(installed, slurm_ns) == sorted([slurm_ns, f"{p}-a"])


def test_several_bindings_share_one_target_without_flapping(installed, operator, emulator, slurm_ns):
    make_scheduler(installed, slurm_ns, scope_namespaces=[slurm_ns])
    p = namespaces(installed, "a", "team-x")
    bind(installed, emulator, slurm_ns, "wide", f"{p}-*")           # wants both
    installed.wait_condition(slurm_ns, "wide", "ScopeSynced", "True", timeout=30)
    bind(installed, emulator, slurm_ns, "team", f"{p}-team-*")      # wants one of them too
    installed.wait_condition(slurm_ns, "team", "ScopeSynced", "True", timeout=30)
    assert listed(installed, slurm_ns) == sorted([slurm_ns, f"{p}-a", f"{p}-team-x"])
    rv = installed.core.read_namespaced_config_map(CM, slurm_ns).metadata.resource_version

    def still() -> None:
        assert installed.core.read_namespaced_config_map(CM, slurm_ns).metadata.resource_version == rv
    assert_stays(still, 3)  # no tug-of-war between the two bindings' records

    delete_binding(installed, slurm_ns, "wide")  # Restore: its entries leave, except what "team" still wants
    wait_for(lambda: listed(installed, slurm_ns) == sorted([slurm_ns, f"{p}-team-x"]), 20,
             lambda: str(listed(installed, slurm_ns)))
    installed.wait_condition(slurm_ns, "team", "ScopeSynced", "True", timeout=10)
    delete_binding(installed, slurm_ns, "team")  # the last binding wanting it removes it
    wait_for(lambda: listed(installed, slurm_ns) == [slurm_ns], 20, lambda: str(listed(installed, slurm_ns)))


def test_bindings_that_disagree_on_a_shared_target_get_a_clear_condition(installed, operator, emulator, slurm_ns):
    make_scheduler(installed, slurm_ns, scope_namespaces=[slurm_ns])
    p = namespaces(installed, "a")
    bind(installed, emulator, slurm_ns, "writer", f"{p}-*")
    installed.wait_condition(slurm_ns, "writer", "ScopeSynced", "True", timeout=30)
    time.sleep(1.1)  # creation times have one-second resolution: the observer is strictly younger
    bind(installed, emulator, slurm_ns, "observer", f"{p}-*", mode="Observe")
    cond = installed.wait_condition(slurm_ns, "observer", "ScopeSynced", "False", "SharedTargetConflict", timeout=30)
    assert f"binding {slurm_ns}/writer (older)" in cond["message"] and "spec.mode" in cond["message"]
    assert installed.condition(slurm_ns, "writer", "ScopeSynced")["status"] == "True"


def test_the_scheduler_s_rbac_is_checked_in_every_listed_namespace(installed, operator, emulator, slurm_ns):
    make_scheduler(installed, slurm_ns, scope_namespaces=[slurm_ns], permitted=False)
    p = namespaces(installed, "a", "b")
    bind(installed, emulator, slurm_ns, "b", f"{p}-*")
    cond = installed.wait_condition(slurm_ns, "b", "ScopeSynced", "False", "SchedulerNotPermitted", timeout=30)
    # Checked where the binding's sandboxes are (its matched namespaces), not in what else is listed.
    assert f"{slurm_ns}/slurm-scheduler may not watch pods or create pods/binding in 2 of the binding's listed " \
        "namespace(s)" in cond["message"], cond["message"]
    assert f"{p}-a" in cond["message"] and "grantClusterRole: sunk-scheduler-sandbox" in cond["message"]
    assert listed(installed, slurm_ns) == sorted([slurm_ns, f"{p}-a", f"{p}-b"])  # the list is still written

    # The fix the message names: the operator grants the shipped ClusterRole in each of them.
    installed.custom.patch_namespaced_custom_object("sunksandbox.dev", "v1alpha1", slurm_ns, "sunksandboxbindings", "b",
                                                    {"spec": {"scope": {"grantClusterRole": "sunk-scheduler-sandbox"}}})
    installed.wait_condition(slurm_ns, "b", "ScopeSynced", "True", timeout=30)
    for ns in (f"{p}-a", f"{p}-b"):
        rbs = installed.rbac.list_namespaced_role_binding(ns, label_selector="sunksandbox.dev/binding").items
        assert [rb.role_ref.name for rb in rbs] == ["sunk-scheduler-sandbox"]
    assert installed.rbac.list_namespaced_role_binding(slurm_ns, label_selector="sunksandbox.dev/binding").items == []
    # A namespace created now is listed, granted and checked too.
    installed.create_namespace(f"{p}-c")
    wait_for(lambda: f"{p}-c" in listed(installed, slurm_ns), 10)
    def permitted() -> None:
        cond = installed.condition(slurm_ns, "b", "ScopeSynced")
        assert cond["status"] == "True", cond
    assert_stays(permitted, 2)


def test_a_scheduler_run_by_a_statefulset_is_rolled(installed, operator, emulator, slurm_ns):
    make_scheduler(installed, slurm_ns, scope_namespaces=[slurm_ns])
    dep = installed.apps.read_namespaced_deployment("slurm-scheduler", slurm_ns)
    installed.apps.delete_namespaced_deployment("slurm-scheduler", slurm_ns)
    labels = dep.spec.selector.match_labels
    installed.apps.create_namespaced_stateful_set(slurm_ns, {
        "metadata": {"name": "slurm-scheduler"},
        "spec": {"serviceName": "slurm-scheduler", "replicas": 1, "selector": {"matchLabels": labels},
                 "template": installed.api.sanitize_for_serialization(dep.spec.template)}})
    p = namespaces(installed, "a")
    bind(installed, emulator, slurm_ns, "b", f"{p}-*", scope={"minRollInterval": "0s"})  # every change rolls
    installed.wait_condition(slurm_ns, "b", "ScopeSynced", "True", timeout=30)

    def template() -> dict:
        sts = installed.apps.read_namespaced_stateful_set("slurm-scheduler", slurm_ns)
        return dict(sts.spec.template.metadata.annotations or {})
    first = wait_for(lambda: template().get(GENERATION), 10, lambda: str(template()))
    installed.create_namespace(f"{p}-b")
    wait_for(lambda: template().get(GENERATION) not in (None, first), 10, lambda: str(template()))
    cond = installed.condition(slurm_ns, "b", "ScopeSynced")
    assert "No Deployment or StatefulSet" not in cond["message"]
