"""The policy pipeline without a server: a fake runner client (FakeRunner) stands in for the runner API."""

from __future__ import annotations

import base64
import copy

import pytest

from sunk_sandbox_operator.adapters.runnerapi import client as rc
from sunk_sandbox_operator.adapters.runnerapi import errors as rerr
from sunk_sandbox_operator.controller import policy, retry

from tests.unit.fakes import FakeRunner, binding_body, harness_fixture, install_runner, settle  # noqa: F401 (fixture)

PARTITION = 'base.metadata.annotations["sunk.coreweave.com/partition"]'
PARTITION_KEY = "sunk.coreweave.com/partition"


def setup(harness, policy_doc: dict | None, partition: str = "a", **config):
    h = harness(**config)
    body = binding_body(partition=partition)
    state = h.binding(body)
    fake = FakeRunner(policy_doc)
    install_runner(state, fake)
    return h, state, fake, h.kube.get("bindings", "slurm", "b")


def set_partition(h, body: dict, partition: str):
    body = copy.deepcopy(body)
    body["spec"]["partition"] = partition
    body["metadata"]["generation"] += 1
    state = h.ctx.bindings.ensure(body)
    state.admit()  # as the next reconcile's tenancy check does
    return state


async def test_a_spec_change_is_not_reported_as_drift(harness) -> None:
    h, state, fake, body = setup(harness, {})
    first = await policy.sync(h.ctx, state, "slurm-scheduler")
    state.report(first)
    state.status = {"policy": first.data}                      # as if flushed
    set_partition(h, body, "b")
    second = await policy.sync(h.ctx, state, "slurm-scheduler")
    assert fake.updates == 2
    assert (first.reason, second.reason) == ("Synced", "Synced")
    assert h.reasons() == ["PolicyUpdated", "PolicyUpdated"]
    assert state.counters.drift_corrections == 0 and state.counters.policy_writes == 2
    assert fake.policy["base"]["metadata"]["annotations"][PARTITION_KEY] == "b"


async def test_someone_removing_our_field_is_drift(harness) -> None:
    h, state, fake, _ = setup(harness, {})
    state.report(await policy.sync(h.ctx, state, "slurm-scheduler"))
    del fake.policy["base"]["spec"]["schedulerName"]
    part = await policy.sync(h.ctx, state, "slurm-scheduler")
    assert part.reason == "DriftCorrected" and part.status == "True"
    assert h.events[-1][1] == "DriftCorrected" and "runner r policy" in h.events[-1][2]
    assert fake.policy["base"]["spec"]["schedulerName"] == "slurm-scheduler"
    assert state.counters.drift_corrections == 1


async def test_owned_paths_survive_a_status_write_that_did_not_happen(harness) -> None:
    """What we wrote is remembered from the reported part, not only from the API server's status."""
    h, state, fake, body = setup(harness, {"base": {"metadata": {"annotations": {PARTITION_KEY: "orig"}}}})
    state.report(await policy.sync(h.ctx, state, "slurm-scheduler"))  # status never flushed
    set_partition(h, body, "b")
    state.report(await policy.sync(h.ctx, state, "slurm-scheduler"))
    await policy.restore(h.ctx, state)
    assert fake.policy == {"base": {"metadata": {"annotations": {PARTITION_KEY: "orig"}}}}
    owned = {o["path"]: o for o in state.parts["PolicySynced"].data["owned"]}
    assert owned[PARTITION].get("previous") == "orig"
    assert h.reasons()[-1] == "PolicyRestored"


async def test_an_unchanged_policy_is_read_not_written(harness) -> None:
    h, state, fake, _ = setup(harness, {})
    state.report(await policy.sync(h.ctx, state, "slurm-scheduler"))
    await h.clock.advance(300.0)
    part = await policy.sync(h.ctx, state, "slurm-scheduler")
    assert part.reason == "Synced" and fake.updates == 1 and fake.gets == 2
    assert part.data["lastCheckedTime"] == h.clock.iso() and part.data["lastAppliedTime"] != h.clock.iso()
    assert part.data["etag"] == str(fake.etag)


async def test_a_stale_etag_is_retried_and_merged_onto_the_other_writers_policy(harness) -> None:
    h, state, fake, _ = setup(harness, {"base": {"metadata": {"labels": {"team": "x"}}}})
    fake.before_update(lambda r: r.admin_write(lambda p: p["base"]["metadata"].setdefault("annotations", {})
                                               .update({"example.com/admin": "theirs"})))
    part = await h.drive(policy.sync(h.ctx, state, "slurm-scheduler"))
    assert part.reason == "Synced" and fake.stale == 1 and fake.updates == 1 and fake.gets == 2
    annotations = fake.policy["base"]["metadata"]["annotations"]
    assert annotations["example.com/admin"] == "theirs" and annotations[PARTITION_KEY] == "a"  # both kept
    assert fake.policy["base"]["metadata"]["labels"] == {"team": "x"}
    b = retry.CONFLICT_BACKOFF
    assert len(h.clock.slept) == 1 and b.base * (1 - b.jitter) <= h.clock.slept[0] <= b.base
    assert h.reasons() == ["PolicyUpdated"]                    # one write, one event


async def test_an_admin_who_keeps_writing_exhausts_the_retries_and_nothing_is_overwritten(harness) -> None:
    h, state, fake, _ = setup(harness, {}, policy_conflict_retries=2)
    marks = iter(range(10))
    fake.before_update(lambda r: r.admin_write(lambda p: p.update(mark=next(marks))), times=3)
    part = await h.drive(policy.sync(h.ctx, state, "slurm-scheduler"))
    assert (part.status, part.reason) == ("False", "ConflictRetriesExhausted") and "3 times" in part.message
    assert fake.updates == 0 and fake.policy == {"mark": 2} and fake.stale == 3
    assert len(h.clock.slept) == 2 and h.events == []


async def test_observe_mode_reports_drift_and_writes_nothing(harness) -> None:
    h = harness()
    state = h.binding(binding_body(partition="a", mode="Observe"))
    fake = FakeRunner({})
    install_runner(state, fake)
    part = await policy.sync(h.ctx, state, "slurm-scheduler")
    assert (part.status, part.reason) == ("False", "Drifted") and "Observe mode, nothing written" in part.message
    assert fake.updates == 0 and h.events == []


async def test_no_scheduler_name_writes_nothing_and_calls_nothing(harness) -> None:
    h, state, fake, _ = setup(harness, {})
    part = await policy.sync(h.ctx, state, None)
    assert (part.status, part.reason) == ("False", "SchedulerNameUnknown") and fake.gets == 0


async def test_a_malformed_runner_policy_is_left_alone(harness) -> None:
    h, state, fake, _ = setup(harness, {"base": "not a mapping"})
    part = await policy.sync(h.ctx, state, "slurm-scheduler")
    assert (part.status, part.reason) == ("False", "InvalidPolicy") and fake.updates == 0


@pytest.mark.parametrize("error, reason", [
    (rerr.Unauthenticated("bad token"), "Unauthenticated"),
    (rerr.PermissionDenied("no role"), "PermissionDenied"),
    (rerr.NotFound("no such runner"), "RunnerNotFound"),
    (rerr.InvalidArgument("affinity not allowed"), "PolicyRejected"),
    (rerr.Unavailable("down"), "APIUnavailable"),
    (rerr.Unimplemented("wrong path"), "APIUnavailable"),
])
async def test_runner_api_errors_become_reasons(harness, error, reason) -> None:
    h, state, fake, _ = setup(harness, {})
    fake.error = error
    part = await policy.sync(h.ctx, state, "slurm-scheduler")
    assert (part.condition, part.status, part.reason) == ("PolicySynced", "False", reason)
    assert fake.gets == 1                                      # not retried here (the client retries transients)


@pytest.mark.parametrize("secret, denied, fragment", [
    (None, False, "Secret slurm/s not found"),
    ({"other": base64.b64encode(b"t").decode()}, False, "has no key 'token'"),
    (None, True, "may not read Secret slurm/s"),
])
async def test_missing_credentials_are_reported_before_any_request(harness, secret, denied, fragment) -> None:
    h = harness()
    state = h.binding(binding_body(partition="a"))
    if secret is not None:
        h.kube.add("secrets", {"metadata": {"namespace": "slurm", "name": "s"}, "data": secret})
    if denied:
        h.kube.deny("read_secret_key")
    try:
        part = await policy.sync(h.ctx, state, "slurm-scheduler")  # the real client: the token is read first
    finally:
        await policy.close(state)
    assert (part.status, part.reason) == ("False", "CredentialsMissing") and fragment in part.message
    assert h.kube.count("read_secret_key") == 1


@pytest.mark.parametrize("value", ["", "  \n"])
async def test_an_empty_token_is_credentials_missing_and_nothing_is_sent(harness, value) -> None:
    h = harness()
    state = h.binding(binding_body(partition="a"))
    h.kube.add("secrets", {"metadata": {"namespace": "slurm", "name": "s"},
                           "data": {"token": base64.b64encode(value.encode()).decode()}})
    try:
        part = await policy.sync(h.ctx, state, "slurm-scheduler")  # the real client
    finally:
        await policy.close(state)
    assert (part.status, part.reason) == ("False", "CredentialsMissing"), part
    assert part.message == "key 'token' of Secret slurm/s is empty: put the API token there"
    # Every HTTP attempt is counted (ok or error): none was made.
    assert not [s for m in h.ctx.metrics.runner_api_calls.collect() for s in m.samples if s.value], \
        "a runner API request was attempted"


async def test_one_client_per_credentials_the_old_one_closed(harness) -> None:
    h, state, fake, body = setup(harness, {})
    assert policy.client(h.ctx, state) is fake                 # same credentials: the same client
    changed = copy.deepcopy(body)
    changed["spec"]["runner"]["tokenSecretRef"] = {"name": "other"}
    h.ctx.bindings.ensure(changed).admit()
    new = policy.client(h.ctx, state)
    try:
        assert isinstance(new, rc.RunnerClient) and new is not fake
        assert state.policy.client_key == ("https://api.coreweave.com", "other", "token")
        await settle()
        assert fake.closed                                     # the old one is closed in the background
    finally:
        await policy.close(state)
    assert state.policy.client is None


async def test_restore_when_the_runner_is_gone(harness) -> None:
    h, state, fake, _ = setup(harness, {})
    state.report(await policy.sync(h.ctx, state, "slurm-scheduler"))
    fake.exists = False
    await policy.restore(h.ctx, state)
    assert h.reasons()[-1] == "RunnerGone" and fake.updates == 1


async def test_restore_with_nothing_owned_reads_nothing(harness) -> None:
    h, state, fake, _ = setup(harness, {})
    await policy.restore(h.ctx, state)
    assert fake.gets == 0


async def test_restore_retries_a_stale_etag_and_keeps_the_other_writers_change(harness) -> None:
    h, state, fake, _ = setup(harness, {})
    state.report(await policy.sync(h.ctx, state, "slurm-scheduler"))
    fake.before_update(lambda r: r.admin_write(lambda p: p.update(note="theirs")))
    await h.drive(policy.restore(h.ctx, state))
    assert fake.stale == 1 and fake.policy.get("note") == "theirs"
    assert "schedulerName" not in ((fake.policy.get("base") or {}).get("spec") or {})


async def test_restore_that_keeps_losing_raises_for_the_deletion_to_retry(harness) -> None:
    h, state, fake, _ = setup(harness, {}, policy_conflict_retries=1)
    state.report(await policy.sync(h.ctx, state, "slurm-scheduler"))
    fake.before_update(lambda r: r.admin_write(lambda p: p.update(note="theirs")), times=2)
    with pytest.raises(retry.RetriesExhausted):
        await h.drive(policy.restore(h.ctx, state))
