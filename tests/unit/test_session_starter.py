"""SessionStarter: the Spark application is built on a thread while the plan is made."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace
from typing import Any

import pytest

from tableflow_core.engine.spark_session import SessionStarter


def test_get_returns_what_the_thread_built() -> None:
    built_on: list[str] = []
    release = threading.Event()

    def build() -> Any:
        built_on.append(threading.current_thread().name)
        release.wait(5)
        return "session"

    starter = SessionStarter(build)
    release.set()
    assert starter.get() == "session"
    assert starter.get() == "session"  # built once
    assert built_on == ["tableflow-spark-start"]


def test_a_deferred_starter_builds_nothing_until_started() -> None:
    """`apply` starts the JVM only once its plan has tasks (a no-op apply never does)."""
    built = threading.Event()

    def build() -> Any:
        built.set()
        return "session"

    starter = SessionStarter(build, start=False)
    assert not built.wait(0.2)
    assert not starter.started
    starter.start()
    starter.start()  # idempotent
    assert starter.started
    assert built.wait(5)


def test_get_starts_a_deferred_starter() -> None:
    starter = SessionStarter(lambda: "session", start=False)
    assert starter.get() == "session"


def test_many_threads_starting_a_deferred_starter_build_it_once() -> None:
    """The DAG's tasks may be the first to ask for the application, at once."""
    for _ in range(20):
        builds: list[int] = []

        def build(builds: list[int] = builds) -> Any:
            builds.append(1)
            time.sleep(0.05)
            return "session"

        assert _asked_at_once(SessionStarter(build, start=False), 8) == ["session"] * 8
        assert builds == [1]


def _asked_at_once(starter: SessionStarter, threads: int) -> list[Any]:
    barrier = threading.Barrier(threads)
    got: list[Any] = []

    def ask() -> None:
        barrier.wait()
        got.append(starter.get())

    askers = [threading.Thread(target=ask) for _ in range(threads)]
    for asker in askers:
        asker.start()
    for asker in askers:
        asker.join(10)
    return got


def test_a_failure_to_start_is_raised_by_get() -> None:
    def build() -> Any:
        raise RuntimeError("JAVA_HOME is not set")

    starter = SessionStarter(build)
    with pytest.raises(RuntimeError, match="JAVA_HOME"):
        starter.get()


def test_driver_java_options_keep_ours_and_the_users() -> None:
    from tableflow_core.engine.spark_session import driver_java_options

    quick = driver_java_options("-Xss4m -XX:TieredStopAtLevel=4", short_lived=True)
    parts = quick.split(" ")
    assert parts[0].startswith("-Dlog4j2.configurationFile=file:")
    # The user's flags come last, so a user's own JIT choice wins over ours.
    assert parts[1] == "-XX:TieredStopAtLevel=1"
    assert parts[-2:] == ["-Xss4m", "-XX:TieredStopAtLevel=4"]
    # Neither one-shot nor a service (maintain, notebooks): tiered JIT, parallel collector.
    plain = driver_java_options(None, short_lived=False).split(" ")[1:]
    assert plain == ["-XX:+UseParallelGC", "-XX:MinHeapFreeRatio=5", "-XX:MaxHeapFreeRatio=20"]
    assert "-XX:+UseParallelGC" in parts
    assert "-XX:+UseSerialGC" not in parts
    # `run`'s JVM (a service): C1, serial collector returning free heap down to 64 MB.
    service = driver_java_options(None, short_lived=False, service=True).split(" ")[1:]
    assert service == [
        "-XX:TieredStopAtLevel=1",
        "-XX:+UseSerialGC",
        "-Xms64m",
        "-XX:MinHeapFreeRatio=5",
        "-XX:MaxHeapFreeRatio=20",
    ]
    # A user's own initial heap and JIT come after ours: the JVM takes the last.
    users = driver_java_options("-Xms512m -XX:TieredStopAtLevel=4", False, service=True)
    assert users.endswith("-XX:MaxHeapFreeRatio=20 -Xms512m -XX:TieredStopAtLevel=4")


def test_a_users_collector_replaces_ours() -> None:
    """Two collectors on one command line: the JVM refuses to start."""
    from tableflow_core.engine.spark_session import driver_java_options

    for short_lived, service in ((True, False), (False, False), (False, True)):
        options = driver_java_options("-XX:+UseG1GC -Xss4m", short_lived, service=service)
        assert "-XX:+UseParallelGC" not in options
        assert "-XX:+UseSerialGC" not in options
        assert "-Xms64m" not in options
        assert "-XX:MaxHeapFreeRatio=20" not in options
        assert options.endswith("-XX:+UseG1GC -Xss4m")
    assert "-XX:+UseSerialGC" in driver_java_options("-XX:MaxHeapFreeRatio=40", False, service=True)
    assert "-XX:+UseParallelGC" in driver_java_options("-XX:MaxHeapFreeRatio=40", True)


def test_the_cached_iceberg_jars_are_on_the_drivers_own_class_path() -> None:
    from tableflow_core.engine.spark_session import IcebergJars, session_conf

    jars = IcebergJars(files=("/cache/runtime.jar", "/cache/aws-bundle.jar"))
    conf = session_conf(
        {"spark.driver.extraClassPath": "/opt/udfs.jar", "spark.jars": "/opt/mine.jar"},
        iceberg=jars,
    )
    # Executors fetch them from here; the user's own jars are kept.
    assert conf["spark.jars"] == "/cache/runtime.jar,/cache/aws-bundle.jar,/opt/mine.jar"
    assert conf["spark.driver.extraClassPath"] == (
        "/cache/runtime.jar:/cache/aws-bundle.jar:/opt/udfs.jar"
    )
    assert "spark.jars.packages" not in conf
    plain = session_conf(iceberg=jars)
    assert plain["spark.driver.extraClassPath"] == "/cache/runtime.jar:/cache/aws-bundle.jar"


def test_a_cluster_can_resolve_the_same_iceberg_jars_itself() -> None:
    from tableflow_core.engine.spark_session import ICEBERG_LOCK, IcebergJars, session_conf
    from tableflow_core.jvm.artifacts import load_lock

    lock = load_lock(ICEBERG_LOCK)
    coordinates = tuple(f"{c.group}:{c.artifact}:{c.version}" for c in lock.roots)
    assert {c.split(":")[1] for c in coordinates} == {
        "iceberg-spark-runtime-3.5_2.12",
        "iceberg-aws-bundle",
    }
    assert len({c.split(":")[2] for c in coordinates}) == 1  # one Iceberg version
    conf = session_conf(
        packages=["org.example:udfs:1.0"], iceberg=IcebergJars(packages=coordinates)
    )
    assert conf["spark.jars.packages"] == ",".join((*coordinates, "org.example:udfs:1.0"))
    assert "spark.jars" not in conf and "spark.driver.extraClassPath" not in conf


def test_a_user_who_lists_an_iceberg_runtime_gets_theirs_not_ours() -> None:
    from tableflow_core.engine.spark_session import _brings_own_iceberg

    assert _brings_own_iceberg(["org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:1.9.2"])
    assert not _brings_own_iceberg(["org.example:udfs:1.0"])


def test_spark_redacts_catalog_credentials_and_s3_keys_and_keeps_the_users_pattern() -> None:
    import re

    from tableflow_core.engine.spark_session import REDACTION_KEY, session_conf

    pattern = re.compile(session_conf()[REDACTION_KEY].removeprefix("(?i)"), re.IGNORECASE)
    for key in (
        "spark.sql.catalog.tableflow.credential",
        "spark.sql.catalog.tableflow.token",
        "spark.sql.catalog.tableflow.s3.access-key-id",
        "spark.sql.catalog.tableflow.s3.secret-access-key",
        "spark.sql.catalog.tableflow.s3.session-token",
        "spark.executorEnv.AWS_ACCESS_KEY_ID",
        "spark.executorEnv.AWS_SECRET_ACCESS_KEY",
        "spark.hadoop.fs.s3a.access.key",
    ):
        assert pattern.search(key), key
    assert not pattern.search("spark.sql.catalog.tableflow.uri")
    widened = session_conf({REDACTION_KEY: "internal[.]host"})[REDACTION_KEY]
    assert re.search(widened.removeprefix("(?i)"), "spark.x.internal.host", re.IGNORECASE)
    assert re.search(widened.removeprefix("(?i)"), "x.credential", re.IGNORECASE)


def test_a_one_shot_application_sorts_off_the_heap_unless_the_user_says_otherwise() -> None:
    from tableflow_core.engine.spark_session import session_conf

    assert session_conf(short_lived=True)["spark.memory.offHeap.enabled"] == "true"
    assert "spark.memory.offHeap.enabled" not in session_conf(short_lived=False)
    mine = session_conf({"spark.memory.offHeap.enabled": "false"}, short_lived=True)
    assert mine["spark.memory.offHeap.enabled"] == "false"


def test_a_services_workers_use_the_system_arrow_pool_unless_the_target_says() -> None:
    from tableflow_core.engine.spark_session import session_conf

    key = "spark.executorEnv.ARROW_DEFAULT_MEMORY_POOL"
    assert session_conf(service=True)[key] == "system"
    assert key not in session_conf()
    assert key not in session_conf(short_lived=True)
    assert session_conf({key: "mimalloc"}, service=True)[key] == "mimalloc"
    options = session_conf(service=True)["spark.driver.extraJavaOptions"]
    assert "-XX:+UseSerialGC" in options and "-XX:TieredStopAtLevel=1" in options


def test_a_services_driver_uses_the_system_arrow_pool_unless_the_user_chose() -> None:
    import pyarrow as pa

    from tableflow_core.engine.spark_session import use_system_arrow_pool

    before = pa.default_memory_pool()
    try:
        assert not use_system_arrow_pool({"ARROW_DEFAULT_MEMORY_POOL": "mimalloc"})
        assert pa.default_memory_pool().backend_name == before.backend_name
        assert use_system_arrow_pool({})
        assert pa.default_memory_pool().backend_name == "system"
    finally:
        pa.set_memory_pool(before)


def test_a_services_processes_use_two_malloc_arenas_unless_the_user_chose() -> None:
    from tableflow_core.engine.spark_session import limit_malloc_arenas, session_conf

    chosen = {"MALLOC_ARENA_MAX": "4"}
    assert not limit_malloc_arenas(chosen)
    assert chosen == {"MALLOC_ARENA_MAX": "4"}
    environ: dict[str, str] = {}
    assert limit_malloc_arenas(environ)  # and this process's own limit (glibc's mallopt)
    assert environ == {"MALLOC_ARENA_MAX": "2"}
    assert session_conf(service=True)["spark.executorEnv.MALLOC_ARENA_MAX"] == "2"
    assert "spark.executorEnv.MALLOC_ARENA_MAX" not in session_conf(short_lived=True)


def test_the_thread_that_built_the_session_then_prepares_arrow_conversion(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tableflow_core.engine import spark_session

    steps: list[tuple[str, str]] = []
    monkeypatch.setattr(
        spark_session,
        "prepare_arrow_conversion",
        lambda: steps.append(("arrow", threading.current_thread().name)),
    )

    def build() -> Any:
        steps.append(("build", threading.current_thread().name))
        return "session"

    assert SessionStarter(build).get() == "session"
    assert steps == [("build", "tableflow-spark-start"), ("arrow", "tableflow-spark-start")]


def test_python_workers_use_the_standard_librarys_distutils(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tableflow_core.engine.spark_session import WORKER_DISTUTILS_KEY, session_conf

    monkeypatch.delenv("SETUPTOOLS_USE_DISTUTILS", raising=False)
    assert session_conf()[WORKER_DISTUTILS_KEY] == "stdlib"
    monkeypatch.setenv("SETUPTOOLS_USE_DISTUTILS", "local")  # the user's choice stands
    assert WORKER_DISTUTILS_KEY not in session_conf()


@pytest.mark.parametrize(
    ("tables", "upserts", "early"),
    [(1, 0, True), (50, 49, True), (51, 0, False), (1000, 0, False), (1, 1, False), (3, 3, False)],
)
def test_apply_starts_the_jvm_alongside_the_plan_only_for_small_selections(
    monkeypatch: pytest.MonkeyPatch, tables: int, upserts: int, early: bool
) -> None:
    """Not for a selection of upsert tables only either: it waits for its plan, which may
    hold only batches the driver merges (`tasks.apply.needs_spark`)."""
    import tableflow_core.tasks.apply as apply_task
    from tableflow_core.cli.commands import apply as apply_command

    release = threading.Event()
    monkeypatch.setattr(apply_task, "project_spark_session", lambda *_a, **_k: release.wait(5))
    # A project whose catalog is not a REST catalog: none in the application's conf.
    project = SimpleNamespace(target=SimpleNamespace(catalog=None))
    selected = [SimpleNamespace(mode="upsert" if i < upserts else "append") for i in range(tables)]
    starter = apply_command._spark_starter(project, selected)  # type: ignore[arg-type]
    try:
        assert starter.started is early
    finally:
        release.set()
