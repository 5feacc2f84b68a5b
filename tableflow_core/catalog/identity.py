"""A catalog server's identity key, kept in its catalog database.

A server without a client secret (`auth: none`, as `tableflow dev up` runs the project's
catalog) has nothing a client could check it by: anything listening on the port could
answer. Every server therefore keeps a random key in its database (drawn once, on the
first start) and proves it holds it, the way a server with a secret proves that
(`catalog/verification.py`). A client that can read the same database (the project's
own `plan` or `apply`: the database is the project's) verifies the server; a process
squatting the port cannot, as it cannot read the database.
"""

from __future__ import annotations

import contextlib
import secrets
from pathlib import Path

from sqlalchemy import Column, Engine, MetaData, String, Table, create_engine, insert, select
from sqlalchemy.exc import IntegrityError, SQLAlchemyError

_metadata = MetaData()
_IDENTITY = Table(
    "tableflow_server_identity",
    _metadata,
    Column("name", String(64), primary_key=True),
    Column("key", String(128), nullable=False),
)
_NAME = "catalog-server"


def ensure_server_key(engine: Engine) -> str:
    """The database's server key, drawn and stored on first use."""
    _metadata.create_all(engine, tables=[_IDENTITY])
    if (key := _stored_key(engine)) is not None:
        return key
    with contextlib.suppress(IntegrityError), engine.begin() as connection:  # or another drew it
        connection.execute(insert(_IDENTITY).values(name=_NAME, key=secrets.token_hex(32)))
    key = _stored_key(engine)
    assert key is not None
    return key


def _stored_key(engine: Engine) -> str | None:
    with engine.connect() as connection:
        value = connection.execute(
            select(_IDENTITY.c.key).where(_IDENTITY.c.name == _NAME)
        ).scalar_one_or_none()
    return str(value) if value else None


def read_server_key(database_url: str) -> str | None:
    """The server key stored in the database at `database_url`, None when there is none
    (no server started on it yet) or the database cannot be read."""
    if database_url.startswith("sqlite:///") and not _sqlite_file_exists(database_url):
        return None  # do not create an empty database file
    engine = create_engine(database_url)
    try:
        return _stored_key(engine)
    except SQLAlchemyError:
        return None
    finally:
        engine.dispose()


def _sqlite_file_exists(database_url: str) -> bool:
    path = database_url.removeprefix("sqlite:///")
    return path == ":memory:" or Path(path).is_file()
