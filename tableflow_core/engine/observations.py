"""Reading a Spark `Observation` (metrics counted during another action's single pass)."""

from __future__ import annotations

import threading
import weakref
from typing import Any

OBSERVATION_TIMEOUT_S = 120.0

# An observation's figures never change once its action has run, and a run reads them many
# times (each counter, per partition, the accounting). Each `Observation.get` costs several
# JVM round trips: pyspark iterates the metrics' Java map, and the end of that iteration is
# a Java exception that pyspark converts (~10-40 ms on a busy driver).
_FIGURES: weakref.WeakKeyDictionary[Any, dict[str, Any]] = weakref.WeakKeyDictionary()


def observed_metrics(
    observation: Any, timeout_s: float = OBSERVATION_TIMEOUT_S, what: str = "the decode stage"
) -> dict[str, Any]:
    """The observation's figures (a copy), read from Spark once. Spark fills them from its
    listener bus just after the action that read the observed frame finishes;
    `Observation.get` would block forever if no action did (a later stage dropped the frame
    from the written lineage), so wait a bounded time and say so. `what` names the observed
    stage in that error."""
    known = _FIGURES.get(observation)
    if known is not None:
        return dict(known)
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
    _FIGURES[observation] = dict(result)
    return result
