"""Starting, finding and stopping the background servers of the local stack."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

# Where the OS hands out ephemeral ports (Linux's file; IANA's range elsewhere).
_EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_IANA_EPHEMERAL = (49152, 65535)
# Ports below this are left to well-known services.
_LOWEST_PORT = 10000
_TRIES = 200


def ephemeral_ports() -> tuple[int, int]:
    """The range the OS picks ephemeral ports from (binds to port 0, outgoing
    connections), inclusive."""
    with contextlib.suppress(OSError, ValueError):
        low, high = (int(word) for word in _EPHEMERAL_RANGE_FILE.read_text().split())
        return low, high
    return _IANA_EPHEMERAL


def _port_choices(ephemeral: tuple[int, int]) -> range:
    """The wider of the two stretches outside the ephemeral range (above `_LOWEST_PORT`)."""
    below = range(_LOWEST_PORT, ephemeral[0])
    above = range(ephemeral[1] + 1, 65536)
    return below if len(below) >= len(above) else above


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free right now on `host`, outside the OS's ephemeral range.

    A port picked now is used later (written to a config, handed to a server that starts
    in a while). Taken from the ephemeral range, it could be handed meanwhile to any
    process binding port 0 or connecting out: a `tableflow run` soak's Spark driver bound
    the port its embedded catalog was given a second later. Outside that range only a
    process asking for it by number takes it. Falls back to the OS's pick when no port
    outside the range is free."""
    choices = _port_choices(ephemeral_ports())
    for _ in range(_TRIES if choices else 0):
        port = random.choice(choices)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((host, port))
            except OSError:
                continue
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def port_is_open(host: str, port: int, timeout: float = 0.5) -> bool:
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=timeout):
        return True
    return False


def wait_for_port(
    host: str, port: int, timeout: float = 30.0, process: subprocess.Popen | None = None
) -> None:
    """Block until something accepts connections on host:port.

    Raises RuntimeError if `process` exits first or the timeout passes.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if port_is_open(host, port):
            return
        if process is not None and process.poll() is not None:
            raise RuntimeError(
                f"process {process.args!r} exited with code {process.returncode} before listening on {host}:{port}"
            )
        time.sleep(0.1)
    raise RuntimeError(f"nothing listened on {host}:{port} within {timeout:.0f}s")


def pid_is_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child still answers kill(0); reap it if it is ours.
    with contextlib.suppress(ChildProcessError):
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return False
    return True


def wait_for_exit(pid: int, timeout: float) -> bool:
    """True once `pid` is gone; False if it still runs after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not pid_is_alive(pid):
            return True
        time.sleep(0.05)
    return False


def stop_pid(pid: int, timeout: float = 10.0) -> None:
    """SIGTERM the process group (or process), then SIGKILL after `timeout`."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            try:
                os.killpg(pid, sig)
            except (ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        if wait_for_exit(pid, timeout):
            return


@dataclass(frozen=True)
class BackgroundProcess:
    """A server started in its own process group, with its log file."""

    name: str
    pid: int
    host: str
    port: int
    log_file: Path

    def stop(self, timeout: float = 10.0) -> None:
        stop_pid(self.pid, timeout)

    @property
    def alive(self) -> bool:
        return pid_is_alive(self.pid)


def start_background(
    name: str,
    command: list[str],
    host: str,
    port: int,
    log_file: Path,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float = 30.0,
) -> BackgroundProcess:
    """Start `command` detached (own session), wait until it listens on host:port."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with open(log_file, "ab") as log:
        proc = subprocess.Popen(
            command,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **(env or {})},
            cwd=str(cwd) if cwd else None,
            start_new_session=True,
        )
    try:
        wait_for_port(host, port, timeout=timeout, process=proc)
    except RuntimeError as exc:
        stop_pid(proc.pid, timeout=2)
        tail = log_file.read_text(errors="replace")[-2000:]
        raise RuntimeError(
            f"{name} did not start: {exc}\n--- {log_file} (tail) ---\n{tail}"
        ) from exc
    return BackgroundProcess(name=name, pid=proc.pid, host=host, port=port, log_file=log_file)
