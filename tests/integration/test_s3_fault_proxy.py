"""The S3 fault proxy forwards signed requests unchanged and injects the faults it is told."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from botocore.exceptions import ClientError, ConnectionClosedError, EndpointConnectionError

from tableflow_core.dev.s3_server import RunningS3Server, s3_client
from tests.fixtures.s3 import unique_prefix
from tests.support.fault_proxy import Fault, FaultProxy


@pytest.fixture
def proxy(s3_server: RunningS3Server) -> Iterator[FaultProxy]:
    with FaultProxy(upstream=s3_server.endpoint) as running:
        yield running


def _client(server: RunningS3Server, proxy: FaultProxy, attempts: int = 1):  # type: ignore[no-untyped-def]
    return s3_client(
        proxy.endpoint, server.credentials, server.region, retries={"total_max_attempts": attempts}
    )


def test_forwards_and_records(s3_server: RunningS3Server, proxy: FaultProxy) -> None:
    client = _client(s3_server, proxy)
    key = f"{unique_prefix()}/a.txt"
    client.put_object(Bucket=s3_server.bucket, Key=key, Body=b"hello")
    assert client.get_object(Bucket=s3_server.bucket, Key=key)["Body"].read() == b"hello"
    client.head_object(Bucket=s3_server.bucket, Key=key)
    listed = client.list_objects_v2(Bucket=s3_server.bucket, Prefix=key)
    assert listed["KeyCount"] == 1
    assert [(r.method, r.status) for r in proxy.requests] == [
        ("PUT", 200),
        ("GET", 200),
        ("HEAD", 200),
        ("GET", 200),
    ]
    assert proxy.count(method="PUT") == 1


def test_injected_status_is_seen_by_the_client_and_not_by_the_store(
    s3_server: RunningS3Server, proxy: FaultProxy
) -> None:
    key = f"{unique_prefix()}/b.txt"
    proxy.add_fault(Fault(action="status", method="PUT", path=r"/b\.txt$", status=503))
    with pytest.raises(ClientError) as failed:
        _client(s3_server, proxy).put_object(Bucket=s3_server.bucket, Key=key, Body=b"x")
    assert failed.value.response["ResponseMetadata"]["HTTPStatusCode"] == 503
    direct = s3_server.client()
    assert direct.list_objects_v2(Bucket=s3_server.bucket, Prefix=key)["KeyCount"] == 0
    # The fault hits once: a client that retries gets through.
    proxy.add_fault(Fault(action="status", method="PUT", path=r"/b\.txt$", status=500))
    _client(s3_server, proxy, attempts=3).put_object(Bucket=s3_server.bucket, Key=key, Body=b"y")
    assert [r.status for r in proxy.requests if r.method == "PUT"] == [503, 500, 200]


def test_reset_before_and_after_forwarding(s3_server: RunningS3Server, proxy: FaultProxy) -> None:
    prefix = unique_prefix()
    client = _client(s3_server, proxy)
    direct = s3_server.client()
    proxy.add_fault(Fault(action="reset", method="PUT", path=r"/before$"))
    with pytest.raises((ConnectionClosedError, EndpointConnectionError)):
        client.put_object(Bucket=s3_server.bucket, Key=f"{prefix}/before", Body=b"x")
    assert (
        direct.list_objects_v2(Bucket=s3_server.bucket, Prefix=f"{prefix}/before")["KeyCount"] == 0
    )
    # The store applies the write; the client never hears back.
    proxy.add_fault(Fault(action="reset-after", method="PUT", path=r"/after$"))
    with pytest.raises((ConnectionClosedError, EndpointConnectionError)):
        client.put_object(Bucket=s3_server.bucket, Key=f"{prefix}/after", Body=b"y")
    body = direct.get_object(Bucket=s3_server.bucket, Key=f"{prefix}/after")["Body"].read()
    assert body == b"y"
    assert [r.fault for r in proxy.requests] == ["reset", "reset-after"]


def test_delay_and_skip(s3_server: RunningS3Server, proxy: FaultProxy) -> None:
    prefix = unique_prefix()
    client = _client(s3_server, proxy)
    proxy.add_fault(Fault(action="delay", method="GET", seconds=0.5, skip=1, times=1))
    client.put_object(Bucket=s3_server.bucket, Key=f"{prefix}/k", Body=b"z")
    timings = []
    for _ in range(3):
        started = time.monotonic()
        client.get_object(Bucket=s3_server.bucket, Key=f"{prefix}/k")["Body"].read()
        timings.append(time.monotonic() - started)
    assert timings[0] < 0.4 and timings[1] >= 0.5 and timings[2] < 0.4, timings
