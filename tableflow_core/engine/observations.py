"""Reading a Spark `Observation` (metrics counted during another action's single pass)."""

from __future__ import annotations

import json
import threading
import uuid
import weakref
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tableflow_core.sql_text import quote_ident, sql_string

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, Observation

OBSERVATION_TIMEOUT_S = 120.0
# The one metric of an observation made by `observe_counts`: its figures as a JSON object.
FIGURES_METRIC = "__tf_figures"

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
    if FIGURES_METRIC in result:
        result = json.loads(result[FIGURES_METRIC])
    _FIGURES[observation] = dict(result)
    return result


def observe_counts(
    df: DataFrame, label: str, aggregates: Mapping[str, str]
) -> tuple[DataFrame, Observation]:
    """`df`, counted by `aggregates` (Spark SQL aggregate text by figure name) during the
    first action that reads it; `observed_metrics` reads the figures back by name (a NULL
    figure, such as a sum over no rows, is absent).

    The aggregates travel as one metric, `to_json(named_struct(...))`: one expression built
    from SQL text is one call into the JVM, and one string is one entry for
    `Observation.get` to iterate, where a metric per figure cost ~10 round trips to build
    and 3 to read back."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    observation = Observation(f"tableflow_{label}_{uuid.uuid4().hex}")
    assert aggregates, "an observation counts something"
    pairs = ", ".join(f"{sql_string(name)}, {sql}" for name, sql in aggregates.items())
    metric = F.expr(f"to_json(named_struct({pairs})) AS {quote_ident(FIGURES_METRIC)}")
    return df.observe(observation, metric), observation
