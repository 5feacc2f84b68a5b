"""Building the SparkSession that `apply` runs on.

Every table write goes through the Apache Iceberg Spark runtime; its S3FileIO calls the
AWS SDK in `iceberg-aws-bundle` of the same Iceberg version. Both come from the lock
`jvm/artifact_locks/iceberg-s3.json`: fetched once into the artifact cache and shipped
with `spark.jars` (the default), or resolved by Spark itself from their coordinates
(`spark.jars.packages`) when the target says `spark.iceberg_jars: packages`.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import sys
import threading
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from tableflow_core.jvm.artifacts import ensure, load_lock, spark_packages
from tableflow_core.jvm.class_data_sharing import JAVA_OPTIONS_KEY, class_data_sharing

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

LOG4J2_CONFIG = Path(__file__).with_name("log4j2.properties")

# The Iceberg Spark runtime and the AWS bundle its S3FileIO needs, one Iceberg version.
ICEBERG_LOCK = "iceberg-s3"
ICEBERG_RUNTIME_ARTIFACT = "iceberg-spark-runtime"

IcebergJarSource = Literal["cache", "packages"]

LOCAL_IP_ENV = "SPARK_LOCAL_IP"

# Spark redacts a conf entry (environment page, event log) when its key or value matches.
# Its default, `(?i)secret|password|token|access[.]?key`, misses the REST catalog's
# `spark.sql.catalog.<name>.credential` (client id and secret in one value) and the S3
# key id `s3.access-key-id`; `access[._-]?key` also covers `AWS_ACCESS_KEY_ID`.
REDACTION_KEY = "spark.redaction.regex"
REDACTION_REGEX = "(?i)secret|password|token|credential|access[._-]?key"

# Spark's defaults are tuned for clusters; these suit a laptop or a 2-core CI box
# (measured: 200 shuffle partitions made a 1M-row dedup 3-5x slower than 4).
SMALL_MACHINE_DEFAULTS: dict[str, str] = {
    "spark.sql.shuffle.partitions": "4",
    "spark.sql.execution.arrow.maxRecordsPerBatch": "250000",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.driver.memory": "2g",
    "spark.sql.session.timeZone": "UTC",
    # A join whose smaller side is under autoBroadcastJoinThreshold x shuffle partitions
    # (256 MB here) hashes it instead of sorting both sides. An upsert's MERGE is a right
    # outer join of the table's keys (1M rows) and the batch (the build side): 100k
    # records into 1M rows, interleaved A/B over 10 batches, 4.43 s instead of 5.22 s a
    # batch, JVM CPU 3.90 s instead of 4.40 s (no sort of the table's side, no GC of its
    # pages). Adaptive execution re-plans the join with the sizes the shuffles measured,
    # so a large batch still gets the sort-merge join.
    "spark.sql.join.preferSortMergeJoin": "false",
    # An upsert batch (at most 500k records, pipeline/runners/write_upsert.py) is
    # broadcast to its table's scan when its cached size is under this (Spark's default,
    # 10 MB, is ~150k records of 10 fields): the table's rows are matched where they are
    # read, not shuffled (100k records into 10M rows: JVM CPU ~3.8 s instead of ~7.3 s).
    "spark.sql.autoBroadcastJoinThreshold": "64MB",
}

# pyspark's workers check pyarrow's version with distutils' LooseVersion. On Python 3.11
# setuptools' distutils shim turns that import into importing setuptools and
# pkg_resources, which reads every installed distribution (~0.2 s of CPU per worker);
# the standard library's distutils has the same LooseVersion.
WORKER_DISTUTILS_KEY = "spark.executorEnv.SETUPTOOLS_USE_DISTUTILS"

DRIVER_CLASS_PATH_KEY = "spark.driver.extraClassPath"
EXECUTOR_OPTIONS_KEY = "spark.executor.extraJavaOptions"
# Python workers fork from a daemon that imported the decode path already.
WORKER_DAEMON_MODULE = "tableflow_core.pipeline.worker_daemon"

# The parallel collector, shrinking the heap to what is live plus 5-20% after a
# collection: G1 keeps the heap it grew to (up to spark.driver.memory) for good. A one-shot
# apply's JVM measured ~130 MB lower than with G1 (docs/history/performance-rounds.md);
# `tableflow run`'s, on a 10-table soak at 1 s, 1,066 MB PSS at the end instead of 1,483 MB
# (docs/production.md). Left out when the user's options pick a collector of their own
# (the JVM refuses to start with two).
HEAP_RETURNING_JVM_OPTIONS = (
    "-XX:+UseParallelGC",
    "-XX:MinHeapFreeRatio=5",
    "-XX:MaxHeapFreeRatio=20",
)
COLLECTOR_CHOICE = re.compile(r"-XX:\+Use\w+GC\b")

# A service's JVM (`tableflow run`, weeks) instead: the serial collector, starting from a
# 64 MB heap, and the same free-heap ratios. With the parallel collector the heap never
# shrank below its initial size (1/64 of the machine's memory: 384 MB on 24 GB), although
# ~90 MB of it was live after a full collection, and the collector's own structures, sized
# for the 2 GB maximum, took 80 MB (NMT, a 10-table soak at 1 s: heap 386 MB, GC 81 MB
# committed; serial from 64 MB: heap 194 MB, GC 0.7 MB; the JVM's PSS 826 -> 687 MB).
# `spark.driver.memory` (-Xmx) is unchanged: a large batch has the same heap to grow into.
# Left out like the options above when the user's options pick a collector; a user's
# -Xms comes after ours and wins.
SERVICE_HEAP_JVM_OPTIONS = (
    "-XX:+UseSerialGC",
    "-Xms64m",
    "-XX:MinHeapFreeRatio=5",
    "-XX:MaxHeapFreeRatio=20",
)

# A service's JIT: C1 only, as a one-shot command's (below). C2's compiled code and its
# compiler's arenas took ~70 MB of the JVM's PSS in the soak (687 -> 613 MB); a cycle's
# JVM work is Iceberg commits and planning, small batches' writes.
SERVICE_JIT_JVM_OPTIONS = ("-XX:TieredStopAtLevel=1",)

# A service's Python workers (Spark's `executorEnv`; a target's own entry wins): Arrow's
# buffers from the C library's allocator instead of mimalloc, which kept freed pages
# (the soak's workers 249 -> 225 MB PSS with the system pool; the driver's pool is set by
# `use_system_arrow_pool`).
ARROW_POOL_ENV = "ARROW_DEFAULT_MEMORY_POOL"
# A service's processes use at most two of glibc's malloc arenas (its default: eight per
# core, one per thread up to that). With the threads of lanes, the embedded catalog and
# Spark, each arena kept its own freed pages: the 10-table soak's driver grew 406 -> 509 MB
# PSS over 8 minutes with the default, 388 -> 452 MB with two arenas, and the JVM's
# native memory 654 -> 623 MB (`limit_malloc_arenas`).
MALLOC_ARENAS_ENV = "MALLOC_ARENA_MAX"
SERVICE_MALLOC_ARENAS = 2
SERVICE_SPARK_CONF: dict[str, str] = {
    f"spark.executorEnv.{ARROW_POOL_ENV}": "system",
    f"spark.executorEnv.{MALLOC_ARENAS_ENV}": str(SERVICE_MALLOC_ARENAS),
}
# glibc's mallopt parameter for the arena limit (malloc.h: M_ARENA_MAX).
_M_ARENA_MAX = -8

# A one-shot command's JVM (apply) lives seconds to minutes: the C2 compiler spends more
# CPU than its faster code saves (1M records: the JVM used ~30 s of CPU with tiered JIT,
# ~17 s with C1 only). `tableflow run` keeps tiered compilation.
SHORT_LIVED_JVM_OPTIONS = ("-XX:TieredStopAtLevel=1",)


# The same one-shot JVM keeps its heap small (the options above), so a sort's pages on
# the heap (a dedup's window, an upsert's MERGE) made the collector run again and again:
# 1M rows with a dedup spent 3.2 s in task GC on the heap, 0.9 s with the pages off it
# (docs/history/performance-rounds.md). Off-heap pages are allocated only by sorts and aggregations.
SHORT_LIVED_SPARK_CONF: dict[str, str] = {
    "spark.memory.offHeap.enabled": "true",
    "spark.memory.offHeap.size": "512m",
}


@dataclass(frozen=True)
class IcebergJars:
    """Where the session's Iceberg jars come from: local files (`spark.jars`, shipped by
    the driver to the executors) or coordinates Spark resolves (`spark.jars.packages`)."""

    files: tuple[str, ...] = ()
    packages: tuple[str, ...] = ()


def iceberg_jars(source: IcebergJarSource = "cache") -> IcebergJars:
    """The Iceberg runtime and AWS bundle of the `iceberg-s3` lock. `cache`: their files in
    the artifact cache, downloaded and checked only the first time (`jvm/artifacts.py`);
    `packages`: their coordinates, for a cluster whose Spark resolves from Maven itself."""
    lock = load_lock(ICEBERG_LOCK)
    if source == "packages":
        return IcebergJars(packages=tuple(spark_packages(lock).split(",")))
    return IcebergJars(files=tuple(str(path) for path in ensure(lock).files))


def driver_local_ip(
    master: str, conf: Mapping[str, object], environ: Mapping[str, str]
) -> str | None:
    """The address every listener of the driver JVM binds (its `SPARK_LOCAL_IP`), or None
    to leave it alone: the user's own `SPARK_LOCAL_IP`; loopback for `local[*]` (everything
    is on this machine); on a cluster the address the target gives the driver
    (`spark.driver.bindAddress`, else `spark.driver.host`). Spark binds its RPC and block
    manager ports to `spark.driver.bindAddress` already, but its web UI only to
    `SPARK_LOCAL_IP`, else to every interface (measured in tests/integration/test_cluster_hosts.py:
    the driver's UI listened on `*:4040` with only `spark.driver.host` set)."""
    if LOCAL_IP_ENV in environ:
        return None
    if master.startswith("local"):
        return "127.0.0.1"
    address = conf.get("spark.driver.bindAddress") or conf.get("spark.driver.host")
    return str(address) if address else None


def redaction_regex(user_regex: str | None) -> str:
    """Ours, or ours and the user's: a user's own pattern widens redaction, never narrows it."""
    return f"{REDACTION_REGEX}|(?:{user_regex})" if user_regex else REDACTION_REGEX


def iceberg_catalog_conf(name: str, properties: Mapping[str, str]) -> dict[str, str]:
    """Spark conf entries that register an Iceberg catalog called `name`.

    `properties` are Iceberg catalog properties (type, uri, warehouse, credential...).
    """
    conf = {f"spark.sql.catalog.{name}": "org.apache.iceberg.spark.SparkCatalog"}
    # A long-lived session must see commits made by others (pyiceberg, other runs).
    conf[f"spark.sql.catalog.{name}.cache-enabled"] = "false"
    for key, value in properties.items():
        conf[f"spark.sql.catalog.{name}.{key}"] = str(value)
    return conf


def register_catalog(spark: SparkSession, name: str, properties: Mapping[str, str]) -> None:
    """Register an Iceberg catalog on a running session.

    Settings made on a running session are SQL conf, and Spark copies the SQL conf into
    every job's and stage's properties, which its event log writes without redaction
    (only keys of the application's SparkConf are redacted there): the catalog credential
    and S3 keys would be in the log in clear. So a catalog with secrets is loaded at once
    (it reads its options only then) and its secret entries are removed from the conf.
    """
    conf = iceberg_catalog_conf(name, properties)
    for key, value in conf.items():
        spark.conf.set(key, value)
    secret = re.compile(REDACTION_REGEX)
    secret_keys = [k for k, v in conf.items() if secret.search(k) or secret.search(v)]
    if secret_keys:
        # The catalog manager reads the conf of the thread's active session.
        session = spark._jsparkSession
        spark._jvm.org.apache.spark.sql.SparkSession.setActiveSession(session)  # type: ignore[union-attr]
        session.sessionState().catalogManager().catalog(name)
        for key in secret_keys:
            spark.conf.unset(key)


def build_spark_session(
    master: str = "local[*]",
    app_name: str = "tableflow",
    conf: Mapping[str, str] | None = None,
    packages: list[str] | None = None,
    catalogs: Mapping[str, Mapping[str, str]] | None = None,
    short_lived: bool = False,
    share_classes: bool = False,
    iceberg: IcebergJarSource = "cache",
    java_options: Sequence[str] = (),
    service: bool = False,
) -> SparkSession:
    """Create (or reuse) the SparkSession with the Iceberg runtime and extensions.

    `short_lived`: the application ends with the command (apply): C1-only JIT.
    `service`: the application serves `tableflow run` for as long as it runs: sized for
    a small resident set (serial collector from a small heap, C1, the system allocator
    for the workers' Arrow buffers).
    `share_classes`: the driver JVM maps its classes from a class-data sharing archive
    (written by the first such JVM to exit; `jvm/class_data_sharing.py`).
    `java_options`: system properties for the driver and executor JVMs (the object
    store's AWS SDK settings), before the user's own.
    """
    # Workers must run this interpreter, or mapInArrow fails importing our code.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    local_ip = driver_local_ip(master, conf or {}, os.environ)
    if local_ip is not None:
        os.environ[LOCAL_IP_ENV] = local_ip
    from pyspark.sql import SparkSession

    user_packages = list(packages or [])
    jars = IcebergJars() if _brings_own_iceberg(user_packages) else iceberg_jars(iceberg)
    merged = session_conf(
        conf, user_packages, catalogs, short_lived, jars, java_options, service=service
    )
    if share_classes:
        sharing = class_data_sharing(merged)
        if sharing is not None:
            user_options = (conf or {}).get(JAVA_OPTIONS_KEY)
            merged[JAVA_OPTIONS_KEY] = driver_java_options(
                user_options,
                short_lived,
                (*java_options, *sharing.java_options()),
                service=service,
            )
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in merged.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


def session_conf(
    conf: Mapping[str, str] | None = None,
    packages: list[str] | None = None,
    catalogs: Mapping[str, Mapping[str, str]] | None = None,
    short_lived: bool = False,
    iceberg: IcebergJars | None = None,
    java_options: Sequence[str] = (),
    *,
    service: bool = False,
) -> dict[str, str]:
    """The Spark conf `build_spark_session` starts the application with (before the class
    archive's options): our defaults, the Iceberg jars (`iceberg`, see `iceberg_jars`),
    catalogs, then the user's."""
    merged: dict[str, str] = dict(SMALL_MACHINE_DEFAULTS)
    if short_lived:
        merged.update(SHORT_LIVED_SPARK_CONF)
    if service:
        merged.update(SERVICE_SPARK_CONF)
    merged["spark.python.daemon.module"] = WORKER_DAEMON_MODULE
    if "SETUPTOOLS_USE_DISTUTILS" not in os.environ:
        merged[WORKER_DISTUTILS_KEY] = "stdlib"
    merged["spark.sql.extensions"] = (
        "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"
    )
    jars = iceberg if iceberg is not None else IcebergJars()
    all_packages = [*jars.packages, *(packages or [])]
    if all_packages:
        merged["spark.jars.packages"] = ",".join(all_packages)
    for name, props in (catalogs or {}).items():
        merged.update(iceberg_catalog_conf(name, props))
    user_conf = {k: str(v) for k, v in (conf or {}).items()}
    merged.update(user_conf)
    merged[REDACTION_KEY] = redaction_regex(user_conf.get(REDACTION_KEY))
    merged[JAVA_OPTIONS_KEY] = driver_java_options(
        user_conf.get(JAVA_OPTIONS_KEY), short_lived, java_options, service=service
    )
    if java_options:
        executor_options = (*java_options, *filter(None, [user_conf.get(EXECUTOR_OPTIONS_KEY)]))
        merged[EXECUTOR_OPTIONS_KEY] = " ".join(executor_options)
    if jars.files:
        user_jars = user_conf.get("spark.jars")
        merged["spark.jars"] = ",".join(p for p in (*jars.files, user_jars) if p)
        # `spark.jars` reaches Iceberg's classes through a child class loader, so each of
        # them is first looked up, and missed, in all ~250 jars of the driver's class path
        # (class-data sharing maps them only after that miss): on the driver's own class
        # path they load directly, and from the archive without the lookup. Executors
        # still get the jars through `spark.jars`.
        user_path = user_conf.get(DRIVER_CLASS_PATH_KEY)
        merged[DRIVER_CLASS_PATH_KEY] = os.pathsep.join((*jars.files, *filter(None, [user_path])))
    return merged


def _brings_own_iceberg(packages: Sequence[str]) -> bool:
    """The user listed an Iceberg runtime in `spark.packages`: theirs, not ours."""
    return any(ICEBERG_RUNTIME_ARTIFACT in coordinate for coordinate in packages)


def driver_java_options(
    user_options: str | None,
    short_lived: bool,
    ours: Sequence[str] = (),
    *,
    service: bool = False,
) -> str:
    """Our log4j configuration, the JIT choice, the heap-returning collector (a service's:
    serial from a small heap; else parallel; neither when the user's options pick a
    collector), `ours` (system properties, the class-data sharing archive), then the
    user's own options, which win where they set the same flag (the JVM takes the last)."""
    options = [f"-Dlog4j2.configurationFile={LOG4J2_CONFIG.as_uri()}"]
    if short_lived:
        options.extend(SHORT_LIVED_JVM_OPTIONS)
    elif service:
        options.extend(SERVICE_JIT_JVM_OPTIONS)
    if not COLLECTOR_CHOICE.search(user_options or ""):
        options.extend(SERVICE_HEAP_JVM_OPTIONS if service else HEAP_RETURNING_JVM_OPTIONS)
    options.extend(ours)
    if user_options:
        options.append(user_options)
    return " ".join(options)


def use_system_arrow_pool(environ: Mapping[str, str] = os.environ) -> bool:
    """A service's driver allocates Arrow buffers (upsert merges, pyiceberg's writes) with
    the C library's allocator, as its workers do (`SERVICE_SPARK_CONF`): the soak's driver
    held ~35 MB less PSS. Left alone when the user chose a pool
    (`ARROW_DEFAULT_MEMORY_POOL`); True if set."""
    if ARROW_POOL_ENV in environ:
        return False
    import pyarrow as pa

    pa.set_memory_pool(pa.system_memory_pool())
    return True


def limit_malloc_arenas(environ: MutableMapping[str, str] = os.environ) -> bool:
    """A service's processes use `SERVICE_MALLOC_ARENAS` malloc arenas: the environment
    says so to the JVM and Python workers started after this, and glibc's `mallopt` to
    this process (a thread's arena is made at its first allocation, after this). Left
    alone when the user set `MALLOC_ARENA_MAX`; True if set. Not glibc: the variable
    alone, which other C libraries ignore."""
    if MALLOC_ARENAS_ENV in environ:
        return False
    environ[MALLOC_ARENAS_ENV] = str(SERVICE_MALLOC_ARENAS)
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):  # no mallopt (musl)
            ctypes.CDLL(None).mallopt(_M_ARENA_MAX, SERVICE_MALLOC_ARENAS)
    return True


def prepare_arrow_conversion() -> None:
    """Make pyspark's first Arrow-to-Spark type conversion now rather than on the first
    table's thread: that call imports `distutils.version`, which on Python 3.11
    setuptools' distutils shim turns into importing setuptools and pkg_resources (reading
    every installed distribution: ~0.2 s of CPU). Called on the thread that built the
    session, after it: importing pyspark's modules on a second thread at the same time
    can end in Python's import deadlock error (pyspark's modules import each other)."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import from_arrow_type

    from_arrow_type(pa.int64())


class SessionStarter:
    """Builds the Spark application on a daemon thread, so the JVM starts while the plan
    is made (both take seconds; the JVM mostly waits on its own process), then starts
    Spark's Python workers (`engine/python_workers.py`). `get` waits
    for it and re-raises a failure to start. A command that ends without calling `get`
    (nothing to apply) does not wait: the JVM exits with this process."""

    def __init__(
        self,
        build: Callable[[], SparkSession],
        *,
        start: bool = True,
        catalogs: Mapping[str, Mapping[str, str]] | None = None,
    ) -> None:
        """`start=False`: the JVM starts at `start()` (or `get()`), once the caller knows
        it has work for it. `catalogs`: the Iceberg catalogs `build` puts in the
        application's conf (Spark loads them when first used; none to register)."""
        self.catalogs: Mapping[str, Mapping[str, str]] = catalogs or {}
        self._session: SparkSession | None = None
        self._error: BaseException | None = None
        self._imported = threading.Event()
        self._starting = threading.Lock()
        self._thread = threading.Thread(
            target=self._run, args=(build,), name="tableflow-spark-start", daemon=True
        )
        if start:
            self._thread.start()

    def start(self) -> None:
        """Start building now (no-op when already started). Safe from many threads at once:
        the DAG's tasks may be the first to ask (without the lock, two could both see the
        thread unstarted and run the build twice on one Thread object)."""
        with self._starting:
            if self._thread.ident is None:
                self._thread.start()

    @property
    def started(self) -> bool:
        return self._thread.ident is not None

    def _run(self, build: Callable[[], SparkSession]) -> None:
        try:
            # pyspark's modules first, so other threads may use them once `wait_for_pyspark`
            # returns (importing them on two threads at once can deadlock, see above).
            import pyspark.sql  # noqa: F401
        except BaseException as exc:
            self._error = exc
            return
        finally:
            self._imported.set()
        try:
            self._session = build()
            prepare_arrow_conversion()
            from tableflow_core.engine.python_workers import start_python_workers

            start_python_workers(self._session)
        except BaseException as exc:  # re-raised in the caller's thread by get()
            self._error = exc

    def wait_for_pyspark(self) -> None:
        """Wait until this thread imported pyspark's SQL modules (a fraction of a second
        after `start`), not for the JVM: then other threads can use pyspark's Python-only
        functions (type conversions) while the JVM starts."""
        self.start()
        self._imported.wait()

    def get(self) -> SparkSession:
        self.start()
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._session is not None
        return self._session


class SparkOnDemand:
    """A command's Spark application as its tasks see it: waited for only when a task
    first needs it, so the tasks that need no Spark (creating namespaces and tables
    through the catalog's REST API, cutting a run's branch) run while the JVM starts;
    the target's catalog registered on it once, before any task uses it.

    `get` returns the application (waiting for it: a `SessionStarter`'s `get`);
    `catalog` is the target's catalog, registered on the session (`register_catalog`),
    or None when the application was built with it."""

    def __init__(
        self,
        get: Callable[[], SparkSession],
        catalog: tuple[str, Mapping[str, str]] | None = None,
        *,
        wait_for_pyspark: Callable[[], None] | None = None,
    ) -> None:
        self._get = get
        self._catalog = catalog
        self._wait_for_pyspark = wait_for_pyspark
        self._lock = threading.Lock()
        self._ready: SparkSession | None = None

    @classmethod
    def of_session(
        cls, spark: SparkSession, catalog: tuple[str, Mapping[str, str]] | None = None
    ) -> SparkOnDemand:
        """A session that is running already (`tableflow run`, tests, notebooks)."""
        return cls(lambda: spark, catalog)

    def wait_for_pyspark(self) -> None:
        """Return once pyspark's Python modules can be used on this thread (see
        `SessionStarter.wait_for_pyspark`); the JVM may still be starting."""
        if self._wait_for_pyspark is not None:
            self._wait_for_pyspark()

    def session(self) -> SparkSession:
        """The application with the target's catalog registered (waits for both)."""
        with self._lock:
            if self._ready is None:
                spark = self._get()
                if self._catalog is not None:
                    name, properties = self._catalog
                    register_catalog(spark, name, properties)
                self._ready = spark
            return self._ready
