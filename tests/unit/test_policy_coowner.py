"""The policy pipeline against another owner of the runner policy, without a server (FakeRunner): the
stop after N corrections, its event once, no writes while stopped (nor on deletion), the hand-back on
the reconcile-now annotation, spec.policy.management Observe; the settings and the metric."""

from __future__ import annotations

import copy

import pytest

from sunk_sandbox_operator.adapters.metrics import BindingCounters, BindingSample, Metrics
from sunk_sandbox_operator.adapters.ownership import OwnershipStore
from sunk_sandbox_operator.controller import config, policy

from tests.unit.fakes import FakeRunner, binding_body, harness_fixture, install_runner  # noqa: F401 (fixture)

THEIRS = {"base": {"metadata": {"labels": {"team": "ml"}}}, "constraints": {"network": {"egress": "deny"}}}


def terraform_apply(fake: FakeRunner) -> None:
    """The other owner puts its whole policy back (a fresh etag)."""
    fake.admin_write(lambda p: (p.clear(), p.update(copy.deepcopy(THEIRS))))


async def sync(h, state):
    part = await policy.sync(h.ctx, state, "slurm-scheduler")
    state.report(part)
    await h.clock.advance(10.0)
    return part


def setup(harness, doc, **spec):
    h = harness(policy_contention_corrections=2, policy_contention_window_seconds=3600.0)
    state = h.binding(binding_body(partition="a", **spec))
    fake = FakeRunner(doc)
    install_runner(state, fake)
    return h, state, fake


async def test_the_writes_stop_after_n_corrections_with_one_event_and_nothing_is_restored(harness) -> None:
    h, state, fake = setup(harness, THEIRS)
    assert (await sync(h, state)).reason == "Synced" and fake.updates == 1
    for _ in range(2):
        terraform_apply(fake)
        assert (await sync(h, state)).reason == "DriftCorrected"
    terraform_apply(fake)
    part = await sync(h, state)
    assert (part.status, part.reason) == ("False", "PolicyManagedElsewhere") and fake.updates == 3
    assert 'scheduler_name = "slurm-scheduler"' in part.message
    assert h.reasons().count("PolicyWritesStopped") == 1 and h.reasons().count("DriftCorrected") == 2
    for _ in range(3):
        terraform_apply(fake)
        part = await sync(h, state)
        assert part.reason == "PolicyManagedElsewhere"
    assert fake.updates == 3 and fake.policy == THEIRS and h.reasons().count("PolicyWritesStopped") == 1
    await policy.restore(h.ctx, state)                   # deletion with Restore: the policy is theirs
    assert fake.updates == 3 and "PolicyRestored" not in h.reasons()


async def test_a_first_write_that_lost_a_race_is_not_a_correction(harness) -> None:
    """The write-ahead record of a write that lost the race claims values the policy never held: the
    retry's write is the first merge, not the correction of another writer's removal."""
    h, state, fake = setup(harness, THEIRS)
    h.ctx.ownership = OwnershipStore(h.kube, "operator-ns")
    fake.before_update(lambda r: r.admin_write(lambda p: p.update(edited="by another admin")))
    part = await h.drive(policy.sync(h.ctx, state, "slurm-scheduler"))
    state.report(part)
    assert part.reason == "Synced" and fake.stale == 1 and fake.updates == 1 and "contention" not in part.data
    for _ in range(2):
        terraform_apply(fake)
        assert (await sync(h, state)).reason == "DriftCorrected"
    terraform_apply(fake)
    assert (await sync(h, state)).reason == "PolicyManagedElsewhere" and fake.updates == 3


async def test_the_other_owner_carrying_the_keys_resumes_without_a_write(harness) -> None:
    h, state, fake = setup(harness, THEIRS)
    await sync(h, state)
    for _ in range(3):
        terraform_apply(fake)
        await sync(h, state)
    assert state.parts["PolicySynced"].reason == "PolicyManagedElsewhere"
    fake.admin_write(lambda p: (p.setdefault("base", {}).setdefault("spec", {}).update(schedulerName="slurm-scheduler"),
                                p["base"]["metadata"].setdefault("annotations", {})
                                .update({"sunk.coreweave.com/partition": "a"})))
    part = await sync(h, state)
    assert (part.status, part.reason) == ("True", "Synced") and fake.updates == 3
    assert "contention" not in part.data


async def test_a_reconcile_request_hands_the_policy_back(harness) -> None:
    h, state, fake = setup(harness, THEIRS)
    await sync(h, state)
    for _ in range(3):
        terraform_apply(fake)
        await sync(h, state)
    assert fake.updates == 3
    await sync(h, state)
    assert fake.updates == 3
    state.handled_request = "2026-12-24T10:00:00Z"       # kubectl annotate ssb/b sunksandbox.dev/reconcile-requested-at=...
    part = await sync(h, state)
    assert part.reason == "DriftCorrected" and fake.updates == 4
    assert fake.policy["base"]["spec"]["schedulerName"] == "slurm-scheduler"


async def test_observe_management_never_writes_and_restores_nothing(harness) -> None:
    h, state, fake = setup(harness, THEIRS, policy={"management": "Observe"})
    part = await sync(h, state)
    assert (part.status, part.reason) == ("False", "PolicyKeysMissing") and fake.updates == 0
    fake.admin_write(lambda p: p["base"].update(spec={"schedulerName": "slurm-scheduler"}) or
                     p["base"]["metadata"].update(annotations={"sunk.coreweave.com/partition": "a"}))
    part = await sync(h, state)
    assert (part.status, part.reason) == ("True", "Synced") and fake.updates == 0
    await policy.restore(h.ctx, state)
    assert fake.updates == 0 and fake.gets == 2 and h.events == []


def test_the_settings_read_their_variables_and_name_a_bad_one(monkeypatch: pytest.MonkeyPatch) -> None:
    assert (config.load().policy_contention_corrections, config.load().policy_contention_window_seconds) == (3, 86400)
    monkeypatch.setenv("SSB_POLICY_CONTENTION_CORRECTIONS", "5")
    monkeypatch.setenv("SSB_POLICY_CONTENTION_WINDOW", "30m")
    cfg = config.load()
    assert (cfg.policy_contention_corrections, cfg.policy_contention_window_seconds) == (5, 1800.0)
    for bad in ("soon", "-1h"):
        monkeypatch.setenv("SSB_POLICY_CONTENTION_WINDOW", bad)
        with pytest.raises(ValueError, match="SSB_POLICY_CONTENTION_WINDOW"):
            config.load()


def test_the_metric_says_which_bindings_stopped_writing() -> None:
    def cond(reason: str) -> list[dict]:
        return [{"type": "PolicySynced", "status": "False", "reason": reason}]

    text = Metrics(lambda: [BindingSample("ns/a", BindingCounters(), cond("PolicyManagedElsewhere")),
                            BindingSample("ns/b", BindingCounters(), cond("APIUnavailable"))]).render().decode()
    assert 'ssb_policy_managed_elsewhere{binding="ns/a"} 1.0' in text
    assert 'ssb_policy_managed_elsewhere{binding="ns/b"} 0.0' in text
