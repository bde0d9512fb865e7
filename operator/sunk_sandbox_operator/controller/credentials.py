"""Reading a token from a binding's Secret: the runner API token and the Slurm JWT alike.

Read at every use (rotation needs nothing else), through the admitted spec's reference only, never
logged; every way it can be missing is a Problem naming the Secret, the key, the spec field and
the fix, and an empty value is said as such (nothing is sent with it).
"""

from __future__ import annotations

from typing import Protocol

from ..adapters import kube as k
from ..api.reasons import _Reason
from ..core.problems import Problem
from .context import Context


class SecretRef(Protocol):
    """A spec's reference to one key of a Secret in the binding's namespace."""

    @property
    def name(self) -> str: ...

    @property
    def key(self) -> str: ...


async def read_token(ctx: Context, namespace: str, ref: SecretRef, *, reason: _Reason, field: str,
                     what: str) -> str:
    """The value under `ref` in `namespace` (stripped); `field` names the spec field, `what` the token."""
    where = f"Secret {namespace}/{ref.name}"
    try:
        value = await ctx.kube.read_secret_key(namespace, ref.name, ref.key)
    except k.NotFound:
        raise Problem(reason, f"{where} not found ({field}): create it with {what} under key {ref.key!r}") from None
    except KeyError:
        raise Problem(reason, f"{where} has no key {ref.key!r}: set {field}.key or add the key") from None
    except k.Forbidden:
        raise Problem(reason, f"the operator may not read {where}: grant it `get` on secrets in this namespace "
                      "(a RoleBinding to the ClusterRole sunk-sandbox-operator-secret-reader)") from None
    ctx.redactor.remember(value)  # a text that would still carry it is redacted before it leaves
    if not value.strip():  # said as such, not as a token the API refused (and nothing is sent)
        raise Problem(reason, f"key {ref.key!r} of {where} is empty: put {what} there")
    return value.strip()
