"""Errors of the Delta log writer."""

from __future__ import annotations

from tableflow_core.errors import TableflowError


class DeltaSyncError(TableflowError, RuntimeError):
    """The Iceberg table cannot be mirrored as Delta (the message says why and what to do).

    Nothing is written when this is raised: the Delta log stays at its last good version.
    """
