"""The binding cache (issue 31, finding 4): every binding as a compact entry, indexed by runner id and
scope target, judged once per (uid, generation); a reconcile and a review read a few entries, never a
LIST of every binding."""

from __future__ import annotations

from sunk_sandbox_operator.controller.binding_cache import BindingCache
from sunk_sandbox_operator.core import tenancy
from sunk_sandbox_operator.core.tenancy import TenancyPolicy

from tests.unit.fakes import binding_body


def cache() -> tuple[BindingCache, list[tuple[str, str]]]:
    changed: list[tuple[str, str]] = []
    c = BindingCache(TenancyPolicy(), lambda runner, ref: changed.append((runner, ref)))
    return c, changed


def test_entries_by_runner_and_target_compact_and_judged_once_per_generation(monkeypatch) -> None:
    judged: list[str] = []
    real = tenancy.admissible
    monkeypatch.setattr(tenancy, "admissible", lambda body, policy: judged.append(body["metadata"]["name"])
                        or real(body, policy))
    c, changed = cache()
    body = binding_body("b", "slurm", uid="u1")
    body["status"] = {"conditions": [{"type": "Ready", "message": "x" * 10_000}],
                      "runner": {"id": "r", "apiURL": "https://api.coreweave.com", "provenTime": "t"}}
    body["metadata"]["managedFields"] = [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}]
    c.apply("ADDED", body)
    (entry,) = c.on_runner("r")
    assert set(entry) == {"metadata", "spec", "status"} and entry["status"] == {"runner": body["status"]["runner"]}
    assert "managedFields" not in entry["metadata"]
    assert c.on_target(("SchedulerConfigMap", "slurm", "", "scheduler.conf", "scheduler.scope.namespaces")) == [entry]
    assert changed == [("r", "slurm/b")]
    for i in range(5):  # status patches (our own writes): not judged again, nobody woken
        body["status"]["conditions"][0]["message"] = str(i)
        c.apply("MODIFIED", body)
    assert judged == ["b"] and changed == [("r", "slurm/b")]
    body["spec"]["runner"] = {"id": "r2", "tokenSecretRef": {"name": "s"}}
    body["metadata"]["generation"] = 2
    c.apply("MODIFIED", body)
    assert judged == ["b", "b"] and c.on_runner("r") == [] and len(c.on_runner("r2")) == 1
    assert sorted(changed[1:]) == [("r", "slurm/b"), ("r2", "slurm/b")]  # both runners' conflicted look again
    c.apply("DELETED", {"metadata": {"namespace": "slurm", "name": "b"}})  # a relist tombstone
    assert c.on_runner("r2") == [] and len(c) == 0 and not c.allowed("slurm/b")


def test_a_refused_binding_is_known_but_claims_nothing() -> None:
    c, changed = cache()
    evil = binding_body("evil", "attacker", runner={"id": "r", "apiURL": "https://evil.example.com",
                                                     "tokenSecretRef": {"name": "s"}})
    c.apply("ADDED", evil)
    assert len(c) == 1 and c.on_runner("r") == [] and not c.allowed("attacker/evil")


def test_a_proof_change_wakes_the_runner_only_when_it_changes() -> None:
    c, changed = cache()
    body = binding_body("b", "slurm")
    c.apply("ADDED", body)
    body["status"] = {"runner": {"id": "r", "apiURL": "https://api.coreweave.com", "failure": "CredentialsMissing"}}
    c.apply("MODIFIED", body)
    c.apply("MODIFIED", body)
    assert changed == [("r", "slurm/b"), ("r", "slurm/b")]   # added, then failed; the repeat wakes nobody


def test_ten_thousand_bindings_cost_a_reconcile_only_those_on_its_runner() -> None:
    c, _ = cache()
    for i in range(10_000):
        c.apply("ADDED", binding_body(f"b{i}", f"ns{i % 100}", uid=f"u{i}",
                                      runner={"id": f"r{i}", "tokenSecretRef": {"name": "s"}}))
    assert [b["metadata"]["name"] for b in c.on_runner("r42")] == ["b42"]


async def test_every_replica_feeds_the_cache_from_its_own_watch(tmp_path, monkeypatch) -> None:
    """Started by lifecycle.start, before and whatever the leader election (the standby answers the
    webhook too): one informer of the bindings whose sink is the cache, and the cache is ready when it
    has listed; readiness (/readyz) and the first reconcile wait for it like the other informers."""
    import logging

    import yaml

    from sunk_sandbox_operator.controller import lifecycle
    from sunk_sandbox_operator.controller.config import Config
    from tests.unit.test_kubeconfig import doc

    path = tmp_path / "config"
    path.write_text(yaml.safe_dump(doc({"server": "http://127.0.0.1:9"}, {"token": "t"})))
    monkeypatch.setenv("KUBECONFIG", str(path))
    ctx = await lifecycle.start(logging.getLogger("test"), Config())
    try:
        (informer,) = [i for i in ctx.informers if i.resource.path == "/apis/sunksandbox.dev/v1alpha1/sunksandboxbindings"]
        assert informer.sink == ctx.binding_cache.apply and not informer.resource.metadata_only
        assert not ctx.binding_cache.ready
        informer.ready.set()
        assert ctx.binding_cache.ready
    finally:
        await lifecycle.stop(ctx)
