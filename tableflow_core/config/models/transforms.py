"""Transforms (`transforms[]`): a discriminated union on `type`, in the spirit of Flink actions."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, SecretStr, model_validator

from tableflow_core.config.models.base import IDENTIFIER, ConfigModel
from tableflow_core.config.names import MAX_NAME_LENGTH


class MaskTransform(ConfigModel):
    """Mask PII columns."""

    type: Literal["mask"]
    columns: list[str] = Field(min_length=1, description="Columns to mask.")
    method: Literal["hash", "redact", "partial"] = Field(
        "hash",
        description="hash: salted SHA-256 hex; redact: replace with `replacement`; partial: keep edges.",
    )
    salt: SecretStr | None = Field(
        None,
        description="Salt for `hash` (required); secret, never printed: "
        "`\"{{ env_var('TABLEFLOW_MASK_SALT') }}\"`.",
    )
    replacement: str = Field("****", description="Replacement for `redact`.")
    keep_first: int = Field(0, ge=0, description="`partial`: characters kept at the start.")
    keep_last: int = Field(4, ge=0, description="`partial`: characters kept at the end.")

    @model_validator(mode="after")
    def _salt_only_for_hash(self) -> MaskTransform:
        # An unsalted SHA-256 of an email or a phone number is reversed by a dictionary.
        if self.method == "hash" and self.salt is None:
            raise ValueError(
                "mask method hash needs a salt; keep it out of the file: "
                "salt: \"{{ env_var('TABLEFLOW_MASK_SALT') }}\""
            )
        if self.method != "hash" and self.salt is not None:
            raise ValueError("salt only applies to mask method hash")
        return self


class DedupTransform(ConfigModel):
    """Drop duplicate records within a run's batch (append tables: also against the table's rows)."""

    type: Literal["dedup"]
    keys: list[str] = Field(min_length=1, description="Columns identifying a duplicate.")
    keep: Literal["first", "last"] = Field(
        "last", description="Which duplicate survives, by Kafka offset."
    )


class FilterTransform(ConfigModel):
    """Keep only records matching a Spark SQL boolean expression."""

    type: Literal["filter"]
    where: str = Field(min_length=1, description="Spark SQL predicate, e.g. `status <> 'TEST'`.")


class DeriveTransform(ConfigModel):
    """Add (or replace) a column computed by a Spark SQL expression."""

    type: Literal["derive"]
    column: str = Field(
        pattern=IDENTIFIER, max_length=MAX_NAME_LENGTH, description="New column name."
    )
    expression: str = Field(min_length=1, description="Spark SQL expression.")


class RenameTransform(ConfigModel):
    """Rename columns."""

    type: Literal["rename"]
    columns: dict[str, str] = Field(min_length=1, description="Map of old name to new name.")


class DropTransform(ConfigModel):
    """Drop columns."""

    type: Literal["drop"]
    columns: list[str] = Field(min_length=1, description="Columns to drop.")


Transform = Annotated[
    MaskTransform
    | DedupTransform
    | FilterTransform
    | DeriveTransform
    | RenameTransform
    | DropTransform,
    Field(discriminator="type"),
]
