"""The interim jar cache: locks parse, downloads are verified before they become visible."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from tableflow_core.dev import jar_cache
from tableflow_core.dev.jar_cache import JarDownloadError, LockedJar, ensure_jar, load_lock


def test_locks_pin_one_iceberg_version_and_s3proxy() -> None:
    iceberg = load_lock(jar_cache.ICEBERG_S3_LOCK)
    versions = {jar.parts[4] for jar in iceberg}
    assert len(versions) == 1, "the runtime and the AWS bundle must be the same version"
    assert jar_cache.iceberg_s3_packages() == (
        "org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:1.12.0,"
        "org.apache.iceberg:iceberg-aws-bundle:1.12.0"
    )
    (s3proxy,) = load_lock(jar_cache.S3PROXY_LOCK)
    assert s3proxy.relative_path == "org/gaul/s3proxy/4.1.0/s3proxy-4.1.0-jar-with-dependencies.jar"


def _repository(tmp_path: Path, jar: LockedJar, body: bytes) -> Path:
    repository = tmp_path / "repo"
    target = repository / jar.relative_path
    target.parent.mkdir(parents=True)
    target.write_bytes(body)
    return repository


def test_download_is_verified_and_cached(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    body = b"PK fake jar"
    jar = LockedJar("org.example:thing:1.0", hashlib.sha256(body).hexdigest(), len(body))
    monkeypatch.setenv(jar_cache.REPOSITORY_ENV, _repository(tmp_path, jar, body).as_uri())
    monkeypatch.setenv(jar_cache.CACHE_ENV, str(tmp_path / "cache"))
    path = ensure_jar(jar)
    assert path == tmp_path / "cache" / "org/example/thing/1.0/thing-1.0.jar"
    assert path.read_bytes() == body
    monkeypatch.setenv(jar_cache.REPOSITORY_ENV, (tmp_path / "nowhere").as_uri())
    assert ensure_jar(jar) == path  # cached: no download


def test_a_file_that_does_not_match_its_lock_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    jar = LockedJar("org.example:thing:1.0", hashlib.sha256(b"expected").hexdigest(), 8)
    monkeypatch.setenv(jar_cache.REPOSITORY_ENV, _repository(tmp_path, jar, b"tampered").as_uri())
    monkeypatch.setenv(jar_cache.CACHE_ENV, str(tmp_path / "cache"))
    with pytest.raises(JarDownloadError, match="checksum mismatch"):
        ensure_jar(jar)
    folder = tmp_path / "cache" / "org/example/thing/1.0"
    assert [p.name for p in folder.iterdir() if not p.name.endswith(".lock")] == []
