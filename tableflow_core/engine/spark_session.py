"""Building the SparkSession that `apply` runs on.

Every table write goes through the Apache Iceberg Spark runtime. The runtime jar
comes from the `snowpark-connect-deps-iceberg` wheel when it is installed (no
Maven access needed); otherwise users pass `spark.jars.packages` themselves.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from tableflow_core.jvm.class_data_sharing import JAVA_OPTIONS_KEY, class_data_sharing

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

LOG4J2_CONFIG = Path(__file__).with_name("log4j2.properties")

ICEBERG_RUNTIME_JAR = "iceberg-spark-runtime-3.5_2.12-1.10.2.jar"
ICEBERG_RUNTIME_PACKAGE = "org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:1.10.2"

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
    # (40 MB here) hashes it instead of sorting both sides. An upsert's MERGE is a right
    # outer join of the table's keys (1M rows) and the batch (the build side): 100k
    # records into 1M rows, interleaved A/B over 10 batches, 4.43 s instead of 5.22 s a
    # batch, JVM CPU 3.90 s instead of 4.40 s (no sort of the table's side, no GC of its
    # pages). Adaptive execution re-plans the join with the sizes the shuffles measured,
    # so a large batch still gets the sort-merge join.
    "spark.sql.join.preferSortMergeJoin": "false",
}

# pyspark's workers check pyarrow's version with distutils' LooseVersion. On Python 3.11
# setuptools' distutils shim turns that import into importing setuptools and
# pkg_resources, which reads every installed distribution (~0.2 s of CPU per worker);
# the standard library's distutils has the same LooseVersion.
WORKER_DISTUTILS_KEY = "spark.executorEnv.SETUPTOOLS_USE_DISTUTILS"

DRIVER_CLASS_PATH_KEY = "spark.driver.extraClassPath"
# Python workers fork from a daemon that imported the decode path already.
WORKER_DAEMON_MODULE = "tableflow_core.pipeline.worker_daemon"

# A one-shot command's JVM (apply) lives seconds to minutes: the C2 compiler spends more
# CPU than its faster code saves (1M records: the JVM used ~30 s of CPU with tiered JIT,
# ~17 s with C1 only), and the parallel collector returning free heap keeps the JVM's
# memory ~130 MB lower than G1 (docs/history/performance-rounds.md). `tableflow run` keeps the defaults.
SHORT_LIVED_JVM_OPTIONS = (
    "-XX:TieredStopAtLevel=1",
    "-XX:+UseParallelGC",
    "-XX:MinHeapFreeRatio=5",
    "-XX:MaxHeapFreeRatio=20",
)


# The same one-shot JVM keeps its heap small (the options above), so a sort's pages on
# the heap (a dedup's window, an upsert's MERGE) made the collector run again and again:
# 1M rows with a dedup spent 3.2 s in task GC on the heap, 0.9 s with the pages off it
# (docs/history/performance-rounds.md). Off-heap pages are allocated only by sorts and aggregations.
SHORT_LIVED_SPARK_CONF: dict[str, str] = {
    "spark.memory.offHeap.enabled": "true",
    "spark.memory.offHeap.size": "512m",
}


def iceberg_runtime_jar() -> str | None:
    """Path of the bundled Iceberg Spark runtime jar, or None if not installed."""
    try:
        import snowpark_connect_deps_iceberg
    except ImportError:
        return None
    path = snowpark_connect_deps_iceberg.get_jar_path(ICEBERG_RUNTIME_JAR)
    return str(path) if path and os.path.exists(str(path)) else None


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
    """Register an Iceberg catalog on a running session (catalogs load lazily by name)."""
    for key, value in iceberg_catalog_conf(name, properties).items():
        spark.conf.set(key, value)


def build_spark_session(
    master: str = "local[*]",
    app_name: str = "tableflow",
    conf: Mapping[str, str] | None = None,
    packages: list[str] | None = None,
    catalogs: Mapping[str, Mapping[str, str]] | None = None,
    short_lived: bool = False,
    share_classes: bool = False,
) -> SparkSession:
    """Create (or reuse) the SparkSession with the Iceberg runtime and extensions.

    `short_lived`: the application ends with the command (apply): C1-only JIT.
    `share_classes`: the driver JVM maps its classes from a class-data sharing archive
    (written by the first such JVM to exit; `jvm/class_data_sharing.py`).
    """
    # Workers must run this interpreter, or mapInArrow fails importing our code.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if master.startswith("local"):
        # Everything is on this machine: bind to loopback instead of guessing an interface.
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    merged = session_conf(conf, packages, catalogs, short_lived)
    if share_classes:
        sharing = class_data_sharing(merged)
        if sharing is not None:
            user_options = (conf or {}).get(JAVA_OPTIONS_KEY)
            merged[JAVA_OPTIONS_KEY] = driver_java_options(
                user_options, short_lived, sharing.java_options()
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
) -> dict[str, str]:
    """The Spark conf `build_spark_session` starts the application with (before the class
    archive's options): our defaults, the Iceberg runtime, catalogs, then the user's."""
    merged: dict[str, str] = dict(SMALL_MACHINE_DEFAULTS)
    if short_lived:
        merged.update(SHORT_LIVED_SPARK_CONF)
    merged["spark.python.daemon.module"] = WORKER_DAEMON_MODULE
    if "SETUPTOOLS_USE_DISTUTILS" not in os.environ:
        merged[WORKER_DISTUTILS_KEY] = "stdlib"
    merged["spark.sql.extensions"] = (
        "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"
    )
    jar = iceberg_runtime_jar()
    all_packages = list(packages or [])
    if jar:
        merged["spark.jars"] = jar
    elif not any("iceberg-spark-runtime" in p for p in all_packages):
        all_packages.append(ICEBERG_RUNTIME_PACKAGE)
    if all_packages:
        merged["spark.jars.packages"] = ",".join(all_packages)
    for name, props in (catalogs or {}).items():
        merged.update(iceberg_catalog_conf(name, props))
    user_conf = {k: str(v) for k, v in (conf or {}).items()}
    merged.update(user_conf)
    merged[JAVA_OPTIONS_KEY] = driver_java_options(user_conf.get(JAVA_OPTIONS_KEY), short_lived)
    if jar:
        # `spark.jars` reaches Iceberg's classes through a child class loader, so each of
        # them is first looked up, and missed, in all ~250 jars of the driver's class path
        # (class-data sharing maps them only after that miss): on the driver's own class
        # path they load directly, and from the archive without the lookup. Executors still get the jar through `spark.jars`.
        user_path = user_conf.get(DRIVER_CLASS_PATH_KEY)
        merged[DRIVER_CLASS_PATH_KEY] = os.pathsep.join(p for p in (jar, user_path) if p)
    return merged


def driver_java_options(
    user_options: str | None, short_lived: bool, class_sharing: Sequence[str] = ()
) -> str:
    """Our log4j configuration (the JIT choice, the class-data sharing archive), then the
    user's own options, which win where they set the same flag (the JVM takes the last)."""
    options = [f"-Dlog4j2.configurationFile={LOG4J2_CONFIG.as_uri()}"]
    if short_lived:
        options.extend(SHORT_LIVED_JVM_OPTIONS)
    options.extend(class_sharing)
    if user_options:
        options.append(user_options)
    return " ".join(options)


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

    def __init__(self, build: Callable[[], SparkSession]) -> None:
        self._session: SparkSession | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(
            target=self._run, args=(build,), name="tableflow-spark-start", daemon=True
        )
        self._thread.start()

    def _run(self, build: Callable[[], SparkSession]) -> None:
        try:
            self._session = build()
            prepare_arrow_conversion()
            from tableflow_core.engine.python_workers import start_python_workers

            start_python_workers(self._session)
        except BaseException as exc:  # re-raised in the caller's thread by get()
            self._error = exc

    def get(self) -> SparkSession:
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._session is not None
        return self._session
