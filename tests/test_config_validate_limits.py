"""Issue #32: `validate` on hostile and mistyped projects: located errors, no tracebacks,
no quadratic paths, names checked as apply checks them, did-you-mean for mistyped values.
Pure unit tests (files in a temp dir, no process); one CLI run in-process."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tableflow_core.config.errors import ConfigError
from tableflow_core.config.loader import load_project

HEAD = (
    "name: p\ntargets:\n  dev:\n    kafka: {bootstrap_servers: 'b:1'}\n"
    "    catalog: {type: embedded, port: 0, auth: {mode: none}}\ntable_paths: [tables]\n"
)
TABLE = "  - name: orders\n    topic: orders\n    value: {format: json}\n"


def project(tmp_path: Path, tables: str, head: str = HEAD) -> Path:
    (tmp_path / "tables").mkdir(parents=True, exist_ok=True)
    (tmp_path / "tableflow_project.yml").write_text(head)
    (tmp_path / "tables" / "t.yml").write_text("tables:\n" + tables)
    return tmp_path


def problems(directory: Path) -> list[str]:
    with pytest.raises(ConfigError) as refused:
        load_project(directory)
    return [problem.render(directory) for problem in refused.value.problems]


def test_a_table_path_longer_than_the_file_system_allows_is_a_located_error(
    tmp_path: Path,
) -> None:
    for folder in ("x" * 5000, "/".join(["y" * 200] * 30)):
        head = HEAD.replace("table_paths: [tables]", f"table_paths: ['{folder}']")
        (tmp_path / "tableflow_project.yml").write_text(head)
        [message] = problems(tmp_path)
        assert message.startswith("tableflow_project.yml:6 [table_paths[0]]: cannot read")
        assert "File name too long" in message and "characters)" in message
        assert len(message) < 300


def test_duplicate_tables_validate_in_linear_time(tmp_path: Path) -> None:
    """3,000 duplicates took 12.5 s (each table looked its keys up among every line of
    the file); the time now grows like the file."""
    seconds = {}
    for count in (300, 3000):
        directory = project(tmp_path / str(count), TABLE * count)
        start = time.perf_counter()
        found = problems(directory)
        seconds[count] = time.perf_counter() - start
        assert len(found) == 2 * (count - 1)
        assert found[0].startswith("tables/t.yml:5: table name 'orders' is declared twice")
    assert seconds[3000] / seconds[300] < 20, seconds  # linear: ~10; it was ~35
