"""The runner policy pipeline: gather (token, GetManagedRunner) → decide (pure) → write → report.

A stale etag (another admin wrote in between) loses the race: `retry.optimistic` re-reads and
re-decides onto *their* policy, so their change is never lost. Observe mode reads and reports.
"""

from __future__ import annotations

import asyncio
import hashlib

from ..api.events import EventReason
from ..adapters import kube as k
from ..adapters.runnerapi import client as rc
from ..adapters.runnerapi import errors as rerr
from ..api.reasons import PolicySynced
from ..api.status import OwnedPath, PolicyContention
from ..core.problems import Problem
from ..core.redact import describe
from ..core import policy as pol
from ..core import policy_contention as contention
from ..core import ownership as own
from ..core import policy_decide as decide
from ..core.compose import Part
from . import credentials, retry
from .context import Context
from .state import BindingState

COND = "PolicySynced"


def _status_owned(state: BindingState) -> list[OwnedPath]:
    return [OwnedPath.model_validate(o) for o in state.section("policy").get("owned") or []]


def _contention(state: BindingState) -> PolicyContention | None:
    """status.policy.contention as last reported: another writer removing our keys (kept in status
    so a restart or a new leader does not restart the fight; core/policy_contention.py says why)."""
    raw = state.section("policy").get("contention")
    return PolicyContention.model_validate(raw) if isinstance(raw, dict) else None


def _settings(ctx: Context) -> contention.Settings:
    return contention.Settings(ctx.config.policy_contention_corrections, ctx.config.policy_contention_window_seconds)


async def _record(ctx: Context, state: BindingState) -> own.Record | None:
    return await ctx.ownership.load(state.ref) if ctx.ownership is not None else None


async def _owned(ctx: Context, state: BindingState) -> tuple[list[OwnedPath], own.Record | None]:
    """What we own in this runner's policy: the ownership record, else (upgrade) status."""
    record = await _record(ctx, state)
    return own.owned_for(record, state.admitted_spec.runner.id, _status_owned(state)), record


async def _save(ctx: Context, state: BindingState, record_state: own.State, owned: list[OwnedPath],
                etag: str | None) -> None:
    if ctx.ownership is not None:
        await ctx.ownership.save(own.Record(state.ref, state.admitted_spec.runner.id, record_state, tuple(owned),
                                            etag, ctx.now_iso()))


def _part(state: BindingState, report: decide.PolicyReport) -> Part:
    return Part(COND, report.status, report.reason, report.message, "policy",
                decide.section(state.section("policy"), report.section))


async def read_token(ctx: Context, state: BindingState) -> str:
    """The API token, from the admitted spec's Secret (never logged): a CredentialsMissing Problem with the fix."""
    return await credentials.read_token(ctx, state.namespace, state.admitted_spec.runner.token_secret_ref,
                                        reason=PolicySynced.CREDENTIALS_MISSING,
                                        field="spec.runner.tokenSecretRef", what="the API token")


def client(ctx: Context, state: BindingState) -> rc.RunnerClient:
    """One client per binding and credentials; the token is read from the Secret at each call."""
    spec = state.admitted_spec
    ref = spec.runner.token_secret_ref
    key = (spec.runner.api_url, ref.name, ref.key)
    mem = state.policy
    if mem.client is not None and mem.client_key == key:
        return mem.client
    old = mem.client

    async def token() -> str:
        value = await read_token(ctx, state)
        mem.token_digest = _digest(value)
        return value

    calls = ctx.metrics.runner_api_calls
    mem.client = rc.RunnerClient(spec.runner.api_url, token, max_retries=2, backoff_max=2.0,
                                 on_call=lambda method, code: calls.labels(method=method, code=code).inc())
    mem.client_key = key
    if old is not None:  # credentials changed: close the old client (kept referenced until done)
        mem.closing = asyncio.ensure_future(old.aclose())
    return mem.client


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


async def _unchanged(ctx: Context, state: BindingState, scheduler_name: str) -> bool:
    """Has nothing the last runner read depended on changed: the admitted spec (its generation), the
    scheduler's name, the token (compared by digest: a rotation is a change; reading the Secret is a
    Kubernetes GET, not a call on the runner API's budget)?"""
    mem = state.policy
    if mem.read_key != (state.admission.generation, scheduler_name) or mem.token_digest is None:
        return False
    try:
        return _digest(await read_token(ctx, state)) == mem.token_digest
    except Problem:
        return False  # the read reports it


async def close(state: BindingState) -> None:
    if state.policy.client is not None:
        await state.policy.client.aclose()
        state.policy.client, state.policy.client_key = None, None


async def sync(ctx: Context, state: BindingState, scheduler_name: str | None, *, resync: bool = True) -> Part:
    """Read the runner's policy and write what differs. The read (carrying the token, from a budget
    every tenant shares) happens at a resync or when something it depends on changed (`_read_key`),
    not at every wake: a tenant editing its ConfigMaps cannot spend another's budget."""
    spec = state.admitted_spec
    if not scheduler_name:
        return _part(state, decide.no_scheduler_name())
    want = decide.desired(spec, scheduler_name)
    if isinstance(want, decide.PolicyReport):
        return _part(state, want)
    previous = state.parts.get(COND)
    if not resync and previous is not None and await _unchanged(ctx, state, scheduler_name):
        return previous
    state.policy.read_key = (state.admission.generation, scheduler_name)
    api = client(ctx, state)

    async def attempt(_: int) -> decide.PolicyReport:
        owned, record = await _owned(ctx, state)
        runner = await api.get_managed_runner(spec.runner.id)
        applied = record is None or record.state == "applied"
        obs = decide.PolicyObservation(spec, scheduler_name, runner.policy, runner.etag, owned, _contention(state),
                                       state.handled_request, record.etag_before if record and applied else None,
                                       _settings(ctx), confirmed=applied)
        d = decide.decide(obs, ctx.now_iso())
        if d.event is not None:
            ctx.event(state, *d.event)
        if d.report is not None:
            merged = d.report.section.get("owned")
            if d.report.status == "True" and merged is not None:
                # In sync. The record must say what we own now (the merge keeps each path's original
                # previous value): a `pending` record left by a crash is resolved by this read, and
                # one whose values the spec has moved past (e.g. reverted while we were down) is updated.
                now_owned = [OwnedPath.model_validate(o) for o in merged]
                if record is None or record.state == "pending" or list(record.owned) != now_owned:
                    await _save(ctx, state, "applied", now_owned, runner.etag)
            return d.report
        # Write-ahead: what this write makes ours (with the values before it) is on record first.
        await _save(ctx, state, "pending", d.owned, runner.etag)
        ctx.failpoints.hit("after-policy-intent")
        ctx.kube.check_writable()
        written = await api.update_managed_runner(spec.runner.id, identity=runner.identity, policy=d.write,
                                                  etag=runner.etag)
        ctx.failpoints.hit("after-policy-write")
        await _save(ctx, state, "applied", d.owned, written.etag)
        state.counters.policy_writes += 1
        if d.drift:
            state.counters.drift_corrections += 1
        ctx.event(state, EventReason.DRIFT_CORRECTED if d.drift else EventReason.POLICY_UPDATED,
                  f"runner {spec.runner.id} policy: " + "; ".join(d.changes[:8]))
        return decide.written(obs, d, written.etag, ctx.now_iso())

    try:
        report = await retry.optimistic(attempt, lost_race=_stale, retries=ctx.config.policy_conflict_retries,
                                        sleep=ctx.sleep)
    except retry.RetriesExhausted as exc:
        report = decide.conflict_exhausted(exc.attempts)
    except Problem as exc:
        report = decide.PolicyReport("False", exc.reason, exc.message)  # type: ignore[arg-type]  # only the token read raises here
    except rerr.RunnerAPIError as err:
        report = decide.api_error(err.code, err.message)
    except (k.KubeError, OSError) as exc:  # the ownership record: stays on this condition
        report = decide.PolicyReport("False", PolicySynced.RECORD_FAILED,
                                     f"the ownership record could not be read or written ({describe(exc)}); nothing was "
                                     "written to the runner policy")
    return _part(state, report)


def _stale(exc: BaseException) -> bool:
    return isinstance(exc, rerr.RunnerAPIError) and rerr.is_stale_etag(exc)


async def restore(ctx: Context, state: BindingState) -> None:
    """deletionPolicy Restore: put back previous values where our value still holds. A policy the
    binding does not write (`spec.policy.management: Observe`, or held by another owner after a
    tug-of-war) is not written on deletion either: only the record goes."""
    if state.spec is None:
        return
    if not contention.may_restore(state.spec, _contention(state)):
        await forget(ctx, state)
        return
    owned, record = await _owned(ctx, state)
    if not owned:
        if record is not None and ctx.ownership is not None:  # a record comes from the store
            await ctx.ownership.delete(state.ref)
        return
    api = client(ctx, state)
    runner_id = state.spec.runner.id

    async def attempt(_: int) -> None:
        try:
            runner = await api.get_managed_runner(runner_id)
        except rerr.NotFound:
            ctx.event(state, EventReason.RUNNER_GONE, f"runner {runner_id} no longer exists: nothing to restore in its policy")
            return
        restored = pol.restore(runner.policy, owned)
        if pol.strict_equal(restored, runner.policy):
            return
        ctx.kube.check_writable()  # the runner API is outside the Kube adapter: same gate
        await api.update_managed_runner(runner_id, identity=runner.identity, policy=restored, etag=runner.etag)
        ctx.event(state, EventReason.POLICY_RESTORED,
                  f"runner {runner_id} policy: " + "; ".join(pol.diff(runner.policy, restored)[:8]))

    await retry.optimistic(attempt, lost_race=_stale, retries=ctx.config.policy_conflict_retries, sleep=ctx.sleep)
    if ctx.ownership is not None:
        await ctx.ownership.delete(state.ref)


async def forget(ctx: Context, state: BindingState) -> None:
    """deletionPolicy Orphan (or Observe): what we wrote stays; the record of it goes with the binding."""
    if ctx.ownership is not None:
        await ctx.ownership.delete(state.ref)
