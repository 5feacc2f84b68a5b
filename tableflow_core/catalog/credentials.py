"""Temporary, table-scoped S3 credentials the catalog vends (STS `AssumeRole`).

With `--sts-role-arn` the catalog does not hand out the keys it holds: for each table
a client loads, it asks STS for credentials of that role, narrowed by a session policy
to the table's location (objects under `<location>/`, listings of that prefix), valid
for `--vended-credential-seconds`. Clients get the three keys Iceberg's REST spec names
(`s3.access-key-id`, `s3.secret-access-key`, `s3.session-token`), the expiry
(`s3.session-token-expires-at-ms`) and where to refresh them
(`client.refresh-credentials-endpoint`: this catalog's
`GET /v1/namespaces/{ns}/tables/{t}/credentials`).

On AWS, STS is AWS's (the role's own policy bounds what any session can do; the
session policy narrows it to one table). On the dev stack it is the gateway in front of
s3proxy (`tests/support/sts_gateway.py`), which checks what it mints. Credentials are cached per
table location and minted again once less than half their lifetime is left, so a
refresh always returns credentials valid for at least half the configured duration.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from typing import Any

from pydantic import SecretStr

from tableflow_core.catalog.errors import StorageUnavailableError
from tableflow_core.catalog.locations import has_policy_wildcard
from tableflow_core.catalog.storage import ObjectStorage
from tableflow_core.config.names import POLICY_WILDCARDS, invisible_character

# AWS refuses AssumeRole below 900 s; the dev gateway accepts less (tests of expiry).
AWS_MIN_DURATION_SECONDS = 900
OBJECT_ACTIONS = (
    "s3:GetObject",
    "s3:PutObject",
    "s3:DeleteObject",
    "s3:AbortMultipartUpload",
    "s3:ListMultipartUploadParts",
)


class CredentialVendingError(StorageUnavailableError):
    """STS refused or could not be reached (HTTP 503); the message names role and table."""


@dataclass(frozen=True)
class TemporaryCredentials:
    access_key_id: str
    secret_access_key: SecretStr
    session_token: SecretStr
    expires_at_ms: int

    def file_io_config(self) -> dict[str, str]:
        """Iceberg FileIO properties (Java S3FileIO, pyiceberg, DuckDB, Trino read these)."""
        return {
            "s3.access-key-id": self.access_key_id,
            "s3.secret-access-key": self.secret_access_key.get_secret_value(),
            "s3.session-token": self.session_token.get_secret_value(),
            "s3.session-token-expires-at-ms": str(self.expires_at_ms),
        }


def split_location(location: str) -> tuple[str, str]:
    """`s3://bucket/a/b` -> (`bucket`, `a/b`)."""
    _, _, rest = location.partition("://")
    bucket, _, key = rest.partition("/")
    return bucket, key.strip("/")


def scoping_problem(location: str) -> str | None:
    """Why a session policy cannot be scoped to exactly `location`, or None.

    IAM matches `*` and `?` as wildcards in resources and `StringLike` conditions, and
    expands `${...}`; a bucket root has no prefix to scope to; empty, `.` or `..`
    segments name other keys than the catalog compared.
    """
    bucket, key = split_location(location)
    if not bucket or not key:
        return "it is a bucket root, not a table's prefix"
    if has_policy_wildcard(location) or any(c in POLICY_WILDCARDS for c in bucket):
        return "it contains '*', '?' or '$' (IAM policy wildcards)"
    if invisible_character(location) or any(s in ("", ".", "..") for s in key.split("/")):
        return "it has empty, '.' or '..' segments or control characters"
    return None


def table_session_policy(location: str) -> str:
    """A session policy allowing reads and writes of the keys under `location/` only,
    and listings of prefixes under it (JSON). ValueError for a location it cannot scope
    exactly (`scoping_problem`)."""
    if problem := scoping_problem(location):
        raise ValueError(f"cannot scope credentials to {location!r}: {problem}")
    bucket, key = split_location(location)
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Effect": "Allow",
                    "Action": list(OBJECT_ACTIONS),
                    "Resource": [f"arn:aws:s3:::{bucket}/{key}/*"],
                },
                {
                    "Effect": "Allow",
                    "Action": ["s3:ListBucket"],
                    "Resource": [f"arn:aws:s3:::{bucket}"],
                    # `key/*`, not `key`: a listing of `wh/ns/t` also lists `wh/ns/t2/...`.
                    "Condition": {"StringLike": {"s3:prefix": [f"{key}/*"]}},
                },
                {
                    "Effect": "Allow",
                    "Action": ["s3:GetBucketLocation"],
                    "Resource": [f"arn:aws:s3:::{bucket}"],
                },
            ],
        },
        separators=(",", ":"),
    )


class StsCredentialMinter:
    """Mints (and caches) credentials of `storage.sts_role_arn` per table location."""

    def __init__(self, storage: ObjectStorage) -> None:
        if not storage.sts_role_arn:
            raise ValueError("StsCredentialMinter needs storage.sts_role_arn")
        self._storage = storage
        self._role = storage.sts_role_arn
        self._duration = storage.vended_credential_seconds
        self._cache: dict[str, TemporaryCredentials] = {}
        self._lock = threading.Lock()
        self._client: Any = None

    def _sts(self) -> Any:
        if self._client is None:
            import boto3  # only a catalog that vends temporary credentials needs it
            from botocore.config import Config

            keys = self._storage.credential_config()
            self._client = boto3.client(
                "sts",
                endpoint_url=self._storage.sts_endpoint,
                region_name=self._storage.region,
                aws_access_key_id=keys.get("s3.access-key-id"),
                aws_secret_access_key=keys.get("s3.secret-access-key"),
                aws_session_token=keys.get("s3.session-token"),
                # botocore refuses DurationSeconds < 900 itself; AWS says so with a clearer
                # message, and the dev gateway accepts shorter ones.
                config=Config(parameter_validation=False, retries={"total_max_attempts": 3}),
            )
        return self._client

    def credentials_for(self, location: str) -> TemporaryCredentials:
        key = location.rstrip("/")
        now_ms = int(time.time() * 1000)
        with self._lock:
            cached = self._cache.get(key)
            if cached is not None and cached.expires_at_ms - now_ms > self._duration * 500:
                return cached
        minted = self._assume(key)
        with self._lock:
            self._cache[key] = minted
        return minted

    def _assume(self, location: str) -> TemporaryCredentials:
        try:
            policy = table_session_policy(location)
        except ValueError as exc:
            raise CredentialVendingError(f"no credentials vended: {exc}") from None
        try:
            answer = self._sts().assume_role(
                RoleArn=self._role,
                RoleSessionName="tableflow-catalog",
                DurationSeconds=self._duration,
                Policy=policy,
            )
        except Exception as exc:  # botocore's errors share no base class with connection ones
            raise CredentialVendingError(
                f"STS AssumeRole of {self._role} for {location} failed: {exc}"
            ) from exc
        credentials = answer["Credentials"]
        return TemporaryCredentials(
            access_key_id=credentials["AccessKeyId"],
            secret_access_key=SecretStr(credentials["SecretAccessKey"]),
            session_token=SecretStr(credentials["SessionToken"]),
            expires_at_ms=int(credentials["Expiration"].timestamp() * 1000),
        )
