"""An in-memory slurmrestd (v0.0.38) behind httpx.MockTransport, answering as the real one does.

The shapes are the ones shared/reference/slurm.md recorded: 401 without headers, HTTP 500 with
error -1 for a refused token, HTTP 500 with errno 2000 for a missing partition, 404 for a path not
served, `?update_time` answered 304 when nothing changed since (inclusive, whole seconds of the
fake clock), and a held job PENDING for `JobHeldUser`. `down` makes every request fail to connect.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Callable

import httpx

from sunk_sandbox_operator.adapters import slurmrest as sr

from tests.unit.fakes import FakeClock

META = {"plugin": {"type": "openapi/v0.0.38", "name": "Slurm OpenAPI v0.0.38"},
        "Slurm": {"version": {"major": 22, "micro": 8, "minor": 5}, "release": "22.05.8"}}
REFUSED = {"meta": META, "errors": [{"description": "slurmctld config is unable to load", "error_number": -1,
                                     "error": "Unspecified error", "source": "slurm_load_ctl_conf"}]}


@dataclass
class FakeSlurm:
    clock: FakeClock
    url: str = "https://slurm.example.com:6820"
    tokens: dict[str, str] = field(default_factory=dict)      # token -> the user it is for
    partitions: dict[str, str] = field(default_factory=lambda: {"debug": "UP", "sandboxes": "UP"})
    jobs: list[dict] = field(default_factory=list)
    down: bool = False
    log: list[tuple[str, str, int]] = field(default_factory=list)   # (path, query, status)
    next_id: int = 1
    _job_update: float = 0.0
    _part_update: float = 0.0

    def __post_init__(self) -> None:
        self._job_update = self._part_update = self.epoch()

    def epoch(self) -> float:
        from sunk_sandbox_operator.core.pods import parse_time

        return parse_time(self.clock.iso()) or 0.0

    # -------------------------------------------------------------- what tests do to Slurm

    def submit(self, name: str, *, state: str = "RUNNING", reason: str = "None", partition: str = "sandboxes") -> int:
        job_id, self.next_id = self.next_id, self.next_id + 1
        self.jobs.append({"job_id": job_id, "name": name, "job_state": state, "state_reason": reason,
                          "state_description": "", "partition": partition, "user_name": "root", "nodes": "vm",
                          "padding": "x" * 2400})  # ~2.6 KB a job, as the real list
        self._job_update = self.epoch()
        return job_id

    def set_job(self, job_id: int, **changes) -> None:
        for job in self.jobs:
            if job["job_id"] == job_id:
                job.update(changes)
        self._job_update = self.epoch()

    def cancel(self, job_id: int) -> None:
        self.jobs = [j for j in self.jobs if j["job_id"] != job_id]
        self._job_update = self.epoch()

    def set_partition(self, name: str, state: str | None) -> None:
        if state is None:
            self.partitions.pop(name, None)
        else:
            self.partitions[name] = state
        self._part_update = self.epoch()

    def count(self, endpoint: str, status: int | None = None) -> int:
        return sum(1 for p, _, s in self.log if p.endswith("/" + endpoint) and (status is None or s == status))

    # -------------------------------------------------------------- the HTTP side

    def handler(self, request: httpx.Request) -> httpx.Response:
        if self.down:
            raise httpx.ConnectError("All connection attempts failed", request=request)
        response = self._answer(request)
        self.log.append((request.url.path, request.url.query.decode(), response.status_code))
        return response

    def _answer(self, request: httpx.Request) -> httpx.Response:
        user, token = request.headers.get("X-SLURM-USER-NAME"), request.headers.get("X-SLURM-USER-TOKEN")
        path = request.url.path
        if not path.startswith("/slurm/v0.0.38/"):
            return httpx.Response(404, text="Unable find requested URL. Please view /openapi/v3 for API reference.")
        if not user or not token or "authorization" in request.headers:
            return httpx.Response(401, text="Authentication failure")
        if self.tokens.get(token) != user:
            return httpx.Response(500, json=REFUSED)
        tail = path[len("/slurm/v0.0.38/"):]
        since = request.url.params.get("update_time")
        if tail == "ping":
            return httpx.Response(200, json={"meta": META, "errors": [], "pings": [{"ping": "UP", "mode": "primary"}]})
        if tail == "diag":
            return httpx.Response(200, json={"meta": META, "errors": [], "statistics": {"req_time": int(self.epoch())}})
        if tail.startswith("partition/"):
            name = tail.split("/", 1)[1]
            if name not in self.partitions:
                return httpx.Response(500, json={"meta": META, "partitions": [], "errors": [
                    {"error": "Invalid partition name specified", "errno": 2000}]})
            return httpx.Response(200, json={"meta": META, "errors": [], "partitions": [
                {"name": name, "state": self.partitions[name], "nodes": "vm"}]})
        if tail == "partitions":
            if since is not None and int(since) > self._part_update:
                return httpx.Response(304)
            return httpx.Response(200, json={"meta": META, "errors": [], "partitions": [
                {"name": n, "state": s} for n, s in self.partitions.items()]})
        if tail == "jobs":
            if since is not None and int(since) > self._job_update:
                return httpx.Response(304)
            return httpx.Response(200, content=json.dumps({"meta": META, "errors": [], "jobs": self.jobs}).encode(),
                                  headers={"Content-Type": "application/json"})
        return httpx.Response(404, text="Unable find requested URL.")

    def client_factory(self) -> Callable[[str, str], sr.SlurmClient]:
        def make(url: str, api_version: str) -> sr.SlurmClient:
            return sr.SlurmClient(url, api_version, transport=httpx.MockTransport(self.handler), clock=self.clock)
        return make
