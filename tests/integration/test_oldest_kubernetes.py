"""The oldest Kubernetes the chart accepts, for real.

Chart.yaml's kubeVersion names the minor of hack/kube-oldest, whose kube-apiserver (with the current
etcd and kubectl) serves this module's control plane: one, started for the module, which runs last
(its build is the last of `make test`'s background go lane: `needs_tool("kube-oldest")`).

On it the chart is installed by Helm 4 (server-side apply; Helm checks kubeVersion against the
server's /version), the operator runs as the installed ServiceAccount, and the tests of other modules
that cover what an old API server could break run again, with this module's fixtures: they have the
names of tests/conftest.py's session fixtures (cluster, kube, installed, operator_kubeconfig,
operator), and a module's fixture wins over conftest's for the tests collected in it, the imported
ones included.

- the CRD: established, every bad binding of test_crd refused naming its field (OpenAPI bounds and
  the CEL rules: `self.all(...)` over map keys, `has()`, `in`, implications), defaults as the models;
- a binding: Ready (emulator runner), the policy merged, deleted: the policy restored;
- the webhook (test_webhook's own fixtures): every attack denied at apply, the warnings, status and
  finalizer updates never blocked.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

import pytest

from sunk_sandbox_operator.adapters.runnerapi.emulator_wire import json_names
from tests.conftest import OPERATOR_NS, OPERATOR_SA, SECRET_VALUES, TEST_ENV, Kube, wait_for
from tests.integration.conftest import binding_spec, new_runner, runner_policy
from tests.integration.test_crd import (test_bad_binding_rejected_by_kubectl_apply,  # noqa: F401 - run here again
                                        test_bad_binding_rejected_with_field_named, test_crd_is_established,
                                        test_defaults_agree_with_models, test_explain_has_descriptions,
                                        test_minimal_binding_gets_defaults, test_printer_columns)
from tests.integration.test_helm_chart import CHART, INSTALL, RELEASE, helm
from tests.integration.test_policy import test_binding_merges_policy_and_preserves_everything_else  # noqa: F401
from tests.integration.test_webhook import (refused_before, webhook, webhook_ns,  # noqa: F401 - fixtures, tests
                                            webhook_operator, test_a_disallowed_api_url_is_denied_naming_the_field,
                                            test_a_missing_token_secret_is_a_warning_not_a_denial,
                                            test_an_older_binding_on_the_runner_is_a_warning,
                                            test_every_attack_is_denied_at_apply,
                                            test_status_metadata_and_finalizer_updates_are_never_blocked,
                                            test_the_webhook_replica_is_a_standby)

pytestmark = [pytest.mark.integration, pytest.mark.needs_tool("kube-oldest")]
CONSTRAINTS = {"network": {"egress": {"allow": ["pypi.org"]}}}


@pytest.fixture(scope="module")
def cluster() -> Iterator:
    from sunk_sandbox_devtools import devcluster

    c = devcluster.temp_cluster(apiserver=devcluster.ensure_oldest_apiserver())
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture(scope="module")
def kube(cluster) -> Kube:
    """The chart installed by Helm 4 in the release's namespace, its CRD Established before the first test."""
    k = Kube(cluster)
    k.create_namespace("tenant-slurm")  # the documented prerequisite
    done = helm("install", RELEASE, str(CHART), *INSTALL, kubeconfig=cluster.kubeconfig, major=4)
    assert "STATUS: deployed" in done.stdout, done.stdout

    def established() -> bool:
        crd = k.ext.read_custom_resource_definition("sunksandboxbindings.sunksandbox.dev")
        return any(c.type == "Established" and c.status == "True" for c in (crd.status.conditions or []))
    wait_for(established, 60)
    return k


@pytest.fixture(scope="module")
def installed(kube) -> Kube:
    return kube


@pytest.fixture(scope="module")
def operator_kubeconfig(installed, tmp_path_factory) -> Path:
    return installed.cluster.service_account_kubeconfig(
        OPERATOR_NS, OPERATOR_SA, tmp_path_factory.mktemp("oldest-operator") / "operator.kubeconfig")


@pytest.fixture(scope="module")
def operator(operator_kubeconfig, installed, tmp_path_factory) -> Iterator:
    from sunk_sandbox_devtools.devcluster import OperatorProcess

    proc = OperatorProcess(operator_kubeconfig, tmp_path_factory.mktemp("oldest-logs") / "operator.log",
                           env=TEST_ENV, args=("--log-format=json",))
    try:
        yield proc
    finally:
        proc.stop()
        assert not [t for t in SECRET_VALUES if t in proc.logs()], "a secret value appeared in the operator log"


def test_the_control_plane_is_the_oldest_minor_the_chart_accepts(cluster):
    from sunk_sandbox_devtools import devcluster

    server = json.loads(cluster.kubectl_run("version", "-o", "json", check=False).stdout)["serverVersion"]
    assert server["gitVersion"] == devcluster.oldest_kube_version()
    minor = devcluster.oldest_kube_version().split(".")[1]
    assert f">=1.{minor}.0-0" in (CHART / "Chart.yaml").read_text()


def test_a_binding_becomes_ready_and_its_deletion_restores_the_policy(installed, operator, emulator, binding_ns):
    runner = new_runner(emulator, {"constraints": CONSTRAINTS})
    installed.create_binding(binding_ns, "b", binding_spec(runner, emulator))
    ready = installed.wait_condition(binding_ns, "b", "Ready", "True", timeout=60)
    assert ready["observedGeneration"] == 1
    assert installed.binding(binding_ns, "b")["status"]["observedGeneration"] == 1
    assert runner_policy(emulator, runner)["base"]["spec"]["schedulerName"] == "slurm-scheduler"
    installed.kubectl("delete", "ssb", "-n", binding_ns, "b", "--timeout=60s")
    assert "schedulerName" not in (runner_policy(emulator, runner).get("base") or {}).get("spec", {})
    assert runner_policy(emulator, runner)["constraints"] == json_names(CONSTRAINTS)  # kept
