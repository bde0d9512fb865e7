"""spec.slurm.restAPI: where the operator reads Slurm's side (slurmrestd with JWT auth).

Read only: the partition (SlurmReady) and each sandbox pod's placeholder job (PlacementVerified).
The token is read from the Secret at each use and sent only to a URL the operator's settings allow
(core/tenancy.py, `--allowed-slurm-url`).
"""

from __future__ import annotations

from typing import Annotated, Literal, Optional

from pydantic import Field, StringConstraints

from .base import _Model
from .bounds import (DNS_SUBDOMAIN_PATTERN, JOB_NAME_TEMPLATE_MAX, JOB_NAME_TEMPLATE_PATTERN, JOB_NAME_TEMPLATES_MAX,
                     NAME_MAX, SLURM_USER_PATTERN, URL_MAX)

# The OpenAPI (data_parser) versions the operator reads, newest first (core/slurm_versions.py).
SlurmAPIVersion = Literal["v0.0.45", "v0.0.44", "v0.0.43", "v0.0.42", "v0.0.41", "v0.0.40", "v0.0.38"]
DEFAULT_JOB_NAME_TEMPLATES = ["{namespace}/{name}"]


class SlurmTokenRef(_Model):
    """A key of a Secret in the binding's namespace holding a Slurm JWT."""

    name: str = Field(
        description="Name of the Secret, in the binding's namespace, holding a Slurm JWT for restAPI.user "
        "(`scontrol token username=USER lifespan=SECONDS`).",
        pattern=DNS_SUBDOMAIN_PATTERN, max_length=NAME_MAX,
    )
    key: str = Field(default="token", description="Key of the Secret's data holding the token.", min_length=1,
                     max_length=NAME_MAX)


class SlurmRestAPI(_Model):
    """Where the operator reads Slurm's side (slurmrestd, JWT auth): the partition, and each sandbox pod's
    placeholder job. Read only; the token is sent only to a URL the operator's settings allow."""

    url: str = Field(
        description="Base URL of slurmrestd (e.g. https://slurm-rest.tenant-slurm.svc:6820). Must be allowed by "
        "the operator's --allowed-slurm-url (default: none): until then the binding is NotAllowed.",
        pattern=r"^https?://[^\s/]+(/[^\s]*)?$", max_length=URL_MAX,
    )
    token_secret_ref: SlurmTokenRef = Field(
        description="Secret holding the JWT (sent as X-SLURM-USER-TOKEN). Read at each use, so rotation works.")
    user: str = Field(description="The Slurm user the token is for (sent as X-SLURM-USER-NAME; Slurm 22.05 "
                      "requires it).", pattern=SLURM_USER_PATTERN, max_length=32)
    api_version: Optional[SlurmAPIVersion] = Field(
        default=None,
        description="slurmrestd's OpenAPI (data_parser) version. Unset: negotiated, the newest one slurmrestd serves "
        "of those the operator reads (Slurm 22.05 serves v0.0.38; 24.11 v0.0.40-v0.0.42; 25.11, SUNK 8.1 and 8.2, "
        "v0.0.41-v0.0.44; 26.05 v0.0.42-v0.0.45). Set: that one only (SlurmReady says APIVersionNotServed when "
        "slurmrestd does not serve it).",
    )
    job_name_templates: list[Annotated[str, StringConstraints(pattern=JOB_NAME_TEMPLATE_PATTERN, min_length=1,
                                                              max_length=JOB_NAME_TEMPLATE_MAX)]] = Field(
        default_factory=lambda: list(DEFAULT_JOB_NAME_TEMPLATES), min_length=1, max_length=JOB_NAME_TEMPLATES_MAX,
        description="Names the SUNK scheduler may give a sandbox pod's placeholder job, tried in order; "
        "placeholders {namespace}, {name}, {uid}, {sandboxId} (the pod's sandbox.coreweave.com/sandbox-id "
        "label) and {jobName} (its batch.kubernetes.io/job-name label: with SUNK 8.2's gang scheduling one job "
        "stands for the pods of a Job). status.placement.jobs.templates says which matched.",
    )
