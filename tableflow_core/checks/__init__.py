"""Data-quality checks: compiled without Spark (plan), run with great-expectations (apply).

Importing this package imports neither pyspark nor great_expectations; `run_checks`
lives in `tableflow_core.pipeline.checks.run` and imports them when a table has checks.
"""

from tableflow_core.checks.compile import CompiledCheck, CompiledChecks, compile_checks
from tableflow_core.checks.report import CheckReport, CheckResult, ChecksFailedError

__all__ = [
    "CheckReport",
    "CheckResult",
    "ChecksFailedError",
    "CompiledCheck",
    "CompiledChecks",
    "compile_checks",
]
