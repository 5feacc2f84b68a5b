"""Transforms declared in YAML: compiled without Spark (plan), run on Spark (apply).

Importing this package never imports pyspark: `compile_transforms` is pure. The Spark
side lives in `tableflow_core.transforms.spark` (`apply_transforms`, `dedup_against_table`).
"""

from tableflow_core.transforms.compile import CompiledTransforms, TransformStep, compile_transforms
from tableflow_core.transforms.locations import Locator, table_locator

__all__ = ["CompiledTransforms", "Locator", "TransformStep", "compile_transforms", "table_locator"]
