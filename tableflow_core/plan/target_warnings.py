"""What plan warns about in the target as a whole (pure).

- a warehouse on a local path (the embedded catalog's default, or a SQL catalog's) with a
  Spark master that is not `local[...]`: executors write their data files on their own
  hosts, at the path the driver names; unless every host mounts that path (NFS and the
  like), the files land on the executors' disks while the driver commits their paths.
  Seen on a cluster across test hosts (docs/cluster.md, "A cluster across hosts").
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tableflow_core.config.models.catalogs import EmbeddedCatalog, SqlCatalog, is_object_store_uri
from tableflow_core.config.project import Project
from tableflow_core.plan.actions import PlanWarning

TargetRule = Callable[[Project], list[PlanWarning]]


def local_warehouse(project: Project) -> Path | None:
    """The warehouse's directory when the target's catalog keeps its data files on a local
    path (a path or `file://`), else None (object storage, or a catalog that decides)."""
    catalog = project.target.catalog
    if not isinstance(catalog, EmbeddedCatalog | SqlCatalog):
        return None
    warehouse = catalog.warehouse
    if is_object_store_uri(warehouse) or (
        "://" in warehouse and not warehouse.startswith("file://")
    ):
        return None
    return project.resolve_path(warehouse.removeprefix("file://"))


def local_warehouse_on_a_cluster(project: Project) -> list[PlanWarning]:
    master = project.target.spark.master
    warehouse = local_warehouse(project)
    if warehouse is None or master.startswith("local"):
        return []
    target = f"targets.{project.target_name}"
    message = (
        f"the warehouse {warehouse} is a local path and spark.master is not local: "
        "executors write data files at that path on their own hosts. Every Spark worker "
        "host must mount it at the same path (a shared file system), or use an s3:// "
        "warehouse (docs/cluster.md)"
    )
    return [
        PlanWarning(
            table=None,
            key=f"{target}.catalog.warehouse",
            location=str(project.config_file),
            message=message,
        )
    ]


TARGET_RULES: tuple[TargetRule, ...] = (local_warehouse_on_a_cluster,)


def target_warnings(project: Project) -> list[PlanWarning]:
    return [warning for rule in TARGET_RULES for warning in rule(project)]
