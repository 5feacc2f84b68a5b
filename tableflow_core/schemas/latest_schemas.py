"""The latest schema of many subjects in one registry request (`GET /schemas?latestOnly=true`).

A plan reads the latest value (and key) schema of every table's subject. One request per
subject cost a project of 1,000 tables 1,000 round trips: 0.43 s of the plan's CPU in
HTTP client work alone (docs/history/performance-issues-26-31.md,
"Session 6: a plan of 1,000 tables in under 3 s"). The Confluent API
lists the latest version of every subject under a prefix in one answer, which
`resolve_schema` then takes instead of asking subject by subject.

The listing is an optimisation, never a source of different answers:
- it is used only for subjects read at version `latest` in the registry's own text form
  (Avro, JSON Schema; Protobuf asks for `format=serialized`, which the listing does not
  give);
- a subject the listing lacks is read on its own, so a missing subject's error is the
  one it always was;
- a registry that does not answer the listing as the API describes it (an older
  registry, another product's compatibility layer) is asked subject by subject;
- a registry holding many more subjects under the prefix than the project reads
  (`MAX_LISTED_PER_WANTED`) is asked subject by subject too: the listing would be the
  bigger transfer.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from confluent_kafka.schema_registry import RegisteredSchema

from tableflow_core.schemas.registry import RegistrySettings

# Fewer subjects than this are read one request each (concurrently): the listing's two
# requests are not worth it.
MIN_SUBJECTS = 32
# The listing is read when the registry holds at most this many subjects under the
# common prefix for each subject the project reads.
MAX_LISTED_PER_WANTED = 4


def read_latest_schemas(
    registry: RegistrySettings, subjects: Collection[str]
) -> Mapping[str, RegisteredSchema]:
    """The latest registered schema of each of `subjects` the registry lists in one
    answer; empty when the listing is not worth it, not understood or fails (then every
    subject is read on its own, and that read reports what is wrong)."""
    wanted = set(subjects)
    if len(wanted) < MIN_SUBJECTS or registry.url.startswith("mock://"):
        return {}
    prefix = common_prefix(wanted)
    client = registry.client()
    try:
        under_prefix = client.get_subjects(subject_prefix=prefix or None)
        if len(under_prefix) > MAX_LISTED_PER_WANTED * len(wanted):
            return {}
        # The client's own REST session (its auth, TLS settings and retries): the client
        # has no method for this endpoint.
        answer = client._rest_client.get("schemas", {"subjectPrefix": prefix, "latestOnly": "true"})
    except Exception:
        return {}
    return parse_listing(answer, wanted)


def common_prefix(names: Collection[str]) -> str:
    """The longest string every name starts with (character by character)."""
    if not names:
        return ""
    first, last = min(names), max(names)
    size = 0
    while size < min(len(first), len(last)) and first[size] == last[size]:
        size += 1
    return first[:size]


def parse_listing(answer: Any, wanted: Collection[str]) -> dict[str, RegisteredSchema]:
    """The entries of a `GET /schemas?latestOnly=true` answer for `wanted` subjects, as
    `GET /subjects/{subject}/versions/latest` gives them; empty when the answer is not a
    list of subject versions with one version per subject."""
    if not isinstance(answer, list):
        return {}
    found: dict[str, RegisteredSchema] = {}
    seen: set[str] = set()
    for entry in answer:
        if not _is_version_view(entry):
            return {}  # not the API's shape: ask subject by subject
        subject = entry["subject"]
        if subject in seen:
            return {}  # two versions of one subject: `latestOnly` was not honoured
        seen.add(subject)
        if subject in wanted:
            found[subject] = RegisteredSchema.from_dict(entry)
    return found


def _is_version_view(entry: Any) -> bool:
    return (
        isinstance(entry, dict)
        and isinstance(entry.get("subject"), str)
        and isinstance(entry.get("version"), int)
        and isinstance(entry.get("id"), int)
        and isinstance(entry.get("schema"), str)
    )
