"""Output off a terminal (CI logs, pipes) is never wrapped or cut; plans speak Iceberg."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from tests.unit.test_cli_output import long_plan


def run_python(code: str) -> str:
    """Run `code` with stdout a pipe (not a terminal), as in CI."""
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
        env={"COLUMNS": "80", "NO_COLOR": "1", "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_plan_is_not_wrapped_off_a_terminal() -> None:
    plan_json = long_plan().model_dump_json()
    out = run_python(
        f"""
        from tableflow_core.cli.context import make_console
        from tableflow_core.plan.plan import Plan
        from tableflow_core.plan.render_human import render_human
        render_human(Plan.model_validate_json({plan_json!r}), make_console())
        """
    )
    details = next(line for line in out.splitlines() if "details:" in line)
    assert len(details) > 300  # one line, not wrapped at 80 columns
    assert details.strip().startswith("details: struct<field_number_0: list<decimal(38, 9)>")
    assert "amount: decimal(10, 2)" in out
    assert "created_at: timestamptz" in out
    assert "tags: list<string>" in out
    assert "1 table to ingest (1 record)" in out
    assert "ingest 1 record from topic orders" in out


def test_tables_keep_every_character_off_a_terminal() -> None:
    value = "x" * 400
    out = run_python(
        f"""
        from rich.table import Table
        from tableflow_core.cli.context import make_console
        table = Table()
        table.add_column("address")
        table.add_column("detail")
        table.add_row("127.0.0.1:19092", {value!r})
        make_console().print(table)
        """
    )
    assert value in out
    assert "…" not in out
