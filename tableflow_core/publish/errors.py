"""Publishing errors (messages never carry secrets: callers redact with the project's)."""

from __future__ import annotations

from tableflow_core.errors import TableflowError


class PublishError(TableflowError, RuntimeError):
    """A table could not be published to a catalog."""


class PublishConflictError(PublishError):
    """The published pointer changed between reading and writing it (retried)."""
