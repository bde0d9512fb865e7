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


# ---------------------------------------------------------------- proof (issue 31, finding 7)

from sunk_sandbox_operator.core import conflicts as cf  # noqa: E402


def proven(body, runner="r1", url="https://api.coreweave.com"):
    return {**body, "status": {"runner": {"id": runner, "apiURL": url, "provenTime": "2026-12-01T00:00:00Z"}}}


def failed(body, runner="r1", reason="CredentialsMissing"):
    return {**body, "status": {"runner": {"id": runner, "apiURL": "https://api.coreweave.com", "failure": reason}}}


def test_a_squatter_that_cannot_prove_blocks_nobody():
    """The attack: an older binding naming the victim's runner with a token Secret that does not exist."""
    squat, owner = failed(OLD), NEW
    assert cf.runner_verdict(owner, [squat]) == cf.RunnerVerdict(claimants=("a/old",))   # untried beats failed
    assert cf.runner_verdict(proven(owner), [squat]).owner is None
    v = cf.runner_verdict(squat, [proven(owner)])
    assert v.owner == "a/new" and v.owner_tier == cf.PROVEN and v.prove   # it may try again (older, if it proves)
    assert cf.runner_verdict(squat, [owner]).owner == "a/new" and not cf.runner_verdict(squat, [owner]).prove


def test_proven_beats_unproven_whatever_the_age_and_the_older_of_two_proven_wins():
    assert cf.runner_verdict(proven(NEW), [OLD]).owner is None
    v = cf.runner_verdict(OLD, [proven(NEW)])
    assert v.owner == "a/new" and v.prove                       # proving would make the older one the owner
    assert cf.runner_verdict(proven(OLD), [proven(NEW)]).owner is None
    v = cf.runner_verdict(proven(NEW), [proven(OLD)])
    assert v.owner == "a/old" and not v.prove
    v = cf.runner_verdict(NEW, [proven(OLD)])
    assert v.owner == "a/old" and not v.prove                   # younger: proving would change nothing


def test_an_older_binding_that_has_not_tried_is_waited_for():
    """An upgrade (no status.runner yet) or two bindings made at once: the older tries first; the younger
    neither writes nor races it."""
    v = cf.runner_verdict(NEW, [OLD])
    assert v.owner == "a/old" and v.owner_tier == cf.UNTRIED and not v.prove
    assert cf.runner_verdict(OLD, [NEW]) == cf.RunnerVerdict(claimants=("a/new",))
    v = cf.runner_verdict(failed(NEW), [failed(OLD)])           # both failed: the older keeps it, the younger retries
    assert v.owner == "a/old" and v.owner_tier == cf.FAILED and v.prove


def test_a_proof_counts_only_for_the_runner_and_url_the_spec_names_now():
    assert cf.proof_tier(proven(NEW)) == cf.PROVEN
    assert cf.proof_tier(proven(NEW, runner="r2")) == cf.UNTRIED       # the spec moved to r1 since
    assert cf.proof_tier(proven(NEW, url="https://gw.example.com")) == cf.UNTRIED
    assert cf.proof_tier(failed(NEW)) == cf.FAILED
    assert cf.proof_tier({**NEW, "status": {"runner": "junk"}}) == cf.UNTRIED
    with_url = {**NEW, "spec": {"runner": {"id": "r1", "apiURL": "https://gw.example.com"}}}
    assert cf.proof_tier(proven(with_url, url="https://gw.example.com")) == cf.PROVEN


def test_the_verdict_does_not_depend_on_the_order_of_the_others():
    import itertools

    bodies = [failed(b("x", "a", "r1", "2026-01-01T00:00:00Z")), b("x", "b", "r1", "2026-01-02T00:00:00Z"),
              proven(b("x", "c", "r1", "2026-01-03T00:00:00Z")), proven(b("x", "d", "r1", "2026-01-04T00:00:00Z"))]
    owners = set()
    for me in bodies:
        others = [o for o in bodies if o is not me]
        verdicts = {cf.runner_verdict(me, list(p)) for p in itertools.permutations(others)}
        assert len(verdicts) == 1
        owners.add(verdicts.pop().owner or cf.ref(me))
    assert owners == {"x/c"}                                     # exactly one owner, seen alike by all
