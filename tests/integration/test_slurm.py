"""Slurm's side, against a real Slurm of each release and a real kube-apiserver.

slurmctld + slurmd + slurmrestd (JWT): 22.05 from Debian 12's packages, 24.11 (trixie) and 26.05 (sid)
from cached debootstrap chroots, started by the fixture `slurm` (tests/integration/conftest.py), every
test once per release; the bindings leave `apiVersion` unset (negotiated). The operator runs as its
own ServiceAccount (tests/conftest.py, TEST_ENV allows slurmrestd on loopback, polls every second,
counts a pending reason after 3 s over two polls). The SUNK scheduler is closed source: the tests play
its part by submitting, through slurmrestd, the placeholder job it would submit for a sandbox pod,
named after the pod's namespace and name.
"""

from __future__ import annotations

import json
import os
import re
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.conftest import SECRET_VALUES, wait_for
from tests.integration.conftest import binding_spec, new_runner
from tests.integration.test_scheduler_placement import (sandbox_namespaces, sandbox_pod, status,
                                                        wait_policy_applied)

pytestmark = pytest.mark.integration

OTHERS = ("SchedulerReady", "PolicySynced", "ScopeSynced", "GracePeriodSafe")


def uniq(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def jwt_secret(kube, ns: str, token: str, name: str = "slurm-jwt") -> None:
    SECRET_VALUES.append(token)
    kube.core.create_namespaced_secret(ns, {"metadata": {"name": name}, "stringData": {"token": token}})


def rest_api(url: str, user: str = "k8sop", **extra) -> dict:
    return {"url": url, "tokenSecretRef": {"name": "slurm-jwt"}, "user": user, **extra}


def make(kube, emulator, ns: str, name: str, rest: dict, **spec) -> None:
    kube.create_binding(ns, name, binding_spec(new_runner(emulator, {}), emulator, slurm={"restAPI": rest}, **spec))


def conditions(kube, ns: str, name: str) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in status(kube, ns, name).get("conditions") or []}


def jobs(kube, ns: str, name: str = "b") -> dict:
    return (status(kube, ns, name).get("placement") or {}).get("jobs") or {}


# What each release answers where it differs (shared/reference/slurm-versions.md).
MISSING_PARTITION = {"22.05": "HTTP 500: Invalid partition name specified (error 2000)",
                     "24.11": "HTTP 422: Unable to find partition", "26.05": "HTTP 200 without partition"}
REFUSED_TOKEN = {"22.05": "HTTP 500: Unspecified error (error -1)",
                 "24.11": "HTTP 511: Unable to query partitions / Protocol authentication error (error 1007)",
                 "26.05": "HTTP 511"}


def test_slurm_starts_and_answers_its_newest_version(slurm) -> None:
    """The fixture's figure (printed at start too): the daemons, the node idle, REST answering."""
    from sunk_sandbox_operator.core import slurm_versions

    code, body = slurm.request("GET", f"/slurm/{slurm.api_version}/ping")
    assert code == 200 and slurm_versions.responding(body) is True
    assert (slurm_versions.release(body) or "").startswith(slurm.release)
    print(f"\nSlurm {slurm.release} start in the fixture: {slurm.started_in:.2f}s (slurm.md's start script "
          "without accounting: 0.26 s to the first answer for 22.05; 2.5-3.5 s in a chroot, slurm-versions.md)")


def test_the_partition_up_missing_and_down(installed, operator, emulator, slurm, binding_ns) -> None:
    ns = binding_ns
    jwt_secret(installed, ns, slurm.token())
    up, down = uniq("up"), uniq("down")
    slurm.create_partition(up)
    slurm.create_partition(down, "DOWN")
    make(installed, emulator, ns, "up", rest_api(slurm.url), partition=up)
    make(installed, emulator, ns, "missing", rest_api(slurm.url), partition=uniq("nosuch"))
    make(installed, emulator, ns, "down", rest_api(slurm.url), partition=down)
    cond = installed.wait_condition(ns, "up", "SlurmReady", "True", "PartitionUp")
    installed.wait_condition(ns, "up", "Ready", "True")
    got = status(installed, ns, "up")["slurm"]   # negotiated: the newest version the release serves
    assert (got["apiVersion"], got["apiVersionSource"]) == (slurm.api_version, "negotiated")
    assert got["release"].startswith(slurm.release) and f"REST {slurm.api_version} (negotiated)" in cond["message"]
    print(f"\nSlurm {slurm.release}: negotiated {got['apiVersion']} (Slurm {got['release']})")
    missing = installed.wait_condition(ns, "missing", "SlurmReady", "False", "PartitionNotFound")
    assert MISSING_PARTITION[slurm.release] in missing["message"]
    installed.wait_condition(ns, "missing", "Ready", "False", "PartitionNotFound")
    installed.wait_condition(ns, "down", "SlurmReady", "False", "PartitionDown")
    started = time.monotonic()
    slurm.set_partition_state(down, "UP")       # the shared poller sees it and wakes the binding
    installed.wait_condition(ns, "down", "SlurmReady", "True", "PartitionUp", timeout=20)
    print(f"\npartition DOWN -> UP in Slurm -> SlurmReady=True: {time.monotonic() - started:.1f}s (poll 1 s; the "
          "binding's resync is 5 min)")
    slurm.set_partition_state(up, "DRAIN")
    cond = installed.wait_condition(ns, "up", "SlurmReady", "False", "PartitionDown", timeout=20)
    assert "DRAIN" in cond["message"] and f"scontrol update PartitionName={up} State=UP" in cond["message"]


def test_placeholder_jobs_running_pending_and_missing(installed, operator, emulator, slurm, binding_ns) -> None:
    ns = binding_ns
    jwt_secret(installed, ns, slurm.token())
    glob, [sbx] = sandbox_namespaces(installed)
    make(installed, emulator, ns, "b", rest_api(slurm.url), sandboxNamespaces={"names": [glob]})
    wait_policy_applied(installed, ns)
    installed.wait_condition(ns, "b", "SlurmReady", "True", "PartitionUp")

    # The SUNK scheduler's part: a placeholder job per pod it places, named after the pod.
    sandbox_pod(installed, sbx, "running")
    running = slurm.submit(f"{sbx}/running", partition="sandboxes")
    wait_for(lambda: jobs(installed, ns).get("matched") == 1, 20, lambda: f"jobs: {jobs(installed, ns)}")
    cond = installed.wait_condition(ns, "b", "PlacementVerified", "True", "Verified")
    assert "1 placeholder job(s) found ('{namespace}/{name}' ×1)" in cond["message"]
    from sunk_sandbox_operator.core.slurm import job_state
    assert job_state(slurm.job(running)["job_state"]) in ("RUNNING", "PENDING")

    sandbox_pod(installed, sbx, "nojob")
    cond = installed.wait_condition(ns, "b", "PlacementVerified", "False", "SlurmJobMissing", timeout=20)
    assert f"{sbx}/nojob" in cond["message"] and f"job names tried: {sbx}/nojob" in cond["message"]

    sandbox_pod(installed, sbx, "held")
    held = slurm.submit(f"{sbx}/held", partition="sandboxes", hold=True)
    started = time.monotonic()
    cond = installed.wait_condition(ns, "b", "PlacementVerified", "False", "SlurmJobPending", timeout=20)
    print(f"\nheld placeholder job -> PlacementVerified=False SlurmJobPending: {time.monotonic() - started:.1f}s "
          "(a reason counts after 3 s over 2 polls here; 60 s over 3 by default)")
    assert f"sandbox pod {sbx}/held" in cond["message"] and f"job {held} ({sbx}/held)" in cond["message"]
    assert "JobHeldUser" in cond["message"] and f"scontrol release {held}" in cond["message"]
    got = jobs(installed, ns)
    assert (got["matched"], got["pending"], got["missing"]) == (2, 1, 1), got
    assert got["stuck"]["jobId"] == held and got["stuck"]["reason"] == "JobHeldUser"
    assert got["missingPods"] == [f"{sbx}/nojob"] and got["templates"] == {"{namespace}/{name}": 2}
    installed.wait_condition(ns, "b", "Ready", "False", "SlurmJobPending")

    slurm.scontrol("release", str(held))   # released: it starts, nothing is stuck; the missing pod remains
    installed.wait_condition(ns, "b", "PlacementVerified", "False", "SlurmJobMissing", timeout=20)
    for job_id in (running, held):
        slurm.cancel(job_id)


def test_one_placeholder_job_for_a_gang_of_pods(installed, operator, emulator, slurm, binding_ns) -> None:
    """SUNK 8.2's gang scheduling: one Slurm job stands for the pods of a Kubernetes Job; a template
    with {jobName} matches every pod of it to that one job."""
    ns = binding_ns
    jwt_secret(installed, ns, slurm.token())
    glob, [sbx] = sandbox_namespaces(installed)
    make(installed, emulator, ns, "b", rest_api(slurm.url, jobNameTemplates=["{namespace}/{jobName}"]),
         sandboxNamespaces={"names": [glob]})
    wait_policy_applied(installed, ns)
    for i in range(3):
        sandbox_pod(installed, sbx, f"train-{i}", labels={"batch.kubernetes.io/job-name": "train"})
    job = slurm.submit(f"{sbx}/train", partition="sandboxes", cpus=3)
    wait_for(lambda: jobs(installed, ns).get("matched") == 3, 20, lambda: f"jobs: {jobs(installed, ns)}")
    cond = installed.wait_condition(ns, "b", "PlacementVerified", "True", "Verified")
    assert "3 placeholder job(s) found ('{namespace}/{jobName}' ×3)" in cond["message"]
    slurm.cancel(job)


def test_slurm_unreachable_is_a_clear_condition_and_nothing_else_degrades(installed, operator, emulator,
                                                                           binding_ns) -> None:
    from sunk_sandbox_devtools import devcluster, slurm as harness

    ns = binding_ns
    jwt_secret(installed, ns, harness.mint_token(os.urandom(32), "k8sop"))
    url = f"http://127.0.0.1:{devcluster.free_port()}"   # nothing listens there
    make(installed, emulator, ns, "b", rest_api(url))
    cond = installed.wait_condition(ns, "b", "SlurmReady", "Unknown", "SlurmUnreachable")
    assert url in cond["message"] and "nothing else about this binding depends on it" in cond["message"]
    installed.wait_condition(ns, "b", "Ready", "True", "Ready")
    got = conditions(installed, ns, "b")
    assert all(got[t][0] == "True" for t in OTHERS), got


def test_a_refused_token_and_a_url_not_allowed(installed, operator, emulator, slurm, binding_ns) -> None:
    from sunk_sandbox_devtools import slurm as harness

    ns = binding_ns
    jwt_secret(installed, ns, harness.mint_token(os.urandom(32), "k8sop"))   # not signed with Slurm's key
    make(installed, emulator, ns, "forged", rest_api(slurm.url))
    cond = installed.wait_condition(ns, "forged", "SlurmReady", "False", "SlurmAuthFailed")
    assert REFUSED_TOKEN[slurm.release] in cond["message"]  # the partition endpoint's refusal
    make(installed, emulator, ns, "elsewhere", rest_api("https://slurm.example.com:6820"))
    cond = installed.wait_condition(ns, "elsewhere", "SlurmReady", "False", "NotAllowed")
    assert "spec.slurm.restAPI.url" in cond["message"] and "--allowed-slurm-url" in cond["message"]


def _counts(metrics: str) -> dict[tuple[str, str], float]:
    """ssb_slurm_requests_total by (endpoint, code)."""
    out = {}
    for labels, value in re.findall(r"^ssb_slurm_requests_total\{([^}]*)\} (\S+)$", metrics, re.M):
        got = dict(re.findall(r'(\w+)="([^"]*)"', labels))
        out[(got["endpoint"], got["code"])] = float(value)
    return out


def test_the_poller_request_rate_at_1000_jobs(installed, operator, emulator, slurm, binding_ns) -> None:
    """1,000 placeholder jobs (held: nothing runs) and a binding with 20 sandbox pods: the operator's
    requests to slurmrestd per second and per poller, as its metrics count them, beside the reference
    (two per poll interval — the job list and the partitions — whatever the pods and jobs). Earlier
    tests' bindings keep the pollers of the other releases' slurmrestd running: the metrics add them."""
    from sunk_sandbox_operator.core import slurm as core

    ns = binding_ns
    jwt_secret(installed, ns, slurm.token())
    glob, [sbx] = sandbox_namespaces(installed)
    prefix = uniq("bench")
    started = time.monotonic()
    with ThreadPoolExecutor(4) as pool:
        ids = list(pool.map(lambda i: slurm.submit(f"{prefix}/job-{i}", hold=True), range(1000)))
    print(f"\nSlurm {slurm.release}: 1,000 placeholder jobs submitted in {time.monotonic() - started:.1f}s")
    make(installed, emulator, ns, "b", rest_api(slurm.url), sandboxNamespaces={"names": [glob]})
    installed.wait_condition(ns, "b", "SlurmReady", "True", "PartitionUp")
    for i in range(20):
        sandbox_pod(installed, sbx, f"p{i}")
        slurm.submit(f"{sbx}/p{i}", hold=True)
    wait_for(lambda: jobs(installed, ns).get("matched") == 20, 30, lambda: f"jobs: {jobs(installed, ns)}")
    time.sleep(2)
    before, t0 = _counts(operator.metrics()), time.monotonic()
    time.sleep(10)
    change = slurm.submit(f"{prefix}/one-more", hold=True)   # one change in the window: one full read
    time.sleep(5)
    metrics = operator.metrics()
    after, took = _counts(metrics), time.monotonic() - t0
    pollers = float(re.search(r"^ssb_slurm_pollers (\S+)$", metrics, re.M).group(1))  # type: ignore[union-attr]
    delta = {k: after.get(k, 0) - before.get(k, 0) for k in after if after.get(k, 0) != before.get(k, 0)}
    # Answered polls of the shared poller (another test's binding on a dead port may add failed ones).
    total = sum(v for (e, c), v in delta.items() if e in ("jobs", "partitions") and c in ("200", "304", "unchanged"))
    started = time.monotonic()
    code, body = slurm.request("GET", f"/slurm/{slurm.api_version}/jobs")
    fetched = time.monotonic() - started
    size = len(json.dumps(body, separators=(",", ":")))
    started = time.monotonic()
    parsed = core.parse_jobs(body)
    parse_ms = (time.monotonic() - started) * 1000
    print(f"\nSlurm {slurm.release}: poller at {len(parsed)} jobs, 20 sandbox pods: {total:.0f} requests in {took:.1f}s "
          f"from {pollers:.0f} poller(s) = {total / took / pollers:.2f}/s a poller "
          f"({', '.join(f'{e} {c}: {v:.0f}' for (e, c), v in sorted(delta.items()))}); "
          f"reference: 2 per poll interval (SSB_SLURM_POLL_SECONDS, 1 s here, 10 s by default: 0.2/s), whatever "
          f"the pods and jobs; a full list is {size / 1e6:.1f} MB, read in {fetched * 1000:.0f} ms and parsed in "
          f"{parse_ms:.0f} ms, only when Slurm changed (otherwise a 304 on 22.05, an empty 200 from 24.11 on)")
    quiet = ("jobs", "304") if slurm.release == "22.05" else ("jobs", "unchanged")
    assert code == 200 and delta.get(quiet, 0) > 0 and delta.get(("jobs", "200"), 0) >= 1
    for job_id in [*ids, change]:
        slurm.cancel(job_id)
