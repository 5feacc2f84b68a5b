"""Lifecycle of the local development stack: broker, schema registry, Iceberg REST catalog,
and an S3 server (s3proxy) when the project's warehouse is on `s3://`.

    settings = StackSettings.for_project(Path("."))
    status = up(settings)      # starts what is not running yet; idempotent
    status = status(settings)    # what runs now, without starting anything
    stopped = down(settings)   # stops only what `up` started (recorded PIDs)

Everything lives under `settings.data_dir` (default `<project>/.tableflow/dev`):
`state.json` (pids, ports), `logs/`, `kafka/` (noida-db data), `registry/registry.db`,
`catalog/warehouse` and `catalog/catalog.db`, `s3/` (s3proxy's files and
`credentials.json`, mode 0600: the store's keys, made once). Data survives down/up.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib.util
import json
import os
import secrets
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, SecretStr

from tableflow_core.catalog.storage import ObjectStorage
from tableflow_core.dev import broker
from tableflow_core.dev.processes import (
    BackgroundProcess,
    pid_is_alive,
    port_is_open,
    start_background,
    stop_pid,
)
from tableflow_core.dev.registry import registry_command
from tableflow_core.dev.s3_server import S3Credentials, S3ServerSettings, start_s3_server
from tableflow_core.errors import TableflowError
from tableflow_core.registry.server import PASSWORD_ENV, bind_problem

KAFKA = "kafka"
REGISTRY = "schema-registry"
CATALOG = "catalog"
S3 = "s3"
COMPONENTS = (KAFKA, REGISTRY, S3, CATALOG)
CATALOG_MODULE = "tableflow_core.catalog.server"
STATE_FILE = "state.json"

ComponentState = Literal["running", "stopped", "not available"]


class StackError(TableflowError, RuntimeError):
    """A component could not be started or stopped; the message names it, its port and log."""


class StackSettings(BaseModel):
    """Where and on which ports the local stack runs."""

    data_dir: Path
    host: str = "127.0.0.1"
    kafka_port: int = Field(19092, ge=1, le=65535)
    registry_port: int = Field(18081, ge=1, le=65535)
    catalog_port: int = Field(18181, ge=1, le=65535)
    registry_basic_auth_user: str | None = None  # password from $TABLEFLOW_REGISTRY_PASSWORD
    # The project's embedded-catalog warehouse and database, so `tableflow dev up` serves
    # the same tables `plan`/`apply` use; default: under data_dir.
    catalog_warehouse_dir: Path | None = None
    catalog_database_url: str | None = None
    # A warehouse on s3:// (`catalog_warehouse_uri`): the stack starts s3proxy on `s3_port`
    # and the catalog with `catalog_storage` (no keys: it gets the stack's own).
    catalog_warehouse_uri: str | None = None
    catalog_storage: ObjectStorage | None = None
    s3_port: int | None = Field(None, ge=1, le=65535)
    s3_bucket: str = "warehouse"
    start_timeout_seconds: float = 60.0

    @classmethod
    def for_project(cls, project_dir: Path, **overrides: object) -> StackSettings:
        return cls(data_dir=project_dir / ".tableflow" / "dev", **overrides)

    @property
    def logs_dir(self) -> Path:
        return self.data_dir / "logs"

    @property
    def kafka_data_dir(self) -> Path:
        return self.data_dir / "kafka"

    @property
    def registry_database(self) -> Path:
        return self.data_dir / "registry" / "registry.db"

    @property
    def catalog_warehouse(self) -> Path:
        return self.catalog_warehouse_dir or self.data_dir / "catalog" / "warehouse"

    @property
    def catalog_database(self) -> Path:
        return self.data_dir / "catalog" / "catalog.db"

    @property
    def s3_dir(self) -> Path:
        return self.data_dir / "s3"

    @property
    def s3_url(self) -> str:
        return f"http://{self.host}:{self.s3_port}"

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.kafka_port}"

    @property
    def registry_url(self) -> str:
        return f"http://{self.host}:{self.registry_port}"

    @property
    def catalog_url(self) -> str:
        return f"http://{self.host}:{self.catalog_port}"


class ComponentStatus(BaseModel):
    """One row of `tableflow dev status`."""

    name: str
    state: ComponentState
    address: str  # bootstrap servers or URL
    pid: int | None = None
    port: int
    log_file: Path | None = None
    started_now: bool = False
    detail: str = ""


class StackStatus(BaseModel):
    data_dir: Path
    components: list[ComponentStatus]

    def component(self, name: str) -> ComponentStatus:
        return next(c for c in self.components if c.name == name)

    @property
    def running(self) -> bool:
        """True when every available component runs."""
        return all(c.state == "running" for c in self.components if c.state != "not available")

    def rows(self) -> list[dict[str, str]]:
        """Plain strings per component, ready for a rich Table."""
        return [
            {
                "component": c.name,
                "state": c.state + (" (started)" if c.started_now else ""),
                "address": c.address,
                "pid": str(c.pid or ""),
                "detail": c.detail,
            }
            for c in self.components
        ]


class _Recorded(BaseModel):
    """What `up` wrote about a process it started."""

    pid: int
    host: str
    port: int
    marker: str  # text the process's command line must contain
    log_file: Path
    started_at: float
    port_in_command: bool = True  # s3proxy reads its port from a file


@dataclass(frozen=True)
class _Spec:
    name: str
    port: int
    address: str
    marker: str
    command: list[str]
    env: dict[str, str] | None = None


def up(settings: StackSettings) -> StackStatus:
    """Start every component that is not running; report all of them."""
    if problem := bind_problem(settings.host, settings.registry_basic_auth_user):
        raise StackError(f"cannot start {REGISTRY}: {problem}")
    _prepare_dirs(settings)
    with _locked(settings):
        state = _read_state(settings)
        statuses = []
        for name in _components(settings):
            spec = _spec(settings, name)
            if spec is None:
                statuses.append(_not_available(settings))
                continue
            recorded = state.get(name)
            if recorded is not None and _is_ours(recorded):
                statuses.append(_running(spec, recorded, started_now=False))
                continue
            state.pop(name, None)
            recorded = _start(settings, spec)
            state[name] = recorded
            _write_state(settings, state)
            statuses.append(_running(spec, recorded, started_now=True))
        _write_state(settings, state)
    return StackStatus(data_dir=settings.data_dir, components=statuses)


def status(settings: StackSettings) -> StackStatus:
    state = _read_state(settings)
    statuses = []
    for name in _components(settings):
        spec = _spec(settings, name)
        if spec is None:
            statuses.append(_not_available(settings))
            continue
        recorded = state.get(name)
        if recorded is not None and _is_ours(recorded):
            statuses.append(_running(spec, recorded, started_now=False))
            continue
        detail = ""
        if port_is_open(settings.host, spec.port):
            detail = f"port {spec.port} is in use by a process this stack did not start"
        statuses.append(
            ComponentStatus(
                name=name, state="stopped", address=spec.address, port=spec.port, detail=detail
            )
        )
    return StackStatus(data_dir=settings.data_dir, components=statuses)


def down(settings: StackSettings) -> list[ComponentStatus]:
    """Stop the processes `up` recorded, after checking each PID is still that process."""
    stopped = []
    with _locked(settings):
        state = _read_state(settings)
        for name in reversed(COMPONENTS):
            recorded = state.pop(name, None)
            if recorded is None or not _is_ours(recorded):
                continue  # gone, or the PID now belongs to another process: leave it alone
            stop_pid(recorded.pid)
            if pid_is_alive(recorded.pid) and _is_ours(recorded):
                state[name] = recorded
                _write_state(settings, state)
                raise StackError(f"{name} (pid {recorded.pid}) did not stop")
            stopped.append(
                ComponentStatus(
                    name=name,
                    state="stopped",
                    address=f"{recorded.host}:{recorded.port}",
                    pid=recorded.pid,
                    port=recorded.port,
                    log_file=recorded.log_file,
                )
            )
        _write_state(settings, state)
    return stopped


# -- components ----------------------------------------------------------------------------


def _components(settings: StackSettings) -> tuple[str, ...]:
    return tuple(name for name in COMPONENTS if name != S3 or settings.s3_port is not None)


def s3_credentials(settings: StackSettings) -> S3Credentials:
    """The stack's S3 keys: made on the first `up`, kept in `s3/credentials.json` (0600)."""
    path = settings.s3_dir / "credentials.json"
    if path.is_file():
        kept = json.loads(path.read_text())
        return S3Credentials(kept["access_key_id"], SecretStr(kept["secret_access_key"]))
    credentials = S3Credentials.generate("tableflow-" + secrets.token_hex(6))
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        json.dump(
            {
                "access_key_id": credentials.access_key_id,
                "secret_access_key": credentials.secret_access_key.get_secret_value(),
            },
            handle,
        )
    return credentials


def catalog_available() -> bool:
    return importlib.util.find_spec(CATALOG_MODULE) is not None


def _spec(settings: StackSettings, name: str) -> _Spec | None:
    host = settings.host
    if name == KAFKA:
        command = broker.broker_command(host, settings.kafka_port, settings.kafka_data_dir)
        return _Spec(name, settings.kafka_port, settings.bootstrap, "noida-db", command)
    if name == REGISTRY:
        command = registry_command(
            host,
            settings.registry_port,
            settings.registry_database,
            settings.registry_basic_auth_user,
        )
        env = None
        if settings.registry_basic_auth_user:
            password = os.environ.get(PASSWORD_ENV)
            if not password:
                raise StackError(f"registry basic auth is configured: set ${PASSWORD_ENV}")
            env = {PASSWORD_ENV: password}
        return _Spec(
            name,
            settings.registry_port,
            settings.registry_url,
            "tableflow_core.registry.server",
            command,
            env,
        )
    if name == S3:
        assert settings.s3_port is not None
        # s3proxy's command line names its properties file (under this stack's data dir).
        marker = str(settings.s3_dir / "s3proxy.properties")
        return _Spec(name, settings.s3_port, settings.s3_url, marker, [])
    if not catalog_available():
        return None
    command = [
        sys.executable,
        "-m",
        CATALOG_MODULE,
        "--host",
        host,
        "--port",
        str(settings.catalog_port),
        "--warehouse",
        settings.catalog_warehouse_uri or str(settings.catalog_warehouse),
        "--database-url",
        settings.catalog_database_url or f"sqlite:///{settings.catalog_database}",
        "--auth",
        "none",
    ]
    env = None
    if settings.catalog_storage is not None:
        # The catalog writes (and vends) with the stack's S3 keys, given in its environment.
        command += settings.catalog_storage.server_arguments()
        credentials = s3_credentials(settings)
        env = ObjectStorage(
            access_key_id=credentials.access_key_id,
            secret_access_key=credentials.secret_access_key,
        ).environment()
    return _Spec(name, settings.catalog_port, settings.catalog_url, CATALOG_MODULE, command, env)


def _start(settings: StackSettings, spec: _Spec) -> _Recorded:
    if port_is_open(settings.host, spec.port):
        raise StackError(
            f"cannot start {spec.name}: port {spec.port} on {settings.host} is already in use "
            "by another process (choose another port in the stack settings)"
        )
    log_file = settings.logs_dir / f"{spec.name}.log"
    if spec.name == S3:
        return _start_s3(settings, spec, log_file)
    try:
        process: BackgroundProcess = start_background(
            spec.name,
            spec.command,
            settings.host,
            spec.port,
            log_file,
            env=spec.env,
            timeout=settings.start_timeout_seconds,
        )
        if spec.name == KAFKA:
            broker.wait_for_kafka(spec.address, timeout=settings.start_timeout_seconds)
    except RuntimeError as exc:
        raise StackError(
            f"{spec.name} failed to start on port {spec.port} (log: {log_file}): {exc}"
        ) from exc
    return _Recorded(
        pid=process.pid,
        host=settings.host,
        port=spec.port,
        marker=spec.marker,
        log_file=log_file,
        started_at=time.time(),
    )


def _start_s3(settings: StackSettings, spec: _Spec, log_file: Path) -> _Recorded:
    try:
        server = start_s3_server(
            S3ServerSettings(
                data_dir=settings.s3_dir,
                host=settings.host,
                port=spec.port,
                bucket=settings.s3_bucket,
                credentials=s3_credentials(settings),
                start_timeout=settings.start_timeout_seconds,
            )
        )
    except (OSError, RuntimeError) as exc:
        raise StackError(
            f"{spec.name} failed to start on port {spec.port} (log: {settings.s3_dir}): {exc}"
        ) from exc
    return _Recorded(
        pid=server.process.pid,
        host=settings.host,
        port=spec.port,
        marker=spec.marker,
        log_file=server.settings.log_file,
        started_at=time.time(),
        port_in_command=False,
    )


def _running(spec: _Spec, recorded: _Recorded, started_now: bool) -> ComponentStatus:
    return ComponentStatus(
        name=spec.name,
        state="running",
        address=f"{recorded.host}:{recorded.port}"
        if spec.name == KAFKA
        else f"http://{recorded.host}:{recorded.port}",
        pid=recorded.pid,
        port=recorded.port,
        log_file=recorded.log_file,
        started_now=started_now,
        detail="" if recorded.port == spec.port else f"running on recorded port {recorded.port}",
    )


def _not_available(settings: StackSettings) -> ComponentStatus:
    return ComponentStatus(
        name=CATALOG,
        state="not available",
        address=settings.catalog_url,
        port=settings.catalog_port,
        detail=f"{CATALOG_MODULE} is not installed; storage prepared in {settings.catalog_warehouse}",
    )


def _is_ours(recorded: _Recorded) -> bool:
    """Is `recorded.pid` still the process we started (not a reused PID)?"""
    if not pid_is_alive(recorded.pid):
        return False
    cmdline = Path(f"/proc/{recorded.pid}/cmdline")
    if not cmdline.parent.exists():
        return port_is_open(recorded.host, recorded.port)  # no /proc: best effort
    try:
        args = cmdline.read_bytes().split(b"\0")
    except OSError:
        return False
    text = [a.decode(errors="replace") for a in args]
    if not any(recorded.marker in a for a in text):
        return False
    return str(recorded.port) in text or not recorded.port_in_command


# -- files ---------------------------------------------------------------------------------


def _prepare_dirs(settings: StackSettings) -> None:
    for directory in (
        settings.logs_dir,
        settings.kafka_data_dir,
        settings.registry_database.parent,
        *([] if settings.catalog_warehouse_uri else [settings.catalog_warehouse]),
    ):
        directory.mkdir(parents=True, exist_ok=True)


@contextlib.contextmanager
def _locked(settings: StackSettings) -> Iterator[None]:
    """One `up`/`down` at a time per data dir."""
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    with open(settings.data_dir / ".lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _read_state(settings: StackSettings) -> dict[str, _Recorded]:
    path = settings.data_dir / STATE_FILE
    if not path.exists():
        return {}
    try:
        raw = json.loads(path.read_text())
        return {
            name: _Recorded.model_validate(item) for name, item in raw.get("components", {}).items()
        }
    except (json.JSONDecodeError, ValueError) as exc:
        raise StackError(
            f"{path} is unreadable ({exc}); stop stray processes by hand and delete it"
        ) from exc


def _write_state(settings: StackSettings, state: dict[str, _Recorded]) -> None:
    path = settings.data_dir / STATE_FILE
    payload = {"components": {name: json.loads(r.model_dump_json()) for name, r in state.items()}}
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(payload, indent=2))
    tmp.replace(path)
