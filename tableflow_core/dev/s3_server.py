"""The dev stack's and the tests' S3-compatible object store: s3proxy on local disk.

s3proxy 4.x (Maven Central, `org.gaul:s3proxy`, Java 17) with its `filesystem`
backend: objects are files under `data_dir/blobs/<bucket>/<key>`, so they survive a
restart, and `If-None-Match: *` is resolved by a hard link, so of two writers racing to
create one key exactly one gets 200 and the other 412 (what the Delta log and any
put-if-absent commit rely on). Why s3proxy and not SeaweedFS or moto:
docs/object-storage.md.

The server always runs with authentication (AWS signature v2/v4) on a loopback
address. Its access key and secret go to s3proxy in a properties file readable by this
user only, which is deleted as soon as the server listens: the secret is never on a
command line, in the environment of the JVM or in its log.

    server = start_s3_server(S3ServerSettings(data_dir=Path(".tableflow/dev/s3")))
    server.endpoint, server.credentials.access_key_id, server.bucket
    server.stop()
"""

from __future__ import annotations

import contextlib
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from tableflow_core.dev.launcher import (
    JvmServer,
    LaunchError,
    RunningServer,
    ServerSettings,
    launch,
    render_properties,
)
from tableflow_core.dev.processes import free_port

# boto3 clients are built at run time; no stubs are installed for them.
S3Client = Any

S3_SERVER_NAME = "s3"
MAIN_CLASS = "org.gaul.s3proxy.Main"
DEFAULT_BUCKET = "warehouse"
# Any region string works against s3proxy; clients need one (the AWS SDKs refuse none).
DEFAULT_REGION = "us-east-1"
# The store is I/O bound: C1 code is fast enough, and a small serial heap keeps its
# memory near 120 MB (docs/object-storage.md has the figures).
S3PROXY = JvmServer(name=S3_SERVER_NAME, lock="s3proxy", min_java=17)


@dataclass(frozen=True)
class S3Credentials:
    """A static access key pair. The secret only leaves as `get_secret_value()`."""

    access_key_id: str
    secret_access_key: SecretStr

    @classmethod
    def generate(cls, access_key_id: str = "tableflow") -> S3Credentials:
        return cls(access_key_id, SecretStr(secrets.token_urlsafe(30)))


@dataclass(frozen=True, kw_only=True)
class S3ServerSettings(ServerSettings):
    """Where and how to run the store. `port=0` takes a free port at start."""

    bucket: str = DEFAULT_BUCKET
    credentials: S3Credentials = field(default_factory=S3Credentials.generate)
    region: str = DEFAULT_REGION
    start_timeout: float = 60.0

    @property
    def blob_dir(self) -> Path:
        return self.data_dir / "blobs"

    @property
    def log_file(self) -> Path:
        return self.data_dir / "s3proxy.log"

    @property
    def properties_file(self) -> Path:
        return self.data_dir / "s3proxy.properties"


@dataclass(frozen=True, kw_only=True)
class RunningS3Server(RunningServer):
    """An s3proxy this process started; `stop()` ends exactly that process."""

    settings: S3ServerSettings

    @property
    def endpoint(self) -> str:
        return self.base_url

    @property
    def bucket(self) -> str:
        return self.settings.bucket

    @property
    def credentials(self) -> S3Credentials:
        return self.settings.credentials

    @property
    def region(self) -> str:
        return self.settings.region

    def client(self, **config: Any) -> S3Client:
        """A boto3 S3 client for this server (path-style addressing); `retries={"total_max_attempts": 1}`
        turns retrying off (`max_attempts` counts retries, not attempts)."""
        return s3_client(self.endpoint, self.credentials, self.region, **config)

    def __enter__(self) -> RunningS3Server:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def s3_client(endpoint: str, credentials: S3Credentials, region: str, **config: Any) -> S3Client:
    """boto3 against an S3-compatible endpoint: path-style, checksums only when required.

    botocore 1.36+ adds CRC checksums to every upload by default; stores that predate
    them reject the trailers, so ask for them only where the API requires them.
    """
    import boto3
    from botocore.config import Config

    options: dict[str, Any] = {
        "s3": {"addressing_style": "path"},
        "request_checksum_calculation": "when_required",
        "response_checksum_validation": "when_required",
        "retries": {"max_attempts": 3, "mode": "standard"},
    }
    retries = {**options["retries"], **config.pop("retries", {})}
    options.update(config, retries=retries)
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=credentials.access_key_id,
        aws_secret_access_key=credentials.secret_access_key.get_secret_value(),
        region_name=region,
        config=Config(**options),
    )


def s3proxy_properties(settings: S3ServerSettings, port: int) -> str:
    """s3proxy's configuration: authenticated, loopback, files under `blob_dir`."""
    lines = {
        "s3proxy.endpoint": f"http://{settings.host}:{port}",
        "s3proxy.authorization": "aws-v2-or-v4",
        "s3proxy.identity": settings.credentials.access_key_id,
        "s3proxy.credential": settings.credentials.secret_access_key.get_secret_value(),
        "jclouds.provider": "filesystem",
        "jclouds.filesystem.basedir": str(settings.blob_dir.resolve()),
    }
    return render_properties(lines)


def start_s3_server(settings: S3ServerSettings) -> RunningS3Server:
    """Start s3proxy, wait until it answers, create the bucket (kept if it exists)."""
    (jar,) = S3PROXY.artifacts().files
    settings.blob_dir.mkdir(parents=True, exist_ok=True)
    port = settings.port or free_port(settings.host)
    # s3proxy reads its properties before it binds the port: the secret does not stay
    # on disk once the server is ready.
    running = launch(
        S3PROXY,
        settings.run(
            port,
            ("-cp", str(jar), MAIN_CLASS, "--properties", str(settings.properties_file)),
            archive_files=(jar,),
            private_files={settings.properties_file: s3proxy_properties(settings, port)},
            log_file=settings.log_file,
            timeout=settings.start_timeout,
            ready=lambda running: ensure_bucket(
                s3_client(
                    running.base_url,
                    settings.credentials,
                    settings.region,
                    retries={"total_max_attempts": 1},
                ),
                settings.bucket,
            ),
        ),
    )
    return RunningS3Server(**running.common(), settings=settings)


def ensure_bucket(client: S3Client, bucket: str) -> str | None:
    """Create the bucket unless it exists; None once it does (the launcher's readiness).

    A server still starting answers with a connection error or a 5xx: "not yet"."""
    from botocore.exceptions import ClientError, EndpointConnectionError

    try:
        client.head_bucket(Bucket=bucket)
        return None
    except EndpointConnectionError as exc:
        return str(exc)
    except ClientError as exc:
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        if status in (401, 403):
            raise LaunchError(f"the S3 server refused our credentials ({status})") from None
        if status != 404:
            return str(exc)
    with contextlib.suppress(client.exceptions.BucketAlreadyOwnedByYou):
        client.create_bucket(Bucket=bucket)
    return None
