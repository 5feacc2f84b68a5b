"""The dev/test object store (s3proxy, filesystem backend) does what the S3 work relies on.

Conditional create (`If-None-Match: *`, also under a race), multipart upload,
ListObjectsV2 paging, authentication, durability across a restart, and no secret left
on disk or in the log. Evidence for the choice: docs/object-storage.md.
"""

from __future__ import annotations

import os
import threading
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from botocore.exceptions import ClientError
from pydantic import SecretStr

from tableflow_core.dev.s3_server import (
    RunningS3Server,
    S3Credentials,
    S3ServerSettings,
    s3_client,
    start_s3_server,
)
from tests.fixtures.s3 import unique_prefix


def _status(error: ClientError) -> int:
    return int(error.response["ResponseMetadata"]["HTTPStatusCode"])


def test_second_conditional_create_is_refused(s3_server: RunningS3Server) -> None:
    client = s3_server.client()
    key = f"{unique_prefix()}/commit.json"
    client.put_object(Bucket=s3_server.bucket, Key=key, Body=b"first", IfNoneMatch="*")
    with pytest.raises(ClientError) as refused:
        client.put_object(Bucket=s3_server.bucket, Key=key, Body=b"second", IfNoneMatch="*")
    assert _status(refused.value) == 412
    assert client.get_object(Bucket=s3_server.bucket, Key=key)["Body"].read() == b"first"


def test_racing_conditional_creates_have_one_winner_per_key(s3_server: RunningS3Server) -> None:
    prefix = unique_prefix("race")
    keys = [f"{prefix}/{i:05d}.json" for i in range(15)]
    writers = 6
    winners: dict[str, list[int]] = {}
    refusals: list[int] = []
    lock = threading.Lock()
    barrier = threading.Barrier(writers)

    def write(writer: int) -> None:
        client = s3_server.client(retries={"total_max_attempts": 1})
        barrier.wait()
        for key in keys:
            try:
                client.put_object(
                    Bucket=s3_server.bucket, Key=key, Body=str(writer).encode(), IfNoneMatch="*"
                )
            except ClientError as exc:
                with lock:
                    refusals.append(_status(exc))
                continue
            with lock:
                winners.setdefault(key, []).append(writer)

    with ThreadPoolExecutor(writers) as pool:  # all at once (the barrier); errors raise here
        list(pool.map(write, range(writers)))
    assert sorted(winners) == keys
    assert all(len(won) == 1 for won in winners.values()), winners
    assert set(refusals) == {412} and len(refusals) == len(keys) * (writers - 1)
    client = s3_server.client()
    for key, (writer,) in winners.items():
        body = client.get_object(Bucket=s3_server.bucket, Key=key)["Body"].read()
        assert body == str(writer).encode()


def test_multipart_upload_and_conditional_complete(s3_server: RunningS3Server) -> None:
    client = s3_server.client()
    key = f"{unique_prefix()}/data.parquet"
    part = os.urandom(5 * 1024 * 1024)
    upload = client.create_multipart_upload(Bucket=s3_server.bucket, Key=key)["UploadId"]
    etags = [
        client.upload_part(
            Bucket=s3_server.bucket, Key=key, UploadId=upload, PartNumber=n, Body=body
        )["ETag"]
        for n, body in ((1, part), (2, b"tail"))
    ]
    parts = [{"PartNumber": n, "ETag": etag} for n, etag in enumerate(etags, start=1)]
    client.complete_multipart_upload(
        Bucket=s3_server.bucket, Key=key, UploadId=upload, MultipartUpload={"Parts": parts}
    )
    assert client.get_object(Bucket=s3_server.bucket, Key=key)["Body"].read() == part + b"tail"

    again = client.create_multipart_upload(Bucket=s3_server.bucket, Key=key)["UploadId"]
    etag = client.upload_part(
        Bucket=s3_server.bucket, Key=key, UploadId=again, PartNumber=1, Body=b"x"
    )["ETag"]
    with pytest.raises(ClientError) as refused:
        client.complete_multipart_upload(
            Bucket=s3_server.bucket,
            Key=key,
            UploadId=again,
            MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": etag}]},
            IfNoneMatch="*",
        )
    assert _status(refused.value) == 412
    client.abort_multipart_upload(Bucket=s3_server.bucket, Key=key, UploadId=again)
    assert client.get_object(Bucket=s3_server.bucket, Key=key)["Body"].read() == part + b"tail"


def test_list_objects_v2_pages_prefixes_and_delimiters(s3_server: RunningS3Server) -> None:
    client = s3_server.client()
    prefix = unique_prefix("list") + "/"
    keys = sorted(f"{prefix}{'data' if i % 3 else 'metadata'}/{i:04d}" for i in range(23))
    for key in keys:
        client.put_object(Bucket=s3_server.bucket, Key=key, Body=b"z")
    listed: list[str] = []
    pages = 0
    token: str | None = None
    while True:
        kwargs = {"Bucket": s3_server.bucket, "Prefix": prefix, "MaxKeys": 10}
        if token:
            kwargs["ContinuationToken"] = token
        page = client.list_objects_v2(**kwargs)
        pages += 1
        listed += [item["Key"] for item in page.get("Contents", [])]
        if not page["IsTruncated"]:
            break
        token = page["NextContinuationToken"]
    assert (pages, listed) == (3, keys)
    grouped = client.list_objects_v2(Bucket=s3_server.bucket, Prefix=prefix, Delimiter="/")
    assert sorted(p["Prefix"] for p in grouped["CommonPrefixes"]) == [
        f"{prefix}data/",
        f"{prefix}metadata/",
    ]
    deleted = client.delete_objects(
        Bucket=s3_server.bucket, Delete={"Objects": [{"Key": key} for key in keys]}
    )
    assert len(deleted["Deleted"]) == len(keys)
    assert client.list_objects_v2(Bucket=s3_server.bucket, Prefix=prefix)["KeyCount"] == 0


def test_wrong_secret_and_anonymous_requests_are_refused(s3_server: RunningS3Server) -> None:
    wrong = S3Credentials(s3_server.credentials.access_key_id, SecretStr("nope"))
    client = s3_client(
        s3_server.endpoint, wrong, s3_server.region, retries={"total_max_attempts": 1}
    )
    with pytest.raises(ClientError) as refused:
        client.list_objects_v2(Bucket=s3_server.bucket)
    assert _status(refused.value) == 403
    with pytest.raises(urllib.error.HTTPError) as anonymous:
        urllib.request.urlopen(f"{s3_server.endpoint}/{s3_server.bucket}?list-type=2")
    assert anonymous.value.code == 403


def test_objects_survive_a_restart_and_no_secret_stays_behind(tmp_path: Path) -> None:
    settings = S3ServerSettings(data_dir=tmp_path / "s3", bucket="durable")
    secret = settings.credentials.secret_access_key.get_secret_value()
    with start_s3_server(settings) as first:
        first.client().put_object(Bucket="durable", Key="a/b.txt", Body=b"kept")
        assert first.startup_seconds < 30
    assert not first.alive
    with start_s3_server(settings) as second:
        assert second.client().get_object(Bucket="durable", Key="a/b.txt")["Body"].read() == b"kept"
    for path in (tmp_path / "s3").rglob("*"):
        if path.is_file() and path.suffix in (".log", ".properties"):
            assert secret not in path.read_text(errors="replace"), path
    assert not (tmp_path / "s3" / "s3proxy.properties").exists()
