"""The REST spec's error model and the mapping from catalog exceptions to HTTP status codes.

Every error leaves the server as `{"error": {"message", "type", "code"}}`. The `type`
is the Java exception name that Iceberg's REST clients (Spark, Trino) switch on, e.g.
a 404 of type `NoSuchNamespaceException` vs `NoSuchTableException`.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import ValidationError
from pyiceberg.exceptions import (
    CommitFailedException,
    ForbiddenError,
    NamespaceAlreadyExistsError,
    NamespaceNotEmptyError,
    NoSuchNamespaceError,
    NoSuchTableError,
    TableAlreadyExistsError,
)
from pyiceberg.exceptions import ValidationError as IcebergValidationError

from tableflow_core.errors import TableflowError


class NotAuthorizedError(TableflowError):
    """Missing, malformed or expired bearer token (HTTP 401)."""


class BadRequestError(TableflowError, ValueError):
    """Malformed request (HTTP 400)."""


class RequestTooLargeError(TableflowError):
    """A request body over the server's limit (HTTP 413)."""


class UnprocessableEntityError(TableflowError, ValueError):
    """Well-formed but contradictory request, e.g. a key both updated and removed (HTTP 422)."""


class NoSuchViewError(TableflowError):
    """Views are not stored by this catalog (HTTP 404)."""


class UnsupportedOperationError(TableflowError):
    """An operation this catalog does not implement (HTTP 501)."""


class StorageUnavailableError(TableflowError):
    """The warehouse's store (an object store or the disk) failed a read or write (HTTP 503).

    Answered as a handled error, not an unexpected one: Starlette re-raises unexpected
    errors after the 500 and uvicorn then drops the connection, which a client reusing
    it sees as a reset on its next request.
    """


@dataclass(frozen=True)
class ErrorInfo:
    status: int
    type: str
    message: str

    def body(self) -> dict[str, dict[str, str | int]]:
        return {"error": {"message": self.message, "type": self.type, "code": self.status}}


# Most specific first: TableAlreadyExistsError etc. are plain Exceptions, the ValueErrors last.
_STATUS_BY_EXCEPTION: tuple[tuple[type[Exception], int, str], ...] = (
    (NotAuthorizedError, 401, "NotAuthorizedException"),
    (ForbiddenError, 403, "ForbiddenException"),
    (NoSuchNamespaceError, 404, "NoSuchNamespaceException"),
    (NoSuchTableError, 404, "NoSuchTableException"),
    (NoSuchViewError, 404, "NoSuchViewException"),
    (NamespaceAlreadyExistsError, 409, "AlreadyExistsException"),
    (TableAlreadyExistsError, 409, "AlreadyExistsException"),
    (NamespaceNotEmptyError, 409, "NamespaceNotEmptyException"),
    (CommitFailedException, 409, "CommitFailedException"),
    (RequestTooLargeError, 413, "RequestTooLargeException"),
    (UnprocessableEntityError, 422, "UnprocessableEntityException"),
    (UnsupportedOperationError, 501, "UnsupportedOperationException"),
    (StorageUnavailableError, 503, "ServiceUnavailableException"),
    (NotImplementedError, 501, "UnsupportedOperationException"),
    (ValidationError, 400, "BadRequestException"),
    # pyiceberg's models raise their own ValidationError (not a ValueError) from validators,
    # e.g. for a transform like `truncate[-1]` or a type like `decimal(99,99)`.
    (IcebergValidationError, 400, "BadRequestException"),
    (ValueError, 400, "BadRequestException"),
)


def error_info_for(exc: BaseException) -> ErrorInfo | None:
    """The HTTP error for a known exception, or None for an unexpected one (a 500)."""
    for exc_type, status, type_name in _STATUS_BY_EXCEPTION:
        if isinstance(exc, exc_type):
            return ErrorInfo(status=status, type=type_name, message=_message(exc))
    return None


def _message(exc: BaseException) -> str:
    if isinstance(exc, ValidationError):
        # Name the offending fields, not the whole input (which may be large).
        parts = [f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()[:5]]
        return "Invalid request: " + "; ".join(parts)
    return str(exc) or type(exc).__name__


def handled_exception_types() -> list[type[Exception]]:
    """The exception types answered with a 4xx/5xx error body (everything else is a 500)."""
    return [exc_type for exc_type, _, _ in _STATUS_BY_EXCEPTION]
