"""One exception root: every error tableflow defines is a TableflowError, and the CLI turns
one into its message and exit code in one place."""

from __future__ import annotations

import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from tableflow_core.cli.main import cli
from tableflow_core.errors import TableflowError
from tableflow_core.kafka.admin import KafkaUnreachableError
from tableflow_core.plan.plan_file import PlanFileError, StalePlanError

REPO = Path(__file__).resolve().parents[2]


def test_every_exception_class_derives_from_the_root() -> None:
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        import layering
    finally:
        sys.path.remove(str(REPO / "scripts"))
    classes = layering.exception_classes(REPO / "tableflow_core")
    assert len(classes) > 50
    assert set(classes.values()) == {"tableflow_core.errors.TableflowError"}
    # their builtin bases stay: `except ValueError` still catches a bad plan file
    assert issubclass(PlanFileError, ValueError) and issubclass(StalePlanError, RuntimeError)


@pytest.mark.parametrize(
    ("error", "shown"),
    [
        (PlanFileError("plan.json: not a JSON plan file"), "plan.json: not a JSON plan file"),
        (StalePlanError(["table t: snapshot changed"]), "Nothing was changed."),
        (
            KafkaUnreachableError("127.0.0.1:1", "cannot connect to any bootstrap server"),
            "kafka at 127.0.0.1:1 is not reachable: cannot connect",
        ),
    ],
)
def test_the_cli_reports_a_tableflow_error_once(error: TableflowError, shown: str) -> None:
    def fail() -> None:
        raise error

    cli.add_command(click.Command("boom", callback=fail))
    try:
        result = CliRunner().invoke(cli, ["boom"])
    finally:
        cli.commands.pop("boom")
    assert result.exit_code == error.exit_code == 1
    assert "Error:" in result.output and shown in result.output
    assert "Traceback" not in result.output


def test_any_other_exception_keeps_its_traceback() -> None:
    def fail() -> None:
        raise KeyError("a bug")

    cli.add_command(click.Command("boom", callback=fail))
    try:
        result = CliRunner().invoke(cli, ["boom"])
    finally:
        cli.commands.pop("boom")
    assert isinstance(result.exception, KeyError)
