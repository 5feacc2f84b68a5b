"""Global options before or after the subcommand, and a light `tableflow --help`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.test_cli_basics import tableflow


@pytest.fixture
def project(tmp_path: Path) -> Path:
    assert tableflow("init", "p", cwd=tmp_path).returncode == 0
    tables = tmp_path / "p" / "tables"
    (tables / "customers.yml").write_text(
        "tables:\n  - name: customers\n    topic: customers\n    value: {format: avro}\n"
        "    tags: [crm]\n"
    )
    return tmp_path / "p"


def compiled(*args: str, cwd: Path) -> dict[str, object]:
    result = tableflow(*args, cwd=cwd)
    assert result.returncode == 0, result.stderr
    data: dict[str, object] = json.loads(result.stdout)
    return data


def table_names(data: dict[str, object]) -> list[str]:
    tables = data["tables"]
    assert isinstance(tables, list)
    return sorted(t["name"] for t in tables)


@pytest.mark.parametrize("before", [True, False], ids=["before", "after"])
def test_project_dir_and_select_in_either_position(project: Path, before: bool) -> None:
    options = ("--project-dir", "p", "--select", "tag:crm")
    args = (*options, "compile") if before else ("compile", *options)
    data = compiled(*args, cwd=project.parent)
    assert table_names(data) == ["customers"]
    assert data["project"] == "p"


@pytest.mark.parametrize("before", [True, False], ids=["before", "after"])
def test_target_and_vars_in_either_position(project: Path, before: bool) -> None:
    options = ("-t", "prod", "--vars", '{"namespace": "elsewhere"}')
    args = (*options, "compile") if before else ("compile", *options)
    data = compiled(*args, cwd=project)
    assert data["target"] == "prod"
    tables = data["tables"]
    assert isinstance(tables, list)
    assert {t["identifier"] for t in tables} == {"elsewhere.orders", "elsewhere.customers"}


def test_after_wins_for_target_and_adds_for_select(project: Path) -> None:
    data = compiled(
        "--target", "dev", "-s", "orders", "compile", "-t", "prod", "-s", "customers", cwd=project
    )
    assert data["target"] == "prod"
    assert table_names(data) == ["customers", "orders"]


def test_validate_project_dir_after_subcommand(project: Path) -> None:
    result = tableflow("validate", "--project-dir", str(project), cwd=project.parent.parent)
    assert result.returncode == 0, result.stderr
    assert "2 tables valid" in result.stdout


@pytest.mark.parametrize("where", ["group", "subcommand"])
def test_nested_commands_take_global_options(project: Path, where: str) -> None:
    options = ("--project-dir", str(project), "--target", "prod")
    args = ("dev", *options, "status") if where == "group" else ("dev", "status", *options)
    result = tableflow(*args, cwd=Path("/"))
    assert result.returncode == 1
    assert "target 'prod' has no dev_stack section" in result.stderr


def test_env_var_still_sets_the_target(project: Path) -> None:
    result = tableflow("compile", cwd=project, env={"TABLEFLOW_TARGET": "prod"})
    assert json.loads(result.stdout)["target"] == "prod"


def test_bad_vars_after_subcommand_is_a_usage_error(project: Path) -> None:
    result = tableflow("compile", "--vars", "[1, 2]", cwd=project)
    assert result.returncode == 2
    assert "expected a JSON or YAML mapping" in result.stderr


HEAVY = ("fastapi", "pyspark", "pyiceberg", "great_expectations", "pyarrow", "duckdb", "uvicorn")


def test_help_imports_no_heavy_dependency() -> None:
    """`tableflow --help` lists every command without importing the engine or servers."""
    code = (
        "import sys, json\n"
        "from tableflow_core.cli.main import cli\n"
        "try:\n"
        "    cli(['--help'], prog_name='tableflow')\n"
        "except SystemExit:\n"
        "    pass\n"
        f"print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}} & set({list(HEAVY)!r}))))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert "plan" in result.stdout and "apply" in result.stdout and "query" in result.stdout
    assert json.loads(lines[-1]) == []


def test_the_planner_imports_no_catalog_server() -> None:
    """`tableflow plan` imports the object store's settings from the catalog package
    (`catalog.storage`); the package must not load the server with them (FastAPI,
    SQLAlchemy: ~0.45 s of a 1,000-table plan,
    docs/history/performance-issues-26-31.md)."""
    code = (
        "import sys, json\n"
        "import tableflow_core.tasks.plan\n"
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules} & "
        "{'fastapi', 'uvicorn', 'sqlalchemy', 'pyspark'})))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.strip().splitlines()[-1]) == []
