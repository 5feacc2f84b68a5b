"""Test hosts on one machine: Linux network namespaces joined by a bridge.

    with TestNetwork(["driver", "master", "worker1"]) as net:
        master = net.host("master")                       # 198.18.<n>.<i>
        server = master.popen(["python3", "-m", "http.server", "8000", "--bind", master.address])
        net.host("driver").run(["curl", f"http://{master.address}:8000/"])
    # every namespace, veth, the bridge and every process inside is gone, error or not

Each host is a namespace with its own loopback and one veth into a bridge in the root
namespace. The bridge has no address and nothing routes to it, so the hosts reach each
other and nothing else (not the machine's loopback, not any outside address). Addresses
come from 198.18.0.0/15 (RFC 2544, reserved for benchmarking networks, never routed).

Needs root and iproute2 (`ip netns`); `available()` says whether this machine can.
Teardown kills the processes inside the namespaces (`ip netns pids`), deletes the
namespaces, the veths and the bridge; `remove_leftovers()` removes what a killed test
run left behind (names start with `tfn`).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

PREFIX = "tfn"
SUBNET_BASE = "198.18"


def available() -> bool:
    """Root and iproute2 present, and a namespace can actually be made here."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        return False
    probe = f"{PREFIX}probe{secrets.token_hex(3)}"
    made = _ip("netns", "add", probe, check=False).returncode == 0
    if made:
        _ip("netns", "del", probe, check=False)
    return made


@dataclass
class Host:
    name: str
    namespace: str
    address: str
    processes: list[subprocess.Popen[Any]] = field(default_factory=list)

    def command(self, argv: Sequence[str]) -> list[str]:
        return ["ip", "netns", "exec", self.namespace, *argv]

    def run(
        self, argv: Sequence[str], timeout: float = 60.0, **kwargs: Any
    ) -> subprocess.CompletedProcess[str]:
        """Run a command inside the host and wait for it (output captured as text)."""
        kwargs.setdefault("capture_output", True)
        kwargs.setdefault("text", True)
        return subprocess.run(self.command(argv), timeout=timeout, check=False, **kwargs)

    def popen(self, argv: Sequence[str], **kwargs: Any) -> subprocess.Popen[Any]:
        """Start a command inside the host in its own process group; stopped at teardown."""
        kwargs.setdefault("start_new_session", True)
        kwargs.setdefault("stdin", subprocess.DEVNULL)
        process = subprocess.Popen(self.command(argv), **kwargs)
        self.processes.append(process)
        return process

    def pids(self) -> list[int]:
        result = _ip("netns", "pids", self.namespace, check=False)
        return [int(p) for p in result.stdout.split()]


class TestNetwork:
    """`names` hosts on one bridge, addresses 198.18.<n>.2, .3, ... in order."""

    __test__ = False  # not a pytest test class

    def __init__(self, names: Sequence[str], subnet: int | None = None) -> None:
        if len(set(names)) != len(names) or not names:
            raise ValueError(f"host names must be unique and not empty: {names}")
        self.token = secrets.token_hex(3)
        self.subnet = subnet if subnet is not None else int(self.token, 16) % 250 + 1
        self.bridge = f"{PREFIX}b{self.token}"
        self.hosts = {
            name: Host(
                name=name,
                namespace=f"{PREFIX}{self.token}-{name}",
                address=f"{SUBNET_BASE}.{self.subnet}.{i + 2}",
            )
            for i, name in enumerate(names)
        }

    def host(self, name: str) -> Host:
        return self.hosts[name]

    def __enter__(self) -> TestNetwork:
        try:
            _ip("link", "add", self.bridge, "type", "bridge")
            _ip("link", "set", self.bridge, "up")
            for index, host in enumerate(self.hosts.values()):
                veth = f"{PREFIX}v{self.token}{index}"
                _ip("netns", "add", host.namespace)
                _ip(
                    "link",
                    "add",
                    veth,
                    "type",
                    "veth",
                    "peer",
                    "name",
                    "eth0",
                    "netns",
                    host.namespace,
                )
                _ip("link", "set", veth, "master", self.bridge, "up")
                _ip("-n", host.namespace, "addr", "add", f"{host.address}/24", "dev", "eth0")
                _ip("-n", host.namespace, "link", "set", "eth0", "up")
                _ip("-n", host.namespace, "link", "set", "lo", "up")
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Kill everything inside the hosts, then delete namespaces, veths and bridge."""
        for host in self.hosts.values():
            for process in host.processes:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(process.pid, signal.SIGKILL)
            _kill_namespace_processes(host.namespace)
            for process in host.processes:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    process.wait(timeout=5)
            _ip("netns", "del", host.namespace, check=False)
        for index in range(len(self.hosts)):
            _ip("link", "del", f"{PREFIX}v{self.token}{index}", check=False)
        _ip("link", "del", self.bridge, check=False)


def remove_leftovers() -> list[str]:
    """Delete namespaces and links named by this module that a killed run left behind."""
    removed = []
    for line in _ip("netns", "list", check=False).stdout.splitlines():
        name = line.split()[0] if line.strip() else ""
        if name.startswith(PREFIX):
            _kill_namespace_processes(name)
            _ip("netns", "del", name, check=False)
            removed.append(name)
    for line in _ip("-o", "link", "show", check=False).stdout.splitlines():
        parts = line.split(":")
        if len(parts) > 1:
            name = parts[1].strip().split("@")[0]
            if name.startswith(PREFIX):
                _ip("link", "del", name, check=False)
                removed.append(name)
    return removed


def _kill_namespace_processes(namespace: str) -> None:
    """Every process inside a namespace this module made (they are the test's own)."""
    for _ in range(3):
        result = _ip("netns", "pids", namespace, check=False)
        pids = [int(p) for p in result.stdout.split()]
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if check and result.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)} failed: {result.stderr.strip()}")
    return result
