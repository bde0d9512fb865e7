"""A declarative co-writer of a runner's policy: `terraform apply` on a schedule, over HTTP.

Terraform's `coreweave_sandbox_managed_runner` records a desired policy. Each apply reads the
runner (GetManagedRunner: the live policy and its etag) and, when the live policy differs from
the desired one, writes the whole desired policy with that etag (UpdateManagedRunner). Keys
another writer merged are not in it, so an apply removes them, with a fresh etag: nothing
conflicts. An apply whose etag went stale in between fails (`failed_precondition`), as
Terraform's does; the next one reads again. A plan with no changes writes nothing.

`CoWriter.apply` does exactly that against any runner API URL. The emulator runs one per runner
against itself (the `co_writers` knob, `--co-writer`), so a test sees the real fight on the wire.
"""

from __future__ import annotations

import copy
from typing import Any, Literal

import httpx

from ...core.policy.paths import strict_equal
from .emulator_wire import SERVICE, json_names

Outcome = Literal["unchanged", "applied", "conflict", "error"]


class CoWriter:
    """One runner's declarative owner: its desired policy, applied on request."""

    def __init__(self, url: str, token: str, runner_id: str, policy: dict[str, Any] | None,
                 http: httpx.AsyncClient) -> None:
        self.url, self.runner_id, self.http = url.rstrip("/"), runner_id, http
        self._token = token
        self.policy = copy.deepcopy(policy)

    async def _call(self, method: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        response = await self.http.post(f"{self.url}/{SERVICE}/{method}", json=body, headers={
            "Authorization": f"Bearer {self._token}", "Connect-Protocol-Version": "1"})
        try:
            answer = response.json()
        except ValueError:
            answer = {}
        return response.status_code, answer if isinstance(answer, dict) else {}

    async def apply(self) -> tuple[Outcome, str]:
        """Refresh, compare, write the whole desired policy when it differs: the outcome and a detail
        (the error code, or the etag written)."""
        status, body = await self._call("GetManagedRunner", {"runnerId": self.runner_id})
        if status != 200:
            return "error", str(body.get("code") or status)
        runner = body.get("managedRunner", body)
        if strict_equal(json_names(runner.get("policy")), json_names(self.policy)):
            return "unchanged", str(runner.get("etag"))
        status, body = await self._call("UpdateManagedRunner", {
            "runnerId": self.runner_id, "updateMask": "policy",
            "managedRunner": {"identity": runner.get("identity"), "policy": self.policy, "etag": runner.get("etag")}})
        if status == 200:
            return "applied", str(body.get("managedRunner", body).get("etag"))
        code = str(body.get("code") or status)
        return ("conflict" if code in ("failed_precondition", "aborted") else "error"), code
