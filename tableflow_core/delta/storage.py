"""deltalake storage options from a pyiceberg table's FileIO properties (same credentials).

Commits to a Delta log on S3 are conditional PUTs (`If-None-Match: *`, delta-rs's default
on S3): of two writers of one version exactly one wins. The options never carry
`AWS_S3_ALLOW_UNSAFE_RENAME` (a copy-then-delete "rename" that loses commits under
concurrency) and no locking provider: only the keys below are mapped.
"""

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
    "s3.force-virtual-addressing": "AWS_VIRTUAL_HOSTED_STYLE_REQUEST",
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
