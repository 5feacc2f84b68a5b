"""The test-host helper (tests/netns.py): hosts reach each other over TCP, nothing else,
and everything is gone afterwards, also when the test body fails."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from tests import netns

pytestmark = pytest.mark.skipif(not netns.available(), reason="needs root and ip netns")

SERVER = """
import socket, sys
s = socket.socket(); s.bind((sys.argv[1], 7000)); s.listen(4)
for _ in range(2):
    c, peer = s.accept(); c.sendall(f"hello {peer[0]}".encode()); c.close()
"""
CLIENT = """
import socket, sys
for _ in range(50):
    try:
        s = socket.create_connection((sys.argv[1], 7000), timeout=2); break
    except ConnectionRefusedError:
        import time; time.sleep(0.1)
print(s.recv(100).decode())
"""


def _leftovers(network: netns.TestNetwork) -> list[str]:
    namespaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    return [n for n in (h.namespace for h in network.hosts.values()) if n in namespaces] + (
        [network.bridge] if network.bridge in links else []
    )


def test_hosts_talk_tcp_to_each_other_and_to_nothing_else() -> None:
    with netns.TestNetwork(["server", "a", "b"]) as net:
        server = net.host("server")
        process = server.popen([sys.executable, "-c", SERVER, server.address])
        for name in ("a", "b"):
            result = net.host(name).run([sys.executable, "-c", CLIENT, server.address])
            assert result.stdout.strip() == f"hello {net.host(name).address}", result.stderr
        assert process.wait(timeout=10) == 0
        # The machine's own loopback is not the hosts' loopback, and nothing routes out.
        probe = net.host("a").run(
            [
                sys.executable,
                "-c",
                "import socket; socket.create_connection(('198.18.255.1', 9), timeout=1)",
            ]
        )
        assert probe.returncode != 0 and "unreachable" in probe.stderr.lower(), probe.stderr
        routes = net.host("a").run(["ip", "route"]).stdout
        assert "default" not in routes
    assert _leftovers(net) == []


def test_teardown_after_a_failure_kills_processes_and_removes_everything() -> None:
    network = netns.TestNetwork(["h1", "h2"])
    with pytest.raises(RuntimeError, match="boom"), network as net:
        sleeper = net.host("h1").popen(["sleep", "300"])
        net.host("h2").popen(["sleep", "300"])
        # `ip netns exec` joins the namespace after it starts: wait until it has.
        deadline = time.monotonic() + 10
        while not (net.host("h1").pids() and net.host("h2").pids()):
            assert time.monotonic() < deadline, "the sleepers never entered their namespaces"
            time.sleep(0.05)
        raise RuntimeError("boom")
    assert sleeper.poll() is not None
    assert _leftovers(network) == []
