"""A private PostgreSQL 15 cluster on loopback, for change data capture tests and benchmarks.

    server = start_postgres(PostgresSettings(data_dir=Path("/tmp/pg"), password=SecretStr("...")))
    server.dsn()                # "host=127.0.0.1 port=<p> dbname=tableflow user=tableflow"
    server.stop()               # fast shutdown (SIGINT), SIGKILL after the timeout
    server = restart_postgres(server)   # same folder, same port

Debian's `postgresql-15` package (`/usr/lib/postgresql/15/bin`; `scripts/install-postgres.sh`
installs it and makes sure its `postgres` system user exists). The cluster lives in its own
folder (`initdb` once, `<data_dir>/pgdata`), listens only on 127.0.0.1 (no Unix socket),
with `wal_level=logical` for Debezium's pgoutput slot, and asks every TCP client for a
SCRAM-SHA-256 password (replication connections too). PostgreSQL refuses to run as root:
a root caller runs it as the `postgres` system user (`run_as`), which then owns the folder;
the folder must be reachable by that user (a fresh folder under /tmp is; pytest's
0700 /tmp/pytest-of-root is not).

The password reaches `initdb` through a 0600 file removed right after; it is never on a
command line or in a log.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import SecretStr

from tableflow_core.dev.processes import free_port, pid_is_alive, wait_for_exit
from tableflow_core.errors import TableflowError

BIN_DIR = Path("/usr/lib/postgresql/15/bin")
INSTALL_SCRIPT = "scripts/install-postgres.sh"
ROOT_RUNS_AS = "postgres"
# Debezium's slot and its one walsender, plus the e2e's restarts: a few of each suffice.
DEFAULT_SERVER_SETTINGS: tuple[tuple[str, str], ...] = (
    ("wal_level", "logical"),
    ("max_wal_senders", "8"),
    ("max_replication_slots", "8"),
    ("password_encryption", "scram-sha-256"),
    ("unix_socket_directories", ""),
    ("shared_buffers", "64MB"),
    # A test cluster: a crash may lose the last commits' durability, never their order.
    ("synchronous_commit", "off"),
)


class PostgresError(TableflowError, RuntimeError):
    """The cluster could not be made, started or stopped; the message names the log."""


@dataclass(frozen=True)
class PostgresSettings:
    data_dir: Path
    password: SecretStr
    user: str = "tableflow"
    database: str = "tableflow"
    host: str = "127.0.0.1"
    port: int = 0
    bin_dir: Path = BIN_DIR
    run_as: str | None = None
    server_settings: tuple[tuple[str, str], ...] = DEFAULT_SERVER_SETTINGS


@dataclass(frozen=True)
class PostgresServer:
    settings: PostgresSettings
    port: int
    pid: int
    log_file: Path
    startup_seconds: float = 0.0
    run_as: str | None = field(default=None)

    @property
    def host(self) -> str:
        return self.settings.host

    @property
    def pgdata(self) -> Path:
        return cluster_dir(self.settings)

    @property
    def alive(self) -> bool:
        return pid_is_alive(self.pid)

    def dsn(self, database: str | None = None, user: str | None = None) -> str:
        """A libpq connection string without the password (pass it apart)."""
        return (
            f"host={self.host} port={self.port} dbname={database or self.settings.database} "
            f"user={user or self.settings.user}"
        )

    def connect_kwargs(self) -> dict[str, str | int]:
        return {
            "host": self.host,
            "port": self.port,
            "dbname": self.settings.database,
            "user": self.settings.user,
            "password": self.settings.password.get_secret_value(),
        }

    def stop(self, timeout: float = 30.0, mode: str = "fast") -> None:
        """`fast` (SIGINT: disconnect clients, checkpoint), `immediate` (SIGQUIT: a crash
        that recovers from the WAL at the next start); SIGKILL after `timeout`."""
        signals = {"fast": signal.SIGINT, "immediate": signal.SIGQUIT, "smart": signal.SIGTERM}
        _signal_and_wait(self.pid, signals[mode], timeout)


def cluster_dir(settings: PostgresSettings) -> Path:
    return settings.data_dir / "pgdata"


def binary(settings: PostgresSettings, name: str) -> Path:
    path = settings.bin_dir / name
    if not path.is_file():
        raise PostgresError(
            f"{path} not found: PostgreSQL 15 is not installed (run `bash {INSTALL_SCRIPT}` "
            "as root, or apt-get install postgresql-15)"
        )
    return path


def os_user(settings: PostgresSettings) -> str | None:
    """The system user the server runs as: `run_as`, else `postgres` for root, else the caller."""
    if settings.run_as:
        return settings.run_as
    return ROOT_RUNS_AS if os.geteuid() == 0 else None


def init_cluster(settings: PostgresSettings) -> bool:
    """`initdb` the cluster once (SCRAM-SHA-256 for every TCP client); False if it exists."""
    pgdata = cluster_dir(settings)
    if (pgdata / "PG_VERSION").is_file():
        return False
    user = os_user(settings)
    _own_folder(settings.data_dir, user)
    password_file = settings.data_dir / ".initdb-password"
    _write_private(password_file, settings.password.get_secret_value() + "\n", user)
    command = [
        str(binary(settings, "initdb")),
        "-D",
        str(pgdata),
        "-U",
        settings.user,
        f"--pwfile={password_file}",
        "--auth-host=scram-sha-256",
        "--auth-local=scram-sha-256",
        "--encoding=UTF8",
        "--no-locale",
        "--no-sync",
    ]
    try:
        result = subprocess.run(
            command, capture_output=True, text=True, check=False, user=user, cwd=settings.data_dir
        )
    finally:
        password_file.unlink(missing_ok=True)
    if result.returncode != 0:
        raise PostgresError(f"initdb failed ({pgdata}):\n{(result.stdout + result.stderr)[-2000:]}")
    return True


def start_postgres(settings: PostgresSettings, timeout: float = 60.0) -> PostgresServer:
    """Init the cluster if needed, start it, create the database; wait until it answers."""
    started = time.monotonic()
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    created = init_cluster(settings)
    user = os_user(settings)
    port = settings.port or free_port(settings.host)
    log_file = settings.data_dir / "postgres.log"
    command = [
        str(binary(settings, "postgres")),
        "-D",
        str(cluster_dir(settings)),
        "-c",
        f"listen_addresses={settings.host}",
        "-c",
        f"port={port}",
    ]
    for key, value in settings.server_settings:
        command += ["-c", f"{key}={value}"]
    with open(log_file, "ab") as log:
        if user:
            with contextlib.suppress(PermissionError):
                shutil.chown(log_file, user)
        process = subprocess.Popen(
            command,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=settings.data_dir,
            user=user,
            start_new_session=True,
        )
    server = PostgresServer(settings, port, process.pid, log_file, run_as=user)
    try:
        _wait_until_ready(server, process, timeout)
        if created and settings.database != "postgres":
            _psql(server, "postgres", f'CREATE DATABASE "{settings.database}"')
    except BaseException:
        _signal_and_wait(process.pid, signal.SIGQUIT, 5)
        raise
    return PostgresServer(
        settings, port, process.pid, log_file, time.monotonic() - started, run_as=user
    )


def restart_postgres(server: PostgresServer, mode: str = "fast") -> PostgresServer:
    """Stop the server and start it again on the same folder and port."""
    server.stop(mode=mode)
    return start_postgres(_with_port(server.settings, server.port))


def _with_port(settings: PostgresSettings, port: int) -> PostgresSettings:
    from dataclasses import replace

    return replace(settings, port=port)


def _wait_until_ready(server: PostgresServer, process: subprocess.Popen, timeout: float) -> None:
    """`pg_isready` says the server accepts connections (it needs no password)."""
    isready = str(binary(server.settings, "pg_isready"))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise PostgresError(
                f"postgres exited with code {process.returncode} while starting; "
                f"{server.log_file} (tail):\n{_tail(server.log_file)}"
            )
        ready = subprocess.run(
            [isready, "-q", "-h", server.host, "-p", str(server.port), "-t", "1"], check=False
        )
        if ready.returncode == 0:
            return
        time.sleep(0.1)
    raise PostgresError(
        f"postgres did not accept connections on {server.host}:{server.port} within "
        f"{timeout:.0f}s; {server.log_file} (tail):\n{_tail(server.log_file)}"
    )


def _psql(server: PostgresServer, database: str, sql: str) -> None:
    """Run one statement with Debian's psql (the password through the environment)."""
    result = subprocess.run(
        [
            str(binary(server.settings, "psql")),
            "-X",
            "-v",
            "ON_ERROR_STOP=1",
            "-h",
            server.host,
            "-p",
            str(server.port),
            "-U",
            server.settings.user,
            "-d",
            database,
            "-c",
            sql,
        ],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PGPASSWORD": server.settings.password.get_secret_value()},
    )
    if result.returncode != 0:
        raise PostgresError(f"psql {sql!r} failed: {result.stderr.strip()[-1000:]}")


def _signal_and_wait(pid: int, sig: signal.Signals, timeout: float) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)
    if wait_for_exit(pid, timeout):
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
    while pid_is_alive(pid):
        time.sleep(0.05)


def _own_folder(folder: Path, user: str | None) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o700)
    if user and user != pwd.getpwuid(os.geteuid()).pw_name:
        shutil.chown(folder, user, pwd.getpwnam(user).pw_gid)
        _check_reachable(folder, user)


def _check_reachable(folder: Path, user: str) -> None:
    """Every parent of `folder` lets `user` through (PostgreSQL cannot chdir otherwise)."""
    entry = pwd.getpwnam(user)
    for parent in folder.resolve().parents:
        mode = parent.stat()
        if mode.st_uid == entry.pw_uid:
            continue
        others_x = mode.st_mode & 0o001
        group_x = mode.st_mode & 0o010 and mode.st_gid == entry.pw_gid
        if not (others_x or group_x):
            raise PostgresError(
                f"{parent} is not reachable by the system user {user!r} that PostgreSQL runs "
                f"as (mode {oct(mode.st_mode & 0o777)}): give the cluster a folder under /tmp"
            )


def _write_private(path: Path, text: str, user: str | None) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(text)
    if user and user != pwd.getpwuid(os.geteuid()).pw_name:
        shutil.chown(path, user)


def _tail(path: Path) -> str:
    with contextlib.suppress(OSError):
        return path.read_text(errors="replace")[-2000:]
    return ""
