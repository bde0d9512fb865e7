from sunk_sandbox_operator.core.conflicts import older_owner


def b(ns, name, runner, created, deleting=False):
    meta = {"namespace": ns, "name": name, "creationTimestamp": created}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-30T01:00:00Z"
    return {"metadata": meta, "spec": {"runner": {"id": runner}}}


OLD = b("a", "old", "r1", "2026-11-30T00:00:00Z")
NEW = b("a", "new", "r1", "2026-11-30T00:00:05Z")


def test_younger_sees_the_older_owner():
    assert older_owner(NEW, [OLD, NEW]) == "a/old"
    assert older_owner(OLD, [OLD, NEW]) is None


def test_other_runner_and_self_do_not_conflict():
    other = b("a", "x", "r2", "2026-11-29T00:00:00Z")
    assert older_owner(NEW, [NEW, other]) is None


def test_same_second_tie_broken_by_namespace_then_name():
    first = b("a", "p", "r1", "2026-11-30T00:00:00Z")
    second = b("a", "q", "r1", "2026-11-30T00:00:00Z")
    assert older_owner(second, [first, second]) == "a/p"
    assert older_owner(first, [first, second]) is None


def test_an_older_binding_keeps_the_runner_until_its_finalizer_is_done():
    # Its Restore may still be writing the policy back; the younger takes over on its DELETED event.
    assert older_owner(NEW, [b("a", "old", "r1", "2026-11-30T00:00:00Z", deleting=True), NEW]) == "a/old"
    assert older_owner(NEW, [NEW]) is None


def test_a_spelled_out_default_and_an_omitted_one_are_the_same_scheduler_configmap_target() -> None:
    """target_key is target_ref.locate's: the spec's defaults filled in for every kind (it compared raw
    specs for ConfigMap targets, so `key: scheduler.conf` written out looked like another target)."""
    from sunk_sandbox_operator.core import conflicts as cf

    def body(name: str, **target) -> dict:
        return {"metadata": {"namespace": "slurm", "name": name},
                "spec": {"runner": {"id": name, "tokenSecretRef": {"name": "s"}}, "sandboxNamespaces": {"names": ["ds-*"]},
                         "scope": {"target": target}}}
    assert cf.target_key(body("a")) == cf.target_key(body("b", configMap={"key": "scheduler.conf"}))
    assert cf.target_key(body("a")) != cf.target_key(body("c", configMap={"key": "other.conf"}))
