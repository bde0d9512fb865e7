"""The base of every spec and status model: camelCase on the wire, unknown fields refused."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


class _Model(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=False
    )

    def wire(self) -> dict[str, Any]:
        """The object as the API server stores it (camelCase, no unset optionals)."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


# A CEL rule the API server runs (x-kubernetes-validations), next to the model it guards.
def _cel(rule: str, message: str, field_path: str | None = None) -> dict[str, Any]:
    out = {"rule": rule, "message": message}
    if field_path:
        out["fieldPath"] = field_path
    return out
