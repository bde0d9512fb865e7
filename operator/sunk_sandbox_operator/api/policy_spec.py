"""spec.policy: how the binding treats the runner policy (crossplane's managementPolicies, for one concern).

The runner policy may have another declarative owner (Terraform's `coreweave_sandbox_managed_runner`
puts its whole policy back at every apply). `management: Observe` declares it up front: the policy
is read and verified, never written (nor restored on deletion), while the scope, the RBAC grants
and the placement checks go on as usual. `spec.mode: Observe` is the same for every concern at once.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from .base import _Model


class PolicySpec(_Model):
    """How the runner policy is managed."""

    management: Literal["Enforce", "Observe"] = Field(
        default="Enforce",
        description="Enforce: merge the binding's keys (schedulerName, the pinned annotations) into the runner "
        "policy and put them back when someone removes them; if another writer keeps removing them, stop "
        "writing and report PolicyManagedElsewhere. Observe: another owner (e.g. Terraform) manages the policy: "
        "it is read and verified, never written nor restored; PolicySynced names the keys it lacks and the "
        "fragment to add. The scope, RBAC and placement checks are not affected.",
    )
