"""Transforms and checks compiled without Spark: output schema, descriptions, located errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def test_pure_modules_import_neither_spark_nor_great_expectations() -> None:
    code = (
        "import sys\n"
        "import tableflow_core.transforms, tableflow_core.checks\n"
        "from tableflow_core.transforms import compile_transforms\n"
        "from tableflow_core.checks import compile_checks\n"
        "import tableflow_core.pipeline.transforms.spark, tableflow_core.pipeline.checks.run\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('pyspark', 'great_expectations', 'py4j')]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).parents[2])
