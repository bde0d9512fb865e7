"""The runner API emulator over real HTTP on loopback: wire shapes, auth, etags, validation, knobs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from typing import Any, Iterator

import httpx
import pytest

from sunk_sandbox_operator.adapters.runnerapi.emulator import (
    EmulatorState,
    EmulatorThread,
    _parse_args,
    forbidden_fields,
    running_emulator,
    state_from_args,
)
from sunk_sandbox_operator.adapters.runnerapi.emulator_wire import json_name, json_names

ADMIN = "admin-tok-1"
READONLY = "readonly-tok-1"
SVC = "coreweave.sandbox.v1.RunnerManagementService"
# As the emulator answers it: every field under its JSON name (lowerCamelCase), as protojson writes.
POLICY = {
    "base": {"metadata": {"annotations": {"a": "1"}}, "spec": {"schedulerName": "default-scheduler"}},
    "constraints": {"network": {"egress": {"allow": ["10.0.0.0/8"]}}, "metadata": {"deniedAnnotationPrefixes": ["x/"]}},
}
# The same policy as the API documents it (proto names inside the policy): how runner r-set is set up.
POLICY_PROTO_NAMES = {
    "base": {"metadata": {"annotations": {"a": "1"}}, "spec": {"schedulerName": "default-scheduler"}},
    "constraints": {"network": {"egress": {"allow": ["10.0.0.0/8"]}}, "metadata": {"denied_annotation_prefixes": ["x/"]}},
}


# One client for the module: building an httpx client per request costs ~50 ms (TLS context).
HTTP = httpx.Client(timeout=10)


@pytest.fixture(scope="module", autouse=True)
def _close_http() -> Iterator[None]:
    yield
    HTTP.close()


@pytest.fixture
def emu() -> Iterator[EmulatorThread]:
    state = EmulatorState(admin_tokens={ADMIN}, readonly_tokens={READONLY}, seed=1)
    state.add_runner("r-null")
    state.add_runner("r-set", POLICY_PROTO_NAMES)
    state.add_runner("r-empty", {})
    with running_emulator(state) as thread:
        yield thread


def rpc(emu: EmulatorThread, method: str, body: Any, token: str | None = ADMIN, **headers: str) -> httpx.Response:
    h = {"Content-Type": "application/json", "Connect-Protocol-Version": "1", **headers}
    if token is not None:
        h["Authorization"] = f"Bearer {token}"
    return HTTP.post(f"{emu.url}/{SVC}/{method}", content=json.dumps(body), headers=h)


def get(emu: EmulatorThread, runner_id: str, **kw: Any) -> httpx.Response:
    return rpc(emu, "GetManagedRunner", {"runnerId": runner_id}, **kw)


def update(emu: EmulatorThread, runner_id: str, policy: Any, etag: str | None, mask: Any = "policy", **kw: Any) -> httpx.Response:
    managed: dict[str, Any] = {"identity": {"runnerId": runner_id}, "policy": policy}
    if etag is not None:
        managed["etag"] = etag
    return rpc(emu, "UpdateManagedRunner", {"runnerId": runner_id, "managedRunner": managed, "updateMask": mask}, **kw)


def assert_error(resp: httpx.Response, status: int, code: str, *in_message: str) -> None:
    assert resp.status_code == status, resp.text
    body = resp.json()
    assert body["code"] == code
    for fragment in in_message:
        assert fragment in body["message"]


# ---------------------------------------------------------------- Get


def test_get_returns_top_level_runner_with_explicit_null_policy(emu: EmulatorThread) -> None:
    resp = get(emu, "r-null")
    assert resp.status_code == 200
    body = resp.json()
    assert set(body) == {"runnerId", "identity", "policy", "etag"}
    assert '"policy": null' in resp.text  # present and null, not omitted
    assert body["policy"] is None and body["etag"]
    assert get(emu, "r-empty").json()["policy"] == {}
    assert get(emu, "r-set").json()["policy"] == POLICY


def test_wrap_knob_wraps_in_managed_runner(emu: EmulatorThread) -> None:
    HTTP.post(f"{emu.url}/_emulator/knobs", json={"wrap_responses": True}).raise_for_status()
    body = get(emu, "r-set").json()
    assert set(body) == {"managedRunner"} and body["managedRunner"]["policy"] == POLICY


def test_get_unknown_runner_is_not_found(emu: EmulatorThread) -> None:
    assert_error(get(emu, "nope"), 404, "not_found", "nope")


def test_get_accepts_snake_case_runner_id(emu: EmulatorThread) -> None:
    resp = rpc(emu, "GetManagedRunner", {"runner_id": "r-set"})
    assert resp.status_code == 200 and resp.json()["policy"] == POLICY


# ---------------------------------------------------------------- field names (protojson)
#
# Connect's JSON codec is protojson: it reads a field under its JSON name (lowerCamelCase) or its
# proto name (snake_case), refuses the same field under both, and writes JSON names only. Map keys
# (annotation keys, labels, node selectors) are data: never renamed.


def test_json_name_is_protocs_rule() -> None:
    assert json_name("runner_id") == "runnerId"
    assert json_name("managed_runner") == "managedRunner"
    assert json_name("update_mask") == "updateMask"
    assert json_name("denied_annotation_prefixes") == "deniedAnnotationPrefixes"
    assert json_name("termination_grace_period_seconds") == "terminationGracePeriodSeconds"
    for already in ("runnerId", "schedulerName", "etag", "sunk.coreweave.com/partition", "x_y/z"):
        assert json_name(already) == already


def test_json_names_keep_map_keys_and_rename_fields_below_them() -> None:
    policy = {"base": {"metadata": {"annotations": {"team_name": "rl", "sunk.coreweave.com/qos": "low"},
                                    "labels": {"app_tier": "web"}},
                       "spec": {"node_selector": {"node_pool": "cpu"}, "scheduler_name": "s",
                                "containers": [{"name": "c", "resources": {"limits": {"nvidia_com_gpu": "0"}}}],
                                "topology_spread_constraints": [{"label_selector": {"match_labels": {"a_b": "c"}},
                                                                 "max_skew": 1}]}},
              "constraints": {"metadata": {"denied_annotation_prefixes": ["x_y/"]}}}
    assert json_names(policy) == {
        "base": {"metadata": {"annotations": {"team_name": "rl", "sunk.coreweave.com/qos": "low"},
                              "labels": {"app_tier": "web"}},
                 "spec": {"nodeSelector": {"node_pool": "cpu"}, "schedulerName": "s",
                          "containers": [{"name": "c", "resources": {"limits": {"nvidia_com_gpu": "0"}}}],
                          "topologySpreadConstraints": [{"labelSelector": {"matchLabels": {"a_b": "c"}},
                                                         "maxSkew": 1}]}},
        "constraints": {"metadata": {"deniedAnnotationPrefixes": ["x_y/"]}}}


def test_get_with_proto_names_answers_json_names(emu: EmulatorThread) -> None:
    resp = rpc(emu, "GetManagedRunner", {"runner_id": "r-set"})
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert set(body) == {"runnerId", "identity", "policy", "etag"}
    assert body["policy"] == POLICY and "denied_annotation_prefixes" not in resp.text
    assert set(body["identity"]) == {"runnerId", "name", "cluster"}


def test_update_with_proto_names_everywhere_is_stored_and_answered_in_json_names(emu: EmulatorThread) -> None:
    etag = get(emu, "r-set").json()["etag"]
    policy = {"base": {"metadata": {"annotations": {"sunk.coreweave.com/partition": "sandboxes", "team_name": "rl"}},
                       "spec": {"scheduler_name": "slurm-scheduler", "node_selector": {"node_pool": "cpu"}}},
              "constraints": {"metadata": {"denied_annotation_prefixes": ["x/"]}}}
    resp = rpc(emu, "UpdateManagedRunner", {"runner_id": "r-set", "update_mask": "policy",
                                            "managed_runner": {"identity": {"runner_id": "r-set"}, "policy": policy,
                                                               "etag": etag}})
    assert resp.status_code == 200, resp.text
    expected = {"base": {"metadata": {"annotations": {"sunk.coreweave.com/partition": "sandboxes", "team_name": "rl"}},
                         "spec": {"schedulerName": "slurm-scheduler", "nodeSelector": {"node_pool": "cpu"}}},
                "constraints": {"metadata": {"deniedAnnotationPrefixes": ["x/"]}}}
    assert resp.json()["policy"] == expected
    assert get(emu, "r-set").json()["policy"] == expected
    with emu.state.lock:
        assert emu.state.runners["r-set"]["policy"] == expected  # the message, not the spelling it came in
        assert emu.state.write_log[-1]["policy"] == expected


def test_update_with_mixed_names_and_a_fieldmask_object(emu: EmulatorThread) -> None:
    etag = get(emu, "r-set").json()["etag"]
    resp = rpc(emu, "UpdateManagedRunner", {"runnerId": "r-set", "update_mask": {"paths": ["policy"]},
                                            "managedRunner": {"policy": {"base": {"spec": {"scheduler_name": "s"}}},
                                                              "etag": etag}})
    assert resp.status_code == 200, resp.text
    assert resp.json()["policy"] == {"base": {"spec": {"schedulerName": "s"}}}


@pytest.mark.parametrize("body", [
    {"runnerId": "r-set", "runner_id": "r-set"},
    {"runnerId": "r-set", "updateMask": "policy", "update_mask": "policy", "managedRunner": {"etag": "e"}},
    {"runnerId": "r-set", "updateMask": "policy",
     "managedRunner": {"etag": "e", "policy": {"base": {"spec": {"schedulerName": "a", "scheduler_name": "b"}}}}},
], ids=["runner id", "update mask", "inside the policy"])
def test_a_field_under_both_names_is_invalid_argument(emu: EmulatorThread, body: dict) -> None:
    method = "GetManagedRunner" if set(body) == {"runnerId", "runner_id"} else "UpdateManagedRunner"
    etag = get(emu, "r-set").json()["etag"]
    assert_error(rpc(emu, method, body), 400, "invalid_argument", "given twice")
    assert get(emu, "r-set").json()["etag"] == etag


def test_a_runner_set_up_with_proto_names_is_answered_in_json_names(emu: EmulatorThread) -> None:
    HTTP.post(f"{emu.url}/_emulator/runners/r-admin", json={
        "policy": {"constraints": {"metadata": {"denied_annotation_prefixes": ["a/"]}}},
        "identity": {"runner_id": "r-admin"}}).raise_for_status()
    body = get(emu, "r-admin").json()
    assert body["policy"] == {"constraints": {"metadata": {"deniedAnnotationPrefixes": ["a/"]}}}
    assert body["identity"] == {"runnerId": "r-admin"}


# ---------------------------------------------------------------- auth


@pytest.mark.parametrize("token", [None, "wrong-token"])
def test_missing_or_unknown_token_is_unauthenticated(emu: EmulatorThread, token: str | None) -> None:
    assert_error(get(emu, "r-set", token=token), 401, "unauthenticated")
    etag = get(emu, "r-set").json()["etag"]
    assert_error(update(emu, "r-set", {}, etag, token=token), 401, "unauthenticated")
    assert get(emu, "r-set").json()["etag"] == etag


def test_readonly_token_is_permission_denied_on_get_and_update(emu: EmulatorThread) -> None:
    assert_error(get(emu, "r-set", token=READONLY), 403, "permission_denied", "sandbox_admin")
    etag = get(emu, "r-set").json()["etag"]
    assert_error(update(emu, "r-set", {}, etag, token=READONLY), 403, "permission_denied")
    assert get(emu, "r-set").json()["policy"] == POLICY


def test_missing_connect_protocol_version_is_rejected(emu: EmulatorThread) -> None:
    resp = HTTP.post(
        f"{emu.url}/{SVC}/GetManagedRunner",
        json={"runnerId": "r-set"},
        headers={"Authorization": f"Bearer {ADMIN}"},
    )
    assert_error(resp, 400, "invalid_argument", "Connect-Protocol-Version")


# ---------------------------------------------------------------- paths


@pytest.mark.parametrize("path", ["/nope", f"/{SVC}/DeleteManagedRunner", "/coreweave.sandbox.v1.Other/GetManagedRunner"])
def test_wrong_path_is_a_bare_404(emu: EmulatorThread, path: str) -> None:
    resp = HTTP.post(f"{emu.url}{path}", json={}, headers={"Authorization": f"Bearer {ADMIN}"})
    assert resp.status_code == 404
    assert resp.content == b"" and "json" not in resp.headers.get("content-type", "")


# ---------------------------------------------------------------- Update


def test_update_writes_with_new_etag_each_time_and_logs(emu: EmulatorThread) -> None:
    etag0 = get(emu, "r-null").json()["etag"]
    resp1 = update(emu, "r-null", {"base": {"spec": {"schedulerName": "slurm-scheduler"}}}, etag0)
    assert resp1.status_code == 200, resp1.text
    etag1 = resp1.json()["etag"]
    resp2 = update(emu, "r-null", {}, etag1)
    etag2 = resp2.json()["etag"]
    assert len({etag0, etag1, etag2}) == 3
    assert get(emu, "r-null").json() == resp2.json()
    log = emu.state.snapshot()["write_log"]
    assert [(w["who"], w["etag_before"], w["etag_after"]) for w in log] == [
        ("client", etag0, etag1),
        ("client", etag1, etag2),
    ]
    assert log[1]["policy"] == {}


def test_update_policy_null_and_empty_stay_distinct(emu: EmulatorThread) -> None:
    etag = get(emu, "r-set").json()["etag"]
    etag = update(emu, "r-set", {}, etag).json()["etag"]
    assert get(emu, "r-set").json()["policy"] == {}
    update(emu, "r-set", None, etag)
    assert get(emu, "r-set").json()["policy"] is None


def test_update_without_etag_is_invalid_argument(emu: EmulatorThread) -> None:
    assert_error(update(emu, "r-set", {}, None), 400, "invalid_argument", "etag is required")
    assert_error(update(emu, "r-set", {}, ""), 400, "invalid_argument", "etag is required")
    assert get(emu, "r-set").json()["policy"] == POLICY


@pytest.mark.parametrize("mask", [None, "", "identity", "policy,identity", {"paths": ["identity"]}])
def test_update_requires_policy_mask(emu: EmulatorThread, mask: Any) -> None:
    etag = get(emu, "r-set").json()["etag"]
    assert_error(update(emu, "r-set", {}, etag, mask=mask), 400, "invalid_argument", "updateMask")
    assert get(emu, "r-set").json()["policy"] == POLICY


def test_update_accepts_fieldmask_object(emu: EmulatorThread) -> None:
    etag = get(emu, "r-set").json()["etag"]
    assert update(emu, "r-set", {}, etag, mask={"paths": ["policy"]}).status_code == 200


FORBIDDEN = [
    ("base.affinity", {"affinity": {}}),
    ("base.spec.affinity", {"spec": {"affinity": {"nodeAffinity": {}}}}),
    ("base.spec.securityContext", {"spec": {"securityContext": {"runAsUser": 0}}}),
    ("base.securityContext", {"securityContext": {}}),
    ("base.spec.containers[1].securityContext", {"spec": {"containers": [{"name": "a"}, {"name": "b", "securityContext": {}}]}}),
    ("base.spec.runtimeClassName", {"spec": {"runtimeClassName": "gvisor"}}),
    ("base.runtimeClassName", {"runtimeClassName": "gvisor"}),
    ("base.spec.initContainers", {"spec": {"initContainers": []}}),
    ("base.spec.terminationGracePeriodSeconds", {"spec": {"terminationGracePeriodSeconds": 10}}),
    ("base.terminationGracePeriodSeconds", {"terminationGracePeriodSeconds": 10}),
    # A proto name is read as its JSON name, and the error names the field by that.
    ("base.spec.terminationGracePeriodSeconds", {"spec": {"termination_grace_period_seconds": 10}}),
]


@pytest.mark.parametrize(("field", "base"), FORBIDDEN, ids=[json.dumps(b) for _, b in FORBIDDEN])
def test_update_rejects_forbidden_base_fields(emu: EmulatorThread, field: str, base: dict) -> None:
    etag = get(emu, "r-set").json()["etag"]
    policy = {"base": {**base, "metadata": {"annotations": {"k": "v"}}}, "constraints": {}}
    resp = update(emu, "r-set", policy, etag)
    assert_error(resp, 400, "invalid_argument", field)
    after = get(emu, "r-set").json()
    assert after["policy"] == POLICY and after["etag"] == etag
    assert emu.state.snapshot()["write_log"] == []


def test_forbidden_fields_allows_the_operators_own_fields() -> None:
    ours = {
        "base": {
            "metadata": {"annotations": {"sunk.coreweave.com/partition": "sandboxes"}},
            "spec": {"schedulerName": "slurm-scheduler", "containers": [{"name": "c", "resources": {}}]},
        },
        # constraints may mention anything: only `base` is restricted
        "constraints": {"affinity": {}, "securityContext": {}},
    }
    assert forbidden_fields(ours) == []
    assert forbidden_fields(None) == [] and forbidden_fields({}) == []


def test_stale_etag_is_failed_precondition_and_changes_nothing(emu: EmulatorThread) -> None:
    etag = get(emu, "r-set").json()["etag"]
    fresh = update(emu, "r-set", {"v": 1}, etag).json()
    assert_error(update(emu, "r-set", {"v": 2}, etag), 400, "failed_precondition", "etag")
    assert get(emu, "r-set").json() == fresh
    assert len(emu.state.snapshot()["write_log"]) == 1


def test_update_unknown_runner_is_not_found(emu: EmulatorThread) -> None:
    assert_error(update(emu, "ghost", {}, "1-x"), 404, "not_found")


def test_update_accepts_snake_case_envelope(emu: EmulatorThread) -> None:
    etag = get(emu, "r-set").json()["etag"]
    body = {"runner_id": "r-set", "managed_runner": {"identity": None, "policy": {"x": 1}, "etag": etag}, "update_mask": "policy"}
    resp = rpc(emu, "UpdateManagedRunner", body)
    assert resp.status_code == 200, resp.text
    assert get(emu, "r-set").json()["policy"] == {"x": 1}


def test_update_rejects_non_object_policy_and_body(emu: EmulatorThread) -> None:
    etag = get(emu, "r-set").json()["etag"]
    assert_error(update(emu, "r-set", [1], etag), 400, "invalid_argument", "policy")
    assert_error(update(emu, "r-set", {"base": "x"}, etag), 400, "invalid_argument", "policy.base")
    assert_error(rpc(emu, "UpdateManagedRunner", [1]), 400, "invalid_argument")


# ---------------------------------------------------------------- knobs and admin endpoints


def test_admin_endpoints(emu: EmulatorThread) -> None:
    assert HTTP.get(f"{emu.url}/_emulator/healthz").json() == {"ok": True}
    etag = get(emu, "r-set").json()["etag"]
    written = HTTP.post(f"{emu.url}/_emulator/runners/r-set", json={"policy": {"by": "other"}}).json()
    assert written["policy"] == {"by": "other"} and written["etag"] != etag
    created = HTTP.post(f"{emu.url}/_emulator/runners/r-new", json={"policy": None}).json()
    assert created["policy"] is None and created["etag"]
    state = HTTP.get(f"{emu.url}/_emulator/state").json()
    assert set(state) == {"runners", "write_log", "call_log", "co_writer_log", "knobs"}
    assert state["runners"]["r-set"]["policy"] == {"by": "other"}
    assert [(w["runner_id"], w["who"]) for w in state["write_log"]] == [("r-set", "other-admin"), ("r-new", "other-admin")]
    assert state["call_log"][-1]["method"] == "GetManagedRunner" and state["call_log"][-1]["code"] == "ok"
    assert HTTP.post(f"{emu.url}/_emulator/runners/r-set", json={"nope": 1}).status_code == 400
    bad = HTTP.post(f"{emu.url}/_emulator/knobs", json={"error_rates": {"bogus": 1}})
    assert bad.status_code == 400


def test_error_rate_knob_and_scripted_failures(emu: EmulatorThread) -> None:
    knobs = HTTP.post(f"{emu.url}/_emulator/knobs", json={"error_rates": {"unavailable": 1.0}, "retry_after_seconds": 2}).json()
    assert knobs["error_rates"] == {"unavailable": 1.0}
    resp = get(emu, "r-set")
    assert_error(resp, 503, "unavailable")
    assert resp.headers["Retry-After"] == "2"
    HTTP.post(f"{emu.url}/_emulator/knobs", json={"error_rates": {}, "fail_next": ["internal", "resource_exhausted"]})
    assert_error(get(emu, "r-set"), 500, "internal")
    assert_error(get(emu, "r-set"), 429, "resource_exhausted")
    assert get(emu, "r-set").status_code == 200
    codes = [c["code"] for c in emu.state.snapshot()["call_log"]]
    assert codes == ["unavailable", "internal", "resource_exhausted", "ok"]


def test_latency_knob_delays_answers(emu: EmulatorThread) -> None:
    emu.state.set_knobs({"latency_seconds": 0.2})
    start = time.monotonic()
    assert get(emu, "r-set").status_code == 200
    assert time.monotonic() - start >= 0.2


def test_other_admin_strikes_between_read_and_write_once_per_cycle(emu: EmulatorThread) -> None:
    emu.state.set_knobs({"other_admin": True})
    for cycle in (1, 2):
        etag = get(emu, "r-set").json()["etag"]
        assert_error(update(emu, "r-set", POLICY, etag), 400, "failed_precondition")
        current = get(emu, "r-set").json()
        assert current["etag"] != etag
        assert current["policy"]["constraints"]["network"]["egress"]["otherAdminEdits"] == cycle
        # the client re-merges (keeps the other admin's edit) and resends: this time it lands
        ok = update(emu, "r-set", current["policy"], current["etag"])
        assert ok.status_code == 200, ok.text
    who = [w["who"] for w in emu.state.snapshot()["write_log"]]
    assert who == ["other-admin", "client", "other-admin", "client"]


def test_other_admin_needs_a_read_first(emu: EmulatorThread) -> None:
    etag = get(emu, "r-set").json()["etag"]
    emu.state.set_knobs({"other_admin": False})
    etag = update(emu, "r-set", {}, etag).json()["etag"]
    emu.state.set_knobs({"other_admin": True})
    # no Get since the last write: nothing to race with
    assert update(emu, "r-set", {"x": 1}, etag).status_code == 200


# ---------------------------------------------------------------- running it


def test_thread_start_stop_frees_the_port() -> None:
    emu = EmulatorThread(EmulatorState(admin_tokens={ADMIN})).start()
    url = emu.url
    assert url.startswith("http://127.0.0.1:")
    assert HTTP.get(f"{url}/_emulator/healthz").status_code == 200
    emu.stop()
    with pytest.raises(httpx.TransportError):  # refused (or a pooled connection found dead)
        HTTP.get(f"{url}/_emulator/healthz")


def test_state_from_args(tmp_path: Any) -> None:
    policy_file = tmp_path / "p.json"
    policy_file.write_text(json.dumps(POLICY))
    args = _parse_args(
        ["--token", "tok-cli-xyz", "--readonly-token", "ro-cli-xyz", "--runner", "a", "--runner", f"b={policy_file}",
         "--error-rate", "unavailable=0.25", "--latency", "0.5", "--other-admin"]
    )
    state = state_from_args(args)
    assert state.admin_tokens == {"tok-cli-xyz"} and state.readonly_tokens == {"ro-cli-xyz"}
    assert "cli-xyz" not in repr(state)
    assert state.runners["a"]["policy"] is None and state.runners["b"]["policy"] == POLICY
    assert state.error_rates == {"unavailable": 0.25} and state.latency_seconds == 0.5 and state.other_admin
    with pytest.raises(SystemExit):
        state_from_args(_parse_args(["--runner", "a"]))  # no token
    with pytest.raises(SystemExit):
        state_from_args(_parse_args(["--token", "t", "--error-rate", "nope=1"]))


def test_cli_serves_until_sigterm() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "sunk_sandbox_operator.adapters.runnerapi.emulator", "--listen", "127.0.0.1:0",
         "--token", "cli-secret-token", "--runner", "r1"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert "listening on http://127.0.0.1:" in line, line
        url = line.rsplit(" ", 1)[1].strip()
        resp = HTTP.post(
            f"{url}/{SVC}/GetManagedRunner", json={"runnerId": "r1"},
            headers={"Authorization": "Bearer cli-secret-token", "Connect-Protocol-Version": "1"},
        )
        assert resp.status_code == 200 and resp.json()["policy"] is None
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
        assert proc.stderr is not None and "cli-secret-token" not in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
