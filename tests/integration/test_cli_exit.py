"""The `tableflow` process ends right after its command and exit handlers: its exit
status and its output are those of the command."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def tableflow(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "tableflow_core", *args]
    return subprocess.run(command, capture_output=True, text=True, cwd=cwd)


def test_exit_status_and_output_are_the_commands(tmp_path: Path) -> None:
    ok = tableflow("--help", cwd=tmp_path)
    assert ok.returncode == 0 and "Usage: tableflow" in ok.stdout
    missing = tableflow("--project-dir", str(tmp_path / "none"), "validate", cwd=tmp_path)
    assert missing.returncode == 1 and "no tableflow_project.yml" in missing.stderr
    assert tableflow("nosuchcommand", cwd=tmp_path).returncode == 2
    created = tableflow("init", "demo", cwd=tmp_path)
    assert created.returncode == 0, created.stderr
    validated = tableflow("--project-dir", "demo", "validate", cwd=tmp_path)
    assert validated.returncode == 0 and validated.stdout.startswith("OK"), validated.stdout
