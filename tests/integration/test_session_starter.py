"""SessionStarter: the Spark application is built on a thread while the plan is made."""

from __future__ import annotations


def test_preparing_arrow_conversion_imports_what_its_first_call_needs() -> None:
    import subprocess
    import sys

    code = (
        "import sys; from tableflow_core.engine.spark_session import prepare_arrow_conversion;"
        "assert 'distutils.version' not in sys.modules; prepare_arrow_conversion();"
        "assert 'distutils.version' in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
