"""Record decoders for tests and benchmarks, built as the pipeline builds them: the topic's
schema resolved (`resolve_schema`), then `build_decoder` onto the Arrow schema it maps to."""

from __future__ import annotations

import pyarrow as pa

from tableflow_core.schemas.decoding import (
    DecoderSpec,
    RecordDecoder,
    build_decoder,
    serialize_schema,
)
from tableflow_core.schemas.formats import FormatSpec
from tableflow_core.schemas.registry import RegistrySettings
from tableflow_core.schemas.resolve import resolve_schema


def resolved_decoder(
    topic: str,
    value: FormatSpec,
    key: FormatSpec | None = None,
    metadata: tuple[str, ...] = (),
    registry: RegistrySettings | None = None,
) -> tuple[RecordDecoder, pa.Schema]:
    """A decoder of `topic`'s records, and the table schema it decodes them to."""
    target = resolve_schema(topic, value, key, metadata, registry).arrow_schema
    spec = DecoderSpec(topic, value, key, metadata, registry, serialize_schema(target))
    return build_decoder(spec), target
