"""great-expectations' judge of a check's flag column, bundled with its row count.

`run_checks` gives great-expectations a frame of 0/1 flag columns, one per row-level
check (1: the row fails the check). `ExpectFlagColumnSumToBeZero` passes when a flag
column sums to zero; its observed value is the sum, the exact failing count.

Why not great-expectations' own `ExpectColumnSumToBeBetween`: every column aggregate
metric (`column.sum`) depends on the table's row count, so great-expectations computes
the row count in one pass over the batch and the sums in a second. The metric here,
`tableflow.flag_column_sum`, is a table-domain aggregate like `table.row_count` itself
and depends on nothing, so great-expectations resolves both at once and its Spark engine
bundles them into one `df.agg(...)`: one pass over the batch for every check and the
rows evaluated. Both are great-expectations' documented extension points (a metric
provider with a partial aggregate function, and a batch expectation over it).

Importing this module imports great-expectations and registers both by name (once per
process): only `checks.run` imports it, when a table's checks run.
"""

from __future__ import annotations

from typing import Any, ClassVar

from great_expectations.core.metric_domain_types import MetricDomainTypes
from great_expectations.core.metric_function_types import MetricPartialFunctionTypes
from great_expectations.execution_engine import SparkDFExecutionEngine
from great_expectations.expectations.expectation import BatchExpectation
from great_expectations.expectations.metrics.metric_provider import metric_partial
from great_expectations.expectations.metrics.table_metric_provider import TableMetricProvider

from tableflow_core.sql_text import quote_ident

FLAG_SUM_METRIC = "tableflow.flag_column_sum"


class FlagColumnSum(TableMetricProvider):
    """The sum of a 0/1 flag column (0 over no rows)."""

    metric_name = FLAG_SUM_METRIC
    value_keys = ("column",)

    @metric_partial(
        engine=SparkDFExecutionEngine,
        partial_fn_type=MetricPartialFunctionTypes.AGGREGATE_FN,
        domain_type=MetricDomainTypes.TABLE,
    )
    def _spark(
        cls,
        execution_engine: SparkDFExecutionEngine,
        metric_domain_kwargs: dict[str, Any],
        metric_value_kwargs: dict[str, Any],
        metrics: dict[str, Any],
        runtime_configuration: dict[str, Any],
    ) -> tuple[Any, dict[str, Any], dict[str, Any]]:
        from pyspark.sql import functions as F

        flag = F.col(quote_ident(metric_value_kwargs["column"]))
        return F.coalesce(F.sum(flag), F.lit(0)), metric_domain_kwargs, {}


class ExpectFlagColumnSumToBeZero(BatchExpectation):
    """No row of the batch fails the check whose 0/1 flag column is `column`."""

    column: str
    metric_dependencies: ClassVar[tuple[str, ...]] = (FLAG_SUM_METRIC,)
    success_keys: ClassVar[tuple[str, ...]] = ("column",)

    def _validate(
        self,
        metrics: dict[str, Any],
        runtime_configuration: dict[str, Any] | None = None,
        execution_engine: Any = None,
    ) -> dict[str, Any]:
        failing = int(metrics[FLAG_SUM_METRIC])
        return {"success": failing == 0, "result": {"observed_value": failing}}
