"""The artifact cache: locks, verification, no network once cached, offline, unpacking.

A `file://` repository stands in for Maven Central (urllib reads it like HTTPS), so
these tests run without a network and without a server process.
"""

from __future__ import annotations

import hashlib
import io
import tarfile
from pathlib import Path

import pytest

from tableflow_core.dev.kafka_server import (
    ScramCredentials,
    redact_format_output,
    render_properties,
    sasl_ssl_properties,
    server_properties,
)
from tableflow_core.jvm import artifacts
from tableflow_core.jvm.artifacts import (
    ArtifactError,
    ArtifactLock,
    Coordinate,
    LockedArtifact,
    ensure,
    load_lock,
    parse_dependency_list,
    spark_packages,
    unpack,
    write_lock,
)
from tableflow_core.jvm.class_data_sharing import DYNAMIC_ARCHIVE_MAGIC
from tableflow_core.jvm.java import drop_archive_of_failed_start, find_java, runtime_at


def _publish(repository: Path, coordinate: Coordinate, data: bytes, sha1: bool = True) -> None:
    path = repository / coordinate.relative_path
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    if sha1:
        path.with_name(path.name + ".sha1").write_text(hashlib.sha1(data).hexdigest())


def _lock(coordinate: Coordinate, data: bytes) -> ArtifactLock:
    locked = LockedArtifact(coordinate, hashlib.sha256(data).hexdigest(), len(data))
    return ArtifactLock("t", (coordinate,), False, (locked,))


@pytest.fixture
def repository(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "repository"
    root.mkdir()
    monkeypatch.setenv(artifacts.REPOSITORY_ENV, root.as_uri())
    monkeypatch.setenv(artifacts.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.delenv(artifacts.OFFLINE_ENV, raising=False)
    return root


def test_coordinates_parse_and_print() -> None:
    plain = Coordinate.parse("org.apache.kafka:kafka_2.13:4.4.0")
    assert plain.relative_path == "org/apache/kafka/kafka_2.13/4.4.0/kafka_2.13-4.4.0.jar"
    assert str(plain) == "org.apache.kafka:kafka_2.13:4.4.0"
    archive = Coordinate.parse("io.apicurio:apicurio-registry-app:tar.gz:all:3.3.3")
    assert archive.file_name == "apicurio-registry-app-3.3.3-all.tar.gz"
    assert str(archive) == "io.apicurio:apicurio-registry-app:tar.gz:all:3.3.3"
    with pytest.raises(ArtifactError, match="not a Maven coordinate"):
        Coordinate.parse("just-a-name")


def test_parse_dependency_list_reads_mvn_output() -> None:
    text = (
        "\nThe following files have been resolved:\n"
        "   org.slf4j:slf4j-api:jar:1.7.36:runtime -- module org.slf4j\n"
        "   com.github.luben:zstd-jni:jar:1.5.7-17:runtime\n"
        "   io.netty:netty-transport-native-epoll:jar:linux-x86_64:4.1.0:runtime\n"
    )
    assert [str(c) for c in parse_dependency_list(text)] == [
        "com.github.luben:zstd-jni:1.5.7-17",
        "io.netty:netty-transport-native-epoll:jar:linux-x86_64:4.1.0",
        "org.slf4j:slf4j-api:1.7.36",
    ]


def test_ensure_downloads_verifies_and_then_needs_no_network(
    repository: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    coordinate = Coordinate("org.example", "thing", "1.0")
    data = b"jar bytes" * 100
    _publish(repository, coordinate, data)
    lock = _lock(coordinate, data)

    first = ensure(lock)
    assert first.downloaded == 1 and first.files[0].read_bytes() == data
    assert first.classpath() == str(first.files[0])
    # No network at all now: an unreachable repository and offline mode change nothing.
    monkeypatch.setenv(artifacts.REPOSITORY_ENV, "http://127.0.0.1:9/unreachable")
    monkeypatch.setenv(artifacts.OFFLINE_ENV, "1")
    again = ensure(lock, verify=True)
    assert again.downloaded == 0 and again.files == first.files


def test_a_file_that_does_not_match_the_lock_never_lands(repository: Path) -> None:
    coordinate = Coordinate("org.example", "tampered", "1.0")
    _publish(repository, coordinate, b"what the repository serves")
    lock = _lock(coordinate, b"what the lock pinned!!!!!!")  # same length, other bytes
    with pytest.raises(ArtifactError, match="SHA-256"):
        ensure(lock)
    folder = artifacts.cache_root() / coordinate.relative_path
    assert not folder.exists()
    assert list(folder.parent.iterdir()) == []  # no partial file left behind


def test_offline_names_what_is_missing(repository: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(artifacts.OFFLINE_ENV, "true")
    lock = _lock(Coordinate("org.example", "absent", "2.0"), b"x")
    with pytest.raises(ArtifactError, match=r"org\.example:absent:2\.0"):
        ensure(lock)


def test_write_lock_checks_the_published_checksum(
    repository: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(artifacts, "LOCK_DIR", tmp_path / "locks")
    good = Coordinate("org.example", "good", "1.0")
    _publish(repository, good, b"good bytes")
    lock = write_lock("example", [good], transitive=False)
    assert lock.artifacts[0].sha256 == hashlib.sha256(b"good bytes").hexdigest()
    assert artifacts.load_lock("example") == lock

    corrupt = Coordinate("org.example", "corrupt", "1.0")
    _publish(repository, corrupt, b"served bytes", sha1=False)
    (repository / (corrupt.relative_path + ".sha1")).write_text("0" * 40)
    with pytest.raises(ArtifactError, match="does not match the published"):
        write_lock("corrupt", [corrupt], transitive=False)

    unsigned = Coordinate("org.example", "unsigned", "1.0")
    _publish(repository, unsigned, b"no checksum", sha1=False)
    with pytest.raises(ArtifactError, match=r"no \.sha256 or \.sha1"):
        write_lock("unsigned", [unsigned], transitive=False)


def test_unpack_once_and_refuse_unsafe_members(repository: Path, tmp_path: Path) -> None:
    archive = tmp_path / "app-1.0.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        payload = b"run me"
        info = tarfile.TarInfo("app-1.0/run.jar")
        info.size = len(payload)
        tar.addfile(info, io.BytesIO(payload))
    target = unpack(archive)
    assert (target / "app-1.0" / "run.jar").read_bytes() == b"run me"
    assert unpack(archive) == target

    evil = tmp_path / "evil-1.0.tar.gz"
    with tarfile.open(evil, "w:gz") as tar:
        info = tarfile.TarInfo("../outside.txt")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    with pytest.raises(tarfile.TarError):
        unpack(evil)
    assert not (artifacts.cache_root() / "outside.txt").exists()


def test_the_committed_locks_are_complete() -> None:
    kafka = artifacts.load_lock("kafka")
    names = {a.coordinate.artifact for a in kafka.artifacts}
    assert {"kafka_2.13", "kafka-server", "kafka-raft", "log4j-slf4j-impl"} <= names
    assert all(len(a.sha256) == 64 and a.size > 0 for a in kafka.artifacts)
    apicurio = artifacts.load_lock("apicurio")
    assert [str(a.coordinate) for a in apicurio.artifacts] == [
        "io.apicurio:apicurio-registry-app:tar.gz:all:3.3.3"
    ]


def test_java_runtimes_are_found_by_their_release_file(tmp_path: Path) -> None:
    home = tmp_path / "jdk"
    (home / "bin").mkdir(parents=True)
    (home / "bin" / "java").write_text("#!/bin/sh\n")
    (home / "bin" / "java").chmod(0o755)
    (home / "release").write_text('JAVA_VERSION="21.0.4"\n')
    runtime = runtime_at(home)
    assert runtime is not None and runtime.major == 21
    (home / "release").write_text('JAVA_VERSION="1.8.0_402"\n')
    assert runtime_at(home).major == 8  # type: ignore[union-attr]
    assert find_java(17).major >= 17  # the machine's own JDK


def test_server_properties_bind_loopback_and_sasl_ssl_rewrites_the_client_listener(
    tmp_path: Path,
) -> None:
    plain = server_properties("127.0.0.1", 9001, 9002, tmp_path / "logs")
    assert plain["listeners"] == "PLAINTEXT://127.0.0.1:9001,CONTROLLER://127.0.0.1:9002"
    assert plain["offsets.topic.replication.factor"] == "1"
    secured = {
        **plain,
        **sasl_ssl_properties(plain, tmp_path / "tls" / "server.pem", ScramCredentials("b", "pw")),
    }
    assert secured["listeners"] == "SASL_SSL://127.0.0.1:9001,CONTROLLER://127.0.0.1:9002"
    assert secured["listener.security.protocol.map"] == "SASL_SSL:SASL_SSL,CONTROLLER:PLAINTEXT"
    rendered = render_properties({"a": "line1\nline2", "b": "back\\slash"})
    assert rendered == "a=line1\\nline2\nb=back\\\\slash\n"


def test_format_output_with_scram_records_is_not_logged() -> None:
    text = "Bootstrap metadata: [ScramCredentialRecord(name='u', salt=[1], storedKey=[2])]\nok\n"
    assert redact_format_output(text) == (
        "(bootstrap metadata with SCRAM credentials: not logged)\nok\n"
    )


def test_a_failed_start_drops_the_archive_it_claimed_written_or_not(tmp_path: Path) -> None:
    # A JVM that exits on a failed start still writes a complete archive of the few
    # classes it loaded: every later start would map it, so it goes too.
    claimed = tmp_path / "a.jsa.partial"
    claimed.touch()
    written = tmp_path / "b.jsa.partial"
    written.write_bytes(DYNAMIC_ARCHIVE_MAGIC + b"rest")
    mapped = tmp_path / "c.jsa"
    mapped.write_bytes(DYNAMIC_ARCHIVE_MAGIC + b"rest")
    drop_archive_of_failed_start(
        [
            f"-XX:ArchiveClassesAtExit={claimed}",
            f"-XX:ArchiveClassesAtExit={written}",
            f"-XX:SharedArchiveFile={mapped}",
            "-Xmx1m",
        ]
    )
    assert not claimed.exists() and not written.exists()
    assert mapped.exists(), "an archive it only mapped belongs to an earlier, good start"


def test_the_iceberg_s3_lock_pins_one_version_and_s3proxy() -> None:
    iceberg = load_lock("iceberg-s3")
    assert len({a.coordinate.version for a in iceberg.artifacts}) == 1, (
        "the Spark runtime and the AWS bundle must be the same Iceberg version"
    )
    assert spark_packages(iceberg) == (
        "org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:1.12.0,"
        "org.apache.iceberg:iceberg-aws-bundle:1.12.0"
    )
    (s3proxy,) = load_lock("s3proxy").artifacts
    assert s3proxy.coordinate.relative_path == (
        "org/gaul/s3proxy/4.1.0/s3proxy-4.1.0-jar-with-dependencies.jar"
    )
