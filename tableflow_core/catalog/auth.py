"""OAuth2 client-credentials tokens for the catalog.

Tokens are signed, not stored:
`tfc2.<subject>.<audience>.<granted-at>.<expiry>.<signature>`, the signature an
HMAC-SHA256 keyed from the client secret. A restarted server with the same secret still
accepts the tokens it issued earlier (a long-lived Spark session survives a catalog
restart); rotating the secret revokes every token.

- **Audience**: the catalog a token is for (`CatalogServerSettings.token_audience`, from
  its warehouse and name). Another server with the same secret refuses it.
- **Bounded renewal**: a token exchange (Iceberg's Java client refreshes this way before
  a token expires) renews a live token without the secret, but only up to
  `max_lifetime_seconds` after the client-credentials grant it descends from
  (`granted-at`); no token outlives that. Past it, the client authenticates again with
  its credentials (Java's client does so by itself: a token exchange with HTTP Basic
  credentials, which starts a new grant).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import time
from dataclasses import dataclass
from urllib.parse import parse_qs

from pydantic import SecretStr

from tableflow_core.catalog.errors import NotAuthorizedError
from tableflow_core.errors import TableflowError

TOKEN_PREFIX = "tfc2"
_TOKEN_PARTS = 6
ACCESS_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:access_token"
CLIENT_CREDENTIALS_GRANT = "client_credentials"
TOKEN_EXCHANGE_GRANT = "urn:ietf:params:oauth:grant-type:token-exchange"
# The unauthenticated endpoint where a server proves it holds the client secret.
PROOF_PATH = "/tableflow/v1/proof"
SERVER_KIND = "tableflow-catalog"


class OAuthError(TableflowError):
    """An RFC 6749 token endpoint error (`{"error": code, "error_description": ...}`)."""

    def __init__(self, code: str, description: str, status: int = 400) -> None:
        super().__init__(description)
        self.code = code
        self.description = description
        self.status = status

    def body(self) -> dict[str, str]:
        return {"error": self.code, "error_description": self.description}


@dataclass(frozen=True)
class IssuedToken:
    access_token: str
    expires_in: int

    def response_body(self) -> dict[str, str | int]:
        return {
            "access_token": self.access_token,
            "token_type": "bearer",
            "expires_in": self.expires_in,
            "issued_token_type": ACCESS_TOKEN_TYPE,
        }


def server_proof(client_secret: str, challenge: str, address: str) -> str:
    """What a catalog server holding `client_secret` answers to `challenge` on `address`
    (`ip:port` of the connection's server side): the client checks it before it sends
    its credentials (`catalog/verification.py`). Binding the address stops a server that
    is not ours from relaying the challenge to ours and replaying the answer."""
    key = hmac.new(client_secret.encode(), b"tableflow-catalog-proof-v1", hashlib.sha256)
    message = f"{challenge}\x00{address}".encode()
    return hmac.new(key.digest(), message, hashlib.sha256).hexdigest()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class TokenAuthority:
    """Checks client credentials, issues and verifies bearer tokens for one catalog."""

    def __init__(
        self,
        client_id: str,
        client_secret: SecretStr,
        ttl_seconds: int,
        *,
        audience: str,
        max_lifetime_seconds: int,
    ) -> None:
        self._client_id = client_id
        self._client_secret = client_secret
        self._ttl_seconds = ttl_seconds
        self._audience = audience
        self._max_lifetime_seconds = max_lifetime_seconds
        self._key = hmac.new(
            client_secret.get_secret_value().encode(), b"tableflow-catalog-token-v2", hashlib.sha256
        ).digest()

    def proof(self, challenge: str, address: str) -> str:
        return server_proof(self._client_secret.get_secret_value(), challenge, address)

    def credentials_match(self, client_id: str, client_secret: str) -> bool:
        id_ok = hmac.compare_digest(client_id.encode(), self._client_id.encode())
        secret_ok = hmac.compare_digest(
            client_secret.encode(), self._client_secret.get_secret_value().encode()
        )
        return id_ok and secret_ok

    def issue(
        self, subject: str, now: float | None = None, granted_at: int | None = None
    ) -> IssuedToken:
        """A token for `subject`; `granted_at` is the grant it renews (None: a new grant)."""
        current = int(now if now is not None else time.time())
        granted = current if granted_at is None else granted_at
        expiry = min(current + self._ttl_seconds, granted + self._max_lifetime_seconds)
        payload = ".".join(
            (TOKEN_PREFIX, _b64(subject.encode()), self._audience, str(granted), str(expiry))
        )
        return IssuedToken(
            access_token=f"{payload}.{self._sign(payload)}", expires_in=max(expiry - current, 0)
        )

    def verify(self, token: str, now: float | None = None) -> str:
        """The token's subject; raises NotAuthorizedError if forged, malformed or expired."""
        return self._verified(token, now).subject

    def _verified(self, token: str, now: float | None) -> _TokenClaims:
        """The claims of a genuine, unexpired token of this catalog."""
        claims = self._genuine(token)
        if claims.expiry <= (now if now is not None else time.time()):
            raise NotAuthorizedError("Bearer token expired")
        return claims

    def _genuine(self, token: str) -> _TokenClaims:
        """The claims of a token this catalog signed, expired or not."""
        if not token.isascii():  # hmac.compare_digest raises TypeError on non-ASCII str
            raise NotAuthorizedError("Malformed bearer token")
        parts = token.split(".")
        if len(parts) != _TOKEN_PARTS or parts[0] != TOKEN_PREFIX:
            raise NotAuthorizedError("Malformed bearer token")
        payload = ".".join(parts[:-1])
        if not hmac.compare_digest(parts[-1], self._sign(payload)):
            raise NotAuthorizedError("Invalid bearer token")
        try:
            subject = _unb64(parts[1]).decode()
            granted_at, expiry = int(parts[3]), int(parts[4])
        except (ValueError, binascii.Error) as exc:
            raise NotAuthorizedError("Malformed bearer token") from exc
        if not hmac.compare_digest(parts[2], self._audience):
            raise NotAuthorizedError("Bearer token was issued for another catalog")
        return _TokenClaims(subject, granted_at, expiry)

    def _sign(self, payload: str) -> str:
        return _b64(hmac.new(self._key, payload.encode(), hashlib.sha256).digest())

    def token_response(
        self, form_body: bytes, authorization: str | None, now: float | None = None
    ) -> IssuedToken:
        """Answer a form-encoded request to the token endpoint.

        Supports `client_credentials` (id/secret in the form or as HTTP Basic) and the
        token exchange Iceberg's Java client uses to refresh a token before it expires:
        with valid HTTP Basic credentials it is a new grant; without, it renews a live
        token of this catalog within its grant's maximum lifetime.
        """
        form = {k: v[0] for k, v in parse_qs(form_body.decode("utf-8", "replace")).items()}
        grant_type = form.get("grant_type", "")
        if grant_type == CLIENT_CREDENTIALS_GRANT:
            return self.issue(self._authenticated(form, authorization), now)
        if grant_type == TOKEN_EXCHANGE_GRANT:
            if authorization and authorization[:6].lower() == "basic ":
                return self.issue(self._authenticated({}, authorization), now)
            subject_token = form.get("subject_token") or bearer_token(authorization) or ""
            try:
                claims = self._genuine(subject_token)
                current = now if now is not None else time.time()
                if current >= claims.granted_at + self._max_lifetime_seconds:
                    raise NotAuthorizedError(
                        "The token's grant reached its maximum lifetime: authenticate "
                        "again with the client credentials"
                    )
                self._verified(subject_token, now)
            except NotAuthorizedError as exc:
                raise OAuthError("invalid_grant", str(exc), status=401) from exc
            return self.issue(claims.subject, now, granted_at=claims.granted_at)
        raise OAuthError("unsupported_grant_type", f"Unsupported grant_type {grant_type!r}")

    def _authenticated(self, form: dict[str, str], authorization: str | None) -> str:
        client_id, client_secret = _client_credentials(form, authorization)
        if not self.credentials_match(client_id, client_secret):
            raise OAuthError("invalid_client", "Invalid client credentials", status=401)
        return client_id


@dataclass(frozen=True)
class _TokenClaims:
    subject: str
    granted_at: int
    expiry: int


def _client_credentials(form: dict[str, str], authorization: str | None) -> tuple[str, str]:
    if "client_id" in form and "client_secret" in form:
        return form["client_id"], form["client_secret"]
    if authorization and authorization.lower().startswith("basic "):
        try:
            decoded = base64.b64decode(authorization[6:].strip(), validate=True).decode()
        except (ValueError, binascii.Error) as exc:
            raise OAuthError("invalid_request", "Malformed Basic authorization header") from exc
        client_id, _, client_secret = decoded.partition(":")
        return client_id, client_secret
    raise OAuthError("invalid_request", "client_id and client_secret are required")


def bearer_token(authorization: str | None) -> str | None:
    """The token of an `Authorization: Bearer <token>` header, else None."""
    if authorization and authorization[:7].lower() == "bearer ":
        return authorization[7:].strip()
    return None
