"""One shape of domain error: a problem a condition reports, with its reason and the fix.

Raised where a failure has an explanation (a target that cannot be read or written, a token that
cannot be found, a document refused as untrusted) and caught by the pipeline that owns the
condition, which reports it as it is: the reason (an `api.reasons` member) and a message that
says what to do. Adapters never make one: transport failures (`adapters.kube.KubeError`, the runner
API's errors) and what a scope target could not do (`adapters.targets.TargetFailed`, its facts a
`core.scope.errors.TargetError`) are classified by the concern that catches them (for the scope
target: `core.scope.errors.classify`, one pure table).
"""

from __future__ import annotations

from ..api.reasons import _Reason


class Problem(Exception):
    def __init__(self, reason: _Reason, message: str) -> None:
        super().__init__(message)
        self.reason, self.message = reason, message
