"""The Slurm wing over the fakes: SlurmReady from the binding's own request, the shared poller (one per
slurmrestd URL and user, two requests per poll whatever the pods), placeholder jobs in PlacementVerified,
and the token's handling. slurmrestd is tests/unit/fake_slurm.py behind httpx.MockTransport; time is
the fake clock (no wall-clock sleep)."""

from __future__ import annotations

import base64
import json

import pytest

from sunk_sandbox_operator.api import keys
from sunk_sandbox_operator.controller import reconcile, watch
from sunk_sandbox_operator.controller.slurm_poll import Pollers

from tests.unit.fake_slurm import NEWEST, RELEASES, FakeSlurm
from tests.unit.fakes import FakeRunner, binding_body, harness_fixture, install_runner, settle  # noqa: F401
from tests.unit.test_reconcile import NS, cluster, conditions

URL = "https://slurm.example.com:6820"
POLL = 10.0


def jwt(user: str = "k8sop", exp: int = 2_000_000_000) -> str:
    enc = lambda d: base64.urlsafe_b64encode(json.dumps(d).encode()).rstrip(b"=").decode()  # noqa: E731
    return f"{enc({'alg': 'HS256', 'typ': 'JWT'})}.{enc({'exp': exp, 'iat': 1, 'sun': user})}.sig-{user}-{exp}"


TOKEN = jwt()


@pytest.fixture(params=list(RELEASES))
def release(request) -> str:
    """Every test runs against each release's slurmrestd (tests/unit/fake_slurm.py), negotiated."""
    return request.param


def setup(harness, release: str = "22.05", **config):
    h = harness(**{"allowed_slurm_urls": (URL,), "slurm_poll_seconds": POLL, "slurm_pending_seconds": 30.0,
                   "slurm_pending_polls": 2, "status_min_interval_seconds": 0.0, **config})
    cluster(h)
    fake = FakeSlurm(h.clock, release, tokens={TOKEN: "k8sop"})
    h.ctx.slurm = Pollers(h.ctx, client_factory=fake.client_factory())
    secret(h, TOKEN)
    return h, fake


def secret(h, token: str, name: str = "slurm-jwt") -> None:
    h.kube.add("secrets", {"metadata": {"namespace": NS, "name": name},
                           "data": {"token": base64.b64encode(token.encode()).decode()}})


def rest(**kw) -> dict:
    return {"url": URL, "tokenSecretRef": {"name": "slurm-jwt"}, "user": "k8sop", **kw}


def binding(h, name: str = "b", uid: str = "u1", partition: str | None = "sandboxes", **slurm):
    spec = {"scheduler": {"killWaitSeconds": 60}, "slurm": {"restAPI": rest(**slurm)}}
    if partition is not None:
        spec["partition"] = partition
    state = h.binding(binding_body(name, NS, uid=uid, **spec), active=False)
    install_runner(state, FakeRunner({}, runner_id="r"))
    return state


def pod(h, name: str, ns: str = "ds-alice", *, scheduler: str = "slurm-scheduler") -> dict:
    return {"metadata": {"namespace": ns, "name": name, "uid": f"uid-{name}", "creationTimestamp": h.clock.iso(),
                         "labels": {keys.SANDBOX_ID_LABEL: name},
                         "annotations": {"sunk.coreweave.com/partition": "sandboxes"}},
            "spec": {"schedulerName": scheduler, "containers": [
                {"name": "c", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}}]},
            "status": {"phase": "Pending"}}


def cond(h, ctype: str, name: str = "b") -> dict:
    return next(c for c in h.kube.get("bindings", NS, name)["status"]["conditions"] if c["type"] == ctype)


def jobs_status(h, name: str = "b") -> dict:
    return h.kube.get("bindings", NS, name)["status"]["placement"].get("jobs") or {}


async def one_matched_job(harness, release: str, name: str = "p"):
    """A reconciled binding whose one sandbox pod has its placeholder job, seen by a poll."""
    h, fake = setup(harness, release)
    state = binding(h)
    await reconcile.reconcile(h.ctx, state)
    watch.on_pod(h.ctx, "ADDED", pod(h, name))
    fake.submit(f"ds-alice/{name}")
    await h.clock.advance(POLL)
    await h.run_until_idle()
    assert jobs_status(h)["matched"] == 1
    return h, fake, state


async def test_without_rest_api_slurm_is_not_read_and_nothing_polls(harness, release) -> None:
    h, fake = setup(harness, release)
    state = h.binding(binding_body("b", NS, scheduler={"killWaitSeconds": 60}), active=False)
    install_runner(state, FakeRunner({}, runner_id="r"))
    await reconcile.reconcile(h.ctx, state)
    assert conditions(h)["SlurmReady"] == ("True", "NotConfigured") and conditions(h)["Ready"] == ("True", "Ready")
    assert h.ctx.slurm.running == {} and fake.log == []


async def test_slurm_ready_follows_the_partition_and_the_poller_wakes_the_binding(harness, release) -> None:
    h, fake = setup(harness, release)
    state = binding(h)
    await reconcile.reconcile(h.ctx, state)
    assert conditions(h)["SlurmReady"] == ("True", "PartitionUp") and conditions(h)["Ready"] == ("True", "Ready")
    await settle()
    state.wake.clear()
    fake.set_partition("sandboxes", "DOWN")
    await h.clock.advance(POLL)
    assert state.wake.is_set()  # the shared poller saw the partition move: a reconcile checks it
    await reconcile.reconcile(h.ctx, state)
    assert conditions(h)["SlurmReady"] == ("False", "PartitionDown")
    assert conditions(h)["Ready"] == ("False", "PartitionDown")
    assert "scontrol update PartitionName=sandboxes State=UP" in cond(h, "SlurmReady")["message"]
    fake.set_partition("sandboxes", None)
    await reconcile.reconcile(h.ctx, state)
    assert conditions(h)["SlurmReady"] == ("False", "PartitionNotFound")
    await h.close()


async def test_one_poller_per_url_and_user_two_requests_per_poll_whatever_the_pods(harness, release) -> None:
    h, fake = setup(harness, release)
    a, b = binding(h), binding(h, "b2", "u2", partition=None)
    for state in (a, b):
        await reconcile.reconcile(h.ctx, state)
    assert conditions(h, "b2")["SlurmReady"] == ("True", "SlurmReachable")
    assert len(h.ctx.slurm.running) == 1
    for i in range(200):
        watch.on_pod(h.ctx, "ADDED", pod(h, f"p{i}"))
        fake.submit(f"ds-alice/p{i}")
    await settle()  # the poller's first round (the list, and slurmctld's clock from /diag)
    fake.log.clear()
    fake.unchanged_log.clear()
    await h.clock.advance(POLL * 10)
    polls = fake.count("jobs")
    assert polls == 10 and fake.count("partitions") == 10 and fake.count("partition") == 0
    assert fake.unchanged("jobs") == 9  # the list was read once, then unchanged (304, or 24.11+'s empty 200)
    assert fake.count("jobs", 200) == (1 if release == "22.05" else 10)
    assert len(fake.log) == 2 * polls    # nothing per pod, nothing per binding
    await h.run_until_idle()
    assert jobs_status(h)["matched"] == 200 and jobs_status(h, "b2")["matched"] == 200
    await h.close()


async def test_placeholder_jobs_found_stuck_and_missing(harness, release) -> None:
    h, fake, state = await one_matched_job(harness, release, "running")
    assert conditions(h)["PlacementVerified"] == ("True", "Verified")
    assert "1 placeholder job(s) found ('{namespace}/{name}' ×1)" in cond(h, "PlacementVerified")["message"]
    assert jobs_status(h) == {"matched": 1, "pending": 0, "missing": 0, "templates": {"{namespace}/{name}": 1}}

    watch.on_pod(h.ctx, "ADDED", pod(h, "nojob"))
    await h.clock.advance(POLL)
    await h.run_until_idle()
    assert conditions(h)["PlacementVerified"] == ("True", "Verified")  # young: SUNK may not have submitted yet
    await h.clock.advance(30)
    await h.run_until_idle()
    assert conditions(h)["PlacementVerified"] == ("False", "SlurmJobMissing")
    assert "ds-alice/nojob" in cond(h, "PlacementVerified")["message"]
    assert jobs_status(h)["missing"] == 1 and jobs_status(h)["missingPods"] == ["ds-alice/nojob"]

    watch.on_pod(h.ctx, "ADDED", pod(h, "held"))
    held = fake.submit("ds-alice/held", state="PENDING", reason="ReqNodeNotAvail")
    await h.clock.advance(POLL)
    fake.set_job(held, state_reason="JobHeldUser")   # a brief backfill reason, then one that stays
    for _ in range(3):
        await h.clock.advance(POLL)
        await h.run_until_idle()
    assert conditions(h)["PlacementVerified"] == ("False", "SlurmJobMissing")  # not persistent yet: 20 s < 30 s
    await h.clock.advance(POLL)
    await h.run_until_idle()
    message = cond(h, "PlacementVerified")["message"]
    assert conditions(h)["PlacementVerified"] == ("False", "SlurmJobPending")
    assert f"ds-alice/held: its placeholder job {held} (ds-alice/held)" in message and "JobHeldUser" in message
    assert f"scontrol release {held}" in message
    got = jobs_status(h)
    assert (got["matched"], got["pending"], got["missing"]) == (2, 1, 1)
    assert got["stuck"]["jobId"] == held and got["stuck"]["reason"] == "JobHeldUser"
    assert conditions(h)["Ready"] == ("False", "SlurmJobPending")

    patches = h.kube.count("patch_binding_status")
    await h.clock.advance(POLL * 6)  # nothing changes in Slurm: polls answer 304, no status write
    await h.run_until_idle()
    assert h.kube.count("patch_binding_status") == patches
    await h.close()


async def test_slurm_unreachable_is_its_own_condition_and_nothing_else_degrades(harness, release) -> None:
    h, fake, state = await one_matched_job(harness, release)
    fake.down = True
    state.wake.clear()
    await h.clock.advance(POLL)
    assert state.wake.is_set()
    await reconcile.reconcile(h.ctx, state)
    await h.run_until_idle()
    got = conditions(h)
    assert got["SlurmReady"] == ("Unknown", "SlurmUnreachable")
    assert got["Ready"] == ("True", "Ready")
    assert {got[t] for t in ("SchedulerReady", "PolicySynced", "ScopeSynced", "GracePeriodSafe")} == {
        ("True", "SchedulerFound"), ("True", "Synced"), ("True", "GracePeriodWithinKillWait")}
    assert got["PlacementVerified"] == ("True", "Verified") and jobs_status(h) == {}  # the policy's verdict alone
    assert "All connection attempts failed" in cond(h, "SlurmReady")["message"]
    fake.down = False
    state.wake.clear()
    await h.clock.advance(600)  # backoff, then an answer: the binding is woken to check again
    assert state.wake.is_set()
    await reconcile.reconcile(h.ctx, state)
    await h.clock.advance(POLL)
    await h.run_until_idle()
    assert conditions(h)["SlurmReady"] == ("True", "PartitionUp") and jobs_status(h)["matched"] == 1
    await h.close()


async def test_the_token_read_at_use_checked_offline_and_never_shown(harness, release) -> None:
    h, fake = setup(harness, release)
    state = binding(h)
    h.kube.store["secrets"].clear()
    await reconcile.reconcile(h.ctx, state)
    assert conditions(h)["SlurmReady"] == ("False", "CredentialsMissing") and fake.log == []
    expired = jwt(exp=1)
    secret(h, expired)
    await reconcile.reconcile(h.ctx, state)
    assert conditions(h)["SlurmReady"] == ("False", "SlurmAuthFailed") and fake.log == []  # never sent
    assert "expired at" in cond(h, "SlurmReady")["message"]
    wrong = jwt(exp=2_000_000_001)   # well formed, not one Slurm issued
    secret(h, wrong)
    await reconcile.reconcile(h.ctx, state)
    assert conditions(h)["SlurmReady"] == ("False", "SlurmAuthFailed")
    assert ("slurmctld config is unable to load" if release == "22.05" else "HTTP 511: Unable to query partitions / "
            "Protocol authentication error (error 1007)") in cond(h, "SlurmReady")["message"]
    await h.clock.advance(POLL * 3)
    assert fake.count("jobs") == 0  # a refused token gets no job list
    secret(h, TOKEN)  # rotated: the next check reads the new one
    await reconcile.reconcile(h.ctx, state)
    assert conditions(h)["SlurmReady"] == ("True", "PartitionUp")
    await h.clock.advance(POLL)
    assert fake.count("jobs") >= 1
    shown = json.dumps([h.kube.get("bindings", NS, "b"), h.events])
    assert not any(t in shown for t in (TOKEN, expired, wrong))
    await h.close()


async def test_a_token_refused_mid_way_drops_the_binding_from_the_list(harness, release) -> None:
    h, fake, state = await one_matched_job(harness, release)
    fake.tokens.clear()  # revoked in Slurm
    state.wake.clear()
    await h.clock.advance(POLL)
    assert state.slurm.outcome == "refused" and state.wake.is_set()
    await reconcile.reconcile(h.ctx, state)
    await h.run_until_idle()
    assert conditions(h)["SlurmReady"] == ("False", "SlurmAuthFailed") and jobs_status(h) == {}
    await h.close()


async def test_a_url_the_settings_do_not_allow_is_refused_and_nothing_is_sent(harness, release) -> None:
    h, fake = setup(harness, release, allowed_slurm_urls=())
    state = binding(h)
    await reconcile.reconcile(h.ctx, state)
    got = conditions(h)
    assert got["SlurmReady"] == ("False", "NotAllowed") and got["PolicySynced"] == ("False", "NotAllowed")
    assert "spec.slurm.restAPI.url" in cond(h, "SlurmReady")["message"] and "--allowed-slurm-url" in \
        cond(h, "SlurmReady")["message"]
    assert fake.log == [] and h.ctx.slurm.running == {}
    assert h.kube.count("read_secret_key") == 0


async def test_pollers_follow_the_bindings(harness, release) -> None:
    h, fake = setup(harness, release)
    fake.tokens[jwt("other")] = "other"
    secret(h, jwt("other"), "other-jwt")
    a, b = binding(h), binding(h, "b2", "u2", user="other", tokenSecretRef={"name": "other-jwt"})
    for state in (a, b):
        await reconcile.reconcile(h.ctx, state)
    running = {k.user: p.task for k, p in h.ctx.slurm.running.items()}
    assert sorted(running) == ["k8sop", "other"]  # one per user: each sees what its user may see
    reconcile.forget(h.ctx, b)
    await settle()
    assert [k.user for k in h.ctx.slurm.running] == ["k8sop"]
    assert running["other"].cancelled() and not running["k8sop"].done()
    reconcile.forget(h.ctx, a)
    await settle()
    assert h.ctx.slurm.running == {} and running["k8sop"].cancelled()
    await h.ctx.slurm.close()


async def test_a_binding_that_first_met_slurm_down_is_woken_when_it_answers(harness, release) -> None:
    h, fake = setup(harness, release)
    fake.down = True
    state = binding(h)
    await reconcile.reconcile(h.ctx, state)
    assert conditions(h)["SlurmReady"] == ("Unknown", "SlurmUnreachable") and conditions(h)["Ready"][0] == "True"
    await h.clock.advance(POLL * 3)  # the poller tries with its token, backing off
    state.wake.clear()
    fake.down = False
    await h.clock.advance(300)
    assert state.wake.is_set()
    state.wake.clear()
    await reconcile.reconcile(h.ctx, state)
    assert conditions(h)["SlurmReady"] == ("True", "PartitionUp")
    await h.clock.advance(POLL * 3)
    assert not state.wake.is_set()  # woken once, not at every poll
    await h.close()


async def test_status_says_the_negotiated_version_and_the_release(harness, release) -> None:
    h, fake = setup(harness, release)
    await reconcile.reconcile(h.ctx, binding(h))
    got = h.kube.get("bindings", NS, "b")["status"]["slurm"]
    assert got == {"apiVersion": NEWEST[release], "apiVersionSource": "negotiated",
                   "release": {"22.05": "22.05.8", "24.11": "24.11.5", "26.05": "26.05.5"}[release]}
    assert f"REST {NEWEST[release]} (negotiated)" in cond(h, "SlurmReady")["message"]
    await h.close()


async def test_an_explicit_version_not_served_is_refused_with_the_served_ones(harness, release) -> None:
    h, fake = setup(harness, release)
    state = binding(h, apiVersion="v0.0.40" if release != "24.11" else "v0.0.44")
    await reconcile.reconcile(h.ctx, state)
    assert conditions(h)["SlurmReady"] == ("False", "APIVersionNotServed")
    served = {"22.05": "v0.0.38", "24.11": "v0.0.40–v0.0.42", "26.05": "v0.0.42–v0.0.45"}[release]
    message = cond(h, "SlurmReady")["message"]
    assert f"it serves {served}" in message and "Remove spec.slurm.restAPI.apiVersion to negotiate" in message
    await h.clock.advance(POLL * 3)
    assert fake.count("jobs") == 0  # the poller uses no token whose check failed
    await h.close()


async def test_24_11_v0_0_40_refusing_update_time_is_read_in_full_not_unreachable(harness) -> None:
    h, fake = setup(harness, "24.11")
    state = binding(h, apiVersion="v0.0.40")
    await reconcile.reconcile(h.ctx, state)
    watch.on_pod(h.ctx, "ADDED", pod(h, "p"))
    fake.submit("ds-alice/p")
    for _ in range(4):
        await h.clock.advance(POLL)
        await h.run_until_idle()
    assert conditions(h)["SlurmReady"] == ("True", "PartitionUp") and jobs_status(h)["matched"] == 1
    assert fake.count("jobs", 422) == 1 and fake.count("jobs", 200) >= 4   # refused once, then full lists
    assert h.ctx.slurm.running[next(iter(h.ctx.slurm.running))].memory.reachable is True
    await h.close()


async def test_a_token_expiring_within_the_hour_is_a_warning_once(harness, release) -> None:
    h, fake = setup(harness, release)
    now = int(fake.epoch())
    soon = jwt(exp=now + 1800)
    fake.tokens[soon] = "k8sop"
    secret(h, soon)
    state = binding(h)
    await reconcile.reconcile(h.ctx, state)
    await reconcile.reconcile(h.ctx, state)
    assert conditions(h)["SlurmReady"] == ("True", "PartitionUp")  # it still works: a warning, not a failure
    from sunk_sandbox_operator.core.slurm import iso
    warned = [m for k, r, m in h.events if r == "SlurmTokenExpiring"]
    assert len(warned) == 1 and [k for k, r, _ in h.events if r == "SlurmTokenExpiring"] == ["Warning"]
    assert f"Secret {NS}/slurm-jwt key token" in warned[0] and iso(now + 1800) in warned[0]
    assert f"expires at {iso(now + 1800)}" in cond(h, "SlurmReady")["message"]
    assert h.kube.get("bindings", NS, "b")["status"]["slurm"]["tokenExpires"] == iso(now + 1800)
    fresh = jwt(exp=now + 86400)
    fake.tokens[fresh] = "k8sop"
    secret(h, fresh)   # rotated: no warning, no note
    await reconcile.reconcile(h.ctx, state)
    assert "expires at" not in cond(h, "SlurmReady")["message"]
    assert [r for _, r, _ in h.events].count("SlurmTokenExpiring") == 1
    shown = json.dumps([h.kube.get("bindings", NS, "b"), h.events])
    assert soon not in shown and fresh not in shown
    await h.close()


async def test_an_env_file_secret_is_refused_unsent_naming_the_secret_never_quoted(harness, release) -> None:
    """Issue 31 (6): `SLURM_JWT=…\\nDB_PASSWORD=…` passes as a JWT by its dots; a header cannot carry it."""
    h, fake = setup(harness, release)
    env_file = f"SLURM_JWT={TOKEN}\nDB_PASSWORD=hunter2-{release}"
    secret(h, env_file)
    await reconcile.reconcile(h.ctx, binding(h))
    assert conditions(h)["SlurmReady"] == ("False", "CredentialsMissing")
    message = cond(h, "SlurmReady")["message"]
    assert f"Secret {NS}/slurm-jwt key token cannot be sent" in message and "a line break at offset" in message
    await h.clock.advance(POLL * 2)
    assert fake.log == []   # nothing sent, by the check nor by the poller
    shown = json.dumps([h.kube.get("bindings", NS, "b"), h.events])
    assert "hunter2" not in shown and TOKEN not in shown and "Illegal header" not in shown
    await h.close()
