"""Finding a Java runtime of at least a given version for the stack's JVM servers.

Kafka 4.x runs on Java 17; Apicurio Registry 3.2+ needs Java 21. The candidates, in
order: `$TABLEFLOW_JAVA_HOME`, `$JAVA_HOME`, `java` on PATH, then every JDK under
/usr/lib/jvm (newest first). A version is read from the JDK's `release` file, so
finding one starts no process.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from tableflow_core.errors import TableflowError
from tableflow_core.jvm.class_data_sharing import (
    ClassDataSharing,
    cache_directory,
    file_identity,
)

JAVA_HOME_ENV = "TABLEFLOW_JAVA_HOME"
JVM_ROOTS = (Path("/usr/lib/jvm"),)


class JavaNotFoundError(TableflowError, RuntimeError):
    """No Java runtime of the version a server needs."""


@dataclass(frozen=True)
class JavaRuntime:
    executable: Path
    home: Path
    major: int

    def __str__(self) -> str:
        return f"Java {self.major} ({self.home})"


def find_java(min_major: int) -> JavaRuntime:
    """The first candidate whose major version is at least `min_major`."""
    seen: list[str] = []
    for home in _candidate_homes():
        runtime = runtime_at(home)
        if runtime is None:
            continue
        seen.append(f"{runtime.major} at {home}")
        if runtime.major >= min_major:
            return runtime
    raise JavaNotFoundError(
        f"Java {min_major} or newer is needed; found {', '.join(seen) or 'no Java'}. "
        f"Install one (e.g. apt-get install openjdk-{min_major}-jre-headless) or set "
        f"{JAVA_HOME_ENV} to its home."
    )


def runtime_at(home: Path) -> JavaRuntime | None:
    executable = home / "bin" / "java"
    if not os.access(executable, os.X_OK):
        return None
    major = _release_major(home / "release")
    return JavaRuntime(executable, home, major) if major else None


def _release_major(release: Path) -> int | None:
    try:
        text = release.read_text(errors="replace")
    except OSError:
        return None
    match = re.search(r'^JAVA_VERSION="(\d+)(?:\.(\d+))?', text, re.MULTILINE)
    if not match:
        return None
    first = int(match.group(1))
    # "1.8.0_x" is Java 8.
    return int(match.group(2)) if first == 1 and match.group(2) else first


def _candidate_homes() -> list[Path]:
    homes: list[Path] = []
    for variable in (JAVA_HOME_ENV, "JAVA_HOME"):
        value = os.environ.get(variable)
        if value:
            homes.append(Path(value))
    on_path = shutil.which("java")
    if on_path:
        homes.append(Path(on_path).resolve().parent.parent)
    for root in JVM_ROOTS:
        if root.is_dir():
            installed = [p for p in root.iterdir() if p.is_dir() and not p.is_symlink()]
            homes.extend(
                sorted(installed, key=lambda p: _release_major(p / "release") or 0, reverse=True)
            )
    unique: list[Path] = []
    for home in homes:
        if home not in unique:
            unique.append(home)
    return unique


def class_data_sharing_options(
    name: str, java: JavaRuntime, jvm_options: Sequence[str], files: Iterable[Path]
) -> list[str]:
    """JVM options that map a server's class-data sharing archive, or write it at exit.

    The first server of a kind writes the archive when it stops; every later start maps
    it (Kafka: ~2.5 s to ~1.2 s; Apicurio: ~4.5 s to ~3.3 s on the 2-core machine).
    Archives live in `$XDG_CACHE_HOME/tableflow/jvm/<name>`, named by a digest of the
    JDK, the options and the jars (path, size, mtime), so a change gets a new archive.
    The writing and claiming rules are the Spark driver's (jvm.class_data_sharing).
    """
    identity = [str(java.executable), java.major, *jvm_options, *map(file_identity, files)]
    digest = hashlib.sha256(json.dumps(identity, default=str).encode()).hexdigest()[:24]
    sharing = ClassDataSharing(
        directory=cache_directory() / name,
        digest=digest,
        java=java.executable,
        layout=tuple(jvm_options),
    )
    return sharing.java_options()


def drop_archive_of_failed_start(options: Sequence[str]) -> None:
    """After a failed start: drop the archive this JVM claimed, written or not.

    A JVM that exits on a configuration error still writes a complete archive at exit,
    holding the classes of its failed start only (13 MB for Trino instead of 134 MB);
    every later start would map it (tableflow_core.dev.launcher, for every server).
    """
    prefix = "-XX:ArchiveClassesAtExit="
    for option in options:
        if option.startswith(prefix):
            Path(option.removeprefix(prefix)).unlink(missing_ok=True)
