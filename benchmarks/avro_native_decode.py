"""Issue 45: what decoding a batch of Confluent-framed Avro records costs through the
decoders tableflow runs, and through a native Avro reader (an exploration, not a code
path of tableflow), same records, same run.

    .venv/bin/python benchmarks/avro_native_decode.py [--records 100000] [--repeats 3]

The records are benchmarks/upsert.py's (`record(i)`, the 10-field event schema), framed as
the registry serializers frame them (magic byte, schema id). Four decoders, CPU seconds,
best of `--repeats`:

- fastavro's `schemaless_reader` per record, then `pa.Table.from_pylist` (the general path);
- tableflow's compiled reader (`schemas/avro_records.py`, what a flat record goes
  through), then the columns to Arrow;
- tableflow's chunk at once (`schemas/avro_columns.py`, what a chunk of one schema id
  goes through: each field read over every record with numpy, each record proven to end
  on its last byte);
- a native reader: the payloads without their 5-byte frames are exactly the body of one
  block of an Avro object container file, so a header (magic, the writer schema, a sync
  marker) and the block's count and size make a file that polars' Rust reader
  (`polars.read_avro`) decodes in one call. polars is not one of tableflow's
  dependencies: this runs only where it is installed (`pip install polars`), and says so
  otherwise.

Every decoder's rows are checked equal to the records written. The native reader's types
differ from the table's (`large_string`, the enum as a dictionary, timestamps in ms): a
design on it would cast them, and would still need the per-record path to name a corrupt
record (one bad record fails the whole block).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import time
from collections.abc import Callable
from typing import Any

import fastavro
import pyarrow as pa
from event_schema import SCHEMA
from repo_root import ROOT  # noqa: F401  (the repo on sys.path)
from upsert import avro_long, record

from tableflow_core.schemas import avro_columns, avro_records, avro_types
from tableflow_core.schemas.arrow_values import TemporalAs, storage_type

FRAME = b"\x00\x00\x00\x00\x01"  # magic byte 0, schema id 1


def container_file(payloads: list[bytes], schema_text: str) -> bytes:
    """One Avro object container file whose one block is the payloads' bodies."""
    sync = os.urandom(16)
    header = bytearray(b"Obj\x01") + avro_long(2)
    for key, value in ((b"avro.schema", schema_text.encode()), (b"avro.codec", b"null")):
        header += avro_long(len(key)) + key + avro_long(len(value)) + value
    header += b"\x00" + sync
    body = b"".join(p[len(FRAME) :] for p in payloads)
    return bytes(header) + avro_long(len(payloads)) + avro_long(len(body)) + body + sync


def by_fastavro(payloads: list[bytes]) -> pa.Table:
    parsed = fastavro.parse_schema(SCHEMA)
    rows = [fastavro.schemaless_reader(io.BytesIO(p[len(FRAME) :]), parsed, None) for p in payloads]
    return pa.Table.from_pylist(rows)


def by_compiled(payloads: list[bytes]) -> pa.Table:
    mapping = avro_types.map_avro_schema(json.dumps(SCHEMA))
    names = [f["name"] for f in SCHEMA["fields"]]
    reader = avro_records.compile_record_reader(mapping, names)
    assert reader is not None
    rows = [reader(p, len(FRAME)) for p in payloads]
    columns = list(zip(*rows, strict=True))
    return pa.Table.from_arrays([pa.array(c) for c in columns], names=names)


def by_columns(payloads: list[bytes]) -> pa.Table:
    """What a chunk of one schema id goes through (`schemas/avro_columns.py`): the
    payloads joined, each field read over every record, straight into Arrow."""
    mapping = avro_types.map_avro_schema(json.dumps(SCHEMA))
    names = [f.name for f in mapping.arrow_type]
    types = [storage_type(f.type, TemporalAs.INT) for f in mapping.arrow_type]
    reader = avro_columns.compile_columns_reader(mapping, names, types)
    assert reader is not None
    arrays = reader(payloads, FRAME)
    assert arrays is not None, "the records were not proven clean"
    return pa.Table.from_arrays(arrays, names=names)


def by_native(payloads: list[bytes]) -> pa.Table:
    import polars

    blob = container_file(payloads, json.dumps(SCHEMA))
    return polars.read_avro(io.BytesIO(blob)).to_arrow()


def best_cpu(
    decode: Callable[[list[bytes]], pa.Table], payloads: list[bytes], repeats: int
) -> tuple[float, pa.Table]:
    best, table = float("inf"), None
    for _ in range(repeats):
        started = time.process_time()
        table = decode(payloads)
        best = min(best, time.process_time() - started)
    assert table is not None
    return best, table


def canonical(table: pa.Table) -> dict[str, list[Any]]:
    """The first rows' values in one form whatever the decoder's types: timestamps as
    microseconds, dates as days, strings and enum symbols as str."""
    out = {}
    for name in table.column_names:
        column = table[name]
        kind = column.type
        if pa.types.is_dictionary(kind):
            column = column.cast(pa.string())
        elif pa.types.is_timestamp(kind):
            column = column.cast(pa.timestamp("us", kind.tz)).cast(pa.int64())
        elif pa.types.is_date32(kind):
            column = column.cast(pa.int32())
        elif pa.types.is_large_string(kind):
            column = column.cast(pa.string())
        out[name] = column.to_pylist()
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    parsed = fastavro.parse_schema(SCHEMA)
    records: list[dict[str, Any]] = []
    payloads: list[bytes] = []
    for i in range(args.records):
        value = record(i)
        buffer = io.BytesIO()
        fastavro.schemaless_writer(buffer, parsed, value)
        records.append(value)
        payloads.append(FRAME + buffer.getvalue())
    written = pa.Table.from_pylist(records[:2000])
    # `score` is an Avro float: what any decoder reads back is the value rounded to 32 bits.
    score = written.schema.get_field_index("score")
    expected = canonical(written.set_column(score, "score", written["score"].cast(pa.float32())))
    print(f"{args.records:,} records of {len(SCHEMA['fields'])} fields, "
          f"{sum(map(len, payloads)) / len(payloads):.1f} bytes each; load average "
          f"{os.getloadavg()[0]:.2f}")  # fmt: skip
    decoders: dict[str, Callable[[list[bytes]], pa.Table]] = {
        "fastavro + from_pylist": by_fastavro,
        "tableflow's compiled reader + arrays": by_compiled,
        "tableflow's chunk at once (avro_columns)": by_columns,
    }
    try:
        import polars  # noqa: F401
    except ImportError:
        print("polars is not installed (`pip install polars`): the native reader is not run")
    else:
        decoders["native (polars.read_avro on one container block)"] = by_native
    baseline = None
    for name, decode in decoders.items():
        cpu, table = best_cpu(decode, payloads, args.repeats)
        baseline = baseline or cpu
        equal = canonical(table.slice(0, 2000)) == expected
        print(f"{name:<50} {cpu * 1000:8.1f} ms CPU  {cpu / args.records * 1e6:5.2f} us a record  "
              f"{baseline / cpu:5.1f}x  rows equal: {equal}")  # fmt: skip


if __name__ == "__main__":
    main()
