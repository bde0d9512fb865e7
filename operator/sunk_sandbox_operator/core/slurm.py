"""Slurm's side of placement, pure: slurmrestd answers → facts → SlurmReady and the job facts.

Decisions as functions of recorded facts (no I/O, no clock but the times passed in); the per-binding
matching of pods to placeholder jobs is `slurm_jobs.py`:

- `ready_condition`: SlurmReady from one observation of the binding's own request (the partition,
  or a ping when none is pinned) or the error it met; `token_problem` finds what can be told about a
  JWT without sending it (not a JWT, expired, for another user).
- `advance`: the shared job list after a poll → one `JobFact` per job name, with `stuck` set once a
  PENDING job has kept the same reason for `seconds` *and* `polls` polls (a backfill cycle's brief
  `ReqNodeNotAvail` must not count); `changed` names what differs from the previous list.

Responses are read tolerantly: `job_state` is a string in v0.0.38 and a list from v0.0.40; numbers
may be `{"set", "infinite", "number"}` objects; partitions carry `state` or `partition.state`.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from ..api.reasons import SlurmReady
from .conditions import Status
from .tenant_text import load_json, printable

# Job states after which a job is history (sorted after live ones of the same name).
FINISHED = frozenset({"COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL",
                      "DEADLINE", "OUT_OF_MEMORY", "REVOKED", "SPECIAL_EXIT"})
NO_REASON = frozenset({"", "None"})
JOB_NAME_MAX = 1024           # longer names are not a placeholder's: ignored

# ---------------------------------------------------------------- reading responses


def number(value: Any) -> int | None:
    """An integer field: a plain number (v0.0.38) or {"set", "infinite", "number"} (v0.0.40+)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, Mapping) and value.get("set", True) and not value.get("infinite"):
        n = value.get("number")
        return n if isinstance(n, int) and not isinstance(n, bool) else None
    return None


def job_state(value: Any) -> str:
    """`job_state` as one upper-case word: "PENDING" (v0.0.38) or ["PENDING", ...flags] (v0.0.40+)."""
    if isinstance(value, list):
        value = next((v for v in value if isinstance(v, str)), None)
    return value.upper() if isinstance(value, str) and value else "UNKNOWN"


def partition_state(partition: Any) -> str | None:
    """A partition object's state: `state` (v0.0.38: "UP") or `partition.state` (v0.0.40+: ["UP"])."""
    if not isinstance(partition, Mapping):
        return None
    raw = partition.get("state")
    if raw is None and isinstance(partition.get("partition"), Mapping):
        raw = partition["partition"].get("state")
    if isinstance(raw, list):
        raw = next((v for v in raw if isinstance(v, str)), None)
    return raw.upper() if isinstance(raw, str) and raw else None


def partition_states(payload: Any) -> dict[str, str]:
    """GET /partitions: name → state."""
    out: dict[str, str] = {}
    parts = payload.get("partitions") if isinstance(payload, Mapping) else None
    for p in parts if isinstance(parts, list) else []:
        name, state = (p.get("name") if isinstance(p, Mapping) else None), partition_state(p)
        if isinstance(name, str) and state:
            out[name] = state
    return out


@dataclass(frozen=True, slots=True)
class Job:
    """What is kept of one job in the list (the rest of its ~100 keys is dropped at once)."""

    job_id: int
    name: str
    state: str
    reason: str
    description: str


def parse_jobs(payload: Any) -> dict[str, Job]:
    """GET /jobs → the job of each name: a live one before a finished one, then the newest (the
    highest id: a placeholder resubmitted after a requeue)."""
    jobs = payload.get("jobs") if isinstance(payload, Mapping) else None
    out: dict[str, Job] = {}
    for raw in jobs if isinstance(jobs, list) else []:
        if not isinstance(raw, Mapping):
            continue
        name, job_id = raw.get("name"), number(raw.get("job_id"))
        if not isinstance(name, str) or not name or len(name) > JOB_NAME_MAX or job_id is None:
            continue
        reason, description = raw.get("state_reason"), raw.get("state_description")
        job = Job(job_id, name, job_state(raw.get("job_state")), reason if isinstance(reason, str) else "",
                  description if isinstance(description, str) else "")
        old = out.get(name)
        if old is None or _rank(job) > _rank(old):
            out[name] = job
    return out


def _rank(job: Job) -> tuple[bool, int]:
    return (job.state not in FINISHED, job.job_id)


# ---------------------------------------------------------------- persistence of pending reasons


@dataclass(frozen=True, slots=True)
class Pending:
    """A job seen PENDING for one reason: since when (monotonic and wall clock), over how many polls."""

    reason: str
    since: float
    since_wall: float
    polls: int


@dataclass(frozen=True, slots=True)
class JobFact:
    """One placeholder job as bindings see it. `stuck`: PENDING for a reason that persisted; `since`
    (wall-clock epoch) when that reason was first seen, set only when stuck (so a pending job's fact
    changes once, when it becomes stuck, not at every poll)."""

    job_id: int
    name: str
    state: str
    reason: str
    description: str
    stuck: bool = False
    since: float | None = None


def advance(memo: Mapping[int, Pending], jobs: Mapping[str, Job], *, now: float, now_wall: float, seconds: float,
            polls: int) -> tuple[dict[int, Pending], dict[str, JobFact]]:
    """One poll (a 304 passes the previous `jobs` again): the new memo of pending reasons, and the
    facts by job name. A reason persists when the same one was seen on `polls` consecutive polls
    over at least `seconds`; any other state or reason starts over."""
    new_memo: dict[int, Pending] = {}
    facts: dict[str, JobFact] = {}
    for name, job in jobs.items():
        stuck, since = False, None
        if job.state == "PENDING" and job.reason not in NO_REASON:
            old = memo.get(job.job_id)
            p = (Pending(job.reason, old.since, old.since_wall, old.polls + 1) if old and old.reason == job.reason
                 else Pending(job.reason, now, now_wall, 1))
            new_memo[job.job_id] = p
            if p.polls >= polls and now - p.since >= seconds:
                stuck, since = True, p.since_wall
        facts[name] = JobFact(job.job_id, name, job.state, job.reason, job.description, stuck, since)
    return new_memo, facts


def changed(old: Mapping[str, JobFact], new: Mapping[str, JobFact]) -> set[str]:
    """Names whose fact appeared, went or differs."""
    out = {n for n, f in new.items() if old.get(n) != f}
    out.update(n for n in old if n not in new)
    return out


# ---------------------------------------------------------------- the token, without sending it

TOKEN_MAX = 8192              # a Slurm JWT is ~200 bytes; the Secret is tenant-written: nothing longer is decoded
EXPIRING_SECONDS = 3600       # a token expiring within this is warned about (SlurmTokenExpiring) before it breaks
NOT_A_JWT = "the Secret's value is not a JWT (three base64url parts): put the token `scontrol token` printed there"


def _unb64(part: str) -> bytes:
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


def claims(token: str) -> dict[str, Any] | str:
    """The JWT's payload, decoded without verifying (bounded: TOKEN_MAX characters, no nesting
    bomb reaches the caller), or what is wrong with it (never quoting it)."""
    if len(token) > TOKEN_MAX:
        return (f"the Secret's value is {len(token)} characters, longer than any Slurm JWT (at most {TOKEN_MAX} are "
                "read): put the token `scontrol token` printed there, alone")
    parts = token.strip().split(".")
    try:
        if len(parts) != 3:
            raise ValueError
        decoded = load_json(_unb64(parts[1]), TOKEN_MAX)  # tenant-written: bounded, nesting a ValueError
        if not isinstance(decoded, dict):
            raise ValueError
    except (ValueError, binascii.Error, UnicodeDecodeError, RecursionError):
        return NOT_A_JWT
    return decoded


def header_problem(value: str) -> str | None:
    """Why `value` cannot be an HTTP header value, told without it (None: it can). httpx's own error
    would quote the header, token and all."""
    bad = next((i for i, ch in enumerate(value) if not 33 <= ord(ch) <= 126), None)
    if bad is None:
        return None
    what = "a line break" if value[bad] in "\r\n" else "a space" if value[bad] == " " else \
        "a control character" if ord(value[bad]) < 32 or ord(value[bad]) == 127 else "a non-ASCII character"
    return (f"it holds {what} at offset {bad} of {len(value)}, which an HTTP header cannot carry (an env file or "
            "several lines in one key?): put the JWT alone there")


def token_problem(token: str, user: str, now_wall: float) -> str | None:
    """What makes this JWT certain to fail, told without the token: not a JWT, expired (`exp`), or
    issued for another user (`sun`, the claim Slurm's auth/jwt checks against X-SLURM-USER-NAME)."""
    got = claims(token)
    if isinstance(got, str):
        return got
    exp, sun = number(got.get("exp")), got.get("sun")
    if exp is not None and exp <= now_wall:
        return f"the token expired at {iso(exp)}: issue a new one (`scontrol token username={user} lifespan=...`)"
    if isinstance(sun, str) and sun != user:
        return (f"the token is for Slurm user {printable(sun)}, but spec.slurm.restAPI.user is {user!r}: Slurm refuses a "
                "token whose user differs from X-SLURM-USER-NAME")
    return None


def token_expiry(token: str) -> int | None:
    """The JWT's `exp` (epoch seconds), read without verifying; None when it has none or is no JWT."""
    got = claims(token)
    return None if isinstance(got, str) else number(got.get("exp"))


def expiring(exp: int | None, now_wall: float) -> bool:
    """Does a working token expire within EXPIRING_SECONDS (warn now, before it breaks)?"""
    return exp is not None and now_wall < exp <= now_wall + EXPIRING_SECONDS


def iso(ts: float) -> str:
    try:
        return datetime.fromtimestamp(int(ts), timezone.utc).isoformat().replace("+00:00", "Z")
    except (OverflowError, OSError, ValueError):  # e.g. a token's `exp` claim, written by a tenant
        return f"epoch {printable(ts)}"  # printable: an inf or a NaN has no int either


# ---------------------------------------------------------------- SlurmReady


@dataclass(frozen=True)
class SlurmObservation:
    """The binding's own request to slurmrestd (with its own token), or what stopped it."""

    url: str
    user: str
    partition: str | None        # spec.partition (None: a ping was sent instead)
    answer: Mapping[str, Any] | None = None  # the partition object (or the ping answer)
    error: str | None = None     # credentials | token | auth | unreachable | not_found | version | api
    detail: str = ""
    api_version: str | None = None   # the OpenAPI version the request used (None: none was found)
    negotiated: bool = True          # False: spec.slurm.restAPI.apiVersion
    release: str | None = None       # the Slurm release slurmrestd's answer named
    token_where: str = ""            # "Secret ns/name key k" (never the value)
    token_expires: int | None = None  # the JWT's `exp`, when it expires within the hour


def api_text(obs: SlurmObservation) -> str:
    """What the status and the doctor say of the version, e.g. `Slurm 24.11.5, REST v0.0.42 (negotiated)`."""
    release = f"Slurm {obs.release}, " if obs.release else ""
    if obs.api_version is None:
        return release.rstrip(", ")
    how = "negotiated" if obs.negotiated else "spec.slurm.restAPI.apiVersion"
    return f"{release}REST {obs.api_version} ({how})"


def _expiring(obs: SlurmObservation) -> str:
    if obs.token_expires is None:
        return ""
    return (f". The token ({obs.token_where}) expires at {iso(obs.token_expires)}: put a new one there before then "
            f"(`scontrol token username={obs.user} lifespan=...`)")


def ready_condition(obs: SlurmObservation | None) -> tuple[Status, SlurmReady, str]:
    """SlurmReady as (status, reason, message); None: spec.slurm.restAPI is not set."""
    if obs is None:
        return "True", SlurmReady.NOT_CONFIGURED, "spec.slurm.restAPI is not set: Slurm is not read"
    api = api_text(obs)
    where = f"slurmrestd at {obs.url} (user {obs.user}" + (f"; {api})" if api else ")")
    status, reason, message = _ready(obs, where)
    return status, reason, message + _expiring(obs)


def _ready(obs: SlurmObservation, where: str) -> tuple[Status, SlurmReady, str]:
    if obs.error == "credentials":
        return "False", SlurmReady.CREDENTIALS_MISSING, f"{obs.detail}; nothing was sent to {where}"
    if obs.error == "token":
        return "False", SlurmReady.SLURM_AUTH_FAILED, f"{obs.detail}; it was not sent to {where}"
    if obs.error == "auth":
        return "False", SlurmReady.SLURM_AUTH_FAILED, (
            f"{where} refused the token: {obs.detail}. Put a valid JWT for user {obs.user} in the Secret "
            "(`scontrol token`), and check that slurmrestd runs with SLURM_JWT=daemon")
    if obs.error == "unreachable":
        return "Unknown", SlurmReady.SLURM_UNREACHABLE, (
            f"{where} did not answer: {obs.detail}. The partition and the placeholder jobs are not checked until it "
            "does; nothing else about this binding depends on it")
    if obs.error == "version":
        return "False", SlurmReady.API_VERSION_NOT_SERVED, (
            f"{where}: {obs.detail}. Remove spec.slurm.restAPI.apiVersion to negotiate the newest version both sides "
            "know, or set one slurmrestd serves")
    if obs.error == "not_found":
        return "False", SlurmReady.PARTITION_NOT_FOUND, (
            f"Slurm has no partition {obs.partition!r} (spec.partition; {where} answered: {obs.detail}): sandboxes "
            "pinned to it cannot be placed. Fix spec.partition (`sinfo -h -o %P` lists the partitions)")
    if obs.error is not None:
        return "False", SlurmReady.SLURM_API_ERROR, f"{where}: {obs.detail}"
    if obs.partition is None:
        return "True", SlurmReady.SLURM_REACHABLE, (
            f"{where} answers with the token; no spec.partition is pinned, so Slurm picks the partition")
    state = partition_state(obs.answer)
    if state == "UP":
        return "True", SlurmReady.PARTITION_UP, f"partition {obs.partition} is UP ({where})"
    return "False", SlurmReady.PARTITION_DOWN, (
        f"partition {obs.partition} is {state or 'in an unknown state'} in Slurm ({where}): placeholder jobs of "
        f"sandboxes pinned to it stay PENDING. A Slurm admin: `scontrol update PartitionName={obs.partition} State=UP`")


def verified(obs: SlurmObservation | None) -> bool:
    """Did the binding's own token pass Slurm's authentication (so it may share the job list)?"""
    return obs is not None and obs.error in (None, "not_found")
