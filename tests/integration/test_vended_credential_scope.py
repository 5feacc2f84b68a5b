"""Issue 41, item 2, on real processes: a catalog that vends temporary credentials
(STS AssumeRole through the dev gateway in front of s3proxy) refuses every location and
name that would widen them, and a table's credentials cannot list a sibling table whose
name starts with its own.

The session policy text itself is checked against IAM's matching rules in
`tests/unit/test_session_policy_scope.py`.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
import requests

from tests.fixtures.catalog import new_namespace
from tests.fixtures.s3_catalog import S3CatalogServer
from tests.integration.test_s3_temporary_credentials import error_code, load_table_answer, s3_with
from tests.support.sts_gateway import StsGateway

pytestmark = pytest.mark.slow

SCHEMA = {"type": "struct", "fields": [{"id": 1, "name": "id", "required": False, "type": "long"}]}


def create(
    catalog: S3CatalogServer, token: str, namespace: str, name: str, **body: Any
) -> requests.Response:
    return requests.post(
        f"{catalog.uri}/v1/namespaces/{namespace}/tables",
        json={"name": name, "schema": SCHEMA, **body},
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    )


def test_locations_and_names_that_widen_vended_credentials_are_refused(
    sts_catalog: S3CatalogServer, sts_gateway: StsGateway
) -> None:
    catalog = sts_catalog.pyiceberg_catalog()
    namespace = new_namespace(catalog, "scope")
    rows = pa.table({"id": pa.array([1, 2, 3], pa.int64())})
    catalog.create_table((namespace, "t"), rows.schema).append(rows)
    catalog.create_table((namespace, "t2"), rows.schema).append(rows)
    answer = load_table_answer(sts_catalog, namespace, "t")
    token = answer["_token"]
    location = answer["metadata"]["location"]
    warehouse = sts_catalog.warehouse
    cases = {
        "the warehouse root (s3://bucket/prefix)": {"location": warehouse},
        "prefix/*": {"location": f"{warehouse}/{namespace}/*"},
        "prefix/? (one-character wildcard)": {"location": f"{warehouse}/{namespace}/t?"},
        "a namespace folder": {"location": f"{warehouse}/{namespace}"},
        "another table's location": {"location": location},
        "inside another table": {"location": f"{location}/data"},
        "write.data.path at another table": {"properties": {"write.data.path": location}},
    }
    for what, body in cases.items():
        refused = create(sts_catalog, token, namespace, "x", **body)
        assert refused.status_code == 400, (what, refused.text)
    for name in ("*", "t*", "?", "$x"):
        refused = create(sts_catalog, token, namespace, name)
        assert refused.status_code == 400, (name, refused.text)
        assert "wildcards" in refused.json()["error"]["message"]
    assert [t[-1] for t in catalog.list_tables(namespace)] == ["t", "t2"]

    # t's credentials: its own prefix, not t2's (whose name starts with t's).
    s3 = s3_with(answer["config"], sts_gateway.endpoint)
    bucket, key = location.split("/", 3)[2:]
    assert s3.list_objects_v2(Bucket=bucket, Prefix=key + "/")["KeyCount"] > 0
    assert error_code(lambda: s3.list_objects_v2(Bucket=bucket, Prefix=key)) == "AccessDenied"
    assert error_code(lambda: s3.list_objects_v2(Bucket=bucket, Prefix=key + "2/")) == (
        "AccessDenied"
    )
