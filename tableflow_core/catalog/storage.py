"""Object storage (S3 and S3-compatible stores) for the embedded catalog's warehouse.

One description of the store serves three audiences:

- the server itself: pyiceberg FileIO properties, keys included, to write metadata files;
- every client, without secrets: `GET /v1/config` `defaults` and each `loadTable`
  `config` carry `io-impl`, `s3.endpoint`, `s3.path-style-access` and the region, so an
  engine needs only the catalog URL and a credential (Java clients read the former,
  DuckDB only the latter);
- with `vend_credentials`, an authenticated client that asks for them
  (`X-Iceberg-Access-Delegation: vended-credentials`) also gets keys, as a
  `storage-credentials` entry (and in `config`, for clients that read only that):
  with `sts_role_arn`, temporary credentials of that role scoped to the table's
  location (`catalog/credentials.py`); without, the static keys the server holds, for
  the warehouse prefix.

The keys are read from the environment (`TABLEFLOW_S3_ACCESS_KEY_ID`,
`TABLEFLOW_S3_SECRET_ACCESS_KEY`, optionally `TABLEFLOW_S3_SESSION_TOKEN`), never
from a command line. Without keys, pyiceberg falls back to the AWS default chain
(environment, profile, instance role).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, Field, SecretStr

S3_FILE_IO = "org.apache.iceberg.aws.s3.S3FileIO"
ACCESS_DELEGATION_HEADER = "X-Iceberg-Access-Delegation"
VENDED_CREDENTIALS = "vended-credentials"

ACCESS_KEY_ID_ENV = "TABLEFLOW_S3_ACCESS_KEY_ID"
SECRET_ACCESS_KEY_ENV = "TABLEFLOW_S3_SECRET_ACCESS_KEY"
SESSION_TOKEN_ENV = "TABLEFLOW_S3_SESSION_TOKEN"
OBJECT_STORE_SCHEMES = ("s3",)


def is_object_store_location(location: str) -> bool:
    scheme, sep, _ = location.partition("://")
    return bool(sep) and scheme.lower() in OBJECT_STORE_SCHEMES


class ObjectStorage(BaseModel):
    """Where the S3 API is and how to talk to it. `endpoint=None` means AWS itself."""

    model_config = ConfigDict(frozen=True)

    endpoint: str | None = None
    region: str = "us-east-1"
    path_style_access: bool = True
    access_key_id: str | None = None
    secret_access_key: SecretStr | None = None
    session_token: SecretStr | None = None
    vend_credentials: bool = False
    # Vend temporary credentials of this role (STS AssumeRole) instead of the keys above.
    sts_role_arn: str | None = None
    sts_endpoint: str | None = None  # None: AWS STS
    vended_credential_seconds: int = Field(3600, ge=1, le=12 * 3600)

    @classmethod
    def from_environment(
        cls, environ: Mapping[str, str] | None = None, **values: object
    ) -> ObjectStorage:
        env = os.environ if environ is None else environ
        secret = env.get(SECRET_ACCESS_KEY_ENV)
        token = env.get(SESSION_TOKEN_ENV)
        return cls(
            access_key_id=env.get(ACCESS_KEY_ID_ENV) or None,
            secret_access_key=SecretStr(secret) if secret else None,
            session_token=SecretStr(token) if token else None,
            **values,
        )

    def environment(self) -> dict[str, str]:
        """The keys as the environment variables `from_environment` reads (for a child)."""
        env: dict[str, str] = {}
        if self.access_key_id:
            env[ACCESS_KEY_ID_ENV] = self.access_key_id
        if self.secret_access_key is not None:
            env[SECRET_ACCESS_KEY_ENV] = self.secret_access_key.get_secret_value()
        if self.session_token is not None:
            env[SESSION_TOKEN_ENV] = self.session_token.get_secret_value()
        return env

    def server_arguments(self) -> list[str]:
        """These settings as catalog server arguments (the keys go through the environment)."""
        arguments = ["--s3-region", self.region]
        if self.endpoint:
            arguments += ["--s3-endpoint", self.endpoint]
        arguments.append(
            "--s3-path-style-access" if self.path_style_access else "--s3-virtual-host"
        )
        if self.vend_credentials:
            arguments.append("--vend-credentials")
        if self.sts_role_arn:
            arguments += ["--sts-role-arn", self.sts_role_arn]
            arguments += ["--vended-credential-seconds", str(self.vended_credential_seconds)]
        if self.sts_endpoint:
            arguments += ["--sts-endpoint", self.sts_endpoint]
        return arguments

    def server_file_io_properties(self) -> dict[str, str]:
        """pyiceberg FileIO properties for the server's own reads and writes (with keys).

        pyiceberg ignores `s3.path-style-access`; it addresses buckets by path unless
        `s3.force-virtual-addressing` is true.
        """
        properties = {
            "s3.region": self.region,
            "s3.force-virtual-addressing": str(not self.path_style_access).lower(),
        }
        if self.endpoint:
            properties["s3.endpoint"] = self.endpoint
        properties.update(self.credential_config())
        return properties

    def client_config(self) -> dict[str, str]:
        """What every client needs besides keys: Java (S3FileIO), pyiceberg, DuckDB names."""
        config = {
            "io-impl": S3_FILE_IO,
            "client.region": self.region,
            "s3.region": self.region,
            "s3.path-style-access": str(self.path_style_access).lower(),
        }
        if self.endpoint:
            config["s3.endpoint"] = self.endpoint
        return config

    def credential_config(self) -> dict[str, str]:
        """The keys as Iceberg FileIO properties (empty when none are configured)."""
        config: dict[str, str] = {}
        if self.access_key_id and self.secret_access_key is not None:
            config["s3.access-key-id"] = self.access_key_id
            config["s3.secret-access-key"] = self.secret_access_key.get_secret_value()
            if self.session_token is not None:
                config["s3.session-token"] = self.session_token.get_secret_value()
        return config

    def vends_to(self, access_delegation: str | None) -> bool:
        """Whether a request with this `X-Iceberg-Access-Delegation` header gets keys."""
        if not self.vend_credentials or not access_delegation:
            return False
        requested = {part.strip().lower() for part in access_delegation.split(",")}
        if VENDED_CREDENTIALS not in requested:
            return False
        return bool(self.sts_role_arn) or bool(self.credential_config())
