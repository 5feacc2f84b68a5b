"""The S3 work's JVM jars from Maven Central, fetched once into the user cache and verified.

INTERIM. The Kafka work (branch `kafka`) brings the project's generic artifact cache,
`tableflow_core/dev/artifacts.py`: committed *locks* (`dev/artifact_locks/<name>.json`)
name every file with its size and SHA-256, and `ensure(load_lock(name))` downloads what
the cache lacks. This module reads the same lock files (`iceberg-s3.json`,
`s3proxy.json`, written in that format) into the same cache layout
(`$TABLEFLOW_ARTIFACT_CACHE`, default `~/.cache/tableflow/maven/<maven path>`), so
when `artifacts.py` lands, `lock_files(name)` becomes `ensure(load_lock(name)).files`
and this module goes, with nothing downloaded twice.

The locks pin:
- `iceberg-s3`: `iceberg-spark-runtime-3.5_2.12` and `iceberg-aws-bundle`, both 1.12.0
  (the same version: docs/object-storage.md says why this one);
- `s3proxy`: `org.gaul:s3proxy:4.1.0`, classifier `jar-with-dependencies`.

A user with a Spark cluster does not need this: `iceberg_s3_packages()` gives the same
jars as `spark.jars.packages` coordinates (Spark's Ivy resolves them from Maven Central).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import tempfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path

MAVEN_CENTRAL = "https://repo1.maven.org/maven2"
CACHE_ENV = "TABLEFLOW_ARTIFACT_CACHE"
REPOSITORY_ENV = "TABLEFLOW_MAVEN_REPOSITORY"
LOCK_DIR = Path(__file__).with_name("artifact_locks")
ICEBERG_S3_LOCK = "iceberg-s3"
S3PROXY_LOCK = "s3proxy"


class JarDownloadError(RuntimeError):
    """A locked jar could not be downloaded or did not match its lock."""


@dataclass(frozen=True)
class LockedJar:
    """`group:artifact[:extension[:classifier]]:version` with its size and SHA-256."""

    coordinate: str
    sha256: str
    size: int

    @property
    def parts(self) -> tuple[str, str, str, str, str]:
        fields = self.coordinate.split(":")
        if len(fields) == 3:
            return fields[0], fields[1], "jar", "", fields[2]
        if len(fields) == 5:
            return fields[0], fields[1], fields[2], fields[3], fields[4]
        raise JarDownloadError(f"unsupported coordinate in a lock: {self.coordinate!r}")

    @property
    def relative_path(self) -> str:
        group, artifact, extension, classifier, version = self.parts
        suffix = f"-{classifier}" if classifier else ""
        return f"{group.replace('.', '/')}/{artifact}/{version}/{artifact}-{version}{suffix}.{extension}"

    @property
    def package(self) -> str:
        """The `spark.jars.packages` form (Ivy's syntax has no classifier)."""
        group, artifact, _, _, version = self.parts
        return f"{group}:{artifact}:{version}"


def load_lock(name: str) -> list[LockedJar]:
    document = json.loads((LOCK_DIR / f"{name}.json").read_text())
    return [LockedJar(a["coordinate"], a["sha256"], int(a["size"])) for a in document["artifacts"]]


def cache_root() -> Path:
    configured = os.environ.get(CACHE_ENV)
    if configured:
        return Path(configured).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "tableflow" / "maven"


def lock_files(name: str) -> list[Path]:
    """The lock's files in the cache, downloading and verifying what is missing."""
    return [ensure_jar(jar) for jar in load_lock(name)]


def ensure_jar(jar: LockedJar, timeout: float = 300.0) -> Path:
    """A cached file is trusted by its size (it was verified before it was moved there)."""
    path = cache_root() / jar.relative_path
    if _cached(jar, path):
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.parent / f".{path.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be downloading it now
        if not _cached(jar, path):
            _download(jar, path, timeout)
    return path


def _cached(jar: LockedJar, path: Path) -> bool:
    try:
        return path.stat().st_size == jar.size
    except FileNotFoundError:
        return False


def _download(jar: LockedJar, target: Path, timeout: float) -> None:
    url = f"{os.environ.get(REPOSITORY_ENV, MAVEN_CENTRAL).rstrip('/')}/{jar.relative_path}"
    handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
    try:
        digest = hashlib.sha256()
        with os.fdopen(handle, "wb") as out, urllib.request.urlopen(url, timeout=timeout) as resp:
            for block in iter(lambda: resp.read(1 << 20), b""):
                digest.update(block)
                out.write(block)
        if digest.hexdigest() != jar.sha256:
            raise JarDownloadError(
                f"{jar.coordinate}: checksum mismatch for {url} "
                f"(lock says sha256 {jar.sha256}, got {digest.hexdigest()})"
            )
        os.replace(temporary, target)
    except OSError as exc:
        raise JarDownloadError(f"{jar.coordinate}: cannot download {url}: {exc}") from exc
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)


def iceberg_s3_jars() -> list[Path]:
    """The Iceberg Spark runtime and AWS bundle (same version), for `spark.jars`."""
    return lock_files(ICEBERG_S3_LOCK)


def iceberg_s3_packages() -> str:
    """The same jars as `spark.jars.packages` coordinates, for a cluster that resolves."""
    return ",".join(jar.package for jar in load_lock(ICEBERG_S3_LOCK))


def s3proxy_jar() -> Path:
    (path,) = lock_files(S3PROXY_LOCK)
    return path
