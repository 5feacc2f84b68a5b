"""The `tableflow` process ends right after its command and exit handlers: its exit
status and its output are those of the command."""

from __future__ import annotations

from tableflow_core.cli.main import exit_status


def test_system_exit_codes_map_to_statuses_as_python_does() -> None:
    assert [exit_status(c) for c in (None, 0, 3, "message")] == [0, 0, 3, 1]
