"""The runner API emulator's contract and state, with no server around them.

Etag concurrency, `policy: null` for a runner never configured,
the write and call logs, and the knobs (latency, error rates, scripted failures, a concurrent
"other admin", declarative co-writers applying their whole policy on a schedule). `emulator.py`
serves this over HTTP (`emulator_http.py`, checking each request by `emulator_wire.py`: its
field names, its shape, the forbidden `base` fields); `cowriter.py` is the co-writer's client.

The state holds the message, not a spelling: policies and identities are stored under their JSON
names, however they arrived (field names as Connect's protojson treats them: `emulator_wire.py`).
"""

from __future__ import annotations

import copy
import random
import re
import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Mapping

from .emulator_wire import ApiError, json_names
from .errors import CODE_TO_HTTP

OTHER_ADMIN_COUNTER = "otherAdminEdits"
CO_WRITER = "co-writer"  # `who` of the co-writers' calls and writes in the logs


# ---------------------------------------------------------------- the other admin, etags


def other_admin_edit(policy: dict | None) -> dict:
    """The other admin's edit: bump a counter under constraints.network.egress (kept by merges)."""
    out = copy.deepcopy(policy) if policy is not None else {}
    egress = out.setdefault("constraints", {}).setdefault("network", {}).setdefault("egress", {})
    egress[OTHER_ADMIN_COUNTER] = int(egress.get(OTHER_ADMIN_COUNTER, 0)) + 1
    return out


def new_etag(generation: int) -> str:
    return f"{generation}-{secrets.token_hex(4)}"


# ---------------------------------------------------------------- state


@dataclass
class CoWriterPlan:
    """A declarative owner of one runner's policy (Terraform, say): its whole desired policy, applied
    every `interval_seconds` (0: once)."""

    policy: dict | None
    interval_seconds: float = 0.0
    next_at: float = 0.0      # monotonic time of the next apply (inf: none left)


def co_writer_plan(spec: Any) -> CoWriterPlan:
    """A `co_writers` knob entry: {"policy": object|null, "interval_seconds": number >= 0}."""
    if not isinstance(spec, Mapping) or "policy" not in spec or not (spec["policy"] is None or isinstance(spec["policy"], dict)):
        raise ValueError('a co-writer is {"policy": object|null, "interval_seconds": number}')
    interval = float(spec.get("interval_seconds") or 0.0)
    if interval < 0:
        raise ValueError("a co-writer's interval_seconds must be >= 0")
    return CoWriterPlan(copy.deepcopy(spec["policy"]), interval)


@dataclass
class EmulatorState:
    """Everything the emulator knows. Shared with the test/demo thread: mutate under `lock`."""

    runners: dict[str, dict[str, Any]] = field(default_factory=dict)
    admin_tokens: set[str] = field(default_factory=set, repr=False)  # secrets: kept out of reprs
    readonly_tokens: set[str] = field(default_factory=set, repr=False)
    write_log: list[dict[str, Any]] = field(default_factory=list)
    call_log: list[dict[str, Any]] = field(default_factory=list)
    # knobs
    latency_seconds: float = 0.0
    error_rates: dict[str, float] = field(default_factory=dict)
    fail_next: list[str] = field(default_factory=list)  # scripted errors, one per call, in order
    retry_after_seconds: float | None = None  # sent with injected retryable errors
    other_admin: bool = False
    wrap_responses: bool = False
    co_writers: dict[str, CoWriterPlan] = field(default_factory=dict)  # runner id -> its declarative owner
    co_writer_log: list[dict[str, Any]] = field(default_factory=list)
    co_writer_token: str = field(default_factory=lambda: secrets.token_hex(16), repr=False)  # theirs alone
    seed: int | None = None
    lock: threading.RLock = field(default_factory=threading.RLock, repr=False)
    _generation: int = 0
    _read_since_write: set[str] = field(default_factory=set, repr=False)
    _struck: set[str] = field(default_factory=set, repr=False)
    _rng: random.Random = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)
        for runner_id, runner in list(self.runners.items()):
            self.runners[runner_id] = self._normalise(runner_id, runner)

    def _normalise(self, runner_id: str, runner: Mapping[str, Any]) -> dict[str, Any]:
        etag = runner.get("etag") or self._next_etag()
        return {
            "identity": json_names(runner.get("identity") or default_identity(runner_id)),
            "policy": json_names(copy.deepcopy(runner.get("policy"))),
            "etag": etag,
        }

    def _next_etag(self) -> str:
        self._generation += 1
        return new_etag(self._generation)

    def add_runner(self, runner_id: str, policy: dict | None = None, identity: Any = None) -> None:
        """Register a runner without logging a write (setup)."""
        with self.lock:
            self.runners[runner_id] = self._normalise(runner_id, {"policy": policy, "identity": identity})

    def write(self, runner_id: str, policy: dict | None, who: str, identity: Any = None) -> dict[str, Any]:
        """Store a policy with a new etag and log it. Creates the runner if unknown."""
        with self.lock:
            before = self.runners.get(runner_id)
            if before is None:
                before = self.runners[runner_id] = self._normalise(runner_id, {"identity": identity})
            etag_before = before["etag"]
            policy = json_names(copy.deepcopy(policy))
            before["policy"] = policy
            before["etag"] = self._next_etag()
            if identity is not None and who != "client":
                before["identity"] = json_names(identity)
            self.write_log.append(
                {
                    "time": time.time(),
                    "runner_id": runner_id,
                    "who": who,
                    "etag_before": etag_before,
                    "etag_after": before["etag"],
                    "policy": copy.deepcopy(policy),
                }
            )
            self._read_since_write.discard(runner_id)
            return copy.deepcopy(before)

    def set_knobs(self, knobs: Mapping[str, Any]) -> None:
        with self.lock:
            if "latency_seconds" in knobs:
                self.latency_seconds = float(knobs["latency_seconds"] or 0.0)
            if "error_rates" in knobs:
                rates = knobs["error_rates"] or {}
                unknown = set(rates) - set(CODE_TO_HTTP)
                if unknown:
                    raise ValueError(f"unknown error codes: {sorted(unknown)}")
                self.error_rates = {str(k): float(v) for k, v in rates.items()}
            if "fail_next" in knobs:
                codes = [str(c) for c in knobs["fail_next"] or []]
                if set(codes) - set(CODE_TO_HTTP):
                    raise ValueError(f"unknown error codes: {sorted(set(codes) - set(CODE_TO_HTTP))}")
                self.fail_next = codes
            if "retry_after_seconds" in knobs:
                value = knobs["retry_after_seconds"]
                self.retry_after_seconds = None if value is None else float(value)
            if "other_admin" in knobs:
                self.other_admin = bool(knobs["other_admin"])
            if "wrap_responses" in knobs:
                self.wrap_responses = bool(knobs["wrap_responses"])
            if "co_writers" in knobs:  # per runner: a plan sets (and applies at once), null removes
                plans = knobs["co_writers"] or {}
                if not isinstance(plans, Mapping):
                    raise ValueError("co_writers must map runner ids to co-writers (or null)")
                parsed = {str(r): None if spec is None else co_writer_plan(spec) for r, spec in plans.items()}
                for runner_id, plan in parsed.items():
                    if plan is None:
                        self.co_writers.pop(runner_id, None)
                    else:
                        self.co_writers[runner_id] = plan

    def knobs(self) -> dict[str, Any]:
        with self.lock:
            return {
                "latency_seconds": self.latency_seconds,
                "error_rates": dict(self.error_rates),
                "fail_next": list(self.fail_next),
                "retry_after_seconds": self.retry_after_seconds,
                "other_admin": self.other_admin,
                "wrap_responses": self.wrap_responses,
                "co_writers": {r: {"policy": copy.deepcopy(p.policy), "interval_seconds": p.interval_seconds}
                               for r, p in self.co_writers.items()},
            }

    def snapshot(self) -> dict[str, Any]:
        with self.lock:
            return copy.deepcopy(
                {
                    "runners": self.runners,
                    "write_log": self.write_log,
                    "call_log": self.call_log,
                    "co_writer_log": self.co_writer_log,
                    "knobs": self.knobs(),
                }
            )

    def caller(self, token: str | None) -> tuple[bool, bool, str]:
        """(admin, read-only, who) for a bearer token; the co-writers' own token is an admin's."""
        with self.lock:
            if token is not None and secrets.compare_digest(token, self.co_writer_token):
                return True, False, CO_WRITER
            return token in self.admin_tokens, token in self.readonly_tokens, "client"

    def co_writers_due(self, now: float) -> list[tuple[str, dict | None]]:
        """The co-writers whose apply is due at monotonic `now`, each scheduled for its next one."""
        with self.lock:
            due = []
            for runner_id, plan in self.co_writers.items():
                if plan.next_at <= now:
                    plan.next_at = now + plan.interval_seconds if plan.interval_seconds > 0 else float("inf")
                    due.append((runner_id, copy.deepcopy(plan.policy)))
            return due

    def co_writer_applied(self, runner_id: str, outcome: str, detail: str) -> None:
        with self.lock:
            self.co_writer_log.append({"time": time.time(), "runner_id": runner_id, "outcome": outcome,
                                       "detail": detail})

    # -- used by the request handlers (under the lock, never across an await)

    def injected_error(self) -> str | None:
        if self.fail_next:
            return self.fail_next.pop(0)
        for code, rate in self.error_rates.items():
            if self._rng.random() < rate:
                return code
        return None

    def get(self, runner_id: str) -> dict[str, Any]:
        runner = self.runners.get(runner_id)
        if runner is None:
            raise ApiError("not_found", f"runner {runner_id!r} not found")
        self._read_since_write.add(runner_id)
        return copy.deepcopy(runner)

    def update(self, runner_id: str, policy: dict | None, etag: str, who: str = "client") -> dict[str, Any]:
        runner = self.runners.get(runner_id)
        if runner is None:
            raise ApiError("not_found", f"runner {runner_id!r} not found")
        if self.other_admin and runner_id in self._read_since_write and runner_id not in self._struck:
            # Another admin writes between the client's read and its write, once per cycle:
            # the client's retry after re-reading goes through, so callers converge.
            self.write(runner_id, other_admin_edit(runner["policy"]), "other-admin")
            self._struck.add(runner_id)
        if etag != runner["etag"]:
            raise ApiError("failed_precondition", f"etag mismatch for runner {runner_id!r}: re-read and retry")
        self._struck.discard(runner_id)
        return self.write(runner_id, policy, who)


def default_identity(runner_id: str) -> dict[str, Any]:
    return {"runnerId": runner_id, "name": runner_id, "cluster": "emulated-cks"}


def _public(runner_id: str, runner: Mapping[str, Any], wrap: bool) -> dict[str, Any]:
    """The answer, under JSON names only (the state already holds them; a runner put straight into
    `runners` by a test is answered the same way)."""
    obj = {"runnerId": runner_id, "identity": json_names(runner["identity"]), "policy": json_names(runner["policy"]),
           "etag": runner["etag"]}
    return {"managedRunner": obj} if wrap else obj
