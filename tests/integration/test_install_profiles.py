"""What the README's two set-up commands install (issue 32): the demo gets tableflow and
what it runs, the test command also the test tools (great-expectations, the checks' test
model, among them) and chromium; and tableflow never needs great-expectations, checks
included (they run on Spark since round 4)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.catalog import unique_namespace
from tests.fixtures.stack import unique_name

REPO = Path(__file__).resolve().parents[2]

# Run tableflow as if great-expectations were not installed: its import fails like a
# missing package's (`find_spec` finds nothing, `import` raises ModuleNotFoundError).
WITHOUT_GX = """
import importlib.abc, sys

class NoGreatExpectations(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "great_expectations":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, NoGreatExpectations())
"""


def dry_run(script: str, sandbox: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", f"scripts/{script}"],
        cwd=sandbox,
        env={**os.environ, "TABLEFLOW_BOOTSTRAP_DRY_RUN": "1"},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture
def sandbox(tmp_path: Path) -> Path:
    """The scripts in a copy whose .venv programs all fail: a script that ignored the dry
    run could install nothing and start no demo or test run."""
    shutil.copytree(REPO / "scripts", tmp_path / "scripts")
    shutil.copy(REPO / "pyproject.toml", tmp_path)
    bin_dir = tmp_path / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    for name in ("python", "tableflow", "ruff", "mypy"):
        (bin_dir / name).write_text("#!/bin/sh\necho 'not in a dry run' >&2\nexit 97\n")
        (bin_dir / name).chmod(0o755)
    return tmp_path


def test_the_demo_installs_only_what_it_runs(sandbox: Path) -> None:
    demo = dry_run("demo.sh", sandbox)
    assert demo.returncode == 0, demo.stderr
    assert "pip install -e '.'" in demo.stdout
    assert "chromium" not in demo.stdout and "dev" not in demo.stdout.split("pip install")[1]
    assert "prometheus" not in demo.stdout
    assert "== tableflow" not in demo.stdout  # the dry run stops before the demo itself


def test_the_test_command_installs_the_rest(sandbox: Path) -> None:
    tests = dry_run("test.sh", sandbox)
    assert tests.returncode == 0, tests.stderr
    assert "pip install -e '.[dev]'" in tests.stdout
    assert "apt-get install chromium" in tests.stdout
    assert "apt-get install prometheus" in tests.stdout  # the metrics and alert-rule tests
    assert "== ruff" not in tests.stdout


def without_gx(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", WITHOUT_GX + code],
        cwd=cwd,
        env={**os.environ, "NO_COLOR": "1", "COLUMNS": "200"},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_every_module_imports_without_great_expectations_and_none_imports_it() -> None:
    code = """
import importlib, pkgutil
import tableflow_core
for module in pkgutil.walk_packages(tableflow_core.__path__, "tableflow_core."):
    if not module.name.endswith("__main__"):
        importlib.import_module(module.name)
assert "great_expectations" not in sys.modules
print("imported")
"""
    result = without_gx(code, REPO)
    assert result.returncode == 0, result.stderr
    assert "imported" in result.stdout
    # Nor later, inside a function: only the tests import it (the checks' model).
    sources = (REPO / "tableflow_core").rglob("*.py")
    assert not [p for p in sources if "import great_expectations" in p.read_text()]


@pytest.mark.slow
def test_plan_without_great_expectations_plans_the_table_with_checks(
    stack_project, kafka_broker, schema_registry
) -> None:
    from tableflow_core.dev.producer import produce_sample

    topic = unique_name("nogx")
    produce_sample("orders", kafka_broker.bootstrap, schema_registry.url, topic, 20)
    root = stack_project(
        namespace=unique_namespace("nogx"),
        tables=[
            {"name": "plain", "topic": topic},
            {
                "name": "checked",
                "topic": topic,
                "checks": [{"type": "not_null", "columns": ["order_id"]}],
            },
        ],
    )
    code = "from tableflow_core.cli.main import main\nsys.argv = ['tableflow', 'plan']\nmain()\n"
    result = without_gx(code, root)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "check not_null(order_id)" in output, output  # the Check stage's line
    assert "blocked" not in output.lower(), output
