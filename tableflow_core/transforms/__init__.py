"""Transforms declared in YAML: compiled without Spark (plan), run on Spark (apply).

Importing this package never imports pyspark: `compile_transforms` is pure. The Spark
side lives in `tableflow_core.pipeline.transforms.spark` (`apply_transforms`, `dedup_against_table`).
The names below load on first use, so that a decode task importing `arrow_masks` does not
import the compiler (and sqlglot with it).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tableflow_core.transforms.compile import (
        CompiledTransforms,
        TransformStep,
        compile_transforms,
    )
    from tableflow_core.transforms.locations import Locator, table_locator

_HOMES = {
    "CompiledTransforms": "tableflow_core.transforms.compile",
    "TransformStep": "tableflow_core.transforms.compile",
    "compile_transforms": "tableflow_core.transforms.compile",
    "Locator": "tableflow_core.transforms.locations",
    "table_locator": "tableflow_core.transforms.locations",
}

__all__ = ["CompiledTransforms", "Locator", "TransformStep", "compile_transforms", "table_locator"]


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_HOMES[name]), name)
