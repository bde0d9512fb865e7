"""core.scope.errors.classify: what a scope target's failure is reported as, one row per kind of
failure, the reason and the whole message (users read these, and tests/integration wait for them)."""

from __future__ import annotations

from typing import get_args

import pytest

from sunk_sandbox_operator.api.reasons import ScopeSynced
from sunk_sandbox_operator.core.scope.errors import Cause, Op, TargetError, classify

CM = "ConfigMap slurm/cm key scheduler.conf at scheduler.scope.namespaces"
FLUX = ("ConfigMap slurm/slurm-sunk-scope key values.yaml at scheduler.scope.namespaces (valuesFrom of HelmRelease "
        "slurm/slurm)")
GRANT = ("grant it: a RoleBinding in slurm to the ClusterRole sunk-sandbox-operator-targets for the operator's "
         "ServiceAccount (manifests/rbac-targets.yaml)")
ENTRY = "spec:\n  valuesFrom:\n  - kind: ConfigMap\n    name: slurm-sunk-scope\n    valuesKey: values.yaml"


def flux(cause: Cause) -> TargetError:
    """The HelmRelease slurm/slurm, checked for reading ConfigMap slurm-sunk-scope key values.yaml."""
    return TargetError("read", cause, FLUX, "slurm", "HelmRelease slurm/slurm", name="slurm-sunk-scope",
                       key="values.yaml", path="scheduler.scope.namespaces")


ROWS = [
    (TargetError("read", "not-found", CM, "slurm", "ConfigMap slurm/cm", "spec.scope.target"),
     ScopeSynced.TARGET_NOT_FOUND, "ConfigMap slurm/cm not found: create it or fix spec.scope.target"),
    (TargetError("read", "not-found", "HelmRelease slurm/slurm", "slurm", "Flux HelmRelease slurm/slurm",
                 "spec.scope.target.helmRelease (a helm.toolkit.fluxcd.io/v2 HelmRelease)"),
     ScopeSynced.TARGET_NOT_FOUND, "Flux HelmRelease slurm/slurm not found: create it or fix "
     "spec.scope.target.helmRelease (a helm.toolkit.fluxcd.io/v2 HelmRelease)"),
    (TargetError("read", "forbidden", CM, "slurm", "ConfigMap slurm/cm", "spec.scope.target", detail="denied"),
     ScopeSynced.FORBIDDEN, f"the operator may not read {CM}: denied; {GRANT}"),
    (TargetError("write", "forbidden", CM, "slurm", detail="denied"),
     ScopeSynced.FORBIDDEN, f"the operator may not write {CM}: denied; {GRANT}"),
    (TargetError("write", "not-found", CM, "slurm", detail="gone"),
     ScopeSynced.TARGET_NOT_FOUND, f"{CM} disappeared while being written"),
    (TargetError("write", "invalid", CM, "slurm", detail="field is immutable"),
     ScopeSynced.INVALID_CONFIG, f"the API server refused the write to {CM}: field is immutable"),
    (TargetError("read", "no-key", CM, "slurm", "ConfigMap slurm/cm", "spec.scope.target.configMap.key",
                 key="scheduler.conf"),
     ScopeSynced.TARGET_NOT_FOUND, "ConfigMap slurm/cm has no key scheduler.conf: fix spec.scope.target.configMap.key"),
    (TargetError("write", "document", CM, "slurm", detail="malformed YAML at line 3, column 1: oops"),
     ScopeSynced.INVALID_CONFIG, f"{CM}: malformed YAML at line 3, column 1: oops"),
    (TargetError("write", "refused", CM, "slurm", detail="more than 100,000 YAML nodes"),
     ScopeSynced.DOCUMENT_REFUSED, f"{CM}: more than 100,000 YAML nodes"),
    (TargetError("read", "values", "Application argocd/slurm", detail="has neither spec.source nor spec.sources",
                 reason=ScopeSynced.INVALID_CONFIG),
     ScopeSynced.INVALID_CONFIG, "Application argocd/slurm: has neither spec.source nor spec.sources"),
    (TargetError("write", "values", "Application argocd/slurm at x in spec.source.helm.values", detail="why",
                 reason=ScopeSynced.LIST_NOT_EDITABLE),
     ScopeSynced.LIST_NOT_EDITABLE, "Application argocd/slurm at x in spec.source.helm.values: why"),
    (flux("values-from-missing"),
     ScopeSynced.VALUES_FROM_MISSING, "HelmRelease slurm/slurm does not read ConfigMap slurm-sunk-scope key "
     "values.yaml in spec.valuesFrom. Add this entry, last in spec.valuesFrom (a later entry setting "
     f"scheduler.scope.namespaces would override it):\n{ENTRY}\n(or fix spec.scope.target.helmRelease); nothing "
     "is written until then"),
    (flux("values-from-target-path"),
     ScopeSynced.VALUES_FROM_MISSING, "HelmRelease slurm/slurm reads ConfigMap slurm-sunk-scope key values.yaml only "
     "with a targetPath (a single flat value): remove targetPath, the key holds a values document. Add this entry, "
     "last in spec.valuesFrom (a later entry setting scheduler.scope.namespaces would override it):\n"
     f"{ENTRY}\n(or fix spec.scope.target.helmRelease); nothing is written until then"),
    (flux("values-overridden"),
     ScopeSynced.VALUES_OVERRIDDEN, "HelmRelease slurm/slurm sets scheduler.scope.namespaces in its inline "
     "spec.values, which Flux merges over every valuesFrom entry, so the list in "
     f"{FLUX} would have no effect: remove scheduler.scope.namespaces from spec.values (list fixed namespaces in "
     "spec.scope.alwaysInclude); nothing is written until then"),
    (TargetError("build", "no-release-name", namespace="slurm", name=None),
     ScopeSynced.INVALID_CONFIG, "spec.scope.target.helmRelease needs a name, and a configMap name when "
     "None-sunk-scope is longer than 253 characters"),
    (TargetError("build", "no-configmap", namespace="slurm", key="scheduler.conf"),
     ScopeSynced.TARGET_NOT_FOUND, "no ConfigMap labelled app.kubernetes.io/component=scheduler with key "
     "scheduler.conf in slurm: set spec.scope.target.configMap.name, or use target kind ArgoCDApplication when the "
     "list lives in the Slurm chart's Helm values"),
]


@pytest.mark.parametrize("error, reason, message", ROWS, ids=[f"{e.op}-{e.cause}" for e, _, _ in ROWS])
def test_each_failure_has_its_reason_and_fix(error: TargetError, reason: ScopeSynced, message: str) -> None:
    problem = classify(error)
    assert (problem.reason, problem.message) == (reason, message)


def test_every_cause_has_a_row_and_classifies_whatever_the_operation() -> None:
    assert {e.cause for e, _, _ in ROWS} == set(get_args(Cause))
    for cause in get_args(Cause):
        for op in get_args(Op):
            assert classify(TargetError(op, cause, "t", "ns")).reason in set(ScopeSynced)
