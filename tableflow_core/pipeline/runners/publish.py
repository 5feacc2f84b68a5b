"""publish: run the audits on the written branch, then publish it in one catalog commit.

The commit (engine/run_branch.publish_run) adds the accounting snapshot on the run's
branch (the offsets, what the stages reported and the run's accounting in its summary),
moves `main` to it and removes the run's branch. The catalog accepts it only while
`main` is still at the snapshot the run branched from (assert-ref-snapshot-id), so the
data and the offsets become visible together, or not at all.
"""

from __future__ import annotations

import time

from tableflow_core.engine.run_branch import committed_at_ms, publish_run
from tableflow_core.engine.test_hooks import crash_point
from tableflow_core.errors import MainMovedError
from tableflow_core.ingest.stages import Publish
from tableflow_core.pipeline.batch import Batch, StageContext
from tableflow_core.pipeline.registry import stage_runner
from tableflow_core.pipeline.runners.write import commit_properties


def publish_branch(context: StageContext, batch: Batch) -> tuple[int, int | None]:
    """Move main to the run's branch (plus its accounting snapshot); main's new snapshot id
    and its commit time (Unix ms)."""
    spec = context.spec
    assert context.base_snapshot_id is not None, "the engine cuts the branch before the stages"
    table = context.catalog.catalog.load_table((*spec.namespace, spec.table))
    properties = {**commit_properties(context, batch), **context.publish_properties}
    try:
        snapshot_id = publish_run(
            table,
            context.base_snapshot_id,
            context.branch,
            properties,
            context.other_branches,
            before_commit=lambda: crash_point("before_commit"),
        )
    except MainMovedError as exc:
        raise MainMovedError(
            f"table {spec.table_name} ({spec.identifier}): another commit landed on main "
            f"while this run wrote (planned from offsets {dict(context.expected_start)}; {exc}); "
            "this run's data was discarded, nothing was committed. Plan again."
        ) from exc
    return snapshot_id, committed_at_ms(table, snapshot_id)


@stage_runner(Publish)
def publish(context: StageContext, spec: Publish, batch: Batch) -> Batch:
    for audit in batch.audits:
        audit.run(context, batch)
    started = time.perf_counter()
    snapshot_id, committed_at = publish_branch(context, batch)
    context.timings["publish_commit"] = time.perf_counter() - started
    crash_point("after_commit")
    return batch.evolve(snapshot_id=snapshot_id, committed_at_ms=committed_at)
