"""Checking that the server on an embedded catalog's port is the project's, before any
credential is sent to it.

`plan`/`apply` use a catalog server already listening on the configured port (the one
of `tableflow catalog serve`); anything could listen there. The client sends a random
challenge to the server's unauthenticated proof endpoint; a tableflow catalog holding
the project's client secret answers an HMAC of the challenge and of the address the
connection reached (`catalog.auth.server_proof`). The client computes the same from its
own secret and the peer address it connected to. The secret itself never travels: a
server that is not ours learns a random challenge, nothing else; and since the answer
is bound to the address, it cannot relay the challenge to our server elsewhere and
replay the answer.
"""

from __future__ import annotations

import hmac
import http.client
import json
import secrets
import socket
from urllib.parse import urlencode

from tableflow_core.catalog.auth import PROOF_PATH, SERVER_KIND, server_proof


def verification_problem(
    host: str, port: int, client_secret: str, timeout: float = 10.0
) -> str | None:
    """None when the server on host:port proves it holds `client_secret`; else why not."""
    challenge = secrets.token_hex(32)
    answer = _ask(host, port, challenge, timeout)
    if isinstance(answer, str):
        return answer
    body, address = answer
    if body.get("auth") == "none":
        return (
            "it runs without authentication (the catalog of `tableflow dev up` does); "
            "to use it, set `catalog.auth.mode: none` in the target"
        )
    if not _proves(body.get("proof"), server_proof(client_secret, challenge, address)):
        return "it is a tableflow catalog with another client secret"
    return None


def identity_problem(host: str, port: int, server_key: str, timeout: float = 10.0) -> str | None:
    """None when the server on host:port proves it holds `server_key`, the key kept in
    the project's catalog database (`catalog/identity.py`); else why not. For clients
    without a client secret (`auth: none`)."""
    challenge = secrets.token_hex(32)
    answer = _ask(host, port, challenge, timeout)
    if isinstance(answer, str):
        return answer
    body, address = answer
    if not _proves(body.get("identity"), server_proof(server_key, challenge, address)):
        return "it is a tableflow catalog serving another catalog database"
    return None


def _ask(
    host: str, port: int, challenge: str, timeout: float
) -> tuple[dict[str, object], str] | str:
    """The server's answer to `challenge` and the address it was reached at, or a problem."""
    connection = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        connection.connect()
        assert connection.sock is not None
        address = _address(connection.sock)
        connection.request("GET", f"{PROOF_PATH}?{urlencode({'challenge': challenge})}")
        response = connection.getresponse()
        raw = response.read(64 * 1024)
        status = response.status
    except (OSError, http.client.HTTPException) as exc:
        return f"it does not answer HTTP ({type(exc).__name__})"
    finally:
        connection.close()
    try:
        body = json.loads(raw) if status == 200 else None
    except ValueError:
        body = None
    if not isinstance(body, dict) or body.get("server") != SERVER_KIND:
        return "it is not a tableflow catalog server"
    return body, address


def _proves(proof: object, expected: str) -> bool:
    return isinstance(proof, str) and hmac.compare_digest(proof.encode(), expected.encode())


def _address(sock: socket.socket) -> str:
    peer = sock.getpeername()
    return f"{peer[0]}:{peer[1]}"
