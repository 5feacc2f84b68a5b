"""A Quarkus application (`java -jar quarkus-run.jar`) as a launcher server.

Apicurio Registry (dev stack) and Nessie (tests) are both Quarkus apps: an API on one port,
Quarkus' management interface (health) on another, both bound to the settings' host (the
management interface otherwise listens on 0.0.0.0:9000), configured by system
properties, run from their data folder (Quarkus reads `config/application.properties`
there), ready once the health check and then the API answer.

    running = launch_quarkus(NESSIE, settings, NessieServer, runner, properties, ...)
    running.health_url, running.management_port
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from tableflow_core.dev.launcher import (
    JvmServer,
    RunningServer,
    ServerSettings,
    http_probe,
    launch,
)
from tableflow_core.dev.processes import free_port


@dataclass(frozen=True, kw_only=True)
class QuarkusSettings(ServerSettings):
    management_port: int = 0  # 0: a free port at start
    properties: tuple[tuple[str, str], ...] = ()  # system properties, over the app's own


@dataclass(frozen=True, kw_only=True)
class QuarkusServer(RunningServer):
    """A Quarkus app this process started. Each app's class names where its health check
    is and which API path answers once it serves."""

    HEALTH_PATH: ClassVar[str] = "/q/health/ready"  # Quarkus' default
    READY_PATH: ClassVar[str] = "/"

    management_port: int
    data_dir: Path

    @property
    def health_url(self) -> str:
        return f"http://{self.host}:{self.management_port}{self.HEALTH_PATH}"


Q = TypeVar("Q", bound=QuarkusServer)


def quarkus_binds(host: str, port: int, management_port: int) -> dict[str, str]:
    """The API and the management interface on `host`."""
    return {
        "quarkus.http.host": host,
        "quarkus.http.port": str(port),
        "quarkus.management.host": host,
        "quarkus.management.port": str(management_port),
    }


def launch_quarkus(
    server: JvmServer,
    settings: QuarkusSettings,
    kind: type[Q],
    runner: Path,
    properties: Mapping[str, str],
    log_file: Path | None,
    timeout: float,
    **run: Any,
) -> Q:
    """Start `runner` as `server` with `properties` (then `settings.properties`) and wait
    until `kind`'s health check and ready path answer; `run`: the rest of the `Launch`."""
    data_dir = settings.data_dir.resolve()
    host = settings.host
    port = settings.port or free_port(host)
    management_port = settings.management_port or free_port(host)
    running = launch(
        server,
        settings.run(
            port,
            ("-jar", str(runner)),
            system_properties={
                **quarkus_binds(host, port, management_port),
                **properties,
                **dict(settings.properties),
            },
            ready=http_probe(
                f"http://{host}:{management_port}{kind.HEALTH_PATH}",
                f"http://{host}:{port}{kind.READY_PATH}",
            ),
            log_file=log_file,
            cwd=data_dir,
            timeout=timeout,
            **run,
        ),
    )
    return kind(**running.common(), management_port=management_port, data_dir=data_dir)
