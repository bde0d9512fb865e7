"""The emulator's declarative co-writers over real HTTP on loopback: a whole desired policy applied like
`terraform apply` (GET the etag, PUT the policy when it differs), at once and on a schedule; their calls
and writes logged as the co-writer's; a stale etag fails an apply and the next one reads again."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any, Iterator

import httpx
import pytest

from sunk_sandbox_operator.adapters.runnerapi.cowriter import CoWriter
from sunk_sandbox_operator.adapters.runnerapi.emulator import (EmulatorState, EmulatorThread, _parse_args,
                                                               running_emulator, state_from_args)
from sunk_sandbox_operator.adapters.runnerapi.emulator_state import CO_WRITER

from tests.conftest import wait_for

ADMIN = "admin-tok-cw"
SVC = "coreweave.sandbox.v1.RunnerManagementService"
THEIRS = {"base": {"metadata": {"labels": {"team": "ml"}}}, "constraints": {"network": {"egress": "deny"}}}
HTTP = httpx.Client(timeout=10)


@pytest.fixture(scope="module", autouse=True)
def _close_http() -> Iterator[None]:
    yield
    HTTP.close()


@pytest.fixture
def emu() -> Iterator[EmulatorThread]:
    state = EmulatorState(admin_tokens={ADMIN})
    state.add_runner("r", {"base": {"spec": {"schedulerName": "slurm-scheduler"}}})
    with running_emulator(state) as thread:
        yield thread


def rpc(emu: EmulatorThread, method: str, body: Any) -> httpx.Response:
    return HTTP.post(f"{emu.url}/{SVC}/{method}", json=body,
                     headers={"Authorization": f"Bearer {ADMIN}", "Connect-Protocol-Version": "1"})


def client_merges(emu: EmulatorThread) -> None:
    """What the operator does: read, add its key to the live policy, write with the etag (again on a
    stale etag: the co-writer may apply in between)."""
    for _ in range(5):
        runner = rpc(emu, "GetManagedRunner", {"runnerId": "r"}).json()
        policy = runner["policy"] or {}
        policy.setdefault("base", {}).setdefault("spec", {})["schedulerName"] = "slurm-scheduler"
        answer = rpc(emu, "UpdateManagedRunner", {"runnerId": "r", "updateMask": "policy", "managedRunner": {
            "identity": runner["identity"], "policy": policy, "etag": runner["etag"]}})
        if answer.status_code == 200:
            return
        assert answer.json()["code"] == "failed_precondition"
    raise AssertionError("the client never got its write in")


def policy_of(emu: EmulatorThread) -> Any:
    with emu.state.lock:
        return json.loads(json.dumps(emu.state.runners["r"]["policy"]))


def log(emu: EmulatorThread) -> list[dict]:
    with emu.state.lock:
        return list(emu.state.co_writer_log)


def test_a_co_writer_puts_its_whole_policy_back_on_its_schedule_over_http(emu: EmulatorThread) -> None:
    HTTP.post(f"{emu.url}/_emulator/knobs", json={"co_writers": {"r": {"policy": THEIRS, "interval_seconds": 0.2}}})
    wait_for(lambda: policy_of(emu) == THEIRS, 5)                  # applied at once: the operator's key is gone
    for _ in range(3):
        client_merges(emu)
        assert policy_of(emu)["base"]["spec"]["schedulerName"] == "slurm-scheduler"
        wait_for(lambda: policy_of(emu) == THEIRS, 5)              # ... and at the next apply again
    with emu.state.lock:
        writes = [w["who"] for w in emu.state.write_log]
        calls = [(c["method"], c["who"]) for c in emu.state.call_log]
    assert writes == [CO_WRITER, "client"] * 3 + [CO_WRITER]
    assert ("GetManagedRunner", CO_WRITER) in calls and ("UpdateManagedRunner", CO_WRITER) in calls
    assert {c for c in calls if c[1] == "client"} == {("GetManagedRunner", "client"), ("UpdateManagedRunner", "client")}
    # its log line follows its write (the HTTP answer): wait for the fourth, then none more
    wait_for(lambda: [e["outcome"] for e in log(emu)].count("applied") == 4, 5)
    state = HTTP.get(f"{emu.url}/_emulator/state").json()
    assert state["knobs"]["co_writers"] == {"r": {"policy": THEIRS, "interval_seconds": 0.2}}
    assert emu.state.co_writer_token not in json.dumps(state)       # its token is never shown


def test_a_co_writer_carrying_the_keys_writes_nothing_once_the_policy_holds_them(emu: EmulatorThread) -> None:
    carried = {**THEIRS, "base": {**THEIRS["base"], "spec": {"schedulerName": "slurm-scheduler"}}}
    emu.state.set_knobs({"co_writers": {"r": {"policy": carried, "interval_seconds": 0.1}}})
    wait_for(lambda: len(log(emu)) >= 5, 5)
    assert [e["outcome"] for e in log(emu)][:1] == ["applied"] and {e["outcome"] for e in log(emu)[1:]} == {"unchanged"}
    assert len([w for w in emu.state.write_log if w["who"] == CO_WRITER]) == 1


def test_once_applies_once_and_null_stops_a_co_writer() -> None:
    state = EmulatorState(admin_tokens={ADMIN})
    state.add_runner("r")
    state.set_knobs({"co_writers": {"r": {"policy": THEIRS, "interval_seconds": 0}}})
    assert state.co_writers_due(100.0) == [("r", THEIRS)] and state.co_writers_due(1e9) == []
    state.set_knobs({"co_writers": {"r": {"policy": None, "interval_seconds": 5}}})
    assert state.co_writers_due(100.0) == [("r", None)]            # a new plan applies at once
    assert state.co_writers_due(104.0) == [] and state.co_writers_due(105.0) == [("r", None)]
    state.set_knobs({"co_writers": {"r": None}})
    assert state.co_writers == {} and state.knobs()["co_writers"] == {}
    for bad in ({"r": {"interval_seconds": 1}}, {"r": {"policy": [], "interval_seconds": 1}},
                {"r": {"policy": {}, "interval_seconds": -1}}, ["r"]):
        with pytest.raises(ValueError):
            state.set_knobs({"co_writers": bad})


def test_a_stale_etag_fails_the_apply_and_the_next_one_reads_again(emu: EmulatorThread) -> None:
    emu.state.set_knobs({"other_admin": True})  # another admin writes between each read and write, once per cycle

    async def two_applies() -> list[tuple[str, str]]:
        async with httpx.AsyncClient(timeout=10) as http:
            writer = CoWriter(emu.url, ADMIN, "r", THEIRS, http)
            return [await writer.apply(), await writer.apply()]

    first, second = asyncio.run(two_applies())
    assert first == ("conflict", "failed_precondition") and second[0] == "applied"
    assert policy_of(emu) == THEIRS


def test_an_unknown_runner_or_a_refused_token_is_an_error_outcome(emu: EmulatorThread) -> None:
    async def apply(token: str, runner: str) -> tuple[str, str]:
        async with httpx.AsyncClient(timeout=10) as http:
            return await CoWriter(emu.url, token, runner, THEIRS, http).apply()

    assert asyncio.run(apply(ADMIN, "nope")) == ("error", "not_found")
    assert asyncio.run(apply("wrong", "r")) == ("error", "unauthenticated")


def test_the_cli_sets_co_writers(tmp_path: Any) -> None:
    doc = tmp_path / "theirs.json"
    doc.write_text(json.dumps(THEIRS))
    state = state_from_args(_parse_args(["--token", ADMIN, "--runner", "r", "--co-writer", f"r={doc}",
                                         "--co-writer-interval", "30"]))
    assert state.knobs()["co_writers"] == {"r": {"policy": THEIRS, "interval_seconds": 30.0}}
    for bad in (["--co-writer", "r"], ["--co-writer", f"r={doc}", "--co-writer-interval", "-1"]):
        with pytest.raises(SystemExit):
            state_from_args(_parse_args(["--token", ADMIN, *bad]))
    started = time.monotonic()
    with running_emulator(state) as emu:
        wait_for(lambda: policy_of(emu) == THEIRS, 5)
    assert time.monotonic() - started < 5
