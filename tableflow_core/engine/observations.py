"""Reading a Spark `Observation` (metrics counted during another action's single pass)."""

from __future__ import annotations

import threading
from collections.abc import Callable
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
    failure: list[BaseException] = []

    def wait() -> None:
        try:
            result.update(observation.get)
        except BaseException as error:  # re-raised below, in the caller's thread
            failure.append(error)

    waiter = threading.Thread(target=wait, daemon=True)
    waiter.start()
    waiter.join(timeout_s)
    if waiter.is_alive():
        raise RuntimeError(
            f"{what}'s counts never arrived: a stage after it must keep its frame in the "
            "lineage of what the write stage writes"
        )
    if failure:
        # Never counts of zero: the run's accounting would publish them as the truth.
        raise RuntimeError(f"{what}'s counts could not be read: {failure[0]}") from failure[0]
    return result


def observed_once(
    observation: Any, timeout_s: float = OBSERVATION_TIMEOUT_S, what: str = "the decode stage"
) -> Callable[[], dict[str, Any]]:
    """`observed_metrics`, read on the first call and kept for the later ones. Reading
    costs several JVM round trips (pyspark iterates the metrics' Java map, and the end of
    that iteration is a Java exception that pyspark converts: ~10 ms on a busy driver),
    and the figures never change once they have arrived."""
    kept: list[dict[str, Any]] = []

    def figures() -> dict[str, Any]:
        if not kept:
            kept.append(observed_metrics(observation, timeout_s, what))
        return kept[0]

    return figures
