"""Temporary, prefix-scoped S3 credentials on the dev stack: an STS and a checking gateway.

s3proxy (the dev stack's store) has one static identity and refuses every request that
carries a session token (501 NotImplemented, measured: docs/object-storage.md), so it
cannot stand for AWS when the catalog vends temporary credentials. This gateway sits in
front of it on loopback and plays AWS's part:

- **STS `AssumeRole`** (`POST /`, `Action=AssumeRole`), signed with the store's own
  keys (the caller must hold them, as on AWS the catalog's role must be allowed to
  assume the reader role): it mints an access key id (`ASIA...`), a secret, a session
  token and an expiry (`DurationSeconds`), scoped by the call's session `Policy`.
- **S3 requests made with minted credentials**: the gateway refuses an unknown key
  (InvalidAccessKeyId), a wrong or missing session token (InvalidToken), an expired one
  (ExpiredToken), a bad signature or chunk signature (SignatureDoesNotMatch) and any
  object or listing outside the session policy (AccessDenied); an accepted request is
  forwarded to the store re-signed with the store's keys (`aws-chunked` bodies decoded).
- **S3 requests made with the store's own keys** go through unchanged (the catalog's
  own writes, clients given static keys); s3proxy checks those itself.

Minted credentials live in this process's memory: a restart forgets them and clients
fetch new ones from the catalog (the refresh endpoint, or the next table load).
The session policy is evaluated for what tableflow's catalog writes (Allow statements;
`s3:GetObject`/`PutObject`/`DeleteObject`/`AbortMultipartUpload` on object ARNs with
`*` wildcards, `s3:ListBucket` with an `s3:prefix` `StringLike` condition); it is not a
general IAM engine.

    with StsGateway(upstream=server.endpoint, credentials=server.credentials) as gateway:
        gateway.endpoint        # S3 API and STS, one port on 127.0.0.1
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
import secrets
import threading
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit
from xml.sax.saxutils import escape

from tableflow_core.dev.s3_server import S3Credentials
from tableflow_core.errors import TableflowError
from tests.support import sigv4
from tests.support.http_relay import HOP_BY_HOP, BackgroundRelay, RelayHandler, RelayServer

# Headers the gateway rewrites when it re-signs a request for the store.
_RESIGNED = {"authorization", "x-amz-security-token", "x-amz-content-sha256", "x-amz-date"}
_RESIGNED |= {"content-length", "content-encoding", "x-amz-decoded-content-length"}
_RESIGNED |= {"x-amz-trailer", "expect"}
STS_NAMESPACE = "https://sts.amazonaws.com/doc/2011-06-15/"
MAX_DURATION_SECONDS = 12 * 3600


class GatewayRefusal(TableflowError):
    """An S3 error answer: HTTP status, S3 error code, message."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


@dataclass(frozen=True)
class Grant:
    """One Allow statement of a session policy, reduced to what the gateway checks."""

    actions: frozenset[str]
    resources: tuple[re.Pattern[str], ...]  # bucket or bucket/key patterns
    list_prefixes: tuple[re.Pattern[str], ...] | None  # s3:prefix StringLike, if any

    def allows(self, action: str, resource: str, list_prefix: str | None = None) -> bool:
        if not any(_action_matches(pattern, action) for pattern in self.actions):
            return False
        if not any(p.fullmatch(resource) for p in self.resources):
            return False
        if action == "s3:ListBucket" and self.list_prefixes is not None:
            return any(p.fullmatch(list_prefix or "") for p in self.list_prefixes)
        return True


def _action_matches(pattern: str, action: str) -> bool:
    return _wildcard(pattern.lower()).fullmatch(action.lower()) is not None


def _wildcard(pattern: str) -> re.Pattern[str]:
    return re.compile(".*".join(".".join(map(re.escape, p.split("?"))) for p in pattern.split("*")))


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def parse_session_policy(document: str | None) -> tuple[Grant, ...] | None:
    """The Allow grants of a policy JSON; None (no policy) means no restriction."""
    if not document:
        return None
    policy = json.loads(document)
    grants = []
    for statement in _as_list(policy.get("Statement", [])):
        if statement.get("Effect") != "Allow":
            raise GatewayRefusal(400, "MalformedPolicyDocument", "only Allow statements")
        resources = []
        for arn in _as_list(statement.get("Resource", [])):
            if not arn.startswith("arn:aws:s3:::"):
                raise GatewayRefusal(400, "MalformedPolicyDocument", f"not an S3 ARN: {arn}")
            resources.append(_wildcard(arn.removeprefix("arn:aws:s3:::")))
        condition = statement.get("Condition", {}).get("StringLike", {}).get("s3:prefix")
        grants.append(
            Grant(
                frozenset(_as_list(statement.get("Action", []))),
                tuple(resources),
                tuple(_wildcard(p) for p in _as_list(condition)) if condition else None,
            )
        )
    return tuple(grants)


@dataclass(frozen=True)
class Minted:
    access_key_id: str
    secret_access_key: str
    session_token: str
    expires_at: float  # epoch seconds
    grants: tuple[Grant, ...] | None


@dataclass
class _State:
    upstream_host: str
    upstream_port: int
    credentials: S3Credentials
    region: str
    minted: dict[str, Minted] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    refusals: list[tuple[str, str]] = field(default_factory=list)  # (code, path), for tests
    accepted_minted: int = 0  # requests made with minted credentials and forwarded

    def mint(self, duration: int, policy: str | None) -> Minted:
        grants = parse_session_policy(policy)
        minted = Minted(
            access_key_id="ASIA" + secrets.token_hex(8).upper(),
            secret_access_key=secrets.token_urlsafe(30),
            session_token=secrets.token_urlsafe(48),
            # Whole seconds: the expiry enforced is exactly the one STS answers (ISO, no
            # fractions), which clients turn into s3.session-token-expires-at-ms.
            expires_at=float(int(time.time() + duration)),
            grants=grants,
        )
        with self.lock:
            now = time.time()
            for key in [k for k, m in self.minted.items() if m.expires_at < now - 3600]:
                del self.minted[key]
            self.minted[minted.access_key_id] = minted
        return minted


# Query parameters of a bucket listing (ListObjects v1 and v2); any other parameter on a
# bucket-level request names a sub-resource (`?acl`, `?policy`, `?versions`, ...).
LISTING_PARAMETERS = frozenset(
    {"list-type", "prefix", "delimiter", "max-keys", "marker", "continuation-token",
     "start-after", "encoding-type", "fetch-owner", "x-id"}
)  # fmt: skip
# Object sub-resources that are not the object's bytes (ACLs, tags, locks, restore).
OBJECT_SUBRESOURCES = frozenset(
    {"acl", "tagging", "retention", "legal-hold", "restore", "select", "torrent"}
)


def s3_action(method: str, key: str, query: dict[str, list[str]]) -> str:
    """The IAM action of an S3 request (the ones tableflow's engines make); anything else
    (bucket-level sub-resources, object ACLs and tags) is refused, never passed as a
    listing or a write."""
    if not key:
        if method == "POST" and set(query) == {"delete"}:
            return "s3:DeleteObject"  # DeleteObjects: checked per key
        if method in ("GET", "HEAD") and set(query) == {"location"}:
            return "s3:GetBucketLocation"
        if method in ("GET", "HEAD") and set(query) <= LISTING_PARAMETERS:
            return "s3:ListBucket"
        raise GatewayRefusal(
            403,
            "AccessDenied",
            f"bucket-level {method} {'&'.join(sorted(query)) or '(no sub-resource)'}: "
            "not allowed with temporary credentials",
        )
    if OBJECT_SUBRESOURCES & set(query):
        raise GatewayRefusal(
            403, "AccessDenied", f"object sub-resource {sorted(OBJECT_SUBRESOURCES & set(query))}"
        )
    if method in ("GET", "HEAD"):
        return "s3:ListMultipartUploadParts" if "uploadId" in query else "s3:GetObject"
    if method == "DELETE":
        return "s3:AbortMultipartUpload" if "uploadId" in query else "s3:DeleteObject"
    return "s3:PutObject"  # PUT, POST (multipart create, complete)


def normalized_key(key: str, what: str = "key") -> str:
    """`key` if no segment of it is `.` or `..`; refused otherwise.

    A store (or a proxy, or a filesystem backend) may resolve `a/../b` to `b`: scoping
    such a key by its text would let a table's credentials reach another table. Keys
    with those segments are not resolved here but refused, so no reading of them can
    differ from the store's."""
    if any(segment in (".", "..") for segment in key.split("/")):
        raise GatewayRefusal(403, "AccessDenied", f"{what} {key!r} has a '.' or '..' segment")
    return key


def copy_source(headers: dict[str, str]) -> tuple[str, str] | None:
    """(bucket, key) of `x-amz-copy-source` (`bucket/key` or `/bucket/key`, URL-encoded,
    optionally `?versionId=`), or None for a request that copies nothing."""
    source = headers.get("x-amz-copy-source")
    if source is None:
        return None
    bucket, _, key = unquote(source.partition("?")[0]).lstrip("/").partition("/")
    return bucket, key


def _authorize(
    minted: Minted,
    method: str,
    path: str,
    query: str,
    body: bytes,
    headers: dict[str, str] | None = None,
) -> None:
    if minted.grants is None:
        return
    bucket, _, key = unquote(path).lstrip("/").partition("/")
    parsed = parse_qs(query, keep_blank_values=True)
    action = s3_action(method, key, parsed)
    targets: list[tuple[str, str, str | None]]  # (action, resource, listing prefix)
    if action == "s3:DeleteObject" and not key:
        keys = [e.text or "" for e in ET.fromstring(body).iter() if e.tag.endswith("Key")]
        targets = [(action, f"{bucket}/{normalized_key(k)}", None) for k in keys]
    elif key:
        targets = [(action, f"{bucket}/{normalized_key(key)}", None)]
    else:
        targets = [(action, bucket, normalized_key(parsed.get("prefix", [""])[0], "prefix"))]
    source = copy_source(headers or {})
    if source is not None:  # CopyObject, UploadPartCopy: the source is read
        targets.append(("s3:GetObject", f"{source[0]}/{normalized_key(source[1])}", None))
    for needed, resource, listed in targets:
        if not any(g.allows(needed, resource, listed) for g in minted.grants):
            where = resource if listed is None else f"{resource} prefix {listed!r}"
            raise GatewayRefusal(403, "AccessDenied", f"{needed} on {where}: not in the policy")


class _Handler(RelayHandler):
    server: RelayServer[_State]

    def _handle(self) -> None:
        state = self.server.state
        split = urlsplit(self.path)
        body = self.read_body()
        headers = {name.lower(): value for name, value in self.headers.items()}
        try:
            auth = sigv4.parse_authorization(headers.get("authorization"))
            if auth is None:
                raise GatewayRefusal(403, "AccessDenied", "an AWS SigV4 signature is required")
            if auth.service == "sts":
                self._assume_role(auth, split.path, split.query, headers, body)
                return
            if auth.access_key_id == state.credentials.access_key_id:
                self._forward(self.path, list(self.headers.items()), body)  # the store checks
                return
            forwarded = self._check_minted(auth, split.path, split.query, headers, body)
        except GatewayRefusal as refusal:
            with state.lock:
                state.refusals.append((refusal.code, split.path))
            self._error(refusal)
            return
        except sigv4.SignatureError as exc:
            with state.lock:
                state.refusals.append(("SignatureDoesNotMatch", split.path))
            self._error(GatewayRefusal(403, "SignatureDoesNotMatch", str(exc)))
            return
        self._forward(self.path, *forwarded)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle

    def _check_minted(
        self, auth: sigv4.Authorization, path: str, query: str, headers: dict[str, str], body: bytes
    ) -> tuple[list[tuple[str, str]], bytes]:
        state = self.server.state
        with state.lock:
            minted = state.minted.get(auth.access_key_id)
        if minted is None:
            raise GatewayRefusal(403, "InvalidAccessKeyId", "unknown access key id")
        token = headers.get("x-amz-security-token")
        if token is None or not secrets.compare_digest(token, minted.session_token):
            raise GatewayRefusal(400, "InvalidToken", "the session token is missing or wrong")
        if time.time() >= minted.expires_at:
            raise GatewayRefusal(400, "ExpiredToken", "the session token has expired")
        payload_hash = headers.get("x-amz-content-sha256") or hashlib.sha256(body).hexdigest()
        request = sigv4.Request(self.command, path, query, headers, payload_hash)
        sigv4.verify(minted.secret_access_key, auth, request)
        if payload_hash.startswith("STREAMING-"):
            amz_date = headers.get("x-amz-date", "")
            body = sigv4.decode_aws_chunked(
                body, payload_hash, minted.secret_access_key, auth, amz_date
            )
        elif payload_hash not in (sigv4.UNSIGNED_PAYLOAD, hashlib.sha256(body).hexdigest()):
            raise sigv4.SignatureError("the body does not match x-amz-content-sha256")
        _authorize(minted, self.command, path, query, body, headers)
        with state.lock:
            state.accepted_minted += 1
        return self._resigned(auth, path, query, headers, body), body

    def _resigned(
        self, auth: sigv4.Authorization, path: str, query: str, headers: dict[str, str], body: bytes
    ) -> list[tuple[str, str]]:
        """The request's headers for the store: its keys, the decoded body's hash."""
        state = self.server.state
        kept = {n: v for n, v in headers.items() if n not in _RESIGNED and n not in HOP_BY_HOP}
        encoding = [
            e.strip()
            for e in headers.get("content-encoding", "").split(",")
            if e.strip() and e.strip() != "aws-chunked"
        ]
        if encoding:
            kept["content-encoding"] = ",".join(encoding)
        kept["x-amz-date"] = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
        kept["x-amz-content-sha256"] = hashlib.sha256(body).hexdigest()
        signed = tuple(
            sorted(n for n in kept if n == "host" or n.startswith(("x-amz-", "content-")))
        )
        kept["authorization"] = sigv4.sign(
            state.credentials.access_key_id,
            state.credentials.secret_access_key.get_secret_value(),
            auth.region,
            "s3",
            kept["x-amz-date"],
            sigv4.Request(self.command, path, query, kept, kept["x-amz-content-sha256"]),
            signed,
        )
        return list(kept.items())

    def _assume_role(
        self, auth: sigv4.Authorization, path: str, query: str, headers: dict[str, str], body: bytes
    ) -> None:
        state = self.server.state
        if auth.access_key_id != state.credentials.access_key_id:
            raise GatewayRefusal(403, "AccessDenied", "only the store's own identity may assume")
        payload_hash = headers.get("x-amz-content-sha256") or hashlib.sha256(body).hexdigest()
        secret = state.credentials.secret_access_key.get_secret_value()
        sigv4.verify(secret, auth, sigv4.Request(self.command, path, query, headers, payload_hash))
        form = {k: v[0] for k, v in parse_qs(body.decode(), keep_blank_values=True).items()}
        form.update({k: v[0] for k, v in parse_qs(query).items()})
        if form.get("Action") != "AssumeRole":
            raise GatewayRefusal(400, "InvalidAction", f"unsupported action {form.get('Action')}")
        duration = int(form.get("DurationSeconds") or 3600)
        if not 1 <= duration <= MAX_DURATION_SECONDS:
            raise GatewayRefusal(400, "ValidationError", f"DurationSeconds {duration}")
        minted = state.mint(duration, form.get("Policy"))
        expiration = dt.datetime.fromtimestamp(minted.expires_at, dt.UTC)
        session = escape(form.get("RoleSessionName", "session"))
        role = escape(form.get("RoleArn", ""))
        document = (
            f'<AssumeRoleResponse xmlns="{STS_NAMESPACE}"><AssumeRoleResult><Credentials>'
            f"<AccessKeyId>{minted.access_key_id}</AccessKeyId>"
            f"<SecretAccessKey>{minted.secret_access_key}</SecretAccessKey>"
            f"<SessionToken>{minted.session_token}</SessionToken>"
            f"<Expiration>{expiration.strftime('%Y-%m-%dT%H:%M:%SZ')}</Expiration>"
            f"</Credentials><AssumedRoleUser><AssumedRoleId>{minted.access_key_id}:{session}"
            f"</AssumedRoleId><Arn>{role}/{session}</Arn></AssumedRoleUser></AssumeRoleResult>"
            f"<ResponseMetadata><RequestId>{secrets.token_hex(8)}</RequestId>"
            "</ResponseMetadata></AssumeRoleResponse>"
        ).encode()
        self.respond(200, [("Content-Type", "text/xml")], document)

    def _forward(self, target: str, headers: list[tuple[str, str]], body: bytes) -> None:
        state = self.server.state
        try:
            answer = self.relay(state.upstream_host, state.upstream_port, target, headers, body)
        except OSError:
            self._error(GatewayRefusal(502, "BadGateway", "the store did not answer"))
            return
        self.respond(*answer)

    def _error(self, refusal: GatewayRefusal) -> None:
        body = (
            '<?xml version="1.0" encoding="UTF-8"?>'
            f"<Error><Code>{refusal.code}</Code><Message>{escape(refusal.message)}</Message>"
            "</Error>"
        ).encode()
        self.respond(refusal.status, [("Content-Type", "application/xml")], body)


class StsGateway(BackgroundRelay[_State]):
    """The gateway in this process, on `host` and a free port (threads; `close()` stops)."""

    def __init__(
        self,
        upstream: str,
        credentials: S3Credentials,
        region: str = "us-east-1",
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        target = urlsplit(upstream)
        state = _State(target.hostname or "127.0.0.1", target.port or 80, credentials, region)
        super().__init__(_Handler, state, host, port, "sts-gateway")

    @property
    def refusals(self) -> list[tuple[str, str]]:
        """(S3 error code, path) of every refused request, oldest first."""
        with self._state.lock:
            return list(self._state.refusals)

    @property
    def accepted_minted(self) -> int:
        """How many requests made with minted credentials were checked and forwarded."""
        with self._state.lock:
            return self._state.accepted_minted

    def minted_secrets(self) -> list[str]:
        """Every secret and session token minted so far (tests search outputs for them)."""
        with self._state.lock:
            return [
                value
                for minted in self._state.minted.values()
                for value in (minted.secret_access_key, minted.session_token)
            ]

    def minted_count(self) -> int:
        with self._state.lock:
            return len(self._state.minted)
