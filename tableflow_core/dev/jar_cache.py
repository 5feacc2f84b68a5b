"""JVM jars from Maven Central, downloaded once into a local cache and checked.

The S3 work needs three jars that PyPI does not carry: the Iceberg Spark runtime and
the Iceberg AWS bundle of the same version, and s3proxy (the dev stack's object
store). Each is pinned here by coordinates and SHA-256 (taken when the pin was made,
after checking Maven Central's own `.sha1`), downloaded at most once into
`~/.cache/tableflow/jars` (`$TABLEFLOW_JAR_CACHE` moves it) and verified on every
call, so a truncated or altered file is never used.

This is deliberately the smallest direct download; it is meant to merge with the
generic Maven artifact cache of the Kafka work (`tableflow_core/dev/artifacts.py`)
once that lands: the pins below then become its entries.

A user with a Spark cluster does not need this module: the same coordinates work in
`spark.jars.packages` (Spark's Ivy resolves them from Maven Central).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import tempfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path

MAVEN_REPOSITORY_ENV = "TABLEFLOW_MAVEN_REPOSITORY"
JAR_CACHE_ENV = "TABLEFLOW_JAR_CACHE"
DEFAULT_REPOSITORY = "https://repo1.maven.org/maven2"


class JarDownloadError(RuntimeError):
    """A pinned jar could not be downloaded or did not match its checksum."""


@dataclass(frozen=True)
class MavenJar:
    """One pinned artifact: `group:artifact:version[:classifier]` and its SHA-256."""

    group: str
    artifact: str
    version: str
    sha256: str
    classifier: str | None = None

    @property
    def file_name(self) -> str:
        suffix = f"-{self.classifier}" if self.classifier else ""
        return f"{self.artifact}-{self.version}{suffix}.jar"

    @property
    def coordinates(self) -> str:
        """The `spark.jars.packages` form (no classifier: Ivy's syntax has none)."""
        return f"{self.group}:{self.artifact}:{self.version}"

    def url(self, repository: str) -> str:
        group_path = self.group.replace(".", "/")
        base = repository.rstrip("/")
        return f"{base}/{group_path}/{self.artifact}/{self.version}/{self.file_name}"


# The runtime and the AWS bundle must be the same Iceberg version. 1.10.2 (the PyPI
# runtime) has no AWS bundle on Maven Central; 1.10.1 would drop 1.10.2's fixes;
# 1.12.0 has them, still ships a Spark 3.5 runtime and made fewer S3 requests in the
# same scenario (docs/object-storage.md has the evidence).
ICEBERG_VERSION = "1.12.0"
ICEBERG_SPARK_RUNTIME = MavenJar(
    "org.apache.iceberg",
    "iceberg-spark-runtime-3.5_2.12",
    ICEBERG_VERSION,
    "8dd8c90e54ed1a20f2461309d047a255ee56382eb7c0a46162b27a4936fd86dc",
)
ICEBERG_AWS_BUNDLE = MavenJar(
    "org.apache.iceberg",
    "iceberg-aws-bundle",
    ICEBERG_VERSION,
    "dd7e49ffa4ac9b215bed846581991259e3aec9bb2fa08d6cec029c46cd66d957",
)
S3PROXY = MavenJar(
    "org.gaul",
    "s3proxy",
    "4.1.0",
    "a4d025969aaf796616ed4b1e2491d87d455ce84bb28cb9db086b2e6aaa68b48d",
    classifier="jar-with-dependencies",
)


def cache_dir() -> Path:
    configured = os.environ.get(JAR_CACHE_ENV)
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "tableflow" / "jars"


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def cached_jar(jar: MavenJar) -> Path | None:
    """The verified cached file, or None when it is not (validly) in the cache."""
    path = cache_dir() / jar.file_name
    if path.is_file() and sha256_of(path) == jar.sha256:
        return path
    return None


def ensure_jar(jar: MavenJar, timeout: float = 300.0) -> Path:
    """The jar's path in the cache, downloading it first if needed (once, under a lock)."""
    directory = cache_dir()
    directory.mkdir(parents=True, exist_ok=True)
    lock_path = directory / f".{jar.file_name}.lock"
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be downloading it now
        found = cached_jar(jar)
        if found is not None:
            return found
        return _download(jar, directory, timeout)


def _download(jar: MavenJar, directory: Path, timeout: float) -> Path:
    repository = os.environ.get(MAVEN_REPOSITORY_ENV, DEFAULT_REPOSITORY)
    url = jar.url(repository)
    target = directory / jar.file_name
    handle, temporary = tempfile.mkstemp(dir=directory, prefix=f".{jar.file_name}.")
    try:
        digest = hashlib.sha256()
        with os.fdopen(handle, "wb") as out, urllib.request.urlopen(url, timeout=timeout) as resp:
            for block in iter(lambda: resp.read(1 << 20), b""):
                digest.update(block)
                out.write(block)
        if digest.hexdigest() != jar.sha256:
            raise JarDownloadError(
                f"{jar.coordinates}: checksum mismatch for {url} "
                f"(expected sha256 {jar.sha256}, got {digest.hexdigest()})"
            )
        os.replace(temporary, target)
    except OSError as exc:
        raise JarDownloadError(f"{jar.coordinates}: cannot download {url}: {exc}") from exc
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
    return target


def iceberg_s3_jars() -> list[Path]:
    """The Iceberg Spark runtime and AWS bundle (same version), for `spark.jars`."""
    return [ensure_jar(ICEBERG_SPARK_RUNTIME), ensure_jar(ICEBERG_AWS_BUNDLE)]


def iceberg_s3_packages() -> str:
    """The same two jars as `spark.jars.packages` coordinates, for a cluster with Maven."""
    return f"{ICEBERG_SPARK_RUNTIME.coordinates},{ICEBERG_AWS_BUNDLE.coordinates}"
