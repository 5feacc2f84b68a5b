"""great-expectations' import starts early only for tables with checks (apply and run)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.plan_project import write_project

# Loads the project, then reports which modules each step imported (a fresh process: the
# test process may have imported great-expectations already).
PROBE = """
import sys, time
from pathlib import Path
from tableflow_core.pipeline.checks.warmup import prepare_checks_engine
from tableflow_core.config.loader import load_project

project = load_project(Path(sys.argv[1]))
plain = [t for t in project.tables if not t.checks]
assert [t.name for t in plain] == ["plain"], [t.name for t in project.tables]
assert prepare_checks_engine(plain) is False
time.sleep(0.5)
assert "great_expectations" not in sys.modules, "imported for a table without checks"
import tableflow_core.pipeline.checks.run  # its own imports (sqlglot, ...) are not the point here
started = time.monotonic()
assert prepare_checks_engine(project.tables) is True
returned_s = time.monotonic() - started
deadline = time.monotonic() + 300
while "great_expectations.expectations" not in sys.modules and time.monotonic() < deadline:
    time.sleep(0.05)
assert "great_expectations.expectations" in sys.modules, "the import never started"
# The import runs on its own thread: the caller goes on at once (the import takes ~4 s).
assert returned_s < 1.0, returned_s
assert prepare_checks_engine(project.tables) is True  # once per process: no second import
# The collector is paused during the import only, and what it imported is frozen.
import gc, threading
importing = [t for t in threading.enumerate() if t.name == "tableflow-gx-import"]
for thread in importing:
    thread.join(300)
assert gc.isenabled(), "the collector stayed off after the import"
assert gc.get_freeze_count() > 100_000, gc.get_freeze_count()
print("ok")
"""


def test_great_expectations_import_starts_on_a_thread_only_for_tables_with_checks(
    tmp_path: Path,
) -> None:
    root = write_project(
        tmp_path / "project",
        bootstrap="127.0.0.1:9",
        registry_url="http://127.0.0.1:9",
        catalog_uri="http://127.0.0.1:9",
        credential="client:secret",
        namespace="shop",
        tables=[
            {"name": "plain", "topic": "plain"},
            {"name": "checked", "topic": "checked",
             "checks": [{"type": "not_null", "columns": ["id"]}]},
        ],
    )  # fmt: skip
    result = subprocess.run(
        [sys.executable, "-c", PROBE, str(root)],
        capture_output=True,
        text=True,
        timeout=360,
        cwd=Path(__file__).parents[2],
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().endswith("ok")
