"""Issue #32: tableflow's writes under target/ never follow a symbolic link (a link as
`target`, as a folder below it or as the file itself). Pure unit tests, no process."""

from __future__ import annotations

from pathlib import Path

import pytest

from tableflow_core.config.loader import load_project
from tableflow_core.output_files import OutputPathError, open_lock_file, write_text
from tableflow_core.runner.lock import table_locks
from tableflow_core.runner.results import RunResults, write_run_results
from tableflow_core.tasks.docs import DocsGenerateTask

PROJECT = (
    "name: p\ntargets:\n  dev:\n    kafka: {bootstrap_servers: 'b:1'}\n"
    "    catalog: {type: embedded, port: 0, auth: {mode: none}}\n"
    "tables:\n  - {name: orders, topic: orders, value: {format: json}}\n"
)


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    path = tmp_path / "outside"
    path.mkdir()
    (path / "run_results.json").write_text("precious")
    (path / "orders.lock").write_text("precious")
    (path / "index.html").write_text("precious")
    return path


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    (root / "tableflow_project.yml").write_text(PROJECT)
    return root


def untouched(outside: Path) -> bool:
    return {p.name: p.read_text() for p in outside.iterdir()} == {
        "run_results.json": "precious",
        "orders.lock": "precious",
        "index.html": "precious",
    }


def results() -> RunResults:
    return RunResults(
        project="p", target="dev", started_at="2026-01-01T00:00:00Z",
        finished_at="2026-01-01T00:00:01Z", duration_s=1.0, status="success",
        plan_summary="nothing", tables=(),
    )  # fmt: skip


def test_writes_create_folders_and_replace_atomically(root: Path) -> None:
    path = root / "target" / "a" / "b.txt"
    write_text(path, "one", base=root)
    write_text(path, "two", base=root)
    assert path.read_text() == "two"
    assert [p.name for p in path.parent.iterdir()] == ["b.txt"]  # no temporary left


def test_target_itself_a_link_is_refused(root: Path, outside: Path) -> None:
    (root / "target").symlink_to(outside)
    with pytest.raises(OutputPathError, match="symbolic link"):
        write_run_results(results(), root / "target" / "run_results.json", base=root)
    with (
        pytest.raises(OutputPathError),
        table_locks(root / "target" / "locks", ["orders"], base=root),
    ):
        pass
    with pytest.raises(OutputPathError):
        DocsGenerateTask(load_project(root), load_project(root).tables, offline=True).run()
    assert untouched(outside)


def test_a_folder_under_target_that_is_a_link_is_refused(root: Path, outside: Path) -> None:
    (root / "target").mkdir()
    (root / "target" / "docs").symlink_to(outside)
    (root / "target" / "locks").symlink_to(outside)
    project = load_project(root)
    with pytest.raises(OutputPathError, match="target/docs is a symbolic link"):
        DocsGenerateTask(project, project.tables, offline=True).run()
    with (
        pytest.raises(OutputPathError, match="target/locks is a symbolic link"),
        table_locks(root / "target" / "locks", ["orders"], base=root),
    ):
        pass
    assert untouched(outside)


def test_a_file_that_is_a_link_is_replaced_not_written_through(root: Path, outside: Path) -> None:
    (root / "target" / "locks").mkdir(parents=True)
    results_path = root / "target" / "run_results.json"
    results_path.symlink_to(outside / "run_results.json")
    write_run_results(results(), results_path, base=root)
    assert not results_path.is_symlink() and '"plan_summary"' in results_path.read_text()
    lock = root / "target" / "locks" / "orders.lock"
    lock.symlink_to(outside / "orders.lock")
    with pytest.raises(OutputPathError, match=r"orders\.lock is a symbolic link"):
        open_lock_file(lock, base=root)
    assert untouched(outside)


def test_docs_and_locks_still_work_without_links(root: Path) -> None:
    project = load_project(root)
    site = DocsGenerateTask(project, project.tables, offline=True).run()
    assert site.index == root / "target" / "docs" / "index.html" and site.index.is_file()
    with table_locks(root / "target" / "locks", ["orders"], base=root) as paths:
        assert paths == [root / "target" / "locks" / "orders.lock"]
        assert '"pid"' in paths[0].read_text()
