"""The local development stack of one project: Apache Kafka, a schema registry, the
embedded Iceberg REST catalog and an S3 server (s3proxy), all on loopback.

    settings = StackSettings.for_project(Path("."))
    record = prepare(settings)   # ports chosen once for this project, credentials made
    result = up(settings)        # starts what is not running yet; idempotent
    result = status(settings)    # what runs now, without starting anything
    stopped = down(settings)     # stops only what `up` started (recorded PIDs)
    require_running(settings.data_dir, {"kafka"}, "dev")  # StackNotRunningError unless it runs

Each project has its own stack: its ports are chosen free the first time (unless the
target pins them) and kept in `<data_dir>/stack.json` with the addresses clients use;
what `up` generates to log in (the S3 keys, the Kafka SCRAM user) is kept in
`<data_dir>/credentials.json` (0600). The project's config names them with
`dev_stack('kafka_bootstrap')`, ... (`tableflow_core.config.dev_stack`), so no
environment variable moves a project onto another project's stack.

One class per component kind, registered by kind and variant in COMPONENTS (the schema
registry has two: tableflow's own, and Apicurio Registry). `state.json` records the
processes `up` started (pid, ports, and arguments their command line must hold), so
`down` never signals a process that is not the one it started.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import sys
import time
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator

from tableflow_core.catalog.storage import ACCESS_KEY_ID_ENV, ObjectStorage
from tableflow_core.config.dev_stack import (
    CATALOG,
    KAFKA,
    REGISTRY,
    S3,
    VALUES,
    StackRecord,
)
from tableflow_core.dev.apicurio_server import ApicurioSettings, start_apicurio
from tableflow_core.dev.kafka_server import KafkaServerSettings, scram_credentials, start_kafka
from tableflow_core.dev.launcher import ServerSettings
from tableflow_core.dev.processes import (
    free_port,
    pid_is_alive,
    port_is_open,
    start_background,
    stop_pid,
)
from tableflow_core.dev.registry import registry_command
from tableflow_core.dev.s3_server import (
    DEFAULT_BUCKET,
    DEFAULT_REGION,
    S3Credentials,
    S3ServerSettings,
    start_s3_server,
)
from tableflow_core.errors import TableflowError
from tableflow_core.registry.server import PASSWORD_ENV, bind_problem

__all__ = [
    "CATALOG",
    "COMPONENTS",
    "KAFKA",
    "REGISTRY",
    "S3",
    "CatalogLaunch",
    "ComponentStatus",
    "StackError",
    "StackNotRunningError",
    "StackSettings",
    "StackStatus",
    "down",
    "prepare",
    "require_running",
    "status",
    "up",
]

KINDS = (KAFKA, REGISTRY, CATALOG, S3)
START_ORDER = (KAFKA, REGISTRY, S3, CATALOG)
STATE_FILE = "state.json"
CATALOG_MODULE = "tableflow_core.catalog.server"
REGISTRY_MODULE = "tableflow_core.registry.server"

ComponentState = Literal["running", "stopped"]
RegistryVariant = Literal["tableflow", "apicurio"]


class StackError(TableflowError, RuntimeError):
    """A component could not be started or stopped; the message names it, its port and log."""


class StackNotRunningError(StackError):
    """The project's config names its dev stack, and that stack is not running."""

    component_down = True


@dataclass(frozen=True)
class CatalogLaunch:
    """How `up` runs the project's embedded catalog: the server's command-line arguments
    (`catalog.runner.server_arguments`, the stack's port included) and the environment
    holding what may not go on a command line (storage keys)."""

    port: int
    arguments: tuple[str, ...]
    environment: Mapping[str, str] = field(default_factory=dict, repr=False)


class StackSettings(BaseModel):
    """Which components, where; ports left None are chosen free once per project."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    data_dir: Path
    host: str = "127.0.0.1"
    components: tuple[str, ...] = KINDS
    registry: RegistryVariant = "tableflow"
    kafka_security: Literal["plaintext", "sasl_ssl"] = "plaintext"
    kafka_port: int | None = Field(None, ge=1, le=65535)
    registry_port: int | None = Field(None, ge=1, le=65535)
    catalog_port: int | None = Field(None, ge=1, le=65535)
    s3_port: int | None = Field(None, ge=1, le=65535)
    s3_bucket: str = DEFAULT_BUCKET
    registry_basic_auth_user: str | None = None  # password from $TABLEFLOW_REGISTRY_PASSWORD
    # The project's embedded catalog (its warehouse, database, storage); None: a warehouse
    # and SQLite database under data_dir/catalog.
    catalog: CatalogLaunch | None = None
    start_timeout_seconds: float = 120.0

    @model_validator(mode="after")
    def _known_components(self) -> StackSettings:
        unknown = sorted(set(self.components) - set(KINDS))
        if unknown:
            raise ValueError(f"unknown stack component(s) {unknown}; known: {', '.join(KINDS)}")
        # Absolute: process command lines name files under it (how `down` knows its own).
        object.__setattr__(self, "data_dir", self.data_dir.expanduser().resolve())
        return self

    @classmethod
    def for_project(cls, project_dir: Path, **overrides: object) -> StackSettings:
        return cls(data_dir=project_dir / ".tableflow" / "dev", **overrides)

    @property
    def logs_dir(self) -> Path:
        return self.data_dir / "logs"

    def pinned_port(self, kind: str) -> int | None:
        return {
            KAFKA: self.kafka_port,
            REGISTRY: self.registry_port,
            CATALOG: self.catalog_port,
            S3: self.s3_port,
        }[kind]

    def variant(self, kind: str) -> str:
        return self.registry if kind == REGISTRY else "default"


class ComponentStatus(BaseModel):
    """One row of `tableflow dev status`."""

    name: str
    state: ComponentState
    address: str  # bootstrap servers or URL
    what: str = ""
    pid: int | None = None
    port: int
    ports: dict[str, int] = Field(default_factory=dict)
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
        """True when every component of the stack runs."""
        return all(c.state == "running" for c in self.components)

    def rows(self) -> list[dict[str, str]]:
        """Plain strings per component, ready for a rich Table."""
        return [
            {
                "component": c.name,
                "what": c.what,
                "state": c.state + (" (started)" if c.started_now else ""),
                "address": c.address,
                "ports": ", ".join(f"{name} {port}" for name, port in c.ports.items()),
                "pid": str(c.pid or ""),
                "detail": c.detail,
            }
            for c in self.components
        ]


class Recorded(BaseModel):
    """What `up` wrote about a process it started."""

    kind: str
    pid: int
    host: str
    ports: dict[str, int]
    # Arguments the process's command line must hold (exactly) for it to be ours.
    arguments: tuple[str, ...]
    log_file: Path
    started_at: float

    @model_validator(mode="before")
    @classmethod
    def _from_older_state(cls, data: object) -> object:
        """A state.json of the noida-db stack: {"pid", "host", "port", "marker", ...}."""
        if isinstance(data, dict) and "marker" in data and "arguments" not in data:
            data = dict(data)
            port = data.pop("port")
            marker = data.pop("marker")
            data.setdefault("kind", "")
            data["ports"] = {"port": port}
            data["arguments"] = (str(port), f"*{marker}")
        return data

    @property
    def port(self) -> int:
        return next(iter(self.ports.values()))


# -- components ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Started:
    pid: int
    arguments: tuple[str, ...]  # see Recorded.arguments


S = TypeVar("S", bound=ServerSettings)


class Component(ABC):
    """One kind of server of the stack."""

    kind: ClassVar[str]
    variant: ClassVar[str] = "default"
    what: ClassVar[str]
    # Names of the ports it needs; the first is the one clients use (and a target may pin).
    port_names: ClassVar[tuple[str, ...]] = ("port",)

    def __init__(self, settings: StackSettings) -> None:
        self.settings = settings

    @property
    def directory(self) -> Path:
        return self.settings.data_dir / self.kind

    def address(self, ports: Mapping[str, int]) -> str:
        """What clients are given: a URL (or bootstrap servers)."""
        return f"http://{self.settings.host}:{ports['port']}"

    def values(self, ports: Mapping[str, int]) -> dict[str, str]:
        """Its public `dev_stack()` values."""
        return {}

    def secrets(self, kept: Mapping[str, str]) -> dict[str, str]:
        """Its secret `dev_stack()` values, made once (`kept`: what the record holds)."""
        return {}

    @abstractmethod
    def start(self, ports: Mapping[str, int], log_file: Path, record: StackRecord) -> Started:
        """Start the server detached and wait until it answers."""

    def start_python(
        self,
        command: list[str],
        ports: Mapping[str, int],
        log_file: Path,
        env: dict[str, str] | None = None,
    ) -> int:
        """Start a Python server of ours on the component's first port; its pid."""
        process = start_background(
            self.kind,
            command,
            self.settings.host,
            ports["port"],
            log_file,
            env=env,
            timeout=self.settings.start_timeout_seconds,
        )
        return process.pid

    def server_settings(self, kind: type[S], ports: Mapping[str, int], **own: Any) -> S:
        """A launcher server's settings: the component's folder, host and first port, and
        `own`, the server's own settings."""
        return kind(data_dir=self.directory, host=self.settings.host, port=ports["port"], **own)


COMPONENTS: dict[tuple[str, str], type[Component]] = {}


def component(cls: type[Component]) -> type[Component]:
    COMPONENTS[(cls.kind, cls.variant)] = cls
    return cls


def _component(settings: StackSettings, kind: str) -> Component:
    return COMPONENTS[(kind, settings.variant(kind))](settings)


@component
class Kafka(Component):
    kind = KAFKA
    what = "Apache Kafka 4.4 (KRaft)"
    port_names = ("port", "controller")

    def address(self, ports: Mapping[str, int]) -> str:
        return f"{self.settings.host}:{ports['port']}"

    @property
    def secured(self) -> bool:
        return self.settings.kafka_security == "sasl_ssl"

    def values(self, ports: Mapping[str, int]) -> dict[str, str]:
        values = {"kafka_bootstrap": self.address(ports)}
        if self.secured:
            _, client = scram_credentials(self.directory)
            values["kafka_sasl_username"] = client.username
            values["kafka_ca_location"] = str((self.directory / "tls" / "ca.pem").resolve())
        return values

    def secrets(self, kept: Mapping[str, str]) -> dict[str, str]:
        if not self.secured:
            return {}
        _, client = scram_credentials(self.directory)  # made once, kept in the kafka folder
        return {"kafka_sasl_password": client.password}

    def start(self, ports: Mapping[str, int], log_file: Path, record: StackRecord) -> Started:
        settings = self.server_settings(
            KafkaServerSettings, ports, controller_port=ports["controller"], sasl_ssl=self.secured
        )
        server = start_kafka(
            settings, log_file=log_file, timeout=self.settings.start_timeout_seconds
        )
        return Started(server.process.pid, (str(server.data_dir / "server.properties"),))


@component
class TableflowRegistry(Component):
    kind = REGISTRY
    variant = "tableflow"
    what = "tableflow's schema registry"

    @property
    def database(self) -> Path:
        return self.settings.data_dir / "registry" / "registry.db"

    def values(self, ports: Mapping[str, int]) -> dict[str, str]:
        return {"schema_registry_url": self.address(ports)}

    def start(self, ports: Mapping[str, int], log_file: Path, record: StackRecord) -> Started:
        user = self.settings.registry_basic_auth_user
        env = None
        if user:
            password = os.environ.get(PASSWORD_ENV)
            if not password:
                raise StackError(f"registry basic auth is configured: set ${PASSWORD_ENV}")
            env = {PASSWORD_ENV: password}
        self.database.parent.mkdir(parents=True, exist_ok=True)
        command = registry_command(self.settings.host, ports["port"], self.database, user)
        pid = self.start_python(command, ports, log_file, env)
        return Started(pid, (REGISTRY_MODULE, str(self.database)))


@component
class Apicurio(Component):
    kind = REGISTRY
    variant = "apicurio"
    what = "Apicurio Registry 3.3 (ccompat API)"
    port_names = ("port", "management")

    @property
    def directory(self) -> Path:
        return self.settings.data_dir / "apicurio"

    def address(self, ports: Mapping[str, int]) -> str:
        return f"http://{self.settings.host}:{ports['port']}/apis/ccompat/v7"

    def values(self, ports: Mapping[str, int]) -> dict[str, str]:
        return {"schema_registry_url": self.address(ports)}

    def start(self, ports: Mapping[str, int], log_file: Path, record: StackRecord) -> Started:
        settings = self.server_settings(
            ApicurioSettings,
            ports,
            management_port=ports["management"],
            database=self.directory / "registry",  # H2 file: survives down/up
        )
        server = start_apicurio(
            settings, log_file=log_file, timeout=self.settings.start_timeout_seconds
        )
        return Started(server.process.pid, (f"-Dquarkus.http.port={ports['port']}",))


@component
class Catalog(Component):
    kind = CATALOG
    what = "tableflow's Iceberg REST catalog"

    def values(self, ports: Mapping[str, int]) -> dict[str, str]:
        return {"catalog_port": str(ports["port"]), "catalog_url": self.address(ports)}

    def launch(self, port: int) -> CatalogLaunch:
        given = self.settings.catalog
        if given is not None:
            if given.port != port:
                raise StackError(
                    f"{CATALOG}: the project's catalog settings name port {given.port}, "
                    f"the stack's catalog port is {port}"
                )
            return given
        warehouse = self.directory / "warehouse"
        warehouse.mkdir(parents=True, exist_ok=True)
        arguments = (
            "--host", self.settings.host, "--port", str(port), "--warehouse", str(warehouse),
            "--database-url", f"sqlite:///{self.directory / 'catalog.db'}", "--auth", "none",
        )  # fmt: skip
        return CatalogLaunch(port, arguments)

    def start(self, ports: Mapping[str, int], log_file: Path, record: StackRecord) -> Started:
        launch = self.launch(ports["port"])
        environment = dict(launch.environment)
        on_s3 = any(argument.startswith("--s3-") for argument in launch.arguments)
        if on_s3 and ACCESS_KEY_ID_ENV not in environment and "s3_access_key_id" in record.secrets:
            # A warehouse on the stack's S3 server: the catalog writes with the keys `up`
            # made for it (and vends them when the project says `credentials: vended`).
            environment.update(
                ObjectStorage(
                    access_key_id=record.secrets["s3_access_key_id"],
                    secret_access_key=SecretStr(record.secrets["s3_secret_access_key"]),
                ).environment()
            )
        command = [sys.executable, "-m", CATALOG_MODULE, *launch.arguments]
        pid = self.start_python(command, ports, log_file, environment)
        return Started(pid, (CATALOG_MODULE, str(ports["port"])))


@component
class ObjectStore(Component):
    kind = S3
    what = "s3proxy 4.1 (S3 API, files on disk)"

    def values(self, ports: Mapping[str, int]) -> dict[str, str]:
        return {
            "s3_endpoint": self.address(ports),
            "s3_region": DEFAULT_REGION,
            "s3_bucket": self.settings.s3_bucket,
        }

    def secrets(self, kept: Mapping[str, str]) -> dict[str, str]:
        if kept.get("s3_access_key_id") and kept.get("s3_secret_access_key"):
            return {name: kept[name] for name in ("s3_access_key_id", "s3_secret_access_key")}
        return {
            "s3_access_key_id": "tableflow-" + secrets.token_hex(6),
            "s3_secret_access_key": secrets.token_urlsafe(30),
        }

    def start(self, ports: Mapping[str, int], log_file: Path, record: StackRecord) -> Started:
        credentials = S3Credentials(
            record.secrets["s3_access_key_id"], SecretStr(record.secrets["s3_secret_access_key"])
        )
        settings = self.server_settings(
            S3ServerSettings,
            ports,
            bucket=self.settings.s3_bucket,
            credentials=credentials,
            start_timeout=self.settings.start_timeout_seconds,
        )
        server = start_s3_server(settings)
        return Started(server.process.pid, (str(self.directory / "s3proxy.properties"),))


# -- the stack ------------------------------------------------------------------------------


def prepare(settings: StackSettings) -> StackRecord:
    """Choose the ports (once per project; kept while free), make the credentials, and
    write the record `dev_stack()` reads. Idempotent; starts nothing."""
    with _locked(settings):
        return _prepare(settings, _read_state(settings))


def up(settings: StackSettings) -> StackStatus:
    """Start every component that is not running; report all of them."""
    if settings.registry == "tableflow" and (
        problem := bind_problem(settings.host, settings.registry_basic_auth_user)
    ):
        raise StackError(f"cannot start {REGISTRY}: {problem}")
    with _locked(settings):
        state = _read_state(settings)
        record = _prepare(settings, state)
        settings.logs_dir.mkdir(parents=True, exist_ok=True)
        statuses: dict[str, ComponentStatus] = {}
        # The store before the catalog: a catalog on s3:// writes there from its start.
        for kind in sorted(settings.components, key=START_ORDER.index):
            part = _component(settings, kind)
            recorded = state.get(kind)
            if recorded is not None and _is_ours(recorded):
                statuses[kind] = _running(part, recorded, started_now=False)
                continue
            state.pop(kind, None)
            ports = record.ports[kind]
            recorded = _start(settings, part, ports, record)
            state[kind] = recorded
            _write_state(settings, state)
            statuses[kind] = _running(part, recorded, started_now=True)
        _write_state(settings, state)
    return StackStatus(
        data_dir=settings.data_dir, components=[statuses[k] for k in settings.components]
    )


def status(settings: StackSettings) -> StackStatus:
    state = _read_state(settings)
    record = StackRecord.read(settings.data_dir) or StackRecord()
    statuses = []
    for kind in settings.components:
        part = _component(settings, kind)
        recorded = state.get(kind)
        if recorded is not None and _is_ours(recorded):
            statuses.append(_running(part, recorded, started_now=False))
            continue
        ports = record.ports.get(kind, {})
        port = ports.get("port", settings.pinned_port(kind) or 0)
        detail = "never started" if not ports else ""
        if port and port_is_open(settings.host, port):
            detail = f"port {port} is in use by a process this stack did not start"
        statuses.append(
            ComponentStatus(
                name=kind,
                what=part.what,
                state="stopped",
                address=part.address({name: ports.get(name, 0) for name in part.port_names}),
                port=port,
                ports=dict(ports),
                detail=detail,
            )
        )
    return StackStatus(data_dir=settings.data_dir, components=statuses)


def down(settings: StackSettings) -> list[ComponentStatus]:
    """Stop the processes `up` recorded, after checking each PID is still that process."""
    stopped = []
    with _locked(settings):
        state = _read_state(settings)
        for kind in reversed(list(state)):
            recorded = state.pop(kind)
            if not _is_ours(recorded):
                continue  # gone, or the PID now belongs to another process: leave it alone
            stop_pid(recorded.pid, timeout=20.0)
            if pid_is_alive(recorded.pid) and _is_ours(recorded):
                state[kind] = recorded
                _write_state(settings, state)
                raise StackError(f"{kind} (pid {recorded.pid}) did not stop")
            stopped.append(
                ComponentStatus(
                    name=kind or "?",
                    state="stopped",
                    address=f"{recorded.host}:{recorded.port}",
                    pid=recorded.pid,
                    port=recorded.port,
                    ports=recorded.ports,
                    log_file=recorded.log_file,
                )
            )
        _write_state(settings, state)
    return stopped


def require_running(data_dir: Path, components: Iterable[str], target: str) -> None:
    """StackNotRunningError unless each of `components` runs as this stack started it.

    A project whose config reads `dev_stack()` values talks only to its own stack: when
    that stack is down, whatever else listens on its ports is never used."""
    state = _read_state_at(data_dir)
    record = StackRecord.read(data_dir)
    for kind in sorted(set(components), key=KINDS.index):
        recorded = state.get(kind)
        if recorded is not None and _is_ours(recorded):
            continue
        where = f"this project's dev stack ({data_dir})"
        if record is None:
            raise StackNotRunningError(
                f"target {target!r} takes its {kind} address from {where}, which has never "
                "been started: start it with `tableflow dev up`"
            )
        ports = record.ports.get(kind)
        if ports is None:
            raise StackNotRunningError(
                f"target {target!r} uses {kind} from {where}, which does not run one: add "
                f"{kind!r} to the target's `dev_stack.components`, then `tableflow dev up`"
            )
        port = ports["port"]
        other = (
            f"; port {port} is in use by a process this project's stack did not start, "
            "which tableflow will not talk to"
            if port_is_open(_host_of(record, kind), port)
            else ""
        )
        raise StackNotRunningError(
            f"target {target!r} uses {kind} at port {port} of {where}, which is not "
            f"running{other}: start it with `tableflow dev up`"
        )


def _host_of(record: StackRecord, kind: str) -> str:
    for name, value in record.values.items():
        if VALUES[name].component == kind and value.startswith("http://"):
            return value.removeprefix("http://").rsplit(":", 1)[0]
    bootstrap = record.values.get("kafka_bootstrap", "127.0.0.1:0")
    return bootstrap.rsplit(":", 1)[0]


def _prepare(settings: StackSettings, state: Mapping[str, Recorded]) -> StackRecord:
    kept = StackRecord.read(settings.data_dir) or StackRecord()
    ports: dict[str, dict[str, int]] = {}
    values: dict[str, str] = {}
    secret_values: dict[str, str] = {}
    for kind in settings.components:
        part = _component(settings, kind)
        running = state.get(kind)
        if running is not None and _is_ours(running):
            chosen = dict(running.ports)  # a running server keeps its ports
        else:
            chosen = _ports(settings, part, kept.ports.get(kind, {}))
        ports[kind] = chosen
        values.update(part.values(chosen))
        secret_values.update(part.secrets(kept.secrets))
    record = StackRecord(values=values, secrets=secret_values, ports=ports)
    if record != kept:
        record.write(settings.data_dir)
    return record


def _ports(settings: StackSettings, part: Component, kept: Mapping[str, int]) -> dict[str, int]:
    """The ports a stopped component starts on: the kept ones while they are free (so
    addresses stay stable), else free ones; the target's pinned port always."""
    host = settings.host
    chosen: dict[str, int] = {}
    for index, name in enumerate(part.port_names):
        pinned = settings.pinned_port(part.kind) if index == 0 else None
        if pinned is not None:
            chosen[name] = pinned
        elif name in kept and not port_is_open(host, kept[name]):
            chosen[name] = kept[name]
        else:
            chosen[name] = _free_port_besides(host, chosen.values())
    return chosen


def _free_port_besides(host: str, taken: Iterable[int]) -> int:
    taken = set(taken)
    while (port := free_port(host)) in taken:
        pass
    return port


def _start(
    settings: StackSettings, part: Component, ports: Mapping[str, int], record: StackRecord
) -> Recorded:
    for name, port in ports.items():
        if port_is_open(settings.host, port):
            raise StackError(
                f"cannot start {part.kind}: its {name} port {port} on {settings.host} is in "
                "use by another process (unpin it in the target's dev_stack, or stop that "
                "process)"
            )
    log_file = settings.logs_dir / f"{part.kind}.log"
    try:
        started = part.start(ports, log_file, record)
    except StackError:
        raise
    except (RuntimeError, OSError) as exc:
        raise StackError(
            f"{part.kind} failed to start on port {ports['port']} (log: {log_file}): {exc}"
        ) from exc
    return Recorded(
        kind=part.kind,
        pid=started.pid,
        host=settings.host,
        ports=dict(ports),
        arguments=started.arguments,
        log_file=log_file,
        started_at=time.time(),
    )


def _running(part: Component, recorded: Recorded, started_now: bool) -> ComponentStatus:
    return ComponentStatus(
        name=part.kind,
        what=part.what,
        state="running",
        address=part.address(recorded.ports),
        pid=recorded.pid,
        port=recorded.port,
        ports=recorded.ports,
        log_file=recorded.log_file,
        started_now=started_now,
    )


def _is_ours(recorded: Recorded) -> bool:
    """Is `recorded.pid` still the process we started (not a reused PID)?"""
    if not pid_is_alive(recorded.pid):
        return False
    cmdline = Path(f"/proc/{recorded.pid}/cmdline")
    if not cmdline.parent.exists():
        return port_is_open(recorded.host, recorded.port)  # no /proc: best effort
    try:
        arguments = [a.decode(errors="replace") for a in cmdline.read_bytes().split(b"\0")]
    except OSError:
        return False
    return all(_holds(arguments, wanted) for wanted in recorded.arguments)


def _holds(arguments: list[str], wanted: str) -> bool:
    if wanted.startswith("*"):  # a state.json of the noida-db stack: part of an argument
        return any(wanted[1:] in argument for argument in arguments)
    return wanted in arguments


# -- files ---------------------------------------------------------------------------------


@contextlib.contextmanager
def _locked(settings: StackSettings) -> Iterator[None]:
    """One `up`/`down`/`prepare` at a time per data dir."""
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    with open(settings.data_dir / ".lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _read_state(settings: StackSettings) -> dict[str, Recorded]:
    return _read_state_at(settings.data_dir)


def _read_state_at(data_dir: Path) -> dict[str, Recorded]:
    path = data_dir / STATE_FILE
    if not path.exists():
        return {}
    try:
        raw = json.loads(path.read_text())
        return {
            name: Recorded.model_validate({"kind": name, **item})
            for name, item in raw.get("components", {}).items()
        }
    except (json.JSONDecodeError, ValueError) as exc:
        raise StackError(
            f"{path} is unreadable ({exc}); stop stray processes by hand and delete it"
        ) from exc


def _write_state(settings: StackSettings, state: dict[str, Recorded]) -> None:
    path = settings.data_dir / STATE_FILE
    payload = {"components": {name: json.loads(r.model_dump_json()) for name, r in state.items()}}
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(payload, indent=2))
    tmp.replace(path)
