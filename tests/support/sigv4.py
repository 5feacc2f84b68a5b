"""AWS Signature Version 4 for a server: verify a signed request, sign a forwarded one.

Used by the dev stack's credential gateway (`tests/support/sts_gateway.py`), which checks requests
made with temporary credentials and forwards them to the store re-signed with its own
keys. Header authentication only (`Authorization: AWS4-HMAC-SHA256 ...`), the form every
SDK uses for S3 and STS calls; presigned URLs are not accepted.

Streaming uploads (`Content-Encoding: aws-chunked`) are decoded by `decode_aws_chunked`,
which checks each chunk's signature (chained from the request's seed signature) when
the payload is `STREAMING-AWS4-HMAC-SHA256-PAYLOAD[-TRAILER]`.

Reference: https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_sigv-create-signed-request.html
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import quote, unquote

from tableflow_core.errors import TableflowError

ALGORITHM = "AWS4-HMAC-SHA256"
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
UNSIGNED_PAYLOAD = "UNSIGNED-PAYLOAD"
STREAMING_SIGNED = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"
STREAMING_SIGNED_TRAILER = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER"
STREAMING_UNSIGNED_TRAILER = "STREAMING-UNSIGNED-PAYLOAD-TRAILER"

_AUTHORIZATION = re.compile(
    rf"^{ALGORITHM}\s+Credential=(?P<key>[^/\s,]+)/(?P<date>\d{{8}})/(?P<region>[^/\s,]+)/"
    r"(?P<service>[^/\s,]+)/aws4_request\s*,\s*SignedHeaders=(?P<headers>[^,\s]+)\s*,\s*"
    r"Signature=(?P<signature>[0-9a-f]{64})\s*$"
)
_SPACES = re.compile(r"\s+")


class SignatureError(TableflowError, ValueError):
    """A request whose signature or signed body does not verify (message names what)."""


@dataclass(frozen=True)
class Authorization:
    """The parts of an `Authorization: AWS4-HMAC-SHA256 ...` header."""

    access_key_id: str
    date: str  # yyyymmdd
    region: str
    service: str
    signed_headers: tuple[str, ...]
    signature: str

    @property
    def scope(self) -> str:
        return f"{self.date}/{self.region}/{self.service}/aws4_request"


@dataclass(frozen=True)
class Request:
    """What a signature covers of a request: `headers` with lower-case names, the path
    and query as sent (still percent-encoded), the payload's hash as the client gave it."""

    method: str
    raw_path: str
    raw_query: str
    headers: Mapping[str, str]
    payload_hash: str


def parse_authorization(value: str | None) -> Authorization | None:
    """The header's parts, or None when it is not a SigV4 header."""
    match = _AUTHORIZATION.match((value or "").strip())
    if match is None:
        return None
    return Authorization(
        access_key_id=match["key"],
        date=match["date"],
        region=match["region"],
        service=match["service"],
        signed_headers=tuple(match["headers"].split(";")),
        signature=match["signature"],
    )


def _encode(text: str) -> str:
    return quote(text, safe="-_.~")


def canonical_uri(raw_path: str) -> str:
    """S3's canonical URI: each character encoded once (no path normalization)."""
    return quote(unquote(raw_path or "/"), safe="/-_.~")


def canonical_query(raw_query: str) -> str:
    pairs = []
    for part in raw_query.split("&") if raw_query else []:
        name, _, value = part.partition("=")
        pairs.append((_encode(unquote(name)), _encode(unquote(value))))
    return "&".join(f"{name}={value}" for name, value in sorted(pairs))


def canonical_request(request: Request, signed_headers: tuple[str, ...]) -> str:
    """Every signed header must be present."""
    lines = []
    for name in signed_headers:
        if name not in request.headers:
            raise SignatureError(f"signed header {name!r} is missing from the request")
        lines.append(f"{name}:{_SPACES.sub(' ', request.headers[name].strip())}\n")
    return "\n".join(
        [
            request.method,
            canonical_uri(request.raw_path),
            canonical_query(request.raw_query),
            "".join(lines),
            ";".join(signed_headers),
            request.payload_hash,
        ]
    )


def signing_key(secret: str, date: str, region: str, service: str) -> bytes:
    key = f"AWS4{secret}".encode()
    for part in (date, region, service, "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    return key


def _sign(key: bytes, text: str) -> str:
    return hmac.new(key, text.encode(), hashlib.sha256).hexdigest()


def request_signature(secret: str, auth: Authorization, amz_date: str, canonical: str) -> str:
    string_to_sign = "\n".join(
        [ALGORITHM, amz_date, auth.scope, hashlib.sha256(canonical.encode()).hexdigest()]
    )
    return _sign(signing_key(secret, auth.date, auth.region, auth.service), string_to_sign)


def verify(secret: str, auth: Authorization, request: Request) -> None:
    """Raise SignatureError unless `auth.signature` is this request's signature."""
    amz_date = request.headers.get("x-amz-date", "")
    if not amz_date.startswith(auth.date):
        raise SignatureError("x-amz-date does not match the credential scope's date")
    canonical = canonical_request(request, auth.signed_headers)
    expected = request_signature(secret, auth, amz_date, canonical)
    if not hmac.compare_digest(expected, auth.signature):
        raise SignatureError("the request signature does not match")


def sign(
    access_key_id: str,
    secret: str,
    region: str,
    service: str,
    amz_date: str,
    request: Request,
    signed_headers: tuple[str, ...],
) -> str:
    """The `Authorization` header value for `request` signing `signed_headers`."""
    auth = Authorization(access_key_id, amz_date[:8], region, service, signed_headers, "")
    canonical = canonical_request(request, signed_headers)
    signature = request_signature(secret, auth, amz_date, canonical)
    return (
        f"{ALGORITHM} Credential={access_key_id}/{auth.scope}, "
        f"SignedHeaders={';'.join(signed_headers)}, Signature={signature}"
    )


def decode_aws_chunked(
    body: bytes, payload_hash: str, secret: str, auth: Authorization, amz_date: str
) -> bytes:
    """The object bytes of an `aws-chunked` body; chunk signatures checked when signed."""
    signed = payload_hash in (STREAMING_SIGNED, STREAMING_SIGNED_TRAILER)
    key = signing_key(secret, auth.date, auth.region, auth.service)
    previous = auth.signature
    data: list[bytes] = []
    position = 0
    while True:
        end = body.find(b"\r\n", position)
        if end < 0:
            raise SignatureError("aws-chunked body: a chunk header is cut short")
        header = body[position:end].decode("ascii", "replace")
        size_text, _, extension = header.partition(";")
        try:
            size = int(size_text, 16)
        except ValueError as exc:
            raise SignatureError(f"aws-chunked body: bad chunk size {size_text!r}") from exc
        chunk = body[end + 2 : end + 2 + size]
        if len(chunk) != size:
            raise SignatureError("aws-chunked body: a chunk is cut short")
        if signed:
            given = extension.partition("chunk-signature=")[2].strip()
            string_to_sign = "\n".join(
                [
                    f"{ALGORITHM}-PAYLOAD",
                    amz_date,
                    auth.scope,
                    previous,
                    EMPTY_SHA256,
                    hashlib.sha256(chunk).hexdigest(),
                ]
            )
            expected = _sign(key, string_to_sign)
            if not hmac.compare_digest(expected, given):
                raise SignatureError("aws-chunked body: a chunk signature does not match")
            previous = expected
        data.append(chunk)
        if size == 0:
            # Trailers (checksums; their own signature) follow; the chunks are verified.
            return b"".join(data)
        position = end + 2 + size + 2
