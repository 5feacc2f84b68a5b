"""Network addresses: which binds only this machine can reach (shared by our servers)."""

from __future__ import annotations

import ipaddress


def is_loopback(host: str) -> bool:
    """True for addresses only this machine can reach (no name resolution but `localhost`)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
