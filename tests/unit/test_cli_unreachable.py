"""A stack that is down: plan fails at once, names the component and its address,
suggests `tableflow dev up` on a dev target, and librdkafka does not flood stderr."""

from __future__ import annotations

from tableflow_core.kafka.admin import (
    bootstrap_addresses,
)


def test_bootstrap_addresses() -> None:
    assert bootstrap_addresses("a:1, PLAINTEXT://b:2,[::1]:3,c") == [
        ("a", 1),
        ("b", 2),
        ("::1", 3),
        ("c", 9092),
    ]
