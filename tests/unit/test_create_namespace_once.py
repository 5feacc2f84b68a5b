"""An apply creating many tables runs one CREATE NAMESPACE per namespace, not one per table."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace
from typing import Any

import pyarrow as pa

from tableflow_core.engine.ddl import create_table_sql, namespace_of
from tableflow_core.engine.spark_session import SparkOnDemand
from tableflow_core.runner.actions import ApplyContext


class RecordingSpark:
    """Records the SQL it is given (narrow: only `sql` is used by these DDL calls)."""

    def __init__(self) -> None:
        self.statements: list[str] = []
        self._lock = threading.Lock()

    def sql(self, statement: str) -> Any:
        with self._lock:
            self.statements.append(statement)


def test_create_table_sql_can_leave_the_namespace_out() -> None:
    schema = pa.schema([pa.field("id", pa.int64())])
    both = create_table_sql("`c`.`ns`.`t`", schema)
    table_only = create_table_sql("`c`.`ns`.`t`", schema, with_namespace=False)
    assert both[0] == "CREATE NAMESPACE IF NOT EXISTS `c`.`ns`"
    assert table_only == both[1:]
    assert namespace_of("`c`.`ns`.`t`") == "`c`.`ns`"


def test_each_namespace_is_created_once_per_apply_even_concurrently() -> None:
    spark = RecordingSpark()
    # A catalog that is not a REST catalog: namespaces are created by Spark.
    handle = SimpleNamespace(catalog=object(), spark_name="c", spark_properties={"type": "jdbc"})
    context = ApplyContext(
        project=None,  # type: ignore[arg-type]
        plan=None,  # type: ignore[arg-type]
        spark_source=SparkOnDemand.of_session(spark),  # type: ignore[arg-type]
        handle=handle,
    )
    namespaces = [("a",), ("b",)] * 50
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(context.ensure_namespace, namespaces))
    assert sorted(spark.statements) == [
        "CREATE NAMESPACE IF NOT EXISTS `c`.`a`",
        "CREATE NAMESPACE IF NOT EXISTS `c`.`b`",
    ]
