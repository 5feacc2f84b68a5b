"""Temporary, table-scoped vended credentials without a process: SigV4 checked against
botocore's signer, the session policy the catalog writes as the gateway evaluates it, and
what a loadTable answer carries (keys, expiry, refresh endpoint, prefix)."""

from __future__ import annotations

import hashlib
import hmac
import json

import pytest
from botocore.auth import S3SigV4Auth, SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from pydantic import SecretStr

from tableflow_core.catalog.app import TableAccess, VendedTable
from tableflow_core.catalog.credentials import TemporaryCredentials, table_session_policy
from tableflow_core.catalog.settings import CatalogServerSettings
from tableflow_core.catalog.storage import ObjectStorage
from tests.support import sigv4
from tests.support.sts_gateway import GatewayRefusal, Minted, _authorize, parse_session_policy

KEY, SECRET = "ASIAEXAMPLE", "s3cr3t/with+chars"
ENDPOINT = "http://127.0.0.1:9000"


def botocore_signed(
    method: str, path_and_query: str, body: bytes = b"", s3: bool = True
) -> AWSRequest:
    request = AWSRequest(method=method, url=ENDPOINT + path_and_query, data=body)
    request.headers["x-amz-security-token"] = "tok"
    if s3:
        S3SigV4Auth(Credentials(KEY, SECRET, "tok"), "s3", "us-east-1").add_auth(request)
    else:
        SigV4Auth(Credentials(KEY, SECRET, "tok"), "sts", "us-east-1").add_auth(request)
    return request


def verify_request(request: AWSRequest, secret: str = SECRET) -> None:
    path, _, query = request.url.removeprefix(ENDPOINT).partition("?")
    headers = {k.lower(): v for k, v in request.headers.items()}
    headers["host"] = "127.0.0.1:9000"
    body = request.body or b""
    payload = headers.get("x-amz-content-sha256") or hashlib.sha256(body).hexdigest()
    auth = sigv4.parse_authorization(headers["authorization"])
    assert auth is not None and auth.access_key_id == KEY
    sigv4.verify(secret, auth, sigv4.Request(request.method, path, query, headers, payload))


@pytest.mark.parametrize(
    ("method", "target", "body"),
    [
        ("GET", "/warehouse/wh/ns/t/metadata/00001-a.metadata.json", b""),
        ("GET", "/warehouse?list-type=2&prefix=wh%2Fns%2Ft%2F&max-keys=1000", b""),
        ("PUT", "/warehouse/wh/ns/t/data/id_bucket%3D1/f%20x.parquet", b"PAR1 data"),
        ("POST", "/warehouse?delete", b"<Delete><Object><Key>k</Key></Object></Delete>"),
        ("HEAD", "/warehouse/wh/ns/t/data/a.parquet", b""),
    ],
)
def test_botocore_signatures_verify_and_tampering_does_not(
    method: str, target: str, body: bytes
) -> None:
    request = botocore_signed(method, target, body)
    verify_request(request)
    with pytest.raises(sigv4.SignatureError):
        verify_request(request, secret="another secret")
    tampered = botocore_signed(method, target, body)
    tampered.url = tampered.url.replace("/warehouse", "/other", 1)
    with pytest.raises(sigv4.SignatureError):
        verify_request(tampered)


def test_sts_form_requests_verify_with_the_body_hash() -> None:
    request = botocore_signed(
        "POST", "/", b"Action=AssumeRole&Version=2011-06-15&DurationSeconds=60", s3=False
    )
    request.headers["Content-Type"] = "application/x-www-form-urlencoded"
    verify_request(request)


def test_sign_agrees_with_botocore() -> None:
    request = botocore_signed("GET", "/warehouse/a%20b/c?versionId=3&acl")
    headers = {k.lower(): v for k, v in request.headers.items()}
    headers["host"] = "127.0.0.1:9000"
    auth = sigv4.parse_authorization(headers["authorization"])
    assert auth is not None
    signed = sigv4.Request(
        "GET", "/warehouse/a%20b/c", "versionId=3&acl", headers, headers["x-amz-content-sha256"]
    )
    ours = sigv4.sign(
        KEY, SECRET, "us-east-1", "s3", headers["x-amz-date"], signed, auth.signed_headers
    )
    assert ours == headers["authorization"]


def chunked(data: list[bytes], auth: sigv4.Authorization, amz_date: str, secret: str) -> bytes:
    """An aws-chunked body signed per the AWS spec (an independent writer for the test)."""
    key = sigv4.signing_key(secret, auth.date, auth.region, auth.service)
    previous, out = auth.signature, b""
    for chunk in [*data, b""]:
        string_to_sign = "\n".join(
            ["AWS4-HMAC-SHA256-PAYLOAD", amz_date, auth.scope, previous,
             hashlib.sha256(b"").hexdigest(), hashlib.sha256(chunk).hexdigest()]
        )  # fmt: skip
        previous = hmac.new(key, string_to_sign.encode(), hashlib.sha256).hexdigest()
        out += f"{len(chunk):x};chunk-signature={previous}\r\n".encode() + chunk + b"\r\n"
    return out


def test_aws_chunked_bodies_are_decoded_and_each_chunk_checked() -> None:
    auth = sigv4.Authorization(KEY, "20261126", "us-east-1", "s3", ("host",), "ab" * 32)
    amz_date = "20261126T063000Z"
    body = chunked([b"a" * 10, b"b" * 3], auth, amz_date, SECRET)
    assert (
        sigv4.decode_aws_chunked(body, sigv4.STREAMING_SIGNED, SECRET, auth, amz_date)
        == b"a" * 10 + b"b" * 3
    )
    with pytest.raises(sigv4.SignatureError):
        sigv4.decode_aws_chunked(
            body.replace(b"bbb", b"bbc"), sigv4.STREAMING_SIGNED, SECRET, auth, amz_date
        )
    unsigned = b"a\r\n0123456789\r\n0\r\nx-amz-checksum-crc32:AAAAAA==\r\n\r\n"
    assert (
        sigv4.decode_aws_chunked(unsigned, sigv4.STREAMING_UNSIGNED_TRAILER, SECRET, auth, "")
        == b"0123456789"
    )


LOCATION = "s3://warehouse/wh/ns/orders"


def minted_for(location: str) -> Minted:
    return Minted(KEY, SECRET, "tok", 0.0, parse_session_policy(table_session_policy(location)))


@pytest.mark.parametrize(
    ("method", "path", "query", "body", "allowed"),
    [
        ("GET", "/warehouse/wh/ns/orders/metadata/v1.metadata.json", "", b"", True),
        ("PUT", "/warehouse/wh/ns/orders/data/x.parquet", "", b"", True),
        ("DELETE", "/warehouse/wh/ns/orders/data/x.parquet", "", b"", True),
        ("GET", "/warehouse", "list-type=2&prefix=wh/ns/orders/", b"", True),
        ("GET", "/warehouse", "list-type=2&prefix=wh/ns/orders", b"", False),  # lists wh/ns/orders2/ too (issue 41)
        # A sibling whose name starts like this table's, another table, the bucket root.
        ("GET", "/warehouse/wh/ns/orders_archive/data/x.parquet", "", b"", False),
        ("GET", "/warehouse/wh/ns/payments/data/x.parquet", "", b"", False),
        ("GET", "/warehouse", "list-type=2&prefix=wh/ns/", b"", False),
        ("GET", "/warehouse", "list-type=2", b"", False),
        ("PUT", "/other-bucket/wh/ns/orders/data/x.parquet", "", b"", False),
        ("POST", "/warehouse", "delete",
         b"<Delete><Object><Key>wh/ns/orders/a</Key></Object></Delete>", True),
        ("POST", "/warehouse", "delete",
         b"<Delete><Object><Key>wh/ns/orders/a</Key></Object>"
         b"<Object><Key>wh/ns/payments/b</Key></Object></Delete>", False),
    ],
)  # fmt: skip
def test_the_session_policy_confines_credentials_to_the_table(
    method: str, path: str, query: str, body: bytes, allowed: bool
) -> None:
    if allowed:
        _authorize(minted_for(LOCATION), method, path, query, body)
    else:
        with pytest.raises(GatewayRefusal) as refused:
            _authorize(minted_for(LOCATION), method, path, query, body)
        assert refused.value.code == "AccessDenied"


class FixedMinter:
    def __init__(self) -> None:
        self.locations: list[str] = []

    def credentials_for(self, location: str) -> TemporaryCredentials:
        self.locations.append(location)
        return TemporaryCredentials(
            "ASIAFIXED", SecretStr("temp-secret"), SecretStr("temp-token"), 1_900_000_000_000
        )


def settings(**storage: object) -> CatalogServerSettings:
    return CatalogServerSettings(
        warehouse="s3://warehouse/wh",
        database_url="sqlite:////tmp/unused.db",
        auth="none",
        storage=ObjectStorage(endpoint="http://127.0.0.1:9", vend_credentials=True, **storage),
    )


def test_a_load_table_answer_carries_scoped_expiring_credentials_and_the_refresh_endpoint() -> None:
    minter = FixedMinter()
    table = VendedTable(LOCATION, "v1/namespaces/ns/tables/orders/credentials", minter)  # type: ignore[arg-type]
    access = TableAccess.for_request(
        settings(sts_role_arn="arn:aws:iam::1:role/r"), "vended-credentials", table
    )
    assert minter.locations == [LOCATION]
    assert access.config["s3.session-token"] == "temp-token"
    assert access.config["s3.session-token-expires-at-ms"] == "1900000000000"
    assert access.config["client.refresh-credentials-endpoint"] == table.refresh_endpoint
    assert access.config["s3.endpoint"] == "http://127.0.0.1:9"
    (entry,) = access.storage_credentials
    assert entry["prefix"] == LOCATION + "/"
    assert entry["config"] == {
        "s3.access-key-id": "ASIAFIXED",
        "s3.secret-access-key": "temp-secret",
        "s3.session-token": "temp-token",
        "s3.session-token-expires-at-ms": "1900000000000",
    }
    # Not asked for: nothing minted, no keys.
    quiet = TableAccess.for_request(settings(sts_role_arn="arn:aws:iam::1:role/r"), None, table)
    assert "s3.session-token" not in quiet.config and quiet.storage_credentials == []
    assert minter.locations == [LOCATION]


def test_the_session_policy_is_the_aws_form() -> None:
    policy = json.loads(table_session_policy(LOCATION))
    objects, listing, location = policy["Statement"]
    assert objects["Resource"] == ["arn:aws:s3:::warehouse/wh/ns/orders/*"]
    assert "s3:PutObject" in objects["Action"] and "s3:GetObject" in objects["Action"]
    assert listing["Condition"] == {"StringLike": {"s3:prefix": ["wh/ns/orders/*"]}}
    assert location["Action"] == ["s3:GetBucketLocation"]
