"""Class-data sharing (CDS) for the Spark driver's JVM.

Before its first record, the JVM of a `tableflow apply` loads, verifies and links tens of
thousands of classes (Spark, Iceberg, Parquet, Arrow, Catalyst's code generation): seconds
of CPU on every cold start. The JDK can map those classes, already parsed and verified,
from an archive instead (JDK 13+: `-XX:ArchiveClassesAtExit` writes one when a JVM exits,
`-XX:SharedArchiveFile` maps it). On the 2-core machine a bare session plus its first
query went from ~4.9 s to ~2.5 s (docs/history/performance-rounds.md).

The first application (apply, run, maintain) for a given JDK, Spark jar set and JVM
options writes the archive when its JVM exits (after the command's own work is done);
every later application maps it. Archives live in the user's cache directory
(`$XDG_CACHE_HOME/tableflow/jvm`, created 0700), named by a digest of everything that
makes an archive valid, so a JDK upgrade or a new jar gets a new archive. Set
`spark.class_data_sharing: false` in a target to turn it off.

The JVM writes to `<digest>.jsa.partial` and writes the archive's header last (after
every region), so a partial file whose header carries the archive magic is complete; the
next start renames it into place. A partial without a header that is older than
`STALE_PARTIAL_SECONDS` was left by a JVM that died while writing and is replaced.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# JDK's dynamic archive header magic (0xf00baba8), as stored on little-endian machines.
DYNAMIC_ARCHIVE_MAGIC = (0xF00BABA8).to_bytes(4, sys.byteorder)
STALE_PARTIAL_SECONDS = 600.0
KEPT_ARCHIVES = 4
# The JVM reports archive mismatches and skipped classes on stdout: keep the CLI clean.
QUIET_CDS_LOGGING = "-Xlog:cds=off,cds+dynamic=off"
# Spark conf entries whose value changes what the driver JVM loads or how it lays out
# classes; each goes into the archive's digest.
CLASS_PATH_CONF_KEYS = (
    "spark.jars",
    "spark.jars.packages",
    "spark.driver.extraClassPath",
    "spark.driver.memory",
)
JAVA_OPTIONS_KEY = "spark.driver.extraJavaOptions"
# Spark puts these before extraJavaOptions on the driver's command line.
DEFAULT_JAVA_OPTIONS_KEY = "spark.driver.defaultJavaOptions"
# Environment variables the driver JVM reads options from (the launcher, spark-submit).
JAVA_OPTIONS_ENVIRONMENT = (
    "JAVA_TOOL_OPTIONS",
    "JDK_JAVA_OPTIONS",
    "_JAVA_OPTIONS",
    "SPARK_SUBMIT_OPTS",
)
# JVM options that only set properties or logging leave the archive's layout alone.
LAYOUT_NEUTRAL_PREFIXES = ("-D", "-Xlog")
# Options that load a JVMTI agent or Flight Recorder, which hook class loading: JDK 17's
# JVM crashes (SIGSEGV in KlassFactory::check_shared_class_file_load_hook) when such a
# hook meets classes mapped from a dynamic archive, so these JVMs run without sharing.
CLASS_LOAD_HOOK_PREFIXES = (
    "-javaagent:",
    "-agentlib:",
    "-agentpath:",
    "-XX:StartFlightRecording",
    "-XX:+FlightRecorder",
    "-XX:FlightRecorderOptions",
)


@dataclass(frozen=True)
class ClassDataSharing:
    """The archive for one JVM set-up (its digest) in one cache directory; `java` and
    `layout` are the JVM and the options the driver will run with."""

    directory: Path
    digest: str
    java: Path
    layout: tuple[str, ...] = ()

    @property
    def archive(self) -> Path:
        return self.directory / f"{self.digest}.jsa"

    @property
    def partial(self) -> Path:
        return self.directory / f"{self.digest}.jsa.partial"

    def java_options(self) -> list[str]:
        """Options that map the archive, or else write it when the JVM exits; none if
        another JVM is writing it right now or the directory cannot be used."""
        try:
            self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
            self._promote_finished_partial()
            if is_complete_archive(self.archive):
                return [f"-XX:SharedArchiveFile={self.archive}", QUIET_CDS_LOGGING]
            if self._claim_partial():
                if self._jvm_can_write_archives():
                    prune_archives(self.directory, KEPT_ARCHIVES)
                    return [f"-XX:ArchiveClassesAtExit={self.partial}", QUIET_CDS_LOGGING]
                self.partial.unlink(missing_ok=True)
        except OSError:
            pass  # a read-only or full cache directory costs speed, never the run
        return []

    def _promote_finished_partial(self) -> None:
        if is_complete_archive(self.partial):
            os.replace(self.partial, self.archive)

    def _jvm_can_write_archives(self) -> bool:
        """A JVM refuses to start when asked to write an archive without the JDK's base
        archive (a JDK built without one, `-Xshare:off`): try it once, with `-version`."""
        probe = self.directory / f"{self.digest}.probe.jsa"
        command = [str(self.java), *self.layout, f"-XX:ArchiveClassesAtExit={probe}"]
        try:
            result = subprocess.run(
                [*command, "-Xlog:disable", "-version"], capture_output=True, timeout=60
            )
        except (OSError, subprocess.TimeoutExpired):
            return False
        finally:
            probe.unlink(missing_ok=True)
        return result.returncode == 0

    def _claim_partial(self) -> bool:
        """Create the partial file exclusively (one writer at a time); a stale one left
        by a JVM that died while writing is taken over."""
        try:
            age = time.time() - self.partial.stat().st_mtime
        except FileNotFoundError:
            age = None
        if age is not None:
            if age < STALE_PARTIAL_SECONDS:
                return False
            self.partial.unlink(missing_ok=True)
        try:
            os.close(os.open(self.partial, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
        except FileExistsError:
            return False
        return True


def prune_archives(directory: Path, keep: int) -> None:
    """Keep the `keep` most recently written archives (each is ~150 MB)."""
    archives = sorted(directory.glob("*.jsa"), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in archives[keep:]:
        old.unlink(missing_ok=True)


def is_complete_archive(path: Path) -> bool:
    """True if `path` holds a dynamic archive whose header was written (its last step)."""
    try:
        with open(path, "rb") as archive:
            return archive.read(4) == DYNAMIC_ARCHIVE_MAGIC
    except OSError:
        return False


def cache_directory() -> Path:
    """Where archives are kept: `$XDG_CACHE_HOME/tableflow/jvm` (default ~/.cache)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "tableflow" / "jvm"


def class_data_sharing(conf: Mapping[str, str]) -> ClassDataSharing | None:
    """The archive for a driver JVM started with this Spark `conf` (None: no JDK found,
    or the JVM hooks class loading, see `CLASS_LOAD_HOOK_PREFIXES`)."""
    java = java_executable()
    options = driver_jvm_options(conf)
    if java is None or any(o.startswith(CLASS_LOAD_HOOK_PREFIXES) for o in options):
        return None
    identity: dict[str, Any] = {
        "java": file_identity(java),
        "spark_jars": spark_jar_names(),
        "conf": {key: conf.get(key, "") for key in CLASS_PATH_CONF_KEYS},
        "java_options": layout_options(options),
    }
    encoded = json.dumps(identity, sort_keys=True).encode()
    digest = hashlib.sha256(encoded).hexdigest()[:24]
    layout = [*identity["java_options"], f"-Xmx{conf.get('spark.driver.memory', '1g')}"]
    return ClassDataSharing(cache_directory(), digest, java, tuple(layout))


def driver_jvm_options(conf: Mapping[str, str]) -> list[str]:
    """Every option the driver JVM will see, from the Spark conf and the environment."""
    sources = [
        *(os.environ.get(name, "") for name in JAVA_OPTIONS_ENVIRONMENT),
        conf.get(DEFAULT_JAVA_OPTIONS_KEY, ""),
        conf.get(JAVA_OPTIONS_KEY, ""),
    ]
    return [option for source in sources for option in source.split()]


def layout_options(java_options: list[str]) -> list[str]:
    """The JVM options that can change how classes are laid out (heap size, GC, flags)."""
    return [o for o in java_options if not o.startswith(LAYOUT_NEUTRAL_PREFIXES)]


def java_executable() -> Path | None:
    """The `java` Spark's launcher runs: `$JAVA_HOME/bin/java`, else the one on PATH."""
    java_home = os.environ.get("JAVA_HOME")
    candidate = str(Path(java_home) / "bin" / "java") if java_home else shutil.which("java")
    if not candidate or not os.path.exists(candidate):
        return None
    return Path(candidate).resolve()


def file_identity(path: Path) -> list[object]:
    stat = path.stat()
    return [str(path), stat.st_size, stat.st_mtime_ns]


def spark_jar_names() -> list[str]:
    """The jars on the driver's class path (Spark's own `jars/` directory)."""
    import pyspark

    spark_home = os.environ.get("SPARK_HOME") or os.path.dirname(pyspark.__file__)
    jars = Path(spark_home) / "jars"
    return sorted(p.name for p in jars.glob("*.jar")) if jars.is_dir() else []
