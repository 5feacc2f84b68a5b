"""Class-data sharing for the driver JVM: one writer, archives promoted only when complete,
and a real JVM that maps the archive the previous one wrote."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tableflow_core.engine.spark_session import driver_java_options
from tableflow_core.jvm.class_data_sharing import (
    DYNAMIC_ARCHIVE_MAGIC,
    ClassDataSharing,
    class_data_sharing,
    java_executable,
    prune_archives,
)


def sharing_in(directory: Path, *layout: str) -> ClassDataSharing:
    java = java_executable()
    assert java is not None, "the tests need a JDK"
    return ClassDataSharing(directory, "abc", java, layout)


def complete_archive(path: Path) -> None:
    path.write_bytes(DYNAMIC_ARCHIVE_MAGIC + b"\0" * 64)


def test_only_the_newest_archives_are_kept(tmp_path: Path) -> None:
    for age, name in enumerate(["a", "b", "c"]):
        complete_archive(tmp_path / f"{name}.jsa")
        os.utime(tmp_path / f"{name}.jsa", (1000 - age, 1000 - age))
    prune_archives(tmp_path, keep=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.jsa", "b.jsa"]


def test_a_finished_partial_is_promoted_and_mapped(tmp_path: Path) -> None:
    sharing = sharing_in(tmp_path)
    complete_archive(sharing.partial)
    assert sharing.java_options()[0] == f"-XX:SharedArchiveFile={sharing.archive}"
    assert sharing.archive.exists() and not sharing.partial.exists()


def test_an_unusable_cache_directory_costs_speed_not_the_run(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    assert sharing_in(blocker / "jvm").java_options() == []


def test_the_digest_follows_what_the_jvm_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    base = {"spark.jars": "/x/iceberg-1.10.2.jar", "spark.driver.memory": "2g"}
    one = class_data_sharing(base)
    assert one is not None and one.directory == tmp_path / "tableflow" / "jvm"
    assert class_data_sharing(dict(base)) == one
    assert class_data_sharing({**base, "spark.jars": "/x/iceberg-1.11.0.jar"}) != one
    assert class_data_sharing({**base, "spark.driver.memory": "8g"}) != one
    assert class_data_sharing({**base, "spark.sql.shuffle.partitions": "8"}) == one
    options = "spark.driver.extraJavaOptions"
    assert class_data_sharing({**base, options: "-Xmx8g"}) != one
    assert class_data_sharing({**base, options: "-Da=b -Xlog:gc:file=x"}) == one


@pytest.mark.parametrize(
    "option",
    [
        "-javaagent:/opt/agent.jar=port=9404",
        "-agentlib:jdwp=transport=dt_socket,server=y",
        "-agentpath:/opt/libprofiler.so",
        "-XX:StartFlightRecording=name=x,settings=profile",
        "-XX:+FlightRecorder",
    ],
)
def test_a_jvm_that_hooks_class_loading_runs_without_sharing(
    option: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    for name in ("JAVA_TOOL_OPTIONS", "JDK_JAVA_OPTIONS", "_JAVA_OPTIONS", "SPARK_SUBMIT_OPTS"):
        monkeypatch.delenv(name, raising=False)
    assert class_data_sharing({}) is not None
    assert class_data_sharing({"spark.driver.extraJavaOptions": f"-Xss4m {option}"}) is None
    assert class_data_sharing({"spark.driver.defaultJavaOptions": option}) is None
    monkeypatch.setenv("JAVA_TOOL_OPTIONS", option)
    assert class_data_sharing({}) is None


def test_options_from_the_environment_are_part_of_the_digest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("SPARK_SUBMIT_OPTS", raising=False)
    plain = class_data_sharing({})
    monkeypatch.setenv("SPARK_SUBMIT_OPTS", "-XX:+UseG1GC")
    assert class_data_sharing({}) != plain


def test_sharing_options_come_before_the_users() -> None:
    options = driver_java_options("-Xshare:off", True, ["-XX:SharedArchiveFile=/a.jsa"])
    assert options.split(" ")[-2:] == ["-XX:SharedArchiveFile=/a.jsa", "-Xshare:off"]
