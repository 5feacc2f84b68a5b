"""Compare a table's Iceberg schema with the desired Arrow schema.

Safe, in-place changes (`SchemaDiff.changes`): new optional columns (also nested struct
fields), type widening Iceberg allows (int -> long, float -> double, decimal precision
increase at the same scale), required -> optional. Everything else is `incompatible`.

A column the new schema no longer has is never dropped (that would destroy data): it stays
in the table, optional, and new rows hold null there (`schemas.write_schema`). The first
plan that sees it gone shows a `keep_column` change ("kept, now optional"); apply marks the
column (its doc) so later plans converge. When the field comes back, `restore_column`
clears the mark. A desired type narrower than the table's (e.g.
int into a long column) is not a change: values are widened on write.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa
from pyiceberg.io.pyarrow import _pyarrow_to_schema_without_ids
from pyiceberg.schema import Schema, assign_fresh_schema_ids
from pyiceberg.types import (
    DecimalType,
    DoubleType,
    FloatType,
    IcebergType,
    IntegerType,
    ListType,
    LongType,
    MapType,
    NestedField,
    StructType,
)

from tableflow_core.schemas.changes import ChangeKind, SchemaChange
from tableflow_core.schemas.write_schema import KEPT_COLUMN_DOC

__all__ = ["ChangeKind", "SchemaChange", "SchemaDiff", "diff_schemas", "iceberg_schema_for"]


@dataclass(frozen=True)
class SchemaDiff:
    changes: tuple[SchemaChange, ...]  # in-place, safe
    incompatible: tuple[str, ...]  # human reasons; non-empty = destructive

    @property
    def is_empty(self) -> bool:
        return not self.changes and not self.incompatible


def iceberg_schema_for(arrow_schema: pa.Schema) -> Schema:
    """The Iceberg schema of an Arrow schema, with fresh field ids (1..n)."""
    return assign_fresh_schema_ids(_pyarrow_to_schema_without_ids(arrow_schema))


def diff_schemas(current: Schema, desired: pa.Schema) -> SchemaDiff:
    differ = _Differ()
    differ.diff_struct(current.as_struct(), _pyarrow_to_schema_without_ids(desired).as_struct(), "")
    return SchemaDiff(tuple(differ.changes), tuple(differ.incompatible))


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


@dataclass
class _Differ:
    """Walks the table's and the desired types side by side; collects what differs."""

    changes: list[SchemaChange] = field(default_factory=list)
    incompatible: list[str] = field(default_factory=list)

    def change(self, kind: ChangeKind, path: str, detail: str) -> None:
        self.changes.append(SchemaChange(kind=kind, path=path, detail=detail))

    def diff_struct(self, current: StructType, desired: StructType, prefix: str) -> None:
        existing = {f.name: f for f in current.fields}
        for wanted_field in desired.fields:
            path = _join(prefix, wanted_field.name)
            old = existing.get(wanted_field.name)
            if old is None:
                self.change("add_column", path, str(wanted_field.field_type))
                continue
            if old.doc == KEPT_COLUMN_DOC:
                # A kept column is back in the writer schema: clear the mark, so that a later
                # removal is shown again and the column comment does not say it is gone.
                self.change("restore_column", path, "back in the topic's schema")
            self.diff_field(old, wanted_field, path)
        wanted = {f.name for f in desired.fields}
        for old in current.fields:
            if old.name not in wanted and (old.required or old.doc != KEPT_COLUMN_DOC):
                now = "kept, now optional" if old.required else "kept (optional)"
                self.change(
                    "keep_column",
                    _join(prefix, old.name),
                    f"not in the topic's schema any more: {now}; new rows get null",
                )

    def diff_field(self, old: NestedField, new: NestedField, path: str) -> None:
        if old.required and not new.required:
            self.change("make_optional", path, "required -> optional")
        self.diff_type(old.field_type, new.field_type, path)

    def diff_type(self, old: IcebergType, new: IcebergType, path: str) -> None:
        if isinstance(old, StructType) and isinstance(new, StructType):
            self.diff_struct(old, new, path)
        elif isinstance(old, ListType) and isinstance(new, ListType):
            if old.element_required and not new.element_required:
                self.change("make_optional", f"{path}.element", "required -> optional")
            self.diff_type(old.element_type, new.element_type, f"{path}.element")
        elif isinstance(old, MapType) and isinstance(new, MapType):
            if old.key_type != new.key_type:
                self.incompatible.append(
                    f"column {path}: map key type cannot change from {old.key_type} to "
                    f"{new.key_type}"
                )
            if old.value_required and not new.value_required:
                self.change("make_optional", f"{path}.value", "required -> optional")
            self.diff_type(old.value_type, new.value_type, f"{path}.value")
        elif old != new:
            self.diff_primitive(old, new, path)

    def diff_primitive(self, old: IcebergType, new: IcebergType, path: str) -> None:
        detail = f"{old} -> {new}"
        widens = (isinstance(old, IntegerType) and isinstance(new, LongType)) or (
            isinstance(old, FloatType) and isinstance(new, DoubleType)
        )
        if widens:
            self.change("widen_type", path, detail)
        elif (
            isinstance(old, DecimalType) and isinstance(new, DecimalType) and old.scale == new.scale
        ):
            if new.precision > old.precision:
                self.change("widen_type", path, detail)
            # a lower precision fits the existing column: nothing to do
        elif (isinstance(old, LongType) and isinstance(new, IntegerType)) or (
            isinstance(old, DoubleType) and isinstance(new, FloatType)
        ):
            pass  # narrower values fit the wider column
        else:
            self.incompatible.append(
                f"column {path}: type {old} cannot change to {new} in place "
                "(Iceberg only widens int -> long, float -> double and decimal precision)"
            )
