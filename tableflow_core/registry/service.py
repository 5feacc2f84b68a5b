"""The registry's operations, returning Confluent-shaped JSON values (no HTTP here)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from tableflow_core.registry import errors
from tableflow_core.registry.compatibility import CompatibilityLevel, ParsedAvro, check_level
from tableflow_core.registry.schemas import (
    SchemaDefinition,
    SchemaType,
    definition_from_request,
    fingerprint,
    guid_for,
    parse_avro,
    validate,
)
from tableflow_core.registry.store import GLOBAL, RegistryStore, StoredSchema, SubjectVersion

DEFAULT_COMPATIBILITY = CompatibilityLevel.BACKWARD
_MAX_VERSION = 2**31 - 1
_MAX_SCHEMA_ID = 2**63 - 1
_VERSION = re.compile(r"[1-9][0-9]{0,9}", re.ASCII)


class SchemaRegistry:
    """Confluent Schema Registry semantics on top of a `RegistryStore`."""

    def __init__(self, store: RegistryStore) -> None:
        self._store = store

    @classmethod
    def open(cls, database: Path | str) -> SchemaRegistry:
        return cls(RegistryStore(database))

    def close(self) -> None:
        self._store.close()

    # -- registering and looking up ---------------------------------------------------------

    def register(self, subject: str, body: object) -> dict[str, Any]:
        definition = definition_from_request(body)
        with self._store.transaction():
            referenced = self._referenced_texts(definition)
            print_ = fingerprint(definition)
            existing = self._store.schema_by_fingerprint(print_)
            live = self._store.versions(subject)
            if existing and any(v.schema_id == existing.id for v in live):
                return {"id": existing.id, "guid": existing.guid}
            validate(definition, referenced)
            messages = self._incompatibilities(subject, definition, referenced, live, None)
            if messages:
                raise errors.incompatible_schema(subject, messages)
            schema_id = (
                existing.id
                if existing
                else self._store.insert_schema(definition, print_, guid_for(print_))
            )
            self._store.add_version(subject, self._store.next_version(subject), schema_id)
            stored = self._store.schema_by_id(schema_id)
            assert stored is not None
            return {"id": schema_id, "guid": stored.guid}

    def lookup(self, subject: str, body: object, deleted: bool = False) -> dict[str, Any]:
        definition = definition_from_request(body)
        versions = self._store.versions(subject, include_deleted=deleted)
        if not versions:
            raise errors.subject_not_found(subject)
        stored = self._store.schema_by_fingerprint(fingerprint(definition))
        matches = [v for v in versions if stored and v.schema_id == stored.id]
        if stored is None or not matches:
            raise errors.schema_not_found(f"Schema not found under subject '{subject}'")
        return _version_view(matches[-1], stored)

    # -- schemas by id ---------------------------------------------------------------------

    def schema(self, schema_id: int) -> dict[str, Any]:
        return _schema_view(self._stored(schema_id))

    def schema_by_guid(self, guid: str) -> dict[str, Any]:
        stored = self._store.schema_by_guid(guid)
        if stored is None:
            raise errors.schema_not_found(f"Schema {guid} not found")
        return _schema_view(stored)

    def schema_text(self, schema_id: int) -> str:
        return self._stored(schema_id).definition.schema

    def schema_versions(
        self, schema_id: int, subject: str | None = None, deleted: bool = False
    ) -> list[dict[str, Any]]:
        self._stored(schema_id)
        return [
            {"subject": v.subject, "version": v.version}
            for v in self._store.versions_of_schema(schema_id, include_deleted=deleted)
            if subject is None or v.subject == subject
        ]

    def schema_subjects(
        self, schema_id: int, subject: str | None = None, deleted: bool = False
    ) -> list[str]:
        return sorted({v["subject"] for v in self.schema_versions(schema_id, subject, deleted)})

    def list_schemas(
        self,
        subject_prefix: str = "",
        deleted: bool = False,
        latest_only: bool = False,
        offset: int = 0,
        limit: int = -1,
    ) -> list[dict[str, Any]]:
        """`GET /schemas`: a version view (subject, version, id, schema...) of every
        subject version whose subject starts with `subject_prefix`, by subject then
        version; `latest_only`: each subject's latest version only (of those listed)."""
        views: list[dict[str, Any]] = []
        for subject in self.subjects(subject_prefix or None, deleted=deleted):
            listed = self._store.versions(subject, include_deleted=deleted)
            if latest_only:
                listed = listed[-1:]
            views.extend(_version_view(v, self._stored(v.schema_id)) for v in listed)
        end = None if limit < 0 else offset + limit
        return views[offset:end]

    # -- subjects and versions -------------------------------------------------------------

    def subjects(
        self, prefix: str | None = None, deleted: bool = False, deleted_only: bool = False
    ) -> list[str]:
        names = self._store.subjects(include_deleted=deleted, deleted_only=deleted_only)
        return [n for n in names if prefix is None or n.startswith(prefix)]

    def versions(
        self, subject: str, deleted: bool = False, deleted_only: bool = False
    ) -> list[int]:
        all_versions = self._store.versions(subject, include_deleted=True)
        if not all_versions:
            raise errors.subject_not_found(subject)
        if deleted_only:
            return [v.version for v in all_versions if v.deleted]
        chosen = [v.version for v in all_versions if deleted or not v.deleted]
        if not chosen:
            raise errors.subject_not_found(subject)
        return chosen

    def version(self, subject: str, version: str, deleted: bool = False) -> dict[str, Any]:
        found = self._find_version(subject, version, deleted)
        return _version_view(found, self._stored(found.schema_id))

    def version_schema_text(self, subject: str, version: str, deleted: bool = False) -> str:
        return self._stored(
            self._find_version(subject, version, deleted).schema_id
        ).definition.schema

    def referenced_by(self, subject: str, version: str) -> list[int]:
        found = self._find_version(subject, version, deleted=False)
        return [
            s.id
            for s in self._store.all_schemas()
            if any(
                r.subject == found.subject and r.version == found.version
                for r in s.definition.references
            )
        ]

    def delete_subject(self, subject: str, permanent: bool = False) -> list[int]:
        with self._store.transaction():
            every = self._store.versions(subject, include_deleted=True)
            if not every:
                raise errors.subject_not_found(subject)
            live = [v for v in every if not v.deleted]
            if permanent:
                if live:
                    raise errors.subject_not_soft_deleted(subject)
                self._store.hard_delete(subject)
                return [v.version for v in every]
            if not live:
                raise errors.subject_soft_deleted(subject)
            self._store.soft_delete(subject)
            return [v.version for v in live]

    def delete_version(self, subject: str, version: str, permanent: bool = False) -> int:
        with self._store.transaction():
            found = self._find_version(subject, version, deleted=permanent)
            if permanent:
                if not found.deleted:
                    raise errors.version_not_soft_deleted(subject, found.version)
                self._store.hard_delete(subject, found.version)
            else:
                self._store.soft_delete(subject, found.version)
            return found.version

    # -- compatibility config and checks ---------------------------------------------------

    def compatibility(
        self, subject: str | None = None, default_to_global: bool = False
    ) -> dict[str, str]:
        if subject is None:
            level = self._store.compatibility(GLOBAL) or DEFAULT_COMPATIBILITY.value
            return {"compatibilityLevel": level}
        level_or_none = self._store.compatibility(subject)
        if level_or_none is None:
            if not default_to_global:
                raise errors.subject_config_not_found(subject)
            return self.compatibility(None)
        return {"compatibilityLevel": level_or_none}

    def set_compatibility(self, subject: str | None, body: object) -> dict[str, str]:
        raw = (
            body.get("compatibility", body.get("compatibilityLevel"))
            if isinstance(body, dict)
            else None
        )
        level = CompatibilityLevel.parse(raw)
        self._store.set_compatibility(GLOBAL if subject is None else subject, level.value)
        return {"compatibility": level.value}

    def delete_compatibility(self, subject: str | None) -> dict[str, str]:
        key = GLOBAL if subject is None else subject
        previous = self._store.compatibility(key)
        if previous is None and subject is not None:
            raise errors.subject_config_not_found(subject)
        self._store.delete_compatibility(key)
        return {"compatibilityLevel": previous or DEFAULT_COMPATIBILITY.value}

    def test_compatibility(self, subject: str, version: str | None, body: object) -> dict[str, Any]:
        """Check against one version (`version`) or, with None, all versions per the level."""
        definition = definition_from_request(body)
        referenced = self._referenced_texts(definition)
        validate(definition, referenced)
        live = self._store.versions(subject)
        if version is not None:
            if not live:
                if version in ("latest", "-1"):
                    return {"is_compatible": True, "messages": []}
                raise errors.subject_not_found(subject)
            live = [self._find_version(subject, version, deleted=False)]
        messages = self._incompatibilities(subject, definition, referenced, live, version)
        return {"is_compatible": not messages, "messages": messages}

    def _effective_level(self, subject: str) -> CompatibilityLevel:
        raw = self._store.compatibility(subject) or self._store.compatibility(GLOBAL)
        return CompatibilityLevel(raw) if raw else DEFAULT_COMPATIBILITY

    def _incompatibilities(
        self,
        subject: str,
        definition: SchemaDefinition,
        referenced: list[str],
        existing: list[SubjectVersion],
        single_version: str | None,
    ) -> list[str]:
        level = self._effective_level(subject)
        if definition.schema_type is not SchemaType.AVRO or level is CompatibilityLevel.NONE:
            return []
        if single_version is not None and level.transitive:
            level = CompatibilityLevel(level.value.removesuffix("_TRANSITIVE"))
        candidate = ParsedAvro(*parse_avro(definition.schema, referenced))
        previous = []
        for subject_version in existing:
            stored = self._stored(subject_version.schema_id)
            if stored.definition.schema_type is SchemaType.AVRO:
                texts = self._referenced_texts(stored.definition)
                previous.append(ParsedAvro(*parse_avro(stored.definition.schema, texts)))
        return check_level(level, candidate, previous)

    # -- helpers ---------------------------------------------------------------------------

    def _stored(self, schema_id: int) -> StoredSchema:
        if not 1 <= schema_id <= _MAX_SCHEMA_ID:  # SQLite integers are 64-bit
            raise errors.schema_not_found(f"Schema {schema_id} not found")
        stored = self._store.schema_by_id(schema_id)
        if stored is None:
            raise errors.schema_not_found(f"Schema {schema_id} not found")
        return stored

    def _find_version(self, subject: str, version: str, deleted: bool) -> SubjectVersion:
        wanted = _parse_version(version)
        candidates = self._store.versions(subject, include_deleted=deleted)
        if not candidates:
            raise errors.subject_not_found(subject)
        if wanted is None:
            return candidates[-1]
        for candidate in candidates:
            if candidate.version == wanted:
                return candidate
        raise errors.version_not_found(subject, wanted)

    def _referenced_texts(self, definition: SchemaDefinition, depth: int = 0) -> list[str]:
        """Texts of every schema `definition` references, dependencies before dependents."""
        if depth > 32:
            raise errors.invalid_schema("schema references nest deeper than 32 levels (a cycle?)")
        texts: list[str] = []
        for reference in definition.references:
            try:
                found = self._find_version(reference.subject, str(reference.version), deleted=True)
            except errors.RegistryError:
                raise errors.invalid_schema(
                    f"reference {reference.name!r} to subject '{reference.subject}' version "
                    f"{reference.version} does not exist"
                ) from None
            referenced = self._stored(found.schema_id).definition
            texts += self._referenced_texts(referenced, depth + 1)
            texts.append(referenced.schema)
        return texts


def _parse_version(version: str) -> int | None:
    """None means latest. Strict: "latest", "-1" or a positive integer in canonical
    decimal; Python's int() would also take " 1", "1_0", "+1" or full-width digits."""
    if version in ("latest", "-1"):
        return None
    if not _VERSION.fullmatch(version):
        raise errors.invalid_version(version)
    number = int(version)
    if number > _MAX_VERSION:
        raise errors.invalid_version(version)
    return number


def _schema_view(stored: StoredSchema) -> dict[str, Any]:
    view: dict[str, Any] = {"schema": stored.definition.schema, "guid": stored.guid}
    if stored.definition.schema_type is not SchemaType.AVRO:
        view["schemaType"] = stored.definition.schema_type.value
    if stored.definition.references:
        view["references"] = [r.to_dict() for r in stored.definition.references]
    return view


def _version_view(version: SubjectVersion, stored: StoredSchema) -> dict[str, Any]:
    return {
        "subject": version.subject,
        "version": version.version,
        "id": stored.id,
        **_schema_view(stored),
    }
