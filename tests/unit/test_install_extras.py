"""What each install gets (issue 32, a new user's first hour): the demo installs what it
runs, great-expectations is the `checks` extra, and a project that declares checks without
it is told which extra to install, at the `checks:` line."""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

import pytest

from tableflow_core.config import extras
from tableflow_core.config.extras import CHECKS, MissingExtraError, missing_extras
from tableflow_core.plan.builder import build_plan
from tests.unit.test_plan_builder import make_project, world

REPO = Path(__file__).resolve().parents[2]
TEST_TOOLS = ("pytest", "mypy", "ruff", "moto", "hypothesis")


def requirement_names(requirements: list[str]) -> set[str]:
    return {r.split("[")[0].split("=")[0].split(">")[0].split("<")[0].strip() for r in requirements}


def test_core_dependencies_hold_neither_checks_nor_test_tools() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    core = requirement_names(project["dependencies"])
    assert "great-expectations" not in core
    assert not core & set(TEST_TOOLS)
    extras_ = project["optional-dependencies"]
    assert requirement_names(extras_["checks"]) == {"great-expectations"}
    assert set(TEST_TOOLS) <= requirement_names(extras_["dev"])


def checks_project(tmp_path: Path):  # type: ignore[no-untyped-def]
    return make_project(tmp_path, checks=[{"type": "not_null", "columns": ["id"]}])


def test_plan_refuses_checks_without_the_extra_at_the_checks_line(tmp_path: Path) -> None:
    project = checks_project(tmp_path)
    plan = build_plan(project, project.tables, world(project, missing_extras=frozenset({"checks"})))
    (blocker,) = plan.blockers
    assert blocker.kind == "missing_extra" and blocker.key == "checks"
    assert "pip install 'tableflow[checks]'" in blocker.message
    assert "great-expectations" in blocker.message
    table = project.tables[0]
    assert blocker.location == str(table.location_of("checks"))
    assert blocker.location != str(table.source)  # the `checks:` line, not the table's first


def test_tables_without_checks_need_no_extra(tmp_path: Path) -> None:
    project = make_project(tmp_path)
    plan = build_plan(project, project.tables, world(project, missing_extras=frozenset({"checks"})))
    assert not plan.blockers
    installed = build_plan(project, project.tables, world(checks_project(tmp_path / "x")))
    assert not installed.blockers


def test_missing_extras_are_found_without_importing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(extras.importlib.util, "find_spec", lambda name: None)
    assert missing_extras() == {"checks"}
    with pytest.raises(MissingExtraError, match=r"tableflow\[checks\]"):
        extras.require(CHECKS)


def test_the_checks_engine_names_the_extra_when_it_is_absent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tableflow_core.pipeline.checks.run import _gx

    monkeypatch.setitem(sys.modules, "great_expectations", None)  # import fails as if absent
    with pytest.raises(MissingExtraError) as error:
        _gx()
    assert "pip install 'tableflow[checks]'" in error.value.user_message()
