"""SlurmReady: gather (the token, one request with it) → decide (core/slurm.py) → report.

Each binding checks Slurm with its *own* token, at each reconcile: the partition it pins (GET
/partition/NAME) or, with none pinned, a ping. That request is also what admits the binding to the
shared job list (controller/slurm_poll.py): a binding sees placeholder jobs only while its token
passes Slurm's authentication. The token is read from the admitted spec's Secret at use, checked
offline first (a value no HTTP header can carry, a malformed, expired or mismatched JWT is not
sent; one that expires within the hour is a SlurmTokenExpiring Warning, once per token), and never
logged, reported or put in an exception; the URL is one the operator's settings allow (the tenancy
check refused the binding otherwise, before anything here runs). The OpenAPI version is the spec's
or negotiated by the shared client (adapters/slurmrest.py); status.slurm says which, and why.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..adapters import slurmrest as sr
from ..api.events import EventReason
from ..api.reasons import SlurmReady
from ..api.status import SlurmStatus
from ..api.spec import BindingSpec
from ..core import slurm
from ..core.compose import Part
from ..core.pods import parse_time
from ..core.problems import Problem
from ..core.redact import describe
from ..core.slurm_poll import TokenOutcome
from . import credentials
from .context import Context
from .state import BindingState

COND = "SlurmReady"


@dataclass(frozen=True)
class PollerKey:
    """One shared poller per slurmrestd URL, Slurm user and API version (None: negotiated)."""

    url: str
    user: str
    api_version: str | None


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
    where = f"Secret {state.namespace}/{rest.token_secret_ref.name} key {rest.token_secret_ref.key}"
    client = clients.client(url, rest.api_version)

    def seen(**kw) -> slurm.SlurmObservation:
        return slurm.SlurmObservation(url, rest.user, partition, api_version=client.api_version,
                                      negotiated=client.negotiated, release=client.release, token_where=where,
                                      **kw)

    try:
        token = await read_token(ctx, state)
    except Problem as exc:
        return seen(error="credentials", detail=exc.message)
    unsendable = slurm.header_problem(token)
    if unsendable is not None:
        return seen(error="credentials", detail=f"the value of {where} cannot be sent: {unsendable}")
    problem = slurm.token_problem(token, rest.user, wall(ctx))
    if problem is not None:
        return seen(error="token", detail=f"{problem} ({where})")
    exp = slurm.token_expiry(token)
    expires = exp if slurm.expiring(exp, wall(ctx)) else None

    async def again() -> str:  # read at use: the request reads the Secret itself
        return await read_token(ctx, state)

    try:
        if partition is not None:
            answer = await client.partition(partition, rest.user, again)
        else:
            answer = await client.ping(rest.user, again)
    except Problem as exc:
        return seen(error="credentials", detail=exc.message)
    except sr.SlurmError as exc:
        return seen(error=sr.kind(exc), detail=describe(exc), token_expires=expires)
    return seen(answer=answer, token_expires=expires)


def _outcome(obs: slurm.SlurmObservation | None) -> TokenOutcome:
    if slurm.verified(obs):
        return TokenOutcome.VERIFIED
    return TokenOutcome.UNREACHABLE if obs is not None and obs.error == "unreachable" else TokenOutcome.REFUSED


def _section(obs: slurm.SlurmObservation | None, exp: int | None) -> dict | None:
    if obs is None:
        return None
    return SlurmStatus(api_version=obs.api_version, api_version_source=None if obs.api_version is None else
                       "negotiated" if obs.negotiated else "spec", release=obs.release,
                       token_expires=slurm.iso(exp) if exp is not None else None).wire()


async def sync(ctx: Context, clients, state: BindingState) -> Part:
    """SlurmReady (and status.slurm), and what the shared poller needs to know about this binding's
    token. `clients` (slurm_poll.Pollers) holds the HTTP clients, one per slurmrestd and version."""
    obs = await observe(ctx, clients, state)
    mem = state.slurm
    mem.key = key_of(state.spec)
    mem.outcome = _outcome(obs)
    mem.partition_seen = None
    if obs is not None and obs.partition is not None and slurm.verified(obs):
        mem.partition_seen = (slurm.partition_state(obs.answer) or "") if obs.error is None else ""
    if obs is not None and obs.token_expires is not None and mem.expiry_warned != obs.token_expires:
        mem.expiry_warned = obs.token_expires  # once per token: a new one has another `exp`
        ctx.event(state, EventReason.SLURM_TOKEN_EXPIRING,
                  f"the Slurm JWT in {obs.token_where} expires at {slurm.iso(obs.token_expires)} (within the hour): put a "
                  f"new one there (`scontrol token username={obs.user} lifespan=...`); SlurmReady turns False then")
    status, reason, message = slurm.ready_condition(obs)
    exp = obs.token_expires if obs is not None else None
    return Part(COND, status, reason, message, "slurm", _section(obs, exp))
