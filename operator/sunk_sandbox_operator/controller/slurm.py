"""SlurmReady: gather (the token, one request with it) → decide (core/slurm.py) → report.

Each binding checks Slurm with its *own* token, at each reconcile: the partition it pins (GET
/partition/NAME) or, with none pinned, a ping. That request is also what admits the binding to the
shared job list (controller/slurm_poll.py): a binding sees placeholder jobs only while its token
passes Slurm's authentication. The token is read from the admitted spec's Secret at use, checked
offline first (a malformed, expired or mismatched JWT is not sent), and never logged, reported or
put in an exception; the URL is one the operator's settings allow (the tenancy check refused the
binding otherwise, before anything here runs).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..adapters import slurmrest as sr
from ..api.reasons import SlurmReady
from ..api.spec import BindingSpec
from ..core import slurm
from ..core.compose import Part
from ..core.pods import parse_time
from ..core.problems import Problem
from ..core.redact import describe
from . import credentials
from .context import Context
from .state import BindingState

COND = "SlurmReady"


@dataclass(frozen=True)
class PollerKey:
    """One shared poller per slurmrestd URL, Slurm user and API version."""

    url: str
    user: str
    api_version: str


def key_of(spec: BindingSpec | None) -> PollerKey | None:
    rest = spec.slurm.rest_api if spec is not None else None
    return PollerKey(rest.url.rstrip("/"), rest.user, rest.api_version) if rest is not None else None


async def read_token(ctx: Context, state: BindingState) -> str:
    """The Slurm JWT from the admitted spec's Secret (never logged): a CredentialsMissing Problem with the fix."""
    rest = state.admitted_spec.slurm.rest_api
    assert rest is not None  # only a binding naming a slurmrestd reads its token
    return await credentials.read_token(ctx, state.namespace, rest.token_secret_ref, reason=SlurmReady.CREDENTIALS_MISSING,
                                        field="spec.slurm.restAPI.tokenSecretRef", what="a Slurm JWT")


def wall(ctx: Context) -> float:
    """The injected wall clock as epoch seconds (tests drive it with the fake clock)."""
    return parse_time(ctx.now_iso()) or 0.0


async def observe(ctx: Context, clients, state: BindingState) -> slurm.SlurmObservation | None:
    """The binding's own request, or the error it met (None: no spec.slurm.restAPI)."""
    spec = state.spec
    if spec is None or spec.slurm.rest_api is None:
        return None
    rest = spec.slurm.rest_api
    url, partition = rest.url.rstrip("/"), spec.partition

    def fail(kind: str, detail: str) -> slurm.SlurmObservation:
        return slurm.SlurmObservation(url, rest.user, partition, error=kind, detail=detail)

    try:
        token = await read_token(ctx, state)
    except Problem as exc:
        return fail("credentials", exc.message)
    problem = slurm.token_problem(token, rest.user, wall(ctx))
    if problem is not None:
        return fail("token", problem)
    client = clients.client(url, rest.api_version)

    async def again() -> str:  # read at use: the request reads the Secret itself
        return await read_token(ctx, state)

    try:
        if partition is not None:
            answer = await client.partition(partition, rest.user, again)
        else:
            answer = await client.ping(rest.user, again)
    except Problem as exc:
        return fail("credentials", exc.message)
    except sr.SlurmError as exc:
        return fail(sr.kind(exc), describe(exc))
    return slurm.SlurmObservation(url, rest.user, partition, answer=answer)


async def sync(ctx: Context, clients, state: BindingState) -> Part:
    """SlurmReady, and what the shared poller needs to know about this binding's token. `clients`
    (slurm_poll.Pollers) holds the HTTP clients, one per slurmrestd."""
    obs = await observe(ctx, clients, state)
    mem = state.slurm
    mem.key = key_of(state.spec)
    mem.outcome = ("verified" if slurm.verified(obs) else
                   "unreachable" if obs is not None and obs.error == "unreachable" else "refused")
    mem.partition_seen = None
    if obs is not None and obs.partition is not None and slurm.verified(obs):
        mem.partition_seen = (slurm.partition_state(obs.answer) or "") if obs.error is None else ""
    status, reason, message = slurm.ready_condition(obs)
    return Part(COND, status, reason, message)
