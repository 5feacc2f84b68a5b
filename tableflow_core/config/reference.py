"""Generate docs/reference.md from the config models, so the docs cannot drift."""

from __future__ import annotations

import inspect
import types
import typing
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, SecretStr
from pydantic_core import PydanticUndefined

from tableflow_core.config.capabilities import TABLE_GATES, UNSUPPORTED_SPARK_CATALOGS
from tableflow_core.config.models.catalogs import (
    EmbeddedCatalog,
    EmbeddedCatalogAuth,
    GlueCatalog,
    HiveCatalog,
    NessieCatalog,
    ObjectStorage,
    RestCatalog,
    SqlCatalog,
)
from tableflow_core.config.models.checks import Check
from tableflow_core.config.models.dead_letter import DeadLetterTarget
from tableflow_core.config.models.files import ProjectConfig
from tableflow_core.config.models.formats import Format, JsonColumn
from tableflow_core.config.models.layout import PartitionField, SortField
from tableflow_core.config.models.maintenance import (
    CompactSettings,
    ExpireSnapshotsSettings,
    Maintenance,
    RemoveOrphansSettings,
    RewriteDeletesSettings,
    RewriteManifestsSettings,
)
from tableflow_core.config.models.tables import StartFrom, TableConfig, TableDefaults
from tableflow_core.config.models.targets import (
    BasicAuth,
    DevStack,
    KafkaConnection,
    KafkaSecurity,
    MetricsEndpoint,
    SchemaRegistryConnection,
    SparkSettings,
    Target,
)
from tableflow_core.config.models.transforms import Transform


def _typed_sections(key: str, union: Any) -> tuple[tuple[str, type[BaseModel]], ...]:
    """A section per member of the `type`-discriminated `union`, in the union's order."""
    members: tuple[type[BaseModel], ...] = get_args(get_args(union)[0])
    return tuple(
        (f"{key}: type {get_args(m.model_fields['type'].annotation)[0]}", m) for m in members
    )


# (heading, model) in reading order.
SECTIONS: tuple[tuple[str, type[BaseModel]], ...] = (
    ("tableflow_project.yml", ProjectConfig),
    ("targets.<name>", Target),
    ("kafka", KafkaConnection),
    ("kafka.security", KafkaSecurity),
    ("schema_registry", SchemaRegistryConnection),
    ("basic_auth", BasicAuth),
    ("catalog: type embedded (default)", EmbeddedCatalog),
    ("catalog.auth (embedded)", EmbeddedCatalogAuth),
    ("catalog.storage (embedded, rest)", ObjectStorage),
    ("catalog: type rest", RestCatalog),
    ("catalog: type sql", SqlCatalog),
    ("catalog: type glue", GlueCatalog),
    ("catalog: type hive", HiveCatalog),
    ("publish_catalogs.<name>: type nessie", NessieCatalog),
    ("spark", SparkSettings),
    ("dev_stack", DevStack),
    ("metrics", MetricsEndpoint),
    ("defaults", TableDefaults),
    ("tables[] (in tables/*.yml under `tables:`, or inline)", TableConfig),
    ("value / key (formats)", Format),
    ("columns[] (plain json)", JsonColumn),
    ("partition_by[]", PartitionField),
    ("sort_by[]", SortField),
    ("start_from: {timestamp}", StartFrom),
    *_typed_sections("transforms[]", Transform),
    *_typed_sections("checks[]", Check),
    *_typed_sections("dlq", DeadLetterTarget),
    ("maintenance (per table, or in defaults)", Maintenance),
    ("maintenance.compact", CompactSettings),
    ("maintenance.expire_snapshots", ExpireSnapshotsSettings),
    ("maintenance.remove_orphans", RemoveOrphansSettings),
    ("maintenance.rewrite_deletes", RewriteDeletesSettings),
    ("maintenance.rewrite_manifests", RewriteManifestsSettings),
)

HEADER = """# Configuration reference

Generated from `tableflow_core/config/models/` (and, for what is marked
**Not supported yet**, `tableflow_core/config/capabilities.py`: plan refuses those with
the key's file:line) by
`python -m tableflow_core.config.reference > docs/reference.md`; a test fails when
it is out of date. Every model rejects unknown keys and values outside a key's choices
(with a "did you mean" suggestion: `json-schema` -> `json_schema`). Names follow the
rules apply meets: topics Kafka's (1-249 of `A-Za-z0-9._-`), namespaces the catalog's
(at most 16 levels of at most 255 characters, no `/`, `\\` or control characters),
identifiers at most 255 characters. String values are rendered with Jinja2 (sandboxed, after YAML parsing, so a
rendered value is always a string of data): `{{ env_var('NAME', 'default') }}`,
`{{ var('name') }}`, `{{ target.name }}`. Secret fields are masked in every output.
"""


NOT_SUPPORTED = "**Not supported yet**"


def _unsupported_keys() -> dict[str, str]:
    """Table keys `plan` refuses (tableflow_core/config/capabilities.py): key -> what."""
    return {gate.key: gate.what for gate in TABLE_GATES}


def _section_note(heading: str) -> str | None:
    """Why a whole section is not usable yet, from the same capability list."""
    for catalog_type in sorted(UNSUPPORTED_SPARK_CATALOGS):
        if heading == f"catalog: type {catalog_type}":
            return (
                f"{NOT_SUPPORTED} as the catalog `apply` writes to: plan refuses a target "
                f"whose catalog is `{catalog_type}`."
            )
    for key, what in _unsupported_keys().items():
        if heading.startswith((f"{key}[]", f"{key}:")):
            return f"{NOT_SUPPORTED}: {what}; plan refuses tables that set `{key}`."
    return None


def render_reference() -> str:
    parts = [HEADER]
    unsupported = _unsupported_keys()
    for heading, model in SECTIONS:
        parts.append(f"\n## `{heading}`\n")
        note = _section_note(heading)
        if note:
            parts.append(f"\n{note}\n\n")
        doc = inspect.cleandoc(model.__doc__ or "")
        if doc:
            parts.append(f"{doc}\n")
        parts.append("\n| key | type | default | description |\n|---|---|---|---|\n")
        for name, field in model.model_fields.items():
            key = field.alias or name
            default = _default(field)
            description = (field.description or "").replace("|", "\\|").replace("\n", " ")
            if model in (TableConfig, TableDefaults) and key in unsupported:
                description = (
                    f"{NOT_SUPPORTED}: {unsupported[key]} (plan refuses it). {description}"
                )
            parts.append(
                f"| `{key}` | {_type_name(field.annotation)} | {default} | {description} |\n"
            )
    return "".join(parts)


def _default(field: Any) -> str:
    if field.is_required():
        return "**required**"
    if field.default_factory is not None:
        try:
            value = field.default_factory()
        except TypeError:
            return "(computed)"
        if isinstance(value, BaseModel):
            return "(defaults)"
        return f"`{value!r}`" if value not in ({}, []) else f"`{value}`"
    if field.default is None or field.default is PydanticUndefined:
        return "—"
    return f"`{field.default}`"


def _type_name(annotation: Any) -> str:
    origin = get_origin(annotation)
    if origin is typing.Annotated:
        return _type_name(get_args(annotation)[0])
    if origin is Literal:
        return " \\| ".join(f"`{a}`" for a in get_args(annotation))
    if origin is Union or isinstance(annotation, types.UnionType):
        members = [a for a in get_args(annotation) if a is not type(None)]
        return " \\| ".join(_type_name(a) for a in members)
    if origin in (list, tuple):
        return f"list of {_type_name(get_args(annotation)[0])}"
    if origin is dict:
        return f"map of {_type_name(get_args(annotation)[1])}"
    if annotation is SecretStr:
        return "secret string"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation.__name__
    if annotation is Any:
        return "any"
    return getattr(annotation, "__name__", str(annotation))


if __name__ == "__main__":
    print(render_reference(), end="")
