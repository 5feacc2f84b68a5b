"""Reading actual state: catalog tables, registry schemas, Kafka offsets (no JVM).

All reads run concurrently on a thread pool (they are network round trips). A
component that is down fails the whole read with a message naming it and its
address; a problem limited to one table (missing subject, missing topic) is
recorded against that table and becomes a plan blocker.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from tableflow_core.config.project import Project, Table
from tableflow_core.deadletter.topics import topic_partitions
from tableflow_core.errors import TableflowError
from tableflow_core.kafka.admin import CONNECT_TIMEOUT_S as KAFKA_CONNECT_TIMEOUT_S
from tableflow_core.kafka.admin import (
    KafkaMetadataError,
    TopicWatermarks,
    get_watermarks,
    offsets_for_timestamp,
    probe_bootstrap,
    read_watermarks,
    topic_names,
)
from tableflow_core.kafka.latest_records import latest_record
from tableflow_core.maintenance.activity import table_activity
from tableflow_core.plan.actions import PartitionTerm, SortTerm
from tableflow_core.plan.dead_letter_table import iceberg_dlq_users
from tableflow_core.plan.dead_letter_topic import kafka_dlq_users
from tableflow_core.plan.desired import format_spec, start_from_value
from tableflow_core.plan.world_state import ObservedTable, TopicState, WorldState
from tableflow_core.publish import read_published_pointers
from tableflow_core.schemas.latest_schemas import read_latest_schemas
from tableflow_core.schemas.resolve import resolve_schema
from tableflow_core.state.offsets import read_committed_offsets
from tableflow_core.targets.catalog import CatalogHandle
from tableflow_core.targets.kafka import kafka_consumer_config
from tableflow_core.targets.registry import registry_settings

T = TypeVar("T")
KAFKA_TIMEOUT_S = 10.0
# Tables read per call from an embedded catalog running in this process.
IN_PROCESS_CHUNK = 250
_TRANSFORM = re.compile(r"^(?P<name>[a-z]+)(?:\[(?P<param>\d+)\])?$")


class WorldReadError(TableflowError, RuntimeError):
    """A component (catalog, schema registry, Kafka) could not be read."""

    component_down = True

    def __init__(self, component: str, address: str, detail: str) -> None:
        self.component = component
        self.address = address
        super().__init__(f"{component} at {address} is not reachable or failed: {detail}")


@dataclass(frozen=True)
class Readers:
    """The I/O functions the world reader uses (replaceable in tests and benchmarks)."""

    resolve_schema: Callable[..., Any]
    get_watermarks: Callable[..., Mapping[int, tuple[int, int]]]
    offsets_for_timestamp: Callable[..., Mapping[int, int]]
    # Fails fast (KafkaUnreachableError) when no bootstrap server answers at all.
    probe_kafka: Callable[[str, float], None] = lambda _servers, _timeout: None
    # A Kafka dead-letter topic's partition count, None when missing (None: not looked at).
    topic_partitions: Callable[..., int | None] | None = None
    # The cluster's topic names, read when a table's topic is missing (for "did you mean").
    topic_names: Callable[..., frozenset[str]] | None = None
    # Every topic's watermarks in one read (kafka/admin.read_watermarks).
    read_watermarks: Callable[..., TopicWatermarks] = read_watermarks
    # Many subjects' latest schemas in one registry request (schemas/latest_schemas.py).
    read_latest_schemas: Callable[..., Mapping[str, Any]] | None = None
    # A topic's latest record with a value: the embedded schemas of `connect_json`.
    latest_record: Callable[..., Any] | None = None


def default_readers() -> Readers:

    return Readers(
        resolve_schema,
        get_watermarks,
        offsets_for_timestamp,
        probe_bootstrap,
        topic_partitions,
        topic_names,
        read_watermarks,
        read_latest_schemas,
        latest_record,
    )


def partition_terms_of(table: Any) -> tuple[PartitionTerm, ...]:
    schema = table.schema()
    terms = []
    for field in table.spec().fields:
        match = _TRANSFORM.match(str(field.transform))
        name = match.group("name") if match else str(field.transform)
        param = match.group("param") if match else None
        if name == "void":
            continue
        terms.append(
            PartitionTerm(
                column=schema.find_column_name(field.source_id) or str(field.source_id),
                transform=name,
                param=int(param) if param else None,
            )
        )
    return tuple(terms)


def sort_terms_of(table: Any) -> tuple[SortTerm, ...]:
    schema = table.schema()
    return tuple(
        SortTerm(
            column=schema.find_column_name(f.source_id) or str(f.source_id),
            descending=str(f.direction).lower().endswith("desc"),
            nulls_first="first" in str(f.null_order).lower(),
        )
        for f in table.sort_order().fields
    )


def observe_table(
    identifier: str, table: Any, topic: str, *, activity: bool = True
) -> ObservedTable:
    """What plan knows of an existing table; without `activity`, not what its commits
    wrote (the maintenance plan shows as due: an upsert table's manifests are read for it)."""

    committed = read_committed_offsets(table)
    metadata = table.metadata
    return ObservedTable(
        identifier=identifier,
        schema=table.schema(),
        schema_id=metadata.current_schema_id,
        partition_spec_id=metadata.default_spec_id,
        partition_by=partition_terms_of(table),
        sort_order_id=metadata.default_sort_order_id,
        sort_by=sort_terms_of(table),
        properties=dict(metadata.properties),
        snapshot_id=metadata.current_snapshot_id,
        metadata_location=table.metadata_location,
        committed=dict(committed.offsets) if committed and committed.topic == topic else None,
        activity=table_activity(table) if activity else None,
    )


def probe_kafka(project: Project, readers: Readers | None = None) -> None:
    """WorldReadError within ~KAFKA_CONNECT_TIMEOUT_S when no Kafka bootstrap server
    answers. Cheap (one TCP connection): read_world runs it before submitting any
    librdkafka call, so a broker that is down is reported at once, not after timeouts."""
    io = readers or default_readers()
    address = project.target.kafka.bootstrap_servers
    try:
        io.probe_kafka(address, KAFKA_CONNECT_TIMEOUT_S)
    except Exception as exc:
        raise WorldReadError("kafka", address, project.redact(str(exc))) from exc


def key_subject_spec(table: Table) -> Any:
    """The key's format, resolved like a value: its subject named explicitly."""
    spec = format_spec(table.key)
    return spec.model_copy(update={"subject": spec.subject_for(table.topic, is_key=True)})


def listable_subjects(tables: Sequence[Table]) -> set[str]:
    """The subjects the plan reads at version `latest` in text form (Avro, JSON Schema):
    the ones a registry's listing can answer (`schemas/latest_schemas.py`)."""
    subjects: set[str] = set()
    for t in tables:
        sides = [(format_spec(t.value), False)]
        if t.key is not None:
            sides.append((format_spec(t.key), True))
        for spec, is_key in sides:
            if spec.uses_registry and spec.version == "latest" and spec.format != "protobuf":
                subjects.add(spec.subject_for(t.topic, is_key))
    return subjects


def read_world(
    project: Project,
    tables: tuple[Table, ...],
    handle: CatalogHandle,
    *,
    list_undeclared: bool = True,
    read_kafka: bool = True,
    read_published: bool = True,
    observe_activity: bool = True,
    readers: Readers | None = None,
    max_workers: int = 16,
) -> WorldState:
    io = readers or default_readers()
    catalog = handle.catalog
    target = project.target
    kafka_conf = kafka_consumer_config(target.kafka)
    registry = registry_settings(target.schema_registry)
    registry_address = target.schema_registry.url if target.schema_registry else "(none)"
    kafka_address = target.kafka.bootstrap_servers

    if read_kafka and tables:
        probe_kafka(project, io)

    def catalog_call(fn: Callable[[], T]) -> T:
        try:
            return fn()
        except Exception as exc:
            if _is_missing(exc):
                raise
            raise WorldReadError("catalog", handle.address, project.redact(str(exc))) from exc

    with ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="tableflow-world") as pool:
        topics = sorted({t.topic for t in tables}) if read_kafka else []
        # First: Kafka's one read of every topic, and the catalog's listing of each
        # namespace, so only the tables the catalog has are loaded (a new project's first
        # plan loads none: 1,000 tables were 1,000 requests answered "no such table").
        watermarks_f = (
            pool.submit(io.read_watermarks, kafka_conf, topics, KAFKA_TIMEOUT_S) if topics else None
        )
        namespaces_f = pool.submit(
            catalog_call, lambda: {tuple(ns) for ns in catalog.list_namespaces()}
        )
        wanted = {t.namespace for t in tables}
        if list_undeclared:
            wanted |= {t.namespace for t in project.tables}
        listing = {
            ns: pool.submit(_list_tables, catalog_call, catalog, ns) for ns in sorted(wanted)
        }
        resolve = io.resolve_schema
        if io.read_latest_schemas is not None and registry is not None:
            latest = io.read_latest_schemas(registry, listable_subjects(tables))
            if latest:
                resolve = functools.partial(io.resolve_schema, latest=latest)

        def resolve_table(t: Table) -> Any:
            return resolve(
                t.topic,
                format_spec(t.value),
                format_spec(t.key),
                t.metadata_columns,
                registry,
                **_embedded_sample(project, io, kafka_conf, t),
            )

        schema_f = {t.name: pool.submit(resolve_table, t) for t in tables}
        # Upsert: a registry key's own schema (its fields can be key columns).
        key_f = {
            t.name: pool.submit(
                resolve,
                t.topic,
                key_subject_spec(t),
                None,
                (),
                registry,
            )
            for t in tables
            if t.mode == "upsert" and format_spec(t.key).uses_registry
        }
        dlq_f = {
            identifier: pool.submit(_load_identifier, catalog_call, catalog, identifier)
            for identifier in sorted(iceberg_dlq_users(tables))
        }
        # Case-insensitive: some catalogs (Hive) keep names in lower case.
        selected_namespaces = {t.namespace for t in tables}
        present = {
            identifier.lower() for ns in selected_namespaces for identifier in _result(listing[ns])
        }
        table_f = _submit_table_loads(
            pool,
            catalog_call,
            handle,
            [t for t in tables if ".".join((*t.namespace, t.table)).lower() in present],
        )
        dlq_topic_f = {
            topic: pool.submit(io.topic_partitions, kafka_conf, topic, KAFKA_TIMEOUT_S)
            for topic in (sorted(kafka_dlq_users(tables)) if read_kafka else [])
            if io.topic_partitions is not None
        }
        namespaces: set[tuple[str, ...]] = _result(namespaces_f)
        listed: set[str] = set()
        if list_undeclared:
            for ns in {t.namespace for t in project.tables} & namespaces:
                listed.update(listing[ns].result())
        problems: dict[str, list[str]] = {}
        observed: dict[str, ObservedTable] = {}
        for t in tables:
            loaded = table_f[t.name]() if t.name in table_f else None
            if loaded is not None:
                observed[t.identifier] = observe_table(
                    t.identifier, loaded, t.topic, activity=observe_activity
                )
        dlq_tables = {
            identifier: tuple(f.name for f in loaded.schema().fields)
            for identifier, future in dlq_f.items()
            if (loaded := _result(future)) is not None
        }
        schemas: dict[str, Any] = {}
        for t in tables:
            try:
                schemas[t.name] = schema_f[t.name].result()
            except WorldReadError:
                raise  # Kafka, read for a schema embedded in records
            except Exception as exc:
                if type(exc).__name__ == "SchemaResolutionError" and not _registry_down(exc):
                    problems.setdefault(t.name, []).append(f"schema: {exc}")
                else:
                    raise WorldReadError(
                        "schema registry", registry_address, project.redact(str(exc))
                    ) from exc
        key_schemas: dict[str, Any] = {}
        for name, future in key_f.items():
            try:
                key_schemas[name] = future.result()
            except Exception as exc:
                if type(exc).__name__ == "SchemaResolutionError" and not _registry_down(exc):
                    problems.setdefault(name, []).append(f"key schema: {exc}")
                else:
                    raise WorldReadError(
                        "schema registry", registry_address, project.redact(str(exc))
                    ) from exc
        topic_states: dict[str, TopicState] = {}
        missing_topics: set[str] = set()
        if watermarks_f is not None:
            try:
                watermarks = watermarks_f.result()
            except Exception as exc:
                raise WorldReadError("kafka", kafka_address, project.redact(str(exc))) from exc
            for topic, marks in watermarks.found.items():
                topic_states[topic] = TopicState(topic, dict(marks))
            missing_topics.update(watermarks.missing)  # a blocker at the table's `topic:` line
        broker_topics = _broker_topics(io, kafka_conf) if missing_topics else frozenset()
        dlq_topics: dict[str, int | None] = {}
        for topic, future in dlq_topic_f.items():
            try:
                dlq_topics[topic] = future.result()
            except Exception as exc:
                raise WorldReadError("kafka", kafka_address, project.redact(str(exc))) from exc
        published, publish_errors = (
            _read_published(project, [t for t in tables if t.identifier in observed], pool)
            if read_published
            else ({}, {})
        )
        # A timestamp start only matters for partitions the table never read.
        for t in tables:
            start = start_from_value(t)
            state = topic_states.get(t.topic)
            seen = observed.get(t.identifier)
            if (
                isinstance(start, int)
                and state is not None
                and (seen is None or not seen.committed)
            ):
                found = io.offsets_for_timestamp(kafka_conf, t.topic, start, KAFKA_TIMEOUT_S)
                topic_states[t.topic] = TopicState(t.topic, state.watermarks, dict(found))
    return WorldState(
        namespaces=frozenset(namespaces),
        tables=observed,
        listed_tables=frozenset(listed),
        schemas=schemas,
        key_schemas=key_schemas,
        topics=topic_states,
        problems={k: tuple(v) for k, v in problems.items()},
        published=published,
        publish_errors=publish_errors,
        dlq_tables=dlq_tables,
        dlq_topics=dlq_topics,
        missing_topics=frozenset(missing_topics),
        broker_topics=broker_topics,
    )


def _read_published(
    project: Project, tables: list[Table], pool: ThreadPoolExecutor
) -> tuple[dict[str, dict[str, str | None]], dict[str, str]]:
    """The pointers in each existing table's `publish_to` catalogs. A catalog that cannot
    be read does not fail the plan: the table gets a publish action saying so, and apply
    reports whether publishing then works."""

    futures = {
        t.name: pool.submit(read_published_pointers, project, t) for t in tables if t.publish_to
    }
    published: dict[str, dict[str, str | None]] = {}
    errors: dict[str, str] = {}
    for name, future in futures.items():
        try:
            published[name] = future.result()
        except Exception as exc:
            errors[name] = project.redact(f"{type(exc).__name__}: {exc}")[:500]
    return published, errors


def _embedded_sample(
    project: Project, io: Readers, kafka_conf: Mapping[str, str], table: Table
) -> dict[str, Any]:
    """`sample=` for a table whose records embed their schema (`connect_json`): the topic's
    latest record (kafka/latest_records.py); nothing for other tables. Read even when the
    world is read without Kafka (`read_kafka=False`, apply's staleness check of a saved
    plan): these tables' schema is in Kafka, and a changed one makes the plan stale."""
    embedded = "connect_json" in (table.value.format, table.key.format if table.key else None)
    if not embedded or io.latest_record is None:
        return {}
    try:
        return {"sample": io.latest_record(kafka_conf, table.topic, KAFKA_TIMEOUT_S)}
    except KafkaMetadataError as exc:
        if "not found" in str(exc):
            return {}  # a missing topic is reported at the table's `topic:` line
        address = project.target.kafka.bootstrap_servers
        raise WorldReadError("kafka", address, project.redact(str(exc))) from exc


def _broker_topics(io: Readers, kafka_conf: Mapping[str, str]) -> frozenset[str]:
    """The cluster's topics, to suggest a close name for a missing one; empty when they
    cannot be listed (the suggestion is a courtesy, never a reason to fail the plan)."""
    if io.topic_names is None:
        return frozenset()
    try:
        return io.topic_names(kafka_conf, KAFKA_TIMEOUT_S)
    except Exception:
        return frozenset()


def _registry_down(exc: BaseException) -> bool:
    """A resolution error caused by the registry being unreachable or failing (5xx)."""
    cause = exc.__cause__
    if cause is None:
        return False
    if type(cause).__name__ == "SchemaRegistryError":
        return int(getattr(cause, "http_status_code", 0) or 0) >= 500
    return True


def _is_missing(exc: BaseException) -> bool:
    return type(exc).__name__ in ("NoSuchTableError", "NoSuchNamespaceError")


def _list_tables(
    catalog_call: Callable[[Callable[[], Any]], Any], catalog: Any, namespace: tuple[str, ...]
) -> list[str]:
    """The dotted identifiers of the namespace's tables; none when it does not exist."""
    try:
        return [".".join(i) for i in catalog_call(lambda: catalog.list_tables(namespace))]
    except Exception as exc:
        if _is_missing(exc):
            return []
        raise


def _submit_table_loads(
    pool: ThreadPoolExecutor,
    catalog_call: Callable[[Callable[[], Any]], Any],
    handle: CatalogHandle,
    tables: list[Table],
) -> dict[str, Callable[[], Any]]:
    """A function per table giving its pyiceberg table (None when missing), once read.
    An embedded catalog serving from this process is read directly, IN_PROCESS_CHUNK
    tables a call (its work holds the GIL; the calls overlap the registry's round trips);
    any other catalog gets one loadTable request per table on the pool."""
    if not handle.reads_in_process:
        return {
            t.name: pool.submit(_load_table, catalog_call, handle.catalog, t).result for t in tables
        }
    getters: dict[str, Callable[[], Any]] = {}
    for start in range(0, len(tables), IN_PROCESS_CHUNK):
        chunk = tables[start : start + IN_PROCESS_CHUNK]
        loaded = pool.submit(_load_in_process, catalog_call, handle, chunk)
        for t in chunk:
            getters[t.name] = functools.partial(_picked, loaded, t.name)
    return getters


def _picked(loaded: Future[dict[str, Any]], name: str) -> Any:
    return loaded.result().get(name)


def _load_in_process(
    catalog_call: Callable[[Callable[[], Any]], Any], handle: CatalogHandle, tables: list[Table]
) -> dict[str, Any]:
    """Table name -> pyiceberg table for the tables of `tables` the catalog has."""
    identifiers = {t.name: (*t.namespace, t.table) for t in tables}
    loaded = catalog_call(lambda: handle.load_tables_in_process(list(identifiers.values())))
    assert loaded is not None
    return {name: loaded[i] for name, i in identifiers.items() if i in loaded}


def _load_table(
    catalog_call: Callable[[Callable[[], Any]], Any], catalog: Any, table: Table
) -> Any:
    return _load_identifier(catalog_call, catalog, ".".join((*table.namespace, table.table)))


def _load_identifier(
    catalog_call: Callable[[Callable[[], Any]], Any], catalog: Any, identifier: str
) -> Any:
    try:
        return catalog_call(lambda: catalog.load_table(tuple(identifier.split("."))))
    except Exception as exc:
        if _is_missing(exc):
            return None
        raise


def _result(future: Future[T]) -> T:
    return future.result()
