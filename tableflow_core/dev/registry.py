"""Launching the development Schema Registry (tableflow_core.registry.server) as a process."""

from __future__ import annotations

import sys
from pathlib import Path

from tableflow_core.dev.processes import BackgroundProcess, start_background
from tableflow_core.registry.server import PASSWORD_ENV

REGISTRY_NAME = "schema-registry"


def registry_command(
    host: str, port: int, database: Path, basic_auth_user: str | None = None
) -> list[str]:
    command = [
        sys.executable,
        "-m",
        "tableflow_core.registry.server",
        "--host",
        host,
        "--port",
        str(port),
        "--database",
        str(database),
    ]
    if basic_auth_user:
        command += ["--basic-auth-user", basic_auth_user]
    return command


def start_registry(
    host: str,
    port: int,
    database: Path,
    log_file: Path,
    basic_auth_user: str | None = None,
    basic_auth_password: str | None = None,
    timeout: float = 30.0,
) -> BackgroundProcess:
    """Start the registry and wait until it listens. The password goes by environment only."""
    env = {PASSWORD_ENV: basic_auth_password} if basic_auth_password else None
    return start_background(
        REGISTRY_NAME,
        registry_command(host, port, database, basic_auth_user),
        host,
        port,
        log_file,
        env=env,
        timeout=timeout,
    )


def registry_url(host: str, port: int) -> str:
    return f"http://{host}:{port}"
