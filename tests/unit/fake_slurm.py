"""An in-memory slurmrestd behind httpx.MockTransport, answering as Slurm 22.05, 24.11 or 26.05 does.

Each release's answers are the ones measured against the real daemons (shared/reference/slurm.md
for 22.05, slurm-versions.md for 24.11 and 26.05), one row of `RELEASES` each:

| | 22.05 | 24.11 | 26.05 |
|---|---|---|---|
| versions served (others: plain-text 404) | v0.0.36–38 | v0.0.40–42 | v0.0.42–45 |
| a refused token | 500, error -1 | 511, error 1007 | 511, error 1007 |
| token without `X-SLURM-USER-NAME`, or Bearer | 401 | 200 | 200 |
| a missing partition | 500, errno 2000 | 422 `Unable to find partition` | 200 `partitions: null` + warning |
| `/jobs?update_time`, nothing changed | 304 | v40/41: 422 error 9202; v42: 200 `jobs: []`, `last_update` 0, warning | 200 as 24.11's v42 |
| `/partitions?update_time`, nothing changed | 304 | v40/41: 500 error 9202; v42: 304 | 304 |
| `job_state`; numbers | "RUNNING"; plain | ["RUNNING"]; `{set, infinite, number}` | the same |
| ping | `ping: UP` | `pinged: UP` (+ `responding` from v42) | v45: `responding` only |
| a ping with a refused token | 500, error -1 | 200, `pinged: DOWN`, `responding: false` | 200, `responding: false`, `status` says why |
| `meta.slurm.version` | `meta.Slurm`, integers | strings ("24", "11", "5") | strings ("26", "05", "5") |

`update_time` is inclusive, in whole seconds of the fake clock; `down` makes every request fail to
connect. A held job is PENDING for `JobHeldUser`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable

import httpx

from sunk_sandbox_operator.adapters import slurmrest as sr

from tests.unit.fakes import FakeClock


@dataclass(frozen=True)
class Release:
    name: str
    full: str                         # the release string in `meta`
    versions: tuple[str, ...]
    not_found_text: str


RELEASES = {
    "22.05": Release("22.05", "22.05.8", ("v0.0.36", "v0.0.37", "v0.0.38"),
                     "Unable find requested URL. Please view /openapi/v3 for API reference."),
    "24.11": Release("24.11", "24.11.5", ("v0.0.40", "v0.0.41", "v0.0.42"),
                     "Unable find requested URL. Please view /openapi/v3 for API reference."),
    "26.05": Release("26.05", "26.05.5", ("v0.0.42", "v0.0.43", "v0.0.44", "v0.0.45"),
                     "Unable to find requested URL endpoint. Please query the '/openapi/v3' endpoint or visit "
                     "'https://slurm.schedmd.com/rest_api.html' for API reference."),
}
NEWEST = {name: r.versions[-1] for name, r in RELEASES.items()}   # what negotiation picks
REFUSED = {"errors": [{"description": "slurmctld config is unable to load", "error_number": -1,
                       "error": "Unspecified error", "source": "slurm_load_ctl_conf"}]}
REFUSED_511 = {"errors": [{"description": "Unable to query partitions", "error_number": 1007,
                           "error": "Protocol authentication error", "source": "op_handler_partition"}]}


def _num(value: int, new: bool) -> Any:
    return {"set": True, "infinite": False, "number": value} if new else value


@dataclass
class FakeSlurm:
    clock: FakeClock
    release: str = "22.05"
    url: str = "https://slurm.example.com:6820"
    tokens: dict[str, str] = field(default_factory=dict)      # token -> the user it is for
    partitions: dict[str, str] = field(default_factory=lambda: {"debug": "UP", "sandboxes": "UP"})
    jobs: list[dict] = field(default_factory=list)
    down: bool = False
    log: list[tuple[str, str, int]] = field(default_factory=list)   # (path, query, status)
    unchanged_log: list[str] = field(default_factory=list)          # endpoints answered "unchanged"
    next_id: int = 1
    _job_update: float = 0.0
    _part_update: float = 0.0

    def __post_init__(self) -> None:
        self._job_update = self._part_update = self.epoch()

    @property
    def r(self) -> Release:
        return RELEASES[self.release]

    @property
    def old(self) -> bool:
        return self.release == "22.05"

    def epoch(self) -> float:
        from sunk_sandbox_operator.core.pods import parse_time

        return parse_time(self.clock.iso()) or 0.0

    # -------------------------------------------------------------- what tests do to Slurm

    def submit(self, name: str, *, state: str = "RUNNING", reason: str = "None", partition: str = "sandboxes") -> int:
        job_id, self.next_id = self.next_id, self.next_id + 1
        self.jobs.append({"job_id": job_id, "name": name, "job_state": state, "state_reason": reason,
                          "state_description": "", "partition": partition, "user_name": "k8sop", "nodes": "vm",
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

    def unchanged(self, endpoint: str) -> int:
        """Answers that said "nothing changed since update_time" (a 304, or 24.11+'s empty 200)."""
        return self.unchanged_log.count(endpoint)

    # -------------------------------------------------------------- the HTTP side

    def handler(self, request: httpx.Request) -> httpx.Response:
        if self.down:
            raise httpx.ConnectError("All connection attempts failed", request=request)
        response = self._answer(request)
        self.log.append((request.url.path, request.url.query.decode(), response.status_code))
        return response

    def _meta(self, version: str) -> dict:
        major, minor, micro = self.r.full.split(".")
        if self.old:
            return {"plugin": {"type": f"openapi/{version}"},
                    "Slurm": {"version": {"major": int(major), "minor": int(minor), "micro": int(micro)},
                              "release": self.r.full}}
        parts = {"major": major, "minor": minor, "micro": micro}   # strings from 24.11 on
        return {"plugin": {"type": "openapi/slurmctld", "data_parser": f"data_parser/{version}"},
                "slurm": {"version": parts, "release": self.r.full, "cluster": "ci"},
                **({"client": {"source": "[127.0.0.1]:1"}, "command": []} if self.release == "26.05" else {})}

    def _json(self, status: int, version: str, **body: Any) -> httpx.Response:
        full = {"meta": self._meta(version), "errors": [], **({} if self.old else {"warnings": []}), **body}
        return httpx.Response(status, content=json.dumps(full).encode(), headers={"Content-Type": "application/json"})

    def _authenticated(self, request: httpx.Request) -> httpx.Response | None:
        user, token = request.headers.get("X-SLURM-USER-NAME"), request.headers.get("X-SLURM-USER-TOKEN")
        bearer = request.headers.get("authorization", "")
        if self.old:
            if not user or not token or bearer:
                return httpx.Response(401, text="Authentication failure")
            return None if self.tokens.get(token) == user else httpx.Response(500, json=REFUSED)
        token = token or (bearer[7:] if bearer.startswith("Bearer ") else None)
        if not token:
            return httpx.Response(401, text="Authentication failure")
        named = self.tokens.get(token)
        if named is not None and (user is None or user == named):
            return None
        if request.url.path.endswith("/ping"):  # slurmctld "does not respond" to a refused token's ping
            version = request.url.path.split("/")[2]
            ping = self._ping(version)
            ping = ({**ping, "pinged": "DOWN", **({"responding": False} if "responding" in ping else {})}
                    if self.release == "24.11" else {**ping, "responding": False, "status": "Protocol authentication error"})
            return self._json(200, version, pings=[ping])
        return httpx.Response(511, json=REFUSED_511)

    def _answer(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        parts = path.split("/")
        version = parts[2] if len(parts) > 3 and parts[1] == "slurm" else ""
        if version not in self.r.versions:
            return httpx.Response(404, text=self.r.not_found_text)
        refused = self._authenticated(request)
        if refused is not None:
            return refused
        tail = "/".join(parts[3:])
        since = request.url.params.get("update_time")
        new = version != "v0.0.38" and not self.old
        if tail == "ping":
            return self._json(200, version, pings=[self._ping(version)])
        if tail == "diag":
            return self._json(200, version, statistics={"req_time": _num(int(self.epoch()), new)})
        if tail.startswith("partition/"):
            return self._partition(version, tail.split("/", 1)[1])
        if tail in ("partitions", "jobs") and since is not None and version in ("v0.0.40", "v0.0.41"):
            return httpx.Response(422 if tail == "jobs" else 500, json={"errors": [
                {"description": f"Parsing of {since} for timestamp failed", "error_number": 9202,
                 "error": "Unable to convert Data type", "source": "#/update_time/"},
                {"description": "Rejecting request. Failure parsing query.", "error_number": 9000}]})
        if tail == "partitions":
            if since is not None and int(since) > self._part_update:
                self.unchanged_log.append("partitions")
                return httpx.Response(304)
            return self._json(200, version, partitions=[self._part(n, s, version) for n, s in self.partitions.items()],
                              **({} if self.old else {"last_update": _num(int(self._part_update), True)}))
        if tail == "jobs":
            if since is not None and int(since) > self._job_update:
                self.unchanged_log.append("jobs")
                if self.old:
                    return httpx.Response(304)
                return self._json(200, version, jobs=[], last_backfill=_num(0, True), last_update=_num(0, True),
                                  warnings=[{"description": f"No job changes since update_time[{since}]",
                                             "source": "op_handler_jobs"}])
            return self._json(200, version, jobs=[self._job(j, new) for j in self.jobs],
                              **({} if self.old else {"last_update": _num(int(self._job_update), True)}))
        return httpx.Response(404, text=self.r.not_found_text)

    def _ping(self, version: str) -> dict:
        if version == "v0.0.38":
            return {"hostname": "vm", "ping": "UP", "status": 0, "mode": "primary"}
        if version == "v0.0.45":
            return {"hostname": "vm", "responding": True, "latency": 672, "primary": True, "status": "No error"}
        ping: dict[str, Any] = {"hostname": "vm", "pinged": "UP", "latency": 997, "mode": "primary"}
        return ping if version in ("v0.0.40", "v0.0.41") else {**ping, "responding": True, "primary": True}

    def _part(self, name: str, state: str, version: str) -> dict:
        if version == "v0.0.38":
            return {"name": name, "state": state, "nodes": "vm", "total_cpus": 16}
        inner: dict[str, Any] = {"state": [state]}
        if version == "v0.0.45":
            inner = {"exclusive": "NO", "oversubscribe": "NO", **inner}
        return {"name": name, "partition": inner, "nodes": {"configured": "vm", "total": 1},
                "cpus": {"task_binding": [] if version == "v0.0.45" else 0, "total": 16}}

    def _partition(self, version: str, name: str) -> httpx.Response:
        if name in self.partitions:
            return self._json(200, version, partitions=[self._part(name, self.partitions[name], version)])
        if self.old:
            return httpx.Response(500, json={"partitions": [], "errors": [
                {"error": "Invalid partition name specified", "errno": 2000}]})
        said = f"Unable to find partition {name}"
        if self.release == "24.11":
            return httpx.Response(422, json={"partitions": None, "errors": [
                {"description": said, "error_number": 9000, "error": "Query empty or not RFC7320 compliant",
                 "source": "op_handler_partition"}], "warnings": []})
        return self._json(200, version, partitions=None, warnings=[{"description": said, "source": "_partition_get"}])

    def _job(self, job: dict, new: bool) -> dict:
        if not new:
            return job
        return {**job, "job_state": [job["job_state"]], "submit_time": _num(int(self.epoch()), True),
                "time_limit": {"set": False, "infinite": True, "number": 0}}

    def client_factory(self) -> Callable[[str, str | None], sr.SlurmClient]:
        def make(url: str, api_version: str | None) -> sr.SlurmClient:
            return sr.SlurmClient(url, api_version, transport=httpx.MockTransport(self.handler), clock=self.clock)
        return make
