"""Apply's Spark application on demand (engine/spark_session.SparkOnDemand): waited for
only when a task uses it; the target's catalog registered on it unless the application
was started with that very catalog in its conf (a REST target, known before the JVM)."""

from __future__ import annotations

from typing import Any

from tableflow_core.engine.spark_session import SessionStarter
from tableflow_core.targets.catalog import CatalogHandle
from tableflow_core.tasks.apply import ApplyTask

REST = {"type": "rest", "uri": "http://127.0.0.1:1", "credential": "id:secret"}


class FakeSpark:
    """Records the conf it is given (register_catalog's calls); no JVM."""

    def __init__(self) -> None:
        self.conf = self
        self.set_keys: list[str] = []
        self.builds = 0

    def set(self, key: str, value: str) -> None:
        self.set_keys.append(key)

    def unset(self, key: str) -> None:
        pass

    def newSession(self) -> Any:  # the Python workers' warm-up: not on a fake
        raise RuntimeError("no JVM")

    def __getattr__(self, name: str) -> Any:  # the catalog manager's load: no-ops
        return self

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self


def _source(built_with: dict[str, str] | None, handle_properties: dict[str, str]) -> Any:
    spark = FakeSpark()

    def build() -> Any:
        spark.builds += 1
        return spark

    catalogs = {"lake": built_with} if built_with is not None else None
    starter = SessionStarter(build, start=False, catalogs=catalogs)
    handle = CatalogHandle(
        catalog=None, spark_name="lake", spark_properties=handle_properties, address="-"
    )
    task = ApplyTask(project=None, plan=None, spark_starter=starter)  # type: ignore[arg-type]
    source = task._spark_source(handle)
    return source, spark, starter


def test_the_catalog_the_application_was_built_with_is_not_registered_again() -> None:
    source, spark, _ = _source(REST, dict(REST))
    assert source.session() is spark and source.session() is spark
    assert spark.builds == 1 and spark.set_keys == []


def test_another_catalog_is_registered_once() -> None:
    source, spark, _ = _source(None, dict(REST))
    source.session()
    source.session()
    assert spark.set_keys.count("spark.sql.catalog.lake") == 1
    assert "spark.sql.catalog.lake.uri" in spark.set_keys


def test_the_application_starts_when_a_task_first_needs_pyspark_or_spark() -> None:
    source, spark, starter = _source(REST, dict(REST))
    assert not starter.started  # its owner (the CLI) starts it when the plan needs Spark
    source.wait_for_pyspark()  # starts it; waits for pyspark's modules, not the JVM
    assert starter.started
    assert source.session() is spark
