"""Data-quality checks: compiled without Spark (plan), run on Spark (apply).

Importing this package does not import pyspark; `run_checks` lives in
`tableflow_core.pipeline.checks.run`.
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
