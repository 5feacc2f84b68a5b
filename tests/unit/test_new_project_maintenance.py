"""A new project and maintenance (issue 32): the template declares a maintenance block,
and `maintain` on a table without one says what to add, where, and where the docs are."""

from __future__ import annotations

from pathlib import Path

from tableflow_core.config.loader import load_project
from tableflow_core.tasks.init import InitTask
from tableflow_core.tasks.maintain import MaintainTask, how_to_add_maintenance


def new_project(tmp_path: Path) -> Path:
    InitTask(tmp_path / "p").run()
    return tmp_path / "p"


def test_the_template_maintains_its_tables(tmp_path: Path) -> None:
    (orders,) = load_project(new_project(tmp_path)).tables
    block = orders.maintenance
    assert block is not None and block.every == "1h"
    assert block.compact is not None
    assert (block.compact.every_commits, block.compact.every_small_files) == (10, 20)
    assert block.expire_snapshots is not None


def test_a_table_without_a_block_is_told_what_to_add(tmp_path: Path) -> None:
    root = new_project(tmp_path)
    config = root / "tableflow_project.yml"
    text = config.read_text()
    config.write_text(text[: text.index("  # Table maintenance")])  # the block removed
    project = load_project(root)
    (orders,) = project.tables
    assert orders.maintenance is None

    # A table without a block returns before the catalog is read.
    result = MaintainTask(project, project.tables, dry_run=True)._one(None, orders)  # type: ignore[arg-type]
    assert result.note == "no maintenance block (tables/orders.yml:3)"

    hint = how_to_add_maintenance(project, project.tables)
    assert "`defaults:` in tableflow_project.yml" in hint
    assert "under a table (tables/orders.yml:3)" in hint
    assert "  maintenance:\n    every: 1h\n    compact:" in hint
    assert "docs/maintenance.md" in hint and "docs/reference.md" in hint
    # The example it shows is a block the config accepts, and what the template has.
    snippet = hint[hint.index("  maintenance:") : hint.index("Every key")]
    config.write_text(config.read_text() + snippet)
    assert (
        load_project(root).tables[0].maintenance
        == load_project(new_project(tmp_path / "t")).tables[0].maintenance
    )
