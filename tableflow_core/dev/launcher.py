"""One way to run a JVM server of the dev stack or the tests.

A server declares itself once, as a `JvmServer`: its name (log file, class-data archive),
the artifact lock that pins its files, the Java it needs and its default JVM options.
Each start describes one run as a `Launch`: the data folder, the port, what follows the
JVM options (`-jar x` or `-cp ... Main args`), the files that carry secrets and how to
tell it is ready. `launch` does the rest the same way for every server:

1. the artifacts are in the user cache and match their lock (`jvm.artifacts.ensure`,
   done by the declaration's `artifacts()` before the run is described);
2. the oldest installed Java that is new enough (`jvm.java.find_java`: Java 17, or
   Temurin 25 under /usr/lib/jvm for the servers that need 21+);
3. the class-data sharing archive: mapped when one exists, else written by this JVM at
   exit (`jvm.java.class_data_sharing_options`); a failed start drops what it claimed;
4. the secret-bearing files written mode 0600, removed once the server is ready (or when
   it stops, for servers that read them late);
5. the JVM started in its own session, its output in a log file, on 127.0.0.1;
6. readiness: the port, then the server's own probe (a health URL, a query, a metadata
   request), retried until the timeout or until the process dies;
7. `stop()` by the recorded pid (the whole process group), then the secret files go.

    KAFKA = JvmServer(name="kafka", lock="kafka", min_java=17)
    running = launch(KAFKA, Launch(data_dir=..., port=free_port(), main=("-cp", cp, "kafka.Kafka", cfg)))
    running.stop()
"""

from __future__ import annotations

import contextlib
import os
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from tableflow_core.dev.processes import BackgroundProcess, start_background
from tableflow_core.errors import TableflowError
from tableflow_core.jvm.artifacts import ResolvedArtifacts, ensure, load_lock
from tableflow_core.jvm.java import (
    JavaRuntime,
    class_data_sharing_options,
    drop_archive_of_failed_start,
    find_java,
)

# Measured on the 2-core machine (docs/environment.md): the serial collector and C1 only
# start every one of these servers in about half the time of the JVM's defaults.
COMPACT_JVM = ("-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xss512k")
ARCHIVE_WRITE_OPTION = "-XX:ArchiveClassesAtExit"


class LaunchError(TableflowError, RuntimeError):
    """A server did not start or did not become ready; the message names its log."""


# A probe returns None once the server is ready, else what it is still waiting for.
# OSError (refused connections, HTTP errors) and ValueError (half-written JSON) count as
# "not yet"; any other exception ends the wait.
Probe = Callable[[], "str | None"]


@dataclass(frozen=True)
class JvmServer:
    """A server's declaration: what it is, the same for every run."""

    name: str
    lock: str
    min_java: int
    java_options: tuple[str, ...] = COMPACT_JVM
    error: type[LaunchError] = LaunchError

    def artifacts(self, lock: str | None = None) -> ResolvedArtifacts:
        """The locked files, fetched once into the user cache and verified."""
        return ensure(load_lock(lock or self.lock))

    def java(self) -> JavaRuntime:
        return find_java(self.min_java)


@dataclass(frozen=True)
class Launch:
    """One run of a server."""

    data_dir: Path
    port: int
    main: tuple[str, ...]  # after the JVM options: ("-jar", jar) or ("-cp", cp, Main, *args)
    host: str = "127.0.0.1"
    archive_files: tuple[Path, ...] = ()  # what the class-data archive depends on
    heap_mb: int = 256
    java_options: tuple[str, ...] | None = None  # None: the declaration's
    system_properties: Mapping[str, str] = field(default_factory=dict)
    private_files: Mapping[Path, str] = field(default_factory=dict, repr=False)
    keep_private_files: bool = False  # True: until stop (the server reads them late)
    ready: Callable[[RunningServer], str | None] | None = None
    log_file: Path | None = None
    cwd: Path | None = None
    timeout: float = 120.0
    poll_interval: float = 0.1
    class_data_sharing: bool = True
    # Runs before the server with the same JVM (and the archive mapped, never written):
    # Kafka formats its storage with it.
    prepare: Callable[[list[str]], None] | None = None


@dataclass(frozen=True, kw_only=True)
class ServerSettings:
    """The settings every server has; each server's settings class adds its own."""

    data_dir: Path
    host: str = "127.0.0.1"
    port: int = 0  # 0: a free port at start
    heap_mb: int = 256
    java_options: tuple[str, ...] | None = None  # None: the declaration's
    lock: str | None = None  # None: the declaration's artifact lock
    class_data_sharing: bool = True

    def run(self, port: int, main: tuple[str, ...], **launch: Any) -> Launch:
        """A `Launch` of these settings on `port`; `launch` holds the rest of it."""
        return Launch(
            data_dir=self.data_dir.resolve(),
            host=self.host,
            port=port,
            main=main,
            heap_mb=self.heap_mb,
            java_options=self.java_options,
            class_data_sharing=self.class_data_sharing,
            **launch,
        )


@dataclass(frozen=True)
class RunningServer:
    """A server this process started: `stop()` ends exactly its process group.

    Each server's class extends it with what its clients need (URLs, credentials)."""

    name: str
    process: BackgroundProcess
    java: JavaRuntime
    private_files: tuple[Path, ...] = ()
    startup_seconds: float = 0.0

    def common(self) -> dict[str, Any]:
        """This server's fields, to build a server-specific class from it."""
        return {f.name: getattr(self, f.name) for f in fields(RunningServer)}

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def host(self) -> str:
        return self.process.host

    @property
    def port(self) -> int:
        return self.process.port

    @property
    def log_file(self) -> Path:
        return self.process.log_file

    @property
    def alive(self) -> bool:
        return self.process.alive

    def stop(self, timeout: float = 15.0) -> None:
        try:
            self.process.stop(timeout)
        finally:
            remove_files(self.private_files)


def launch(server: JvmServer, run: Launch) -> RunningServer:
    """Start `server` as `run` describes and wait until it is ready (see the module doc)."""
    started = time.monotonic()
    data_dir = run.data_dir.resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    log = run.log_file or data_dir / f"{server.name}.log"
    java = server.java()
    jvm = [
        f"-Xmx{run.heap_mb}m",
        *(server.java_options if run.java_options is None else run.java_options),
    ]
    sharing = (
        class_data_sharing_options(server.name, java, jvm, run.archive_files)
        if run.class_data_sharing
        else []
    )
    properties = [f"-D{key}={value}" for key, value in run.system_properties.items()]
    for path, text in run.private_files.items():
        write_private(path, text)
    secrets = tuple(run.private_files)
    try:
        if run.prepare is not None:
            mapping_only = [o for o in sharing if not o.startswith(ARCHIVE_WRITE_OPTION)]
            run.prepare([str(java.executable), *mapping_only, *jvm, *properties])
        process = start_background(
            server.name,
            [str(java.executable), *sharing, *jvm, *properties, *run.main],
            run.host,
            run.port,
            log,
            cwd=run.cwd,
            timeout=run.timeout,
        )
    except BaseException as exc:
        remove_files(secrets)
        drop_archive_of_failed_start(sharing)
        if isinstance(exc, RuntimeError) and not isinstance(exc, LaunchError):
            raise server.error(str(exc)) from exc
        raise
    running = RunningServer(server.name, process, java, secrets)
    try:
        if run.ready is not None:
            probe = run.ready
            wait_until_ready(
                running, lambda: probe(running), run.timeout, server.error, run.poll_interval
            )
    except BaseException:  # an interrupted wait must not leave a JVM behind
        running.stop(timeout=5)
        drop_archive_of_failed_start(sharing)
        raise
    if not run.keep_private_files:
        remove_files(secrets)  # read at start: the secrets need not stay on disk
        secrets = ()
    return RunningServer(server.name, process, java, secrets, time.monotonic() - started)


def wait_until_ready(
    running: RunningServer,
    probe: Probe,
    timeout: float,
    error: type[LaunchError] = LaunchError,
    interval: float = 0.1,
) -> None:
    """Call `probe` until it says ready; raise `error` naming the log when time is up."""
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        try:
            last = probe()
            if last is None:
                return
        except (OSError, ValueError) as exc:
            last = exc
        if not running.alive:
            last = f"the process exited ({last})"
            break
        time.sleep(interval)
    raise error(
        f"{running.name} at {running.host}:{running.port} was not ready within "
        f"{timeout:.0f}s ({last}); see {running.log_file}"
    )


def http_ok(url: str, timeout: float = 2.0) -> bool:
    """The URL answers 200 (a refused connection or an HTTP error raises OSError)."""
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return bool(response.status == 200)


def http_probe(*urls: str) -> Callable[[RunningServer], str | None]:
    """Ready when each URL answers 200, in order (health first, then the API)."""

    def probe(_: RunningServer) -> str | None:
        return next((f"{url} not ready" for url in urls if not http_ok(url)), None)

    return probe


def log4j2_config(*info_loggers: str) -> str:
    """log4j2 properties for a server's own log file: WARN and above to the console (the
    launcher's log), INFO for `info_loggers`; no shutdown hook (the JVM's stop is ours)."""
    lines = [
        "status = warn",
        "appender.out.type = Console",
        "appender.out.name = OUT",
        "appender.out.layout.type = PatternLayout",
        "appender.out.layout.pattern = [%d] %p %m (%c)%n",
        "rootLogger.level = WARN",
        "rootLogger.appenderRef.out.ref = OUT",
        "shutdownHook = disable",
    ]
    for index, logger in enumerate(info_loggers):
        lines += [f"logger.l{index}.name = {logger}", f"logger.l{index}.level = INFO"]
    return "\n".join(lines) + "\n"


def render_properties(properties: Mapping[str, str]) -> str:
    """A Java properties file (backslashes and line breaks escaped)."""

    def escape(value: str) -> str:
        return value.replace("\\", "\\\\").replace("\n", "\\n")

    return "".join(f"{key}={escape(value)}\n" for key, value in properties.items())


def write_private(path: Path, text: str) -> None:
    """Write a file only this user can read; a file already there is replaced, not reused."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(text)


def remove_files(paths: Sequence[Path]) -> None:
    for path in paths:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
