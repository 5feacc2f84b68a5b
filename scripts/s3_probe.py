"""Probe an S3-compatible endpoint for what tableflow relies on.

Evidence for docs/object-storage.md: conditional create (`If-None-Match: *`) and its
race, `If-Match`, multipart upload (also completed conditionally), ListObjectsV2
paging, delimiters and StartAfter, DeleteObjects, authentication, and uploads with
boto3's default checksums. Prints one `name: result` line per check.

    S3_PROBE_ENDPOINT=http://127.0.0.1:PORT S3_PROBE_KEY=... S3_PROBE_SECRET=... \\
        python scripts/s3_probe.py [bucket]

Keys come from the environment, never the command line.
"""

from __future__ import annotations

import io
import os
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

PATH_STYLE_NO_CHECKSUMS = Config(
    s3={"addressing_style": "path"},
    retries={"total_max_attempts": 1},
    request_checksum_calculation="when_required",
    response_checksum_validation="when_required",
)


def outcome(call: Callable[[], object]) -> str:
    try:
        call()
    except ClientError as exc:
        meta = exc.response["ResponseMetadata"]
        return f"{meta['HTTPStatusCode']} {exc.response['Error']['Code']}"
    return "200"


def probe(client: Callable[..., Any], bucket: str, endpoint: str) -> dict[str, object]:
    s3 = client()
    results: dict[str, object] = {}
    outcome(lambda: s3.create_bucket(Bucket=bucket))
    key = f"cond/{time.time_ns()}"
    s3.put_object(Bucket=bucket, Key=key, Body=b"one", IfNoneMatch="*")
    results["if_none_match_second_put"] = outcome(
        lambda: s3.put_object(Bucket=bucket, Key=key, Body=b"two", IfNoneMatch="*")
    )
    results["content_after"] = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    etag = s3.head_object(Bucket=bucket, Key=key)["ETag"]
    results["if_match_stale"] = outcome(
        lambda: s3.put_object(Bucket=bucket, Key=key, Body=b"3", IfMatch='"' + "0" * 32 + '"')
    )
    results["if_match_current"] = outcome(
        lambda: s3.put_object(Bucket=bucket, Key=key, Body=b"4", IfMatch=etag)
    )
    results.update(race(client, bucket))
    results.update(multipart(s3, bucket))
    results.update(listing(s3, bucket))
    wrong = client(secret="wrong")
    results["wrong_secret"] = outcome(lambda: wrong.list_objects_v2(Bucket=bucket))
    try:
        urllib.request.urlopen(f"{endpoint}/{bucket}/{key}")
        results["anonymous_get"] = "200 (accepted)"
    except urllib.error.HTTPError as exc:
        results["anonymous_get"] = str(exc.code)
    default = client(config=Config(s3={"addressing_style": "path"}))
    results["default_checksum_put"] = outcome(
        lambda: default.put_object(Bucket=bucket, Key="checksum/put", Body=b"abc")
    )
    results["default_checksum_multipart"] = outcome(
        lambda: default.upload_fileobj(
            io.BytesIO(os.urandom(9 * 1024 * 1024)), bucket, "checksum/multipart"
        )
    )
    return results


def race(client: Callable[..., Any], bucket: str, writers: int = 8) -> dict[str, object]:
    keys = [f"race/{time.time_ns()}/{j}" for j in range(20)]
    wins: dict[str, list[int]] = {}
    lock = threading.Lock()
    barrier = threading.Barrier(writers)

    def write(writer: int) -> None:
        s3 = client()
        barrier.wait()
        for key in keys:
            status = outcome(
                lambda key=key: s3.put_object(
                    Bucket=bucket, Key=key, Body=str(writer).encode(), IfNoneMatch="*"
                )
            )
            if status == "200":
                with lock:
                    wins.setdefault(key, []).append(writer)

    with ThreadPoolExecutor(writers) as pool:  # all at once (the barrier); errors raise here
        list(pool.map(write, range(writers)))
    return {
        "race_keys_won": len(wins),
        "race_keys_with_several_winners": sum(1 for won in wins.values() if len(won) > 1),
    }


def multipart(s3: Any, bucket: str) -> dict[str, object]:
    key = f"mp/{time.time_ns()}"
    part = os.urandom(5 * 1024 * 1024)
    upload = s3.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
    parts = []
    for number, body in ((1, part), (2, part), (3, b"tail")):
        etag = s3.upload_part(
            Bucket=bucket, Key=key, UploadId=upload, PartNumber=number, Body=body
        )["ETag"]
        parts.append({"PartNumber": number, "ETag": etag})
    s3.complete_multipart_upload(
        Bucket=bucket, Key=key, UploadId=upload, MultipartUpload={"Parts": parts}
    )
    results: dict[str, object] = {
        "multipart_ok": s3.get_object(Bucket=bucket, Key=key)["Body"].read()
        == part + part + b"tail"
    }
    again = s3.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
    etag = s3.upload_part(Bucket=bucket, Key=key, UploadId=again, PartNumber=1, Body=b"x")["ETag"]
    results["list_multipart_uploads"] = len(s3.list_multipart_uploads(Bucket=bucket)["Uploads"])
    results["complete_multipart_if_none_match_existing"] = outcome(
        lambda: s3.complete_multipart_upload(
            Bucket=bucket,
            Key=key,
            UploadId=again,
            MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": etag}]},
            IfNoneMatch="*",
        )
    )
    outcome(lambda: s3.abort_multipart_upload(Bucket=bucket, Key=key, UploadId=again))
    return results


def listing(s3: Any, bucket: str) -> dict[str, object]:
    prefix = f"list/{time.time_ns()}/"
    for j in range(25):
        s3.put_object(Bucket=bucket, Key=f"{prefix}{'a' if j % 2 else 'b'}/{j:03d}", Body=b"z")
    seen: list[str] = []
    pages = 0
    token = None
    while True:
        kwargs = {"Bucket": bucket, "Prefix": prefix, "MaxKeys": 10}
        if token:
            kwargs["ContinuationToken"] = token
        page = s3.list_objects_v2(**kwargs)
        pages += 1
        seen += [item["Key"] for item in page.get("Contents", [])]
        if not page.get("IsTruncated"):
            break
        token = page["NextContinuationToken"]
    grouped = s3.list_objects_v2(Bucket=bucket, Prefix=prefix, Delimiter="/")
    after = s3.list_objects_v2(Bucket=bucket, Prefix=prefix, StartAfter=f"{prefix}b/010")
    deleted = s3.delete_objects(
        Bucket=bucket, Delete={"Objects": [{"Key": key} for key in seen[:5]]}
    )
    return {
        "listv2_pages_keys_sorted": (pages, len(seen), seen == sorted(seen)),
        "listv2_common_prefixes": sorted(
            p["Prefix"][len(prefix) :] for p in grouped["CommonPrefixes"]
        ),
        "listv2_start_after": after.get("KeyCount"),
        "delete_objects": len(deleted.get("Deleted", [])),
    }


def main() -> int:
    endpoint = os.environ["S3_PROBE_ENDPOINT"]
    key = os.environ["S3_PROBE_KEY"]
    bucket = sys.argv[1] if len(sys.argv) > 1 else "probe"

    def client(secret: str | None = None, config: Config = PATH_STYLE_NO_CHECKSUMS) -> Any:
        return boto3.client(
            "s3",
            endpoint_url=endpoint,
            aws_access_key_id=key,
            aws_secret_access_key=secret or os.environ["S3_PROBE_SECRET"],
            region_name="us-east-1",
            config=config,
        )

    for name, value in probe(client, bucket, endpoint).items():
        print(f"{name}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
