"""catalog/in_process.py: the exceptions a direct commit raises are those pyiceberg's REST
client raises for the HTTP route's answer to the same failure."""

from __future__ import annotations

import pytest
from pyiceberg.exceptions import (
    BadRequestError,
    CommitFailedException,
    CommitStateUnknownException,
    NoSuchTableError,
    ServiceUnavailableError,
)

from tableflow_core.catalog.errors import BadRequestError as ServerBadRequest
from tableflow_core.catalog.errors import StorageUnavailableError
from tableflow_core.catalog.in_process import client_error


@pytest.mark.parametrize(
    ("raised", "expected"),
    [
        (CommitFailedException("main moved"), CommitFailedException),
        (NoSuchTableError("gone"), NoSuchTableError),
        (ServerBadRequest("bad update"), BadRequestError),
        (StorageUnavailableError("store down"), ServiceUnavailableError),
        (RuntimeError("bug"), CommitStateUnknownException),
    ],
)
def test_client_error(raised: Exception, expected: type[Exception]) -> None:
    error = client_error(raised)
    assert type(error) is expected
    assert str(raised) in str(error)
