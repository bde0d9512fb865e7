"""`doctor`'s checks that ask the remote APIs: the runner API (the token, the policy it answers) and
slurmrestd (the pinned partition, the Slurm token's expiry). Pure, over the same one observation as
the cluster's checks in `checks.py`, which runs them all in the runbook's order.
"""

from __future__ import annotations

from ...api.reasons import Common
from .facts import Observation, Result, failing, passed, skipped
from ..policy.checks import policy_warnings, validate_policy
from ..policy.paths import PolicyError
from ..redact import describe
from ..slurm.facts import expiring, iso, ready_condition


_RUNNER_FIXES = {
    "unauthenticated": "the token is invalid or expired: put a current CoreWeave API token in {token}",
    "permission_denied": "give the token's user the sandbox_admin role (reading and writing a runner's policy needs it)",
    "not_found": "check the runner id ({knob}; `cwic runner list`)",
    "unimplemented": "the URL does not serve the runner API: check {url_knob}",
}


def runner_token(obs: Observation) -> Result:
    n, r = "runner token works, has sandbox_admin", obs.runner
    if r is None:
        return skipped("runner-token", n, "no runner given: pass --runner-id and --token-secret NS/NAME[:KEY] "
                        "(and --api-url)")
    url_knob = obs.knob("spec.runner.apiURL", "--api-url")
    if r.outcome == "not_allowed":
        return failing("runner-token", n, f"{r.message}; the token was not sent", Common.NOT_ALLOWED.fix)
    if r.outcome == "credentials":
        return failing("runner-token", n, f"{r.message}; nothing was sent",
                       f"create it: `kubectl create secret generic ... --from-literal=token=$TOKEN` ({r.token})")
    if r.outcome != "ok":
        fix = _RUNNER_FIXES.get(r.code, f"the API at {r.api_url} did not answer as expected: check {url_knob} and "
                                "the network, then run the doctor again")
        return failing("runner-token", n, f"GetManagedRunner {r.runner_id} at {r.api_url} with the token of {r.token}: "
                       f"{r.code} {r.message}".rstrip(),
                       fix.format(token=r.token, knob=obs.knob("spec.runner.id", "--runner-id"), url_knob=url_knob))
    return passed("runner-token", n, f"GetManagedRunner {r.runner_id} at {r.api_url} with the token of {r.token} "
                   "answered (the call needs sandbox_admin)")


def policy_fields(obs: Observation) -> Result:
    n, r = "policy: no forbidden field, no nodeSelector", obs.runner
    if r is None or r.outcome != "ok":
        return skipped("policy", n, "not checked: the runner's policy was not read (see above)")
    if r.policy is None:
        return passed("policy", n, f"runner {r.runner_id} has no policy yet (null): nothing to conflict with")
    edit = f"edit it: `cwic sandbox runner policy edit {r.runner_id}`, keeping everything else"
    try:
        validate_policy(r.policy)
    except PolicyError as exc:
        return failing("policy", n, f"runner {r.runner_id}: {describe(exc)}", edit)
    found = policy_warnings(r.policy, obs.client_annotations)
    if found:
        return failing("policy", n, f"runner {r.runner_id}: " + "; ".join(found), edit)
    return passed("policy", n, f"runner {r.runner_id}: no forbidden base field, no nodeSelector, no instance-type limit")


def partition_exists(obs: Observation) -> Result:
    n, s, p = "partition exists in Slurm", obs.slurm, obs.partition
    if obs.slurm_refused:
        return failing("partition", n, f"{obs.slurm_refused}; the Slurm token was not sent", Common.NOT_ALLOWED.fix)
    if s is None:
        return skipped("partition", n, ("no partition pinned: Slurm chooses" if p is None else f"{p!r} pinned") +
                        "; Slurm not configured (" + obs.knob("spec.slurm.restAPI", "--slurm-url, --slurm-user, "
                                                               "--slurm-token-secret") + "): not asked")
    status, reason, message = ready_condition(s)  # SlurmReady's own verdict on the same request
    if status == "True":
        return passed("partition", n, message)
    return failing("partition", n, message, reason.fix)


def slurm_token(obs: Observation) -> Result:
    n, s = "Slurm token not about to expire", obs.slurm
    if obs.slurm_refused or s is None:
        return skipped("slurm-token", n, "Slurm not configured or not allowed (see the partition line): not read")
    if s.error in ("credentials", "token"):
        return failing("slurm-token", n, s.detail, ready_condition(s)[1].fix)
    exp = obs.slurm_token_exp
    if exp is None:
        return passed("slurm-token", n, f"the JWT in {s.token_where} carries no `exp`")
    if expiring(exp, obs.now):
        return failing("slurm-token", n, f"the JWT in {s.token_where} expires at {iso(exp)}, within the hour: Slurm "
                       "refuses it then", f"put a new one there before then: `scontrol token username={s.user} "
                       "lifespan=SECONDS` (the default lifespan is 1800 s: ask for more)")
    return passed("slurm-token", n, f"the JWT in {s.token_where} (user {s.user}) expires at {iso(exp)}")
