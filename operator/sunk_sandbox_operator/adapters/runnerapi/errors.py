"""Typed errors of the runner API (Connect protocol codes) and the code <-> HTTP status tables.

Shared by the client (to parse errors) and the emulator (to produce them), so both sides agree
on one table: the one in domain.md section 5.
"""

from __future__ import annotations

from typing import Any, ClassVar

# Connect code -> HTTP status, as the real service answers (domain.md, "Error bodies").
CODE_TO_HTTP: dict[str, int] = {
    "canceled": 499,
    "unknown": 500,
    "invalid_argument": 400,
    "deadline_exceeded": 504,
    "not_found": 404,
    "already_exists": 409,
    "permission_denied": 403,
    "resource_exhausted": 429,
    "failed_precondition": 400,
    "aborted": 409,
    "out_of_range": 400,
    "unimplemented": 501,
    "internal": 500,
    "unavailable": 503,
    "data_loss": 500,
    "unauthenticated": 401,
}

# Only these are worth retrying blindly: the request did not take effect or the server asked
# us to slow down. A stale etag needs a re-read and re-merge, which is the caller's job.
RETRYABLE_CODES: frozenset[str] = frozenset({"unavailable", "deadline_exceeded", "resource_exhausted"})

# Errors meaning "someone wrote in between": re-read, re-apply, resend.
STALE_ETAG_CODES: frozenset[str] = frozenset({"failed_precondition", "aborted"})


def code_for_bare_http_status(status: int) -> str:
    """The code for an error response without a Connect JSON body (Connect's HTTP->code table).

    A bare 404 is a wrong path (no such procedure), hence `unimplemented`, not `not_found`.
    """
    return {
        400: "internal",
        401: "unauthenticated",
        403: "permission_denied",
        404: "unimplemented",
        429: "unavailable",
        502: "unavailable",
        503: "unavailable",
        504: "unavailable",
    }.get(status, "unknown")


class RunnerAPIError(Exception):
    """An error from the runner API, or from reaching it. Never carries the bearer token."""

    code: ClassVar[str] = "unknown"
    retryable: ClassVar[bool] = False

    def __init__(
        self,
        message: str = "",
        *,
        http_status: int | None = None,
        details: list[Any] | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.http_status = http_status
        self.details: list[Any] = list(details or [])
        # Seconds the server asked us to wait (Retry-After), if any.
        self.retry_after = retry_after

    def __str__(self) -> str:
        status = f" (HTTP {self.http_status})" if self.http_status is not None else ""
        return f"{self.code}: {self.message}{status}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code!r}, message={self.message!r}, http_status={self.http_status!r})"


# One class per Connect code, so callers can `except PermissionDenied:`.


class Canceled(RunnerAPIError):
    code = "canceled"


class Unknown(RunnerAPIError):
    code = "unknown"


class InvalidArgument(RunnerAPIError):
    code = "invalid_argument"


class DeadlineExceeded(RunnerAPIError):
    code = "deadline_exceeded"
    retryable = True


class NotFound(RunnerAPIError):
    code = "not_found"


class AlreadyExists(RunnerAPIError):
    code = "already_exists"


class PermissionDenied(RunnerAPIError):
    code = "permission_denied"


class ResourceExhausted(RunnerAPIError):
    code = "resource_exhausted"
    retryable = True


class FailedPrecondition(RunnerAPIError):
    code = "failed_precondition"


class Aborted(RunnerAPIError):
    code = "aborted"


class OutOfRange(RunnerAPIError):
    code = "out_of_range"


class Unimplemented(RunnerAPIError):
    code = "unimplemented"


class Internal(RunnerAPIError):
    code = "internal"


class Unavailable(RunnerAPIError):
    code = "unavailable"
    retryable = True


class DataLoss(RunnerAPIError):
    code = "data_loss"


class Unauthenticated(RunnerAPIError):
    code = "unauthenticated"


ERROR_CLASSES: dict[str, type[RunnerAPIError]] = {
    cls.code: cls
    for cls in (
        Canceled, Unknown, InvalidArgument, DeadlineExceeded, NotFound, AlreadyExists,
        PermissionDenied, ResourceExhausted, FailedPrecondition, Aborted, OutOfRange,
        Unimplemented, Internal, Unavailable, DataLoss, Unauthenticated,
    )
}
assert set(ERROR_CLASSES) == set(CODE_TO_HTTP)


def error_for(
    code: str,
    message: str = "",
    http_status: int | None = None,
    details: list[Any] | None = None,
    *,
    retry_after: float | None = None,
) -> RunnerAPIError:
    """The typed error for a Connect code; an unrecognised code becomes `Unknown`, keeping it in the message."""
    cls = ERROR_CLASSES.get(code)
    if cls is None:
        cls, message = Unknown, f"[{code}] {message}"
    return cls(message, http_status=http_status, details=details, retry_after=retry_after)


def is_stale_etag(err: BaseException) -> bool:
    """True when the write lost a race with another writer: re-read, re-merge, resend."""
    return isinstance(err, RunnerAPIError) and err.code in STALE_ETAG_CODES
