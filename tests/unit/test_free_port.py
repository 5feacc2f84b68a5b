"""Where `free_port` looks for a port: outside the range the OS hands out on its own
(pure; the sockets themselves: tests/integration/test_free_port.py)."""

from __future__ import annotations

from tableflow_core.dev.processes import _port_choices


def test_ports_are_chosen_below_or_above_the_ephemeral_range_whichever_is_wider() -> None:
    assert _port_choices((32768, 60999)) == range(10000, 32768)  # Linux's default
    assert _port_choices((15000, 60000)) == range(60001, 65536)
    assert _port_choices((49152, 65535)) == range(10000, 49152)  # IANA's
