"""deltalake storage options from a pyiceberg table's FileIO properties (same credentials)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# pyiceberg FileIO property -> delta-rs (object_store) option.
_S3_OPTIONS: Mapping[str, str] = {
    "s3.endpoint": "AWS_ENDPOINT_URL",
    "s3.access-key-id": "AWS_ACCESS_KEY_ID",
    "s3.secret-access-key": "AWS_SECRET_ACCESS_KEY",
    "s3.session-token": "AWS_SESSION_TOKEN",
    "s3.region": "AWS_REGION",
}


def storage_options_of(table: Any) -> dict[str, str]:
    """The options deltalake needs to reach the files `table` (a pyiceberg Table) reads."""
    properties = {**dict(getattr(table, "properties", {}) or {}), **dict(table.io.properties)}
    options = {
        ours: str(properties[theirs])
        for theirs, ours in _S3_OPTIONS.items()
        if theirs in properties
    }
    endpoint = options.get("AWS_ENDPOINT_URL", "")
    if endpoint.startswith("http://"):
        options["AWS_ALLOW_HTTP"] = "true"
    return options
