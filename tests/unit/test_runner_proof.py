"""A binding owns a runner only once it has proved it may (issue 31, finding 7), over the fakes: the
squat (an allowed URL, another tenant's runner id, a token Secret that does not exist) blocks nobody;
two bindings that can both prove it keep today's rule (the older wins); status.runner records it."""

from __future__ import annotations

import base64

from sunk_sandbox_operator.controller import reconcile
from sunk_sandbox_operator.core import conflicts

from tests.unit.fakes import FakeRunner, binding_body, harness_fixture, install_runner  # noqa: F401
from tests.unit.test_reconcile import NS, cluster, conditions

VICTIM_RUNNER = "runner-victim"


def squatter(h, *, created: str = "2025-01-01T00:00:00Z", secret: str = "missing"):
    """A binding in another namespace naming the victim's runner, its token from a Secret of its own
    (a scheduler name given, so that its policy sync goes as far as reading the token)."""
    body = binding_body("squat", "attacker", uid="u-squat", created=created,
                        runner={"id": VICTIM_RUNNER, "tokenSecretRef": {"name": secret}},
                        scheduler={"namespace": "attacker", "name": "slurm-scheduler", "killWaitSeconds": 60})
    return h.binding(body, active=False, admitted=False)


def owner(h, *, created: str = "2026-01-01T00:00:00Z", name: str = "b", uid: str = "u1"):
    state = h.binding(binding_body(name, NS, uid=uid, created=created, partition="sandboxes",
                                   runner={"id": VICTIM_RUNNER, "tokenSecretRef": {"name": "s"}},
                                   scheduler={"killWaitSeconds": 60}), active=False, admitted=False)
    runner = FakeRunner({}, runner_id=VICTIM_RUNNER)
    install_runner(state, runner, h.ctx)
    return state, runner


async def test_an_older_squatter_without_a_token_does_not_make_the_owner_a_runner_conflict(harness) -> None:
    h = harness()
    cluster(h)
    squat = squatter(h)
    await reconcile.reconcile(h.ctx, squat)                   # alone: it owns nothing it could prove
    runner_status = h.kube.get("bindings", "attacker", "squat")["status"]["runner"]
    assert runner_status == {"id": VICTIM_RUNNER, "apiURL": "https://api.coreweave.com", "failure": "CredentialsMissing"}
    state, runner = owner(h)
    await reconcile.reconcile(h.ctx, state)
    assert conditions(h)["PolicySynced"] == ("True", "Synced") and state.conflict is None
    assert runner.gets >= 1 and runner.updates == 1
    assert h.kube.get("bindings", NS, "b")["status"]["runner"]["provenTime"]
    assert ("Warning", "RunnerClaimed") in {(kind, reason) for kind, reason, _ in h.events}
    # The squatter, reconciled again, is the one kept out, and still sends nothing (no token to send).
    await reconcile.reconcile(h.ctx, squat)
    got = h.kube.get("bindings", "attacker", "squat")["status"]["conditions"]
    policy = next(c for c in got if c["type"] == "PolicySynced")
    assert policy["reason"] == "RunnerConflict" and f"{NS}/b already manages runner {VICTIM_RUNNER}" in policy["message"]
    assert "Secret attacker/missing not found" in policy["message"]
    assert runner.updates == 1


async def test_a_squatter_seen_before_it_tried_is_waited_for_then_passed_over(harness) -> None:
    """The owner's first reconcile comes before the squatter has tried (alone, with no scheduler found,
    it never reached its token): the owner waits (no write, no race) and wakes the squatter, whose
    reconcile tries its token, fails, and wakes the owner, which then keeps the runner."""
    h = harness()
    cluster(h)
    squat = squatter(h)
    body = h.kube.get("bindings", "attacker", "squat")
    del body["spec"]["scheduler"]["name"]
    h.kube.add("bindings", body)
    h.ctx.bindings.ensure(h.kube.get("bindings", "attacker", "squat"))
    await reconcile.reconcile(h.ctx, squat)
    assert conflicts.proof_tier(h.kube.get("bindings", "attacker", "squat")) == conflicts.UNTRIED
    squat.wake.clear()
    state, runner = owner(h)
    assert squat.wake.is_set()                                # a rival named its runner: it tries now
    await reconcile.reconcile(h.ctx, state)
    assert state.conflict == "attacker/squat" and runner.updates == 0 and runner.gets == 0
    state.wake.clear()
    await reconcile.reconcile(h.ctx, squat)                   # it has a rival now: it tries, and fails
    assert conflicts.proof_tier(h.kube.get("bindings", "attacker", "squat")) == conflicts.FAILED
    assert state.wake.is_set()                                # the owner looks again at once
    await reconcile.reconcile(h.ctx, state)
    assert state.conflict is None and runner.updates == 1


async def test_a_squatter_with_a_token_the_api_refuses_blocks_nobody(harness) -> None:
    h = harness()
    cluster(h)
    h.kube.add("secrets", {"metadata": {"namespace": "attacker", "name": "own"},
                           "data": {"token": base64.b64encode(b"tok-of-another-org").decode()}})
    squat = squatter(h, secret="own")
    refusing = FakeRunner({}, runner_id=VICTIM_RUNNER)
    from sunk_sandbox_operator.adapters.runnerapi import errors as rerr
    refusing.error = rerr.PermissionDenied("not your runner")
    install_runner(squat, refusing, h.ctx)
    await reconcile.reconcile(h.ctx, squat)
    assert h.kube.get("bindings", "attacker", "squat")["status"]["runner"]["failure"] == "PermissionDenied"
    state, runner = owner(h)
    await reconcile.reconcile(h.ctx, state)
    assert state.conflict is None and runner.updates == 1


async def test_two_bindings_that_both_prove_it_keep_the_rule_the_older_wins(harness) -> None:
    h = harness()
    cluster(h)
    older, first = owner(h, name="a", uid="u0", created="2025-01-01T00:00:00Z")
    await reconcile.reconcile(h.ctx, older)
    assert first.updates == 1 and older.conflict is None
    younger, second = owner(h, name="b", uid="u1", created="2026-01-01T00:00:00Z")
    await reconcile.reconcile(h.ctx, younger)
    assert younger.conflict == f"{NS}/a" and second.gets == 0 and second.updates == 0   # no call to prove it:
    assert conditions(h, "b")["PolicySynced"] == ("False", "RunnerConflict")              # it would not win


async def test_after_an_upgrade_the_older_binding_tries_first_and_the_younger_does_not_race_it(harness) -> None:
    """Bindings stored before status.runner existed are all untried: the younger's reconcile (first, by
    chance) writes nothing and calls nothing; the older proves it at its own and keeps the runner."""
    h = harness()
    cluster(h)
    older, first = owner(h, name="a", uid="u0", created="2025-01-01T00:00:00Z")
    younger, second = owner(h, name="b", uid="u1", created="2026-01-01T00:00:00Z")
    await reconcile.reconcile(h.ctx, younger)
    assert younger.conflict == f"{NS}/a" and second.gets == 0
    await reconcile.reconcile(h.ctx, older)
    assert older.conflict is None and first.updates == 1
    await reconcile.reconcile(h.ctx, younger)
    assert younger.conflict == f"{NS}/a" and second.gets == 0


async def test_a_proof_is_for_one_runner_id(harness) -> None:
    h = harness()
    cluster(h)
    state, runner = owner(h)
    await reconcile.reconcile(h.ctx, state)
    assert conflicts.proof_tier(h.kube.get("bindings", NS, "b")) == conflicts.PROVEN
    body = h.kube.get("bindings", NS, "b")
    body["spec"]["runner"]["id"] = "runner-other"
    h.kube.add("bindings", body)
    stored = h.kube.get("bindings", NS, "b")
    assert conflicts.proof_tier(stored) == conflicts.UNTRIED  # the record names the old id: it proves nothing now
