"""policy_sync without a server: a fake runner client stands in for the API."""

from __future__ import annotations

import asyncio
import copy

from sunk_sandbox_operator import metrics, policy_sync
from sunk_sandbox_operator.config import Config
from sunk_sandbox_operator.adapters.runnerapi import client as rc
from sunk_sandbox_operator.runtime import Registry

PARTITION = 'base.metadata.annotations["sunk.coreweave.com/partition"]'


class FakeRunner:
    def __init__(self, policy: dict | None) -> None:
        self.policy = policy
        self.etag = 1
        self.updates = 0

    def _runner(self) -> rc.ManagedRunner:
        return rc.ManagedRunner("r", {"name": "r"}, copy.deepcopy(self.policy), str(self.etag), {})

    async def get_managed_runner(self, runner_id: str) -> rc.ManagedRunner:
        return self._runner()

    async def update_managed_runner(self, runner_id, *, identity, policy, etag) -> rc.ManagedRunner:
        assert etag == str(self.etag)
        self.policy, self.etag, self.updates = copy.deepcopy(policy), self.etag + 1, self.updates + 1
        return self._runner()

    async def aclose(self) -> None:
        pass


def _setup(policy: dict | None, partition: str = "a"):
    reg = Registry(Config())
    events: list[tuple[str, str]] = []
    reg.event_sink = lambda body, kind, reason, message: events.append((reason, message))
    body = {"metadata": {"namespace": "slurm", "name": "b", "uid": "u1", "generation": 1},
            "spec": {"runner": {"id": "r", "tokenSecretRef": {"name": "s"}}, "partition": partition,
                     "sandboxNamespaces": {"names": ["ds-*"]}}}
    state = reg.ensure(body)
    fake = FakeRunner(policy)
    ref = state.spec.runner.token_secret_ref
    state.extras["runner_client"] = ((state.spec.runner.api_url, ref.name, ref.key), fake)
    return reg, state, fake, events, body


def _set_partition(reg, body, partition):
    body = copy.deepcopy(body)
    body["spec"]["partition"] = partition
    body["metadata"]["generation"] += 1
    return reg.ensure(body)


def test_a_spec_change_is_not_reported_as_drift():
    reg, state, fake, events, body = _setup({})

    async def main():
        first = await policy_sync.sync(reg, state, "slurm-scheduler")
        state.report(first)
        state.status = {"policy": first.data}  # as if flushed
        _set_partition(reg, body, "b")
        before = metrics.DRIFT_CORRECTIONS.get(binding=state.ref)
        second = await policy_sync.sync(reg, state, "slurm-scheduler")
        return first, second, metrics.DRIFT_CORRECTIONS.get(binding=state.ref) - before

    first, second, drift_count = asyncio.run(main())
    assert fake.updates == 2
    assert (first.reason, second.reason) == ("Synced", "Synced")
    assert [r for r, _ in events] == ["PolicyUpdated", "PolicyUpdated"]
    assert drift_count == 0
    assert fake.policy["base"]["metadata"]["annotations"]["sunk.coreweave.com/partition"] == "b"


def test_someone_removing_our_field_is_drift():
    reg, state, fake, events, _ = _setup({})

    async def main():
        state.report(await policy_sync.sync(reg, state, "slurm-scheduler"))
        del fake.policy["base"]["spec"]["schedulerName"]
        return await policy_sync.sync(reg, state, "slurm-scheduler")

    part = asyncio.run(main())
    assert part.reason == "DriftCorrected"
    assert events[-1][0] == "DriftCorrected"


def test_owned_paths_survive_a_status_write_that_did_not_happen():
    """What we wrote is remembered from the reported part, not only from the API server's status."""
    reg, state, fake, events, body = _setup({"base": {"metadata": {"annotations": {"sunk.coreweave.com/partition": "orig"}}}})

    async def main():
        state.report(await policy_sync.sync(reg, state, "slurm-scheduler"))  # status never flushed
        _set_partition(reg, body, "b")
        state.report(await policy_sync.sync(reg, state, "slurm-scheduler"))
        await policy_sync.restore(reg, state)

    asyncio.run(main())
    assert fake.policy == {"base": {"metadata": {"annotations": {"sunk.coreweave.com/partition": "orig"}}}}
    owned = {o["path"]: o for o in state.parts["PolicySynced"].data["owned"]}
    assert owned[PARTITION].get("previous") == "orig"
