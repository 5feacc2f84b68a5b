"""The alert rules shipped in docs/alerts are valid (`promtool check rules`), pass their
unit tests (`promtool test rules`), and a rule changed against its tests fails them (the
test can fail). Every metric the rules use is one `tableflow run` exports."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace

import yaml

from tableflow_core.observability.metrics import RunMetrics
from tests.fixtures.prometheus import prometheus_binary

ALERTS = Path(__file__).resolve().parents[2] / "docs" / "alerts"
RULES = ALERTS / "tableflow.rules.yml"
RULE_TESTS = ALERTS / "tableflow.rules.test.yml"


def promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [prometheus_binary("promtool"), *args], cwd=cwd, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip


def test_rules_are_valid_and_pass_their_unit_tests() -> None:
    checked = promtool("check", "rules", RULES.name, cwd=ALERTS)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 7 rules found" in checked.stdout
    tested = promtool("test", "rules", RULE_TESTS.name, cwd=ALERTS)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "SUCCESS" in tested.stdout


def test_a_rule_changed_against_its_tests_fails_them(tmp_path: Path) -> None:
    for path in (RULES, RULE_TESTS):
        shutil.copy(path, tmp_path / path.name)
    changed = RULES.read_text().replace(
        "tableflow_table_suspended == 1", "tableflow_table_suspended == 2"
    )
    assert changed != RULES.read_text()
    (tmp_path / RULES.name).write_text(changed)
    assert promtool("check", "rules", RULES.name, cwd=tmp_path).returncode == 0
    tested = promtool("test", "rules", RULE_TESTS.name, cwd=tmp_path)
    assert tested.returncode != 0 and "TableflowTableSuspended" in tested.stdout + tested.stderr


def test_the_rules_use_only_metrics_the_run_exports() -> None:
    tables = (SimpleNamespace(name="orders", topic="shop.orders", refresh_interval_s=60.0),)
    metrics = RunMetrics(tables)  # type: ignore[arg-type]
    exported = {"up"}  # Prometheus' own, per scrape target
    for family in metrics.registry.collect():  # families without samples yet too
        suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count")}
        exported |= {family.name + s for s in suffixes.get(family.type, ("",))}
    groups = yaml.safe_load(RULES.read_text())["groups"]
    used = {
        name
        for group in groups
        for rule in group["rules"]
        for name in re.findall(r"\b((?:tableflow|process)_[a-z_]+|up)\b", rule["expr"])
    }
    assert len(used) >= 7 and used <= exported, sorted(used - exported)
