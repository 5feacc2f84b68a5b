"""The CLI as users run it: a real `tableflow` process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def tableflow(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tableflow_core", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {}), "NO_COLOR": "1", "COLUMNS": "200"},
        timeout=120,
    )


def explicit_addresses(project: Path, kafka: int, registry: int, catalog: int) -> None:
    """Point the template's dev target at these loopback ports instead of its dev stack
    (`dev_stack()` values), as a project with servers of its own would."""
    config = project / "tableflow_project.yml"
    text = config.read_text()
    for value, address in (
        ("kafka_bootstrap", f"127.0.0.1:{kafka}"),
        ("schema_registry_url", f"http://127.0.0.1:{registry}"),
        ("catalog_port", str(catalog)),
    ):
        placeholder = "{{ dev_stack('" + value + "') }}"
        assert placeholder in text, value
        text = text.replace(placeholder, address)
    config.write_text(text)


def test_init_then_validate_then_compile(tmp_path: Path) -> None:
    created = tableflow("init", "myproj", cwd=tmp_path)
    assert created.returncode == 0, created.stderr
    project = tmp_path / "myproj"
    assert (project / "tableflow_project.yml").is_file()
    validated = tableflow("validate", cwd=project)
    assert validated.returncode == 0, validated.stderr
    assert "project myproj" in validated.stdout and "1 table valid" in validated.stdout
    compiled = tableflow("compile", cwd=project)
    assert compiled.returncode == 0, compiled.stderr
    data = json.loads(compiled.stdout)
    assert data["project"] == "myproj"
    assert data["tables"][0]["identifier"] == "raw.orders"
    assert data["tables"][0]["partition_by"] == ["day(created_at)"]


def test_init_refuses_to_overwrite(tmp_path: Path) -> None:
    assert tableflow("init", "p", cwd=tmp_path).returncode == 0
    again = tableflow("init", "p", cwd=tmp_path)
    assert again.returncode == 1
    assert "already exists" in again.stderr


def test_invalid_project_exits_1_with_location(tmp_path: Path) -> None:
    assert tableflow("init", "p", cwd=tmp_path).returncode == 0
    orders = tmp_path / "p" / "tables" / "orders.yml"
    orders.write_text(orders.read_text().replace("partition_by:", "partiton_by:"))
    result = tableflow("validate", cwd=tmp_path / "p")
    assert result.returncode == 1
    assert "tables/orders.yml:" in result.stderr
    assert "did you mean 'partition_by'?" in result.stderr


def test_compile_never_prints_secrets(tmp_path: Path) -> None:
    assert tableflow("init", "p", cwd=tmp_path).returncode == 0
    env = {"KAFKA_API_SECRET": "kafka-secret-value-123", "SR_API_SECRET": "registry-secret-456"}
    result = tableflow("--target", "prod", "compile", cwd=tmp_path / "p", env=env)
    assert result.returncode == 0, result.stderr
    assert "kafka-secret-value-123" not in result.stdout
    assert "registry-secret-456" not in result.stdout
    assert "**********" in result.stdout


def test_usage_errors_exit_2(tmp_path: Path) -> None:
    assert tableflow("validate", "--no-such-flag", cwd=tmp_path).returncode == 2


def test_select_matching_nothing_is_an_error() -> None:
    result = tableflow("--select", "nope", "validate", cwd=REPO)
    assert result.returncode == 1
    assert "matches no table" in result.stderr
    by_tag = tableflow("--select", "tag:sales", "validate", cwd=REPO)
    assert by_tag.returncode == 0 and "orders" in by_tag.stdout


def test_maintain_dry_run_on_a_new_project_says_what_to_add(tmp_path: Path) -> None:
    """Issue 32: `maintain --dry-run` said "no maintenance block" and nothing more."""
    assert tableflow("init", "p", cwd=tmp_path).returncode == 0
    project = tmp_path / "p"
    from tableflow_core.dev.processes import free_port

    # Before any `dev up` a project with dev_stack() addresses talks to nothing; one with
    # its own addresses gets the embedded catalog started on its port.
    explicit_addresses(project, free_port(), free_port(), free_port())
    env: dict[str, str] = {}
    fresh = tableflow("maintain", "--dry-run", cwd=project, env=env)
    assert fresh.returncode == 0, fresh.stderr
    assert "orders: table does not exist yet" in fresh.stdout + fresh.stderr  # it has a block

    config = project / "tableflow_project.yml"
    text = config.read_text()
    config.write_text(text[: text.index("  # Table maintenance")])
    bare = tableflow("maintain", "--dry-run", cwd=project, env=env)
    assert bare.returncode == 0, bare.stderr
    output = bare.stdout + bare.stderr
    assert "orders: no maintenance block (tables/orders.yml:3)" in output
    assert "Add one under `defaults:` in tableflow_project.yml" in output
    assert "compact: {every_commits: 10, every_small_files: 20}" in output
    assert "docs/maintenance.md" in output
