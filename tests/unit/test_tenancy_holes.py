"""Issue 19's holes over the fakes (deterministic where the real-server tests race): the spec checked is
the spec used; a refused binding claims nothing; a target switch restores the old target; only the
ConfigMaps a binding reads wake it."""

from __future__ import annotations

import copy

from sunk_sandbox_operator.controller import depends, reconcile, scope
from sunk_sandbox_operator.controller.depends import Watched
from sunk_sandbox_operator.core.scope import ledger as lg
from sunk_sandbox_operator.api.keys import SCOPE_LEDGER_ANNOTATION
from sunk_sandbox_operator.core.scope.doc import read_list

from tests.unit.fakes import (FakeRunner, binding_body, discovery, harness_fixture, install_runner,  # noqa: F401 (fixture)
                              namespace)
from tests.unit.test_reconcile import CM, NS, cluster

EVIL = {"id": "r", "apiURL": "https://evil.example.com", "tokenSecretRef": {"name": "other", "key": "k"}}


def _live_edit(h, state, runner: dict) -> None:
    """The tenant's edit arrives as a watch event (the registry replaces the live body)."""
    body = copy.deepcopy(state.body)
    body["spec"]["runner"] = runner
    body["metadata"]["generation"] += 1
    h.ctx.bindings.ensure(body)


async def test_a_spec_edited_mid_reconcile_is_not_used_by_that_reconcile(harness) -> None:
    h = harness()
    cluster(h)
    state = h.binding(binding_body("b", NS), active=False, admitted=False)
    fake = FakeRunner({})
    install_runner(state, fake)
    # Between the tenancy check and the policy step (discovery lists the scheduler's ConfigMaps), the
    # tenant points the token at its own server and at another Secret.
    h.kube.before("list_configmaps", lambda: _live_edit(h, state, EVIL))
    await reconcile.reconcile(h.ctx, state)
    assert state.policy.client is fake and fake.gets == 1            # the admitted URL and Secret, nothing else
    assert state.policy.client_key == ("https://api.coreweave.com", "s", "token")
    assert not [c for c in h.kube.calls if c[0] == "read_secret_key" and c[2] == "other"]
    # The next reconcile checks the new spec: refused, nothing sent.
    await reconcile.reconcile(h.ctx, state)
    assert state.parts["PolicySynced"].reason == "NotAllowed" and fake.gets == 1 and state.spec is None


async def test_a_signalled_sync_in_flight_ends_on_the_spec_it_started_with(harness) -> None:
    h = harness()
    cluster(h)
    state = h.binding(binding_body("b", NS, sandboxNamespaces={"names": ["ds-*"]}))
    install_runner(state, FakeRunner({}))
    started_with = state.spec
    seen = []
    # A reconcile admitting a new spec waits for the scope loops' locks a wake holds.
    h.kube.before("get_configmap", lambda: seen.append(state.spec))
    async with scope.held(h.ctx, state):
        body = copy.deepcopy(state.body)
        body["spec"]["sandboxNamespaces"] = {"names": ["other-*"]}
        body["metadata"]["generation"] += 1
        h.ctx.bindings.ensure(body)
        import asyncio
        admitting = asyncio.ensure_future(reconcile._admit(h.ctx, state))
        await asyncio.sleep(0)
        assert state.spec is started_with                            # not swapped under a sync in flight
    assert await admitting == [] and state.spec is not started_with


async def test_a_refused_binding_does_not_make_another_one_a_runner_conflict(harness) -> None:
    h = harness()
    cluster(h)
    squatter = binding_body("squat", "attacker-ns", uid="u0", created="2025-01-01T00:00:00Z",
                            runner={"id": "r", "apiURL": "https://evil.example.com", "tokenSecretRef": {"name": "s"}})
    h.kube.add("bindings", squatter)
    state = h.binding(binding_body("b", NS, uid="u1"), active=False, admitted=False)
    fake = FakeRunner({})
    install_runner(state, fake)
    await reconcile.reconcile(h.ctx, state)
    assert state.conflict is None and state.parts["PolicySynced"].reason != "RunnerConflict" and fake.gets == 1
    cache = h.ctx.binding_cache                                         # nor do its ledger entries count
    assert cache.allowed(f"{NS}/b") and not cache.allowed("attacker-ns/squat")


async def test_a_target_switch_restores_the_old_target_and_starts_fresh_on_the_new(harness) -> None:
    h = harness()
    cluster(h)
    conf = "scheduler:\n  name: slurm-scheduler\n  scope:\n    type: namespace\n    namespaces: [tenant-slurm, ds-alice, admin-x]\n"
    h.kube.add("configmaps", {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"namespace": NS, "name": "cm2"},
                              "data": {"scheduler.conf": conf}})
    state = h.binding(binding_body("b", NS, sandboxNamespaces={"names": ["ds-*"]}), active=False, admitted=False)
    install_runner(state, FakeRunner({}))
    await reconcile.reconcile(h.ctx, state)
    old = h.kube.get("configmaps", NS, CM)
    assert {"ds-alice", "ds-bob"} <= set(read_list(old["data"]["scheduler.conf"], "scheduler.scope.namespaces").values)
    body = copy.deepcopy(state.body)
    body["spec"]["scope"] = {"target": {"configMap": {"name": "cm2"}}}
    body["metadata"]["generation"] += 1
    h.ctx.bindings.ensure(body)
    await reconcile.reconcile(h.ctx, state)
    old = h.kube.get("configmaps", NS, CM)
    values = read_list(old["data"]["scheduler.conf"], "scheduler.scope.namespaces").values
    assert values == ["ds-alice", "tenant-slurm"]              # our ds-bob left it; the admin's ds-alice stays
    assert lg.decode(old["metadata"].get("annotations", {}).get(SCOPE_LEDGER_ANNOTATION)).get(f"{NS}/b") is None
    new = h.kube.get("configmaps", NS, "cm2")
    entry = lg.decode(new["metadata"]["annotations"][SCOPE_LEDGER_ANNOTATION]).get(f"{NS}/b")
    assert entry.added == ("ds-bob",) and "ds-alice" in entry.preexisting   # the admin's ds-alice is not ours
    assert state.section("scope")["target"]["name"] == "cm2"
    await reconcile.finalize(h.ctx, state)
    new = h.kube.get("configmaps", NS, "cm2")
    assert set(read_list(new["data"]["scheduler.conf"], "scheduler.scope.namespaces").values) == {
        "tenant-slurm", "ds-alice", "admin-x"}                                  # the admin's names stay


def test_only_the_configmaps_a_binding_reads_wake_it(harness) -> None:
    h = harness()
    state = h.binding(binding_body(), discovered=discovery(configmap="cm"))
    state.discovery.slurm_configmaps = ("slurm-conf",)
    w = Watched("ConfigMap", "slurm")
    assert depends.concerns(state, w, "cm", {})                                # scheduler.conf, the target
    assert depends.concerns(state, w, "slurm-conf", {})                        # slurm.conf (KillWait)
    assert depends.concerns(state, w, "new", {"app.kubernetes.io/component": "scheduler"})  # may take over
    assert depends.concerns(state, w, "new-slurm", {}, ["node.slurm.conf"])    # a new slurm.conf: discovery reads it
    assert not depends.concerns(state, w, "tenant-noise", {})                  # anything else: nothing
    assert not depends.concerns(state, w, "tenant-noise", {}, ["app.conf"])
