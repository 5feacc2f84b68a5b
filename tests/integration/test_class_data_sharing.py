"""Class-data sharing for the driver JVM: one writer, archives promoted only when complete,
and a real JVM that maps the archive the previous one wrote."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tableflow_core.jvm.class_data_sharing import (
    DYNAMIC_ARCHIVE_MAGIC,
    STALE_PARTIAL_SECONDS,
)
from tests.unit.test_class_data_sharing import sharing_in


def test_the_first_jvm_writes_the_archive_and_a_second_one_does_not(tmp_path: Path) -> None:
    sharing = sharing_in(tmp_path / "jvm")
    first = sharing.java_options()
    assert first[0] == f"-XX:ArchiveClassesAtExit={sharing.partial}"
    assert sharing.partial.exists()
    # While the first JVM has not written its archive, others run without one.
    assert sharing.java_options() == []
    assert (tmp_path / "jvm").stat().st_mode & 0o777 == 0o700


def test_no_archive_is_written_where_the_jvm_would_refuse_to_start(tmp_path: Path) -> None:
    sharing = sharing_in(tmp_path, "-Xshare:off")
    assert sharing.java_options() == []
    assert list(tmp_path.iterdir()) == []


def test_a_partial_left_by_a_dead_writer_is_taken_over(tmp_path: Path) -> None:
    sharing = sharing_in(tmp_path)
    sharing.partial.write_bytes(b"\0" * 64)  # header never written
    old = time.time() - STALE_PARTIAL_SECONDS - 1
    os.utime(sharing.partial, (old, old))
    assert sharing.java_options()[0] == f"-XX:ArchiveClassesAtExit={sharing.partial}"


def test_a_truncated_archive_is_never_mapped(tmp_path: Path) -> None:
    sharing = sharing_in(tmp_path)
    sharing.archive.write_bytes(b"\0\0")
    assert not any(o.startswith("-XX:SharedArchiveFile") for o in sharing.java_options())


SESSION_SCRIPT = """
import sys
from tableflow_core.engine.spark_session import build_spark_session
conf = {"spark.driver.extraJavaOptions": sys.argv[1]} if len(sys.argv) > 1 else {}
spark = build_spark_session("local[1]", conf=conf, short_lived=True, share_classes=True)
spark.sql("select 1").collect()
"""


@pytest.mark.slow
def test_a_second_jvm_maps_the_classes_the_first_one_archived(tmp_path: Path) -> None:
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    loaded = tmp_path / "class-load.txt"
    # Logging options leave the archive's digest alone: both JVMs share one archive.
    command = [sys.executable, "-c", SESSION_SCRIPT, f"-Xlog:class+load=info:file={loaded}"]
    # capture_output waits for the JVM too: it holds the pipes until its archive is written.
    first = subprocess.run(command, env=env, capture_output=True, text=True)
    assert first.returncode == 0, first.stderr[-2000:]
    (partial,) = (tmp_path / "cache" / "tableflow" / "jvm").glob("*.jsa.partial")
    assert partial.read_bytes()[:4] == DYNAMIC_ARCHIVE_MAGIC
    assert "[cds" not in first.stdout
    assert "source: shared objects file (top)" not in loaded.read_text()

    second = subprocess.run(command, env=env, capture_output=True, text=True)
    assert second.returncode == 0, second.stderr[-2000:]
    assert not partial.exists()
    assert partial.with_suffix("").exists()  # promoted to <digest>.jsa
    sources = loaded.read_text()
    # Spark's and Iceberg's classes come from the archive the first JVM wrote.
    assert sources.count("source: shared objects file (top)") > 5000, sources[:2000]
    assert "org.apache.spark.sql.SparkSession source: shared objects file (top)" in sources


@pytest.mark.slow
def test_a_jvm_with_flight_recorder_starts_again_after_its_first_run(tmp_path: Path) -> None:
    """JDK 17 crashed (SIGSEGV) mapping an archive with Flight Recorder on: the second run
    of such a JVM died before Spark started."""
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    recording = f"-XX:StartFlightRecording=filename={tmp_path / 'x.jfr'},settings=profile"
    command = [sys.executable, "-c", SESSION_SCRIPT, recording]
    for _ in range(2):
        run = subprocess.run(command, env=env, capture_output=True, text=True, cwd=tmp_path)
        assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert not list((tmp_path / "cache" / "tableflow" / "jvm").glob("*.jsa*"))
