"""Reading a Spark `Observation` (metrics counted during another action's single pass)."""

from __future__ import annotations

import threading
from typing import Any

OBSERVATION_TIMEOUT_S = 120.0


def observed_metrics(
    observation: Any, timeout_s: float = OBSERVATION_TIMEOUT_S, what: str = "the decode stage"
) -> dict[str, Any]:
    """The observation's figures. Spark fills them from its listener bus just after the
    action that read the observed frame finishes; `Observation.get` would block forever if
    no action did (a later stage dropped the frame from the written lineage), so wait a
    bounded time and say so. `what` names the observed stage in that error."""
    result: dict[str, Any] = {}
    waiter = threading.Thread(target=lambda: result.update(observation.get), daemon=True)
    waiter.start()
    waiter.join(timeout_s)
    if waiter.is_alive():
        raise RuntimeError(
            f"{what}'s counts never arrived: a stage after it must keep its frame in the "
            "lineage of what the write stage writes"
        )
    return result
