"""publish: run the audits on the written branch, then fast-forward main to it.

`fast_forward` succeeds only if main is still an ancestor of the branch (nobody committed
since the run began); the catalog's optimistic concurrency makes it one atomic step, so
the data and the offsets in the branch's head snapshot become visible together.
"""

from __future__ import annotations

from tableflow_core.engine.test_hooks import crash_point
from tableflow_core.ingest.spec import quote_ident
from tableflow_core.pipeline.batch import Batch, StageContext
from tableflow_core.pipeline.errors import MainMovedError
from tableflow_core.pipeline.registry import stage_runner
from tableflow_core.pipeline.stages import Publish

# batch.results key: the snapshot main points at after the publish.
PUBLISHED_SNAPSHOT = "published_snapshot_id"


def fast_forward_main(context: StageContext) -> int | None:
    """Move main to the run's branch; returns main's new snapshot id."""
    spec = context.spec
    # Fully qualified: a bare "ns.table" is misread when the namespace equals a catalog name.
    table_arg = spec.identifier.replace("'", "\\'")
    try:
        rows = context.spark.sql(
            f"CALL {quote_ident(spec.catalog)}.system.fast_forward("
            f"table => '{table_arg}', branch => 'main', to => '{context.branch}')"
        ).collect()
    except Exception as exc:
        # "Ref does not exist": a later run dropped our branch because main moved past it.
        if any(s in str(exc) for s in ("not an ancestor", "CommitFailed", "Ref does not exist")):
            raise MainMovedError(
                f"table {spec.table_name} ({spec.identifier}): another commit landed on main "
                f"while this run wrote (planned from offsets {dict(context.expected_start)}); "
                "this run's data was discarded, nothing was committed. Plan again."
            ) from exc
        raise
    updated = rows[0]["updated_ref"] if rows else None
    return int(updated) if updated is not None else None


@stage_runner(Publish)
def publish(context: StageContext, spec: Publish, batch: Batch) -> Batch:
    for audit in batch.audits:
        audit(context, batch)
    crash_point("before_commit")
    snapshot_id = fast_forward_main(context)
    crash_point("after_commit")
    return batch.evolve(results={**batch.results, PUBLISHED_SNAPSHOT: snapshot_id})
