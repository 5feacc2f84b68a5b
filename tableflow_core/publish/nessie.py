"""Publishing to Project Nessie through its own API v2 (`/api/v2`).

Nessie's Iceberg REST endpoint registers a table but refuses to move it
(`register_table` with overwrite: `AlreadyExistsException`, Nessie 0.99). Its own API
can: a commit that puts an `ICEBERG_TABLE` content with the new `metadataLocation`, sent
to `<branch>@<hash>` where the hash is the branch state the pointer was read at. Nessie
refuses it (409) when the table's content changed since that hash: a real
compare-and-set, which the REST spec lacks. A missing namespace is created in the same
commit (Nessie requires namespaces to exist).
"""

from __future__ import annotations

import json
import urllib.parse
from dataclasses import dataclass
from typing import Any

import requests

from tableflow_core.config.models.catalogs import NessieCatalog
from tableflow_core.publish.errors import PublishConflictError, PublishError

TIMEOUT_S = 30


@dataclass(frozen=True)
class NessieContent:
    """What the branch holds under a key, read at `hash` (the branch state)."""

    hash: str
    content: dict[str, Any] | None


def content_key(elements: tuple[str, ...]) -> str:
    """A content key in a v2 path: elements joined by `.` (tableflow names have no dots)."""
    return urllib.parse.quote(".".join(elements), safe="")


def table_content(metadata: Any, metadata_location: str, content_id: str | None) -> dict[str, Any]:
    """The `ICEBERG_TABLE` content for pyiceberg `metadata` stored at `metadata_location`."""
    content: dict[str, Any] = {
        "type": "ICEBERG_TABLE",
        "metadataLocation": metadata_location,
        "snapshotId": metadata.current_snapshot_id if metadata.current_snapshot_id else -1,
        "schemaId": metadata.current_schema_id,
        "specId": metadata.default_spec_id,
        "sortOrderId": metadata.default_sort_order_id,
    }
    if content_id is not None:
        content["id"] = content_id
    return content


def put_operation(elements: tuple[str, ...], content: dict[str, Any]) -> dict[str, Any]:
    return {"type": "PUT", "key": {"elements": list(elements)}, "content": content}


class NessiePublisher:
    def __init__(self, name: str, config: NessieCatalog) -> None:
        self.name = name
        self.config = config
        self.base = config.uri.rstrip("/")
        self.ref = urllib.parse.quote(config.ref, safe="")
        self.session = requests.Session()
        self.session.headers["Content-Type"] = "application/json"
        if config.token is not None:
            self.session.headers["Authorization"] = f"Bearer {config.token.get_secret_value()}"

    def _request(self, method: str, path: str, body: Any = None) -> requests.Response:
        try:
            return self.session.request(
                method,
                f"{self.base}{path}",
                data=None if body is None else json.dumps(body),
                timeout=TIMEOUT_S,
            )
        except requests.RequestException as exc:
            raise PublishError(f"Nessie at {self.base} cannot be reached: {exc}") from exc

    def _json(self, response: requests.Response, what: str) -> Any:
        if not response.ok:
            raise PublishError(f"Nessie {what}: HTTP {response.status_code}: {_message(response)}")
        return response.json()

    def read(self, elements: tuple[str, ...]) -> NessieContent:
        """The content under `elements` and the branch hash it was read at."""
        response = self._request("GET", f"/trees/{self.ref}/contents/{content_key(elements)}")
        if response.status_code == 404:
            branch = self._json(self._request("GET", f"/trees/{self.ref}"), "reading the branch")
            return NessieContent(str(branch["reference"]["hash"]), None)
        body = self._json(response, f"reading {'.'.join(elements)}")
        return NessieContent(str(body["effectiveReference"]["hash"]), body["content"])

    def current_pointer(self, namespace: tuple[str, ...], table: str) -> str | None:
        content = self.read((*namespace, table)).content
        if content is None:
            return None
        if content.get("type") != "ICEBERG_TABLE":
            raise PublishError(
                f"{'.'.join((*namespace, table))} in Nessie is a {content.get('type')}, not a table"
            )
        return str(content["metadataLocation"])

    def register(self, namespace: tuple[str, ...], table: str, metadata_location: str) -> None:
        key = (*namespace, table)
        state = self.read(key)
        if state.content is not None:
            raise PublishConflictError(f"{'.'.join(key)} appeared in Nessie meanwhile")
        operations = [
            put_operation(level, {"type": "NAMESPACE", "elements": list(level)})
            for level in (namespace[: i + 1] for i in range(len(namespace)))
            if self.read(level).content is None
        ]
        content = table_content(self._metadata(metadata_location), metadata_location, None)
        operations.append(put_operation(key, content))
        self.commit(state.hash, operations, f"tableflow: register {'.'.join(key)}")

    def update(
        self, namespace: tuple[str, ...], table: str, metadata_location: str, previous: str
    ) -> None:
        key = (*namespace, table)
        state = self.read(key)
        if state.content is None or state.content.get("metadataLocation") != previous:
            raise PublishConflictError(f"the pointer of {'.'.join(key)} in Nessie moved")
        content = table_content(
            self._metadata(metadata_location), metadata_location, str(state.content["id"])
        )
        self.commit(
            state.hash, [put_operation(key, content)], f"tableflow: publish {'.'.join(key)}"
        )

    def commit(self, expected_hash: str, operations: list[dict[str, Any]], message: str) -> None:
        response = self._request(
            "POST",
            f"/trees/{self.ref}@{expected_hash}/history/commit",
            {"commitMeta": {"message": message}, "operations": operations},
        )
        if response.status_code == 409:
            raise PublishConflictError(f"Nessie refused the commit: {_message(response)}")
        self._json(response, "commit")

    def _metadata(self, metadata_location: str) -> Any:
        from pyiceberg.io import load_file_io
        from pyiceberg.serializers import FromInputFile

        io = load_file_io(dict(self.config.properties), metadata_location)
        try:
            return FromInputFile.table_metadata(io.new_input(metadata_location))
        except Exception as exc:
            raise PublishError(
                f"cannot read {metadata_location} to publish it to Nessie: {exc}"
            ) from exc

    def close(self) -> None:
        self.session.close()


def _message(response: requests.Response) -> str:
    try:
        return str(response.json().get("message", ""))[:300]
    except ValueError:
        return response.text[:300]
