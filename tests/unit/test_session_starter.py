"""SessionStarter: the Spark application is built on a thread while the plan is made."""

from __future__ import annotations

import threading
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
    assert driver_java_options(None, short_lived=False).count(" ") == 0


def test_the_bundled_iceberg_jar_is_on_the_drivers_own_class_path() -> None:
    from tableflow_core.engine.spark_session import iceberg_runtime_jar, session_conf

    jar = iceberg_runtime_jar()
    assert jar is not None, "the bundled Iceberg runtime is part of the install"
    conf = session_conf({"spark.driver.extraClassPath": "/opt/udfs.jar"})
    assert conf["spark.jars"] == jar  # executors fetch it from here
    assert conf["spark.driver.extraClassPath"] == f"{jar}:/opt/udfs.jar"
    assert session_conf()["spark.driver.extraClassPath"] == jar


def test_a_one_shot_application_sorts_off_the_heap_unless_the_user_says_otherwise() -> None:
    from tableflow_core.engine.spark_session import session_conf

    assert session_conf(short_lived=True)["spark.memory.offHeap.enabled"] == "true"
    assert "spark.memory.offHeap.enabled" not in session_conf(short_lived=False)
    mine = session_conf({"spark.memory.offHeap.enabled": "false"}, short_lived=True)
    assert mine["spark.memory.offHeap.enabled"] == "false"


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
