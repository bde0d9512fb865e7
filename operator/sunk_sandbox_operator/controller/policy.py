"""Reconcile the runner policy through the runner API (imperative shell around policy.py).

Get → merge (pure) → Update only when something differs. A stale etag (another admin wrote in
between) means: re-read, re-merge onto *their* policy, resend — bounded and jittered, so their
change is never lost. Observe mode reads and reports only.
"""

from __future__ import annotations

import asyncio
import logging
import random
from typing import Any

from . import kube, metrics
from . import model as m
from . import policy
from .runnerapi import client as rc
from .runnerapi import errors as rerr
from .runtime import BindingState, Registry, now_iso
from .status import Part

log = logging.getLogger("sunk_sandbox_operator")

COND = "PolicySynced"


class CredentialsMissing(Exception):
    pass


def _api_reason(err: rerr.RunnerAPIError) -> tuple[str, str]:
    """Condition reason and the fix, by Connect code."""
    code = err.code
    if code == "unauthenticated":
        return "Unauthenticated", "the API token was refused: put a valid CoreWeave API token in the Secret"
    if code == "permission_denied":
        return "PermissionDenied", "the token lacks the sandbox_admin role: grant it, or use a token that has it"
    if code == "not_found":
        return "RunnerNotFound", "no runner with spec.runner.id: check the id (`cwic runner list`)"
    if code in ("invalid_argument", "out_of_range"):
        return "PolicyRejected", f"the API rejected the policy: {err.message}"
    if code == "unimplemented":
        return "APIUnavailable", "the API answered 'unimplemented' (wrong path?): check spec.runner.apiURL"
    return "APIUnavailable", f"the runner API is not answering ({code}); retrying"


def _previous(state: BindingState) -> dict:
    """status.policy as last reported: the part in memory (even if its status write failed), else status."""
    part = state.parts.get(COND)
    return (part.data if part is not None and part.data is not None else None) or state.status.get("policy") or {}


def _owned(state: BindingState) -> list[m.OwnedPath]:
    raw = _previous(state).get("owned") or []
    return [m.OwnedPath.model_validate(o) for o in raw]


def _section(state: BindingState, **changes: Any) -> dict:
    """status.policy: the previous section with these fields changed."""
    current = dict(_previous(state))
    current.update({k: v for k, v in changes.items()})
    return {k: v for k, v in current.items() if v is not None and v != []}


def _client(state: BindingState) -> rc.RunnerClient:
    """One client per binding and credentials; the token is read from the Secret at each call."""
    spec = state.spec
    ref = spec.runner.token_secret_ref
    key = (spec.runner.api_url, ref.name, ref.key)
    cached = state.extras.get("runner_client")
    if cached and cached[0] == key:
        return cached[1]
    if cached:
        asyncio.ensure_future(cached[1].aclose())

    async def token() -> str:
        try:
            return await kube.read_secret_key(state.namespace, ref.name, ref.key)
        except kube.NotFound:
            raise CredentialsMissing(f"Secret {state.namespace}/{ref.name} not found: create it with the API token "
                                     f"under key {ref.key!r}") from None
        except KeyError:
            raise CredentialsMissing(f"Secret {state.namespace}/{ref.name} has no key {ref.key!r}: "
                                     "set spec.runner.tokenSecretRef.key or add the key") from None
        except kube.Forbidden:
            raise CredentialsMissing(f"the operator may not read Secret {state.namespace}/{ref.name}: grant it "
                                     "`get` on secrets in this namespace (a RoleBinding to the ClusterRole sunk-sandbox-operator-secret-reader)") from None

    client = rc.RunnerClient(spec.runner.api_url, token, max_retries=2, backoff_max=2.0,
                             on_call=lambda method, code: metrics.RUNNER_API_CALLS.inc(method=method, code=code))
    state.extras["runner_client"] = (key, client)
    return client


async def close(state: BindingState) -> None:
    cached = state.extras.pop("runner_client", None)
    if cached:
        await cached[1].aclose()


async def sync(registry: Registry, state: BindingState, scheduler_name: str | None) -> Part:
    spec = state.spec
    if not scheduler_name:
        return Part(COND, "False", "SchedulerNameUnknown",
                    "the scheduler name is not known yet, so nothing was written: set spec.scheduler.name "
                    "or fix scheduler discovery (see SchedulerReady)", "policy", _section(state))
    try:
        desired = policy.desired_fields(spec, scheduler_name)
    except policy.PolicyError as exc:
        return Part(COND, "False", "InvalidBinding", str(exc), "policy", _section(state))
    client = _client(state)
    owned = _owned(state)
    retries = registry.config.policy_conflict_retries
    try:
        for attempt in range(retries + 1):
            runner = await client.get_managed_runner(spec.runner.id)
            try:
                policy.validate_policy(runner.policy)
            except policy.PolicyError as exc:
                return Part(COND, "False", "InvalidPolicy",
                            f"the runner's current policy is malformed, so it was left alone: {exc}",
                            "policy", _section(state, etag=runner.etag))
            result = policy.merge(runner.policy, desired, owned, spec.client_annotations)
            warnings = result.warnings
            if not result.changed:
                return Part(COND, "True", "Synced", _synced_message(scheduler_name, desired, warnings), "policy",
                            _section(state, etag=runner.etag, lastCheckedTime=now_iso(), warnings=warnings,
                                     owned=[o.wire() for o in result.owned] or None))
            changes = policy.diff(runner.policy, result.policy)
            if spec.mode == "Observe":
                return Part(COND, "False", "Drifted",
                            "Observe mode, nothing written; the operator would change: " + "; ".join(changes[:8]),
                            "policy", _section(state, etag=runner.etag, lastCheckedTime=now_iso(), warnings=warnings))
            try:
                written = await client.update_managed_runner(
                    spec.runner.id, identity=runner.identity, policy=result.policy, etag=runner.etag)
            except rerr.RunnerAPIError as err:
                if rerr.is_stale_etag(err) and attempt < retries:
                    # Another admin wrote between our read and our write: re-read and re-merge onto theirs.
                    await asyncio.sleep(random.uniform(0.05, 0.2 * (2 ** attempt)))
                    continue
                raise
            drift = policy.drifted(runner.policy, desired, owned)
            metrics.POLICY_WRITES.inc(binding=state.ref)
            if drift:
                metrics.DRIFT_CORRECTIONS.inc(binding=state.ref)
            registry.event(state, "Normal", "DriftCorrected" if drift else "PolicyUpdated",
                           f"runner {spec.runner.id} policy: " + "; ".join(changes[:8]))
            return Part(COND, "True", "DriftCorrected" if drift else "Synced",
                        _synced_message(scheduler_name, desired, warnings), "policy",
                        _section(state, etag=written.etag, lastAppliedTime=now_iso(), lastCheckedTime=now_iso(),
                                 warnings=warnings, owned=[o.wire() for o in result.owned] or None))
        return Part(COND, "False", "ConflictRetriesExhausted",
                    f"the policy changed under us {retries + 1} times in a row (another admin is writing); "
                    "nothing was overwritten, retrying at the next resync", "policy", _section(state))
    except CredentialsMissing as exc:
        return Part(COND, "False", "CredentialsMissing", str(exc), "policy", _section(state))
    except rerr.RunnerAPIError as err:
        reason, message = _api_reason(err)
        return Part(COND, "False", reason, message, "policy", _section(state))


def _synced_message(scheduler_name: str, desired: policy.Desired, warnings: list[str]) -> str:
    pinned = len(desired.values) - 1
    msg = f"policy routes sandboxes to scheduler {scheduler_name!r}" + (
        f" with {pinned} pinned annotation(s)" if pinned else "")
    msg += "; applies to new sandboxes only"
    if warnings:
        msg += ". Warnings: " + " | ".join(warnings)
    return msg


async def restore(registry: Registry, state: BindingState) -> None:
    """deletionPolicy Restore: put back previous values where our value still holds."""
    owned = _owned(state)
    if not owned or state.spec is None:
        return
    client = _client(state)
    for attempt in range(registry.config.policy_conflict_retries + 1):
        try:
            runner = await client.get_managed_runner(state.spec.runner.id)
        except rerr.NotFound:
            registry.event(state, "Normal", "RunnerGone", f"runner {state.spec.runner.id} no longer exists: "
                           "nothing to restore in its policy")
            return
        restored = policy.restore(runner.policy, owned)
        if policy.strict_equal(restored, runner.policy):
            return
        try:
            await client.update_managed_runner(state.spec.runner.id, identity=runner.identity, policy=restored,
                                               etag=runner.etag)
            registry.event(state, "Normal", "PolicyRestored",
                           f"runner {state.spec.runner.id} policy: " + "; ".join(policy.diff(runner.policy, restored)[:8]))
            return
        except rerr.RunnerAPIError as err:
            if rerr.is_stale_etag(err):
                await asyncio.sleep(random.uniform(0.05, 0.2 * (2 ** attempt)))
                continue
            raise
    raise RuntimeError("policy restore: conflict retries exhausted")
