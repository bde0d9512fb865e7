"""The policy ownership record: what a policy write will make ours, persisted before the write (pure).

The runner policy cannot carry our bookkeeping, and a value we wrote cannot be told apart from
an admin's once status is lost. So before every UpdateManagedRunner the operator records the
paths it owns and the values they had before its first write, with the state `pending` (the
model is Crossplane's external-create-pending annotation); after the API accepted the write,
`applied`. A record found `pending` at the next reconcile (the process died in between) is
resolved by reading the policy: either way the recorded previous values are the right ones,
since they were computed from the policy as it was before the write.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

from ...api.status import OwnedPath

State = Literal["pending", "applied"]


@dataclass(frozen=True)
class Record:
    binding: str                       # namespace/name
    runner: str
    state: State
    owned: tuple[OwnedPath, ...] = field(default_factory=tuple)
    etag_before: str | None = None     # the policy version the write was based on
    at: str | None = None              # when the record was last written

    def to_json(self) -> str:
        return json.dumps({"binding": self.binding, "runner": self.runner, "state": self.state,
                           "owned": [o.wire() for o in self.owned], "etagBefore": self.etag_before,
                           "at": self.at}, sort_keys=True, separators=(",", ":"))


def from_json(text: str | None) -> Record | None:
    if not text:
        return None
    try:
        doc: Any = json.loads(text)
        return Record(binding=str(doc["binding"]), runner=str(doc["runner"]),
                      state="pending" if doc.get("state") == "pending" else "applied",
                      owned=tuple(OwnedPath.model_validate(o) for o in doc.get("owned") or ()),
                      etag_before=doc.get("etagBefore"), at=doc.get("at"))
    except (ValueError, KeyError, TypeError):
        return None


def owned_for(record: Record | None, runner: str, status_owned: list[OwnedPath]) -> list[OwnedPath]:
    """What we own: the record when it is about this runner; before any record exists (an upgrade
    from a version that kept ownership only in status), status."""
    if record is not None and record.runner == runner:
        return list(record.owned)
    return list(status_owned)
