"""The STS gateway scopes temporary credentials by what a request reaches, not by its
text (issue 41 item 3): with table a's credentials, keys through `a/../`, a listing
prefix `a/../`, a copy source in another table and bucket-level sub-resources are refused
before the store sees them. Real s3proxy, the real gateway, botocore-signed requests;
each case passed through (or listed, or copied) before the fix."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from tableflow_core.catalog.credentials import table_session_policy
from tableflow_core.dev.s3_server import RunningS3Server
from tests.fixtures.s3 import unique_prefix
from tests.support.sts_gateway import StsGateway

B_BYTES = b"table b's data file"


@dataclass
class Tables:
    gateway: StsGateway
    store: Any  # boto3 client with the store's own keys (sees everything)
    client: Any  # boto3 client with table a's temporary credentials, through the gateway
    bucket: str
    root: str  # "<prefix>/ns": tables a, b and v under it

    def key(self, table: str, rest: str) -> str:
        return f"{self.root}/{table}/{rest}"

    def refused(self, call: Any) -> str:
        refusals = len(self.gateway.refusals)
        with pytest.raises(ClientError) as raised:
            call()
        assert len(self.gateway.refusals) == refusals + 1, "the gateway itself refused it"
        return str(raised.value.response["Error"]["Code"])


def client(endpoint: str, key: str, secret: str, token: str | None = None) -> Any:
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id=key,
        aws_secret_access_key=secret,
        aws_session_token=token,
        config=Config(
            s3={"addressing_style": "path"},
            retries={"total_max_attempts": 1},
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
        ),
    )


@pytest.fixture
def tables(s3_server: RunningS3Server) -> Iterator[Tables]:
    root = f"{unique_prefix('gw')}/ns"
    bucket = s3_server.bucket
    store = s3_server.client()
    for table in ("a", "b", "v"):
        store.put_object(Bucket=bucket, Key=f"{root}/{table}/data/f.parquet", Body=B_BYTES)
    secret = s3_server.credentials.secret_access_key.get_secret_value()
    with StsGateway(s3_server.endpoint, s3_server.credentials, s3_server.region) as gateway:
        sts = boto3.client(
            "sts",
            endpoint_url=gateway.endpoint,
            region_name="us-east-1",
            aws_access_key_id=s3_server.credentials.access_key_id,
            aws_secret_access_key=secret,
        )
        minted = sts.assume_role(
            RoleArn="arn:aws:iam::000000000000:role/reader",
            RoleSessionName="table-a",
            Policy=table_session_policy(f"s3://{bucket}/{root}/a"),
        )["Credentials"]
        a = client(
            gateway.endpoint,
            minted["AccessKeyId"],
            minted["SecretAccessKey"],
            minted["SessionToken"],
        )
        scoped = Tables(gateway, store, a, bucket, root)
        # The credentials work for table a itself (so a refusal below is the scope's).
        assert a.get_object(Bucket=bucket, Key=scoped.key("a", "data/f.parquet"))["Body"].read()
        yield scoped


def test_a_get_through_a_dotdot_segment_does_not_reach_another_table(tables: Tables) -> None:
    key = tables.key("a", "../b/data/f.parquet")
    assert tables.refused(lambda: tables.client.get_object(Bucket=tables.bucket, Key=key)) == (
        "AccessDenied"
    )


def test_a_put_through_a_dotdot_segment_writes_nothing_in_another_table(tables: Tables) -> None:
    key = tables.key("a", "../v/data/planted.parquet")
    assert tables.refused(
        lambda: tables.client.put_object(Bucket=tables.bucket, Key=key, Body=b"planted")
    ) == ("AccessDenied")
    listed = tables.store.list_objects_v2(Bucket=tables.bucket, Prefix=tables.key("v", ""))
    assert [o["Key"] for o in listed["Contents"]] == [tables.key("v", "data/f.parquet")]


def test_a_delete_through_a_dotdot_segment_leaves_another_table(tables: Tables) -> None:
    key = tables.key("a", "../v/data/f.parquet")
    assert tables.refused(lambda: tables.client.delete_object(Bucket=tables.bucket, Key=key)) == (
        "AccessDenied"
    )
    victim = tables.store.get_object(Bucket=tables.bucket, Key=tables.key("v", "data/f.parquet"))
    assert victim["Body"].read() == B_BYTES


def test_delete_objects_with_a_dotdot_key_leaves_another_table(tables: Tables) -> None:
    keys = [tables.key("a", "data/gone.parquet"), tables.key("a", "../v/data/f.parquet")]
    assert tables.refused(
        lambda: tables.client.delete_objects(
            Bucket=tables.bucket, Delete={"Objects": [{"Key": k} for k in keys]}
        )
    ) == ("AccessDenied")
    victim = tables.store.get_object(Bucket=tables.bucket, Key=tables.key("v", "data/f.parquet"))
    assert victim["Body"].read() == B_BYTES


def test_a_listing_with_a_dotdot_prefix_lists_nothing_outside(tables: Tables) -> None:
    prefix = tables.key("a", "../")
    assert tables.refused(
        lambda: tables.client.list_objects_v2(Bucket=tables.bucket, Prefix=prefix)
    ) == ("AccessDenied")


def test_a_copy_from_another_table_is_refused(tables: Tables) -> None:
    source = {"Bucket": tables.bucket, "Key": tables.key("b", "data/f.parquet")}
    target = tables.key("a", "data/copied.parquet")
    assert tables.refused(
        lambda: tables.client.copy_object(Bucket=tables.bucket, Key=target, CopySource=source)
    ) == ("AccessDenied")
    with pytest.raises(ClientError):
        tables.store.head_object(Bucket=tables.bucket, Key=target)
    # A copy inside the table's own scope still works.
    own = {"Bucket": tables.bucket, "Key": tables.key("a", "data/f.parquet")}
    tables.client.copy_object(Bucket=tables.bucket, Key=target, CopySource=own)
    assert tables.store.get_object(Bucket=tables.bucket, Key=target)["Body"].read() == B_BYTES


def test_bucket_level_sub_resources_are_refused_not_listed(tables: Tables) -> None:
    # With the table's own prefix added, such a request looked like a listing of it.
    own_prefix = "&prefix=" + quote(tables.key("a", ""), safe="")

    def as_own_listing(request: Any, **_: Any) -> None:
        request.url += own_prefix

    for operation in ("PutBucketAcl", "GetBucketAcl"):
        tables.client.meta.events.register(f"before-sign.s3.{operation}", as_own_listing)
    assert tables.refused(
        lambda: tables.client.put_bucket_acl(Bucket=tables.bucket, ACL="public-read")
    ) == ("AccessDenied")
    assert tables.refused(lambda: tables.client.get_bucket_acl(Bucket=tables.bucket)) == (
        "AccessDenied"
    )
