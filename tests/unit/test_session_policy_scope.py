"""Issue 41, item 2: the session policy of a table's vended credentials, evaluated as IAM
evaluates it, grants the table's exact prefix and nothing of any other table; locations
and names that would widen it are refused.

`iam_allows` is a small model of IAM's rules for the statements such a policy holds
(Allow only): an action matches case-insensitively with `*`/`?` wildcards; a resource
ARN and a `StringLike` condition value match case-sensitively, where `*` is any run of
characters (`/` included, empty too) and `?` exactly one, and `${*}`, `${?}`, `${$}` are
those characters literally (IAM's policy variables for them); any other `${...}` is a
variable IAM would substitute (refused here: the catalog never writes one). A condition
on a key the request does not carry does not match (ListBucket without `prefix`).
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from tableflow_core.catalog.credentials import table_session_policy
from tableflow_core.catalog.locations import LocationPolicy
from tableflow_core.config.names import catalog_name_problem

_LITERALS = {"${*}": "*", "${?}": "?", "${$}": "$"}


def iam_pattern(pattern: str, case_sensitive: bool = True) -> re.Pattern[str]:
    parts: list[str] = []
    i = 0
    while i < len(pattern):
        literal = next((k for k in _LITERALS if pattern.startswith(k, i)), None)
        if literal is not None:
            parts.append(re.escape(_LITERALS[literal]))
            i += len(literal)
        elif pattern.startswith("${", i):
            raise AssertionError(f"policy variable in {pattern!r}: IAM would substitute it")
        elif pattern[i] == "*":
            parts.append(".*")
            i += 1
        elif pattern[i] == "?":
            parts.append(".")
            i += 1
        else:
            parts.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(parts), re.DOTALL | (0 if case_sensitive else re.IGNORECASE))


def _listed(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def iam_allows(
    policy_text: str, action: str, resource: str, context: dict[str, str] | None = None
) -> bool:
    policy = json.loads(policy_text)
    context = context or {}
    for statement in _listed(policy["Statement"]):
        assert statement["Effect"] == "Allow"
        if not any(iam_pattern(a, False).fullmatch(action) for a in _listed(statement["Action"])):
            continue
        if not any(iam_pattern(r).fullmatch(resource) for r in _listed(statement["Resource"])):
            continue
        conditions = statement.get("Condition", {})
        assert set(conditions) <= {"StringLike"}, conditions
        matched = all(
            key in context and any(iam_pattern(v).fullmatch(context[key]) for v in _listed(values))
            for key, values in conditions.get("StringLike", {}).items()
        )
        if matched:
            return True
    return False


def can_read(policy: str, bucket: str, key: str) -> bool:
    return iam_allows(policy, "s3:GetObject", f"arn:aws:s3:::{bucket}/{key}")


def can_list(policy: str, bucket: str, prefix: str) -> bool:
    return iam_allows(policy, "s3:ListBucket", f"arn:aws:s3:::{bucket}", {"s3:prefix": prefix})


def test_the_model_follows_iams_wildcards() -> None:
    assert iam_pattern("a/*").fullmatch("a/b/c") and iam_pattern("a/*").fullmatch("a/")
    assert iam_pattern("a?c").fullmatch("abc") and not iam_pattern("a?c").fullmatch("ac")
    assert iam_pattern("a${*}").fullmatch("a*") and not iam_pattern("a${*}").fullmatch("ab")
    assert not iam_pattern("A/*").fullmatch("a/x")  # resources are case-sensitive
    assert iam_pattern("S3:GetObject", False).fullmatch("s3:getobject")


BUCKET = "warehouse"
TABLE = "wh/ns/orders"


def test_a_tables_policy_grants_its_prefix_and_nothing_else() -> None:
    policy = table_session_policy(f"s3://{BUCKET}/{TABLE}")
    assert can_read(policy, BUCKET, f"{TABLE}/data/f.parquet")
    assert can_read(policy, BUCKET, f"{TABLE}/metadata/v1.metadata.json")
    assert iam_allows(policy, "s3:PutObject", f"arn:aws:s3:::{BUCKET}/{TABLE}/data/x")
    assert can_list(policy, BUCKET, f"{TABLE}/")
    assert can_list(policy, BUCKET, f"{TABLE}/data")
    for key in (
        "wh/ns/orders2/data/f.parquet",  # a sibling whose name starts with this one's
        "wh/ns/orders",  # the bare prefix is no key of the table
        "wh/ns/other/data/f.parquet",
        "wh/ns/ORDERS/data/f.parquet",
        "wh/other.json",
    ):
        assert not can_read(policy, BUCKET, key), key
    assert not can_read(policy, "other-bucket", f"{TABLE}/data/f.parquet")
    # Listing the bare prefix lists `wh/ns/orders2/...` too: not granted.
    for prefix in (TABLE, "wh/ns/", "wh/", "", "wh/ns/orders2/"):
        assert not can_list(policy, BUCKET, prefix), prefix
    assert not iam_allows(policy, "s3:ListBucket", f"arn:aws:s3:::{BUCKET}")  # no prefix
    assert not iam_allows(policy, "s3:DeleteBucket", f"arn:aws:s3:::{BUCKET}")


@pytest.mark.parametrize(
    "location",
    [
        f"s3://{BUCKET}/wh/ns/*",  # `.../prefix/*`: every table of the namespace
        f"s3://{BUCKET}/wh/ns/or?ers",
        f"s3://{BUCKET}/wh/ns/%2A",
        f"s3://{BUCKET}/wh/ns/${{aws:username}}",
        f"s3://{BUCKET}",  # the bucket root
        f"s3://{BUCKET}/",
        f"s3://{BUCKET}/wh//ns/orders",
        f"s3://{BUCKET}/wh/./orders",
        f"s3://{BUCKET}/wh/ns/x\u2028y",
    ],
)
def test_locations_that_would_widen_the_policy_get_none(location: str) -> None:
    with pytest.raises(ValueError, match="cannot scope credentials"):
        table_session_policy(location)


@pytest.mark.parametrize(
    "location",
    [f"s3://{BUCKET}/wh/ns/*", f"s3://{BUCKET}/wh/ns/t?", f"s3://{BUCKET}/wh/ns/%3F"],
)
def test_the_catalog_refuses_wildcards_in_locations(location: str) -> None:
    policy = LocationPolicy.for_warehouse(f"s3://{BUCKET}/wh")
    assert not policy.allows(location)
    with pytest.raises(Exception, match=r"cannot contain '\*', '\?' or '\$'"):
        policy.check(location, "table location")


@pytest.mark.parametrize("name", ["*", "a*", "?", "t?", "$x", "x\u2028y", "x\u2029y", "x\x85"])
def test_names_that_would_widen_the_policy_or_break_lines_are_refused(name: str) -> None:
    assert catalog_name_problem(name) is not None


@pytest.mark.parametrize("name", ["orders", "Orders_2024", "t-1", "café", "表"])
def test_ordinary_names_stay_valid(name: str) -> None:
    assert catalog_name_problem(name) is None
