"""Every command example in README.md and docs/*.md is run, so docs cannot drift.

Examples are ```console blocks with `$ ` lines (see tests/docs_examples.py). Each doc
runs in a fresh copy of the example project (tableflow_project.yml, tables/) whose
dev stack is this test session's broker and registry: the ports move through the
environment variables the project reads (TABLEFLOW_KAFKA_PORT, ...); the embedded
catalog starts in-process on a free port, over the copy's own warehouse. `tableflow`
on PATH runs this checkout. Commands of one doc run in order, in one directory (a
`cd` or an `export` carries over to the next command).

A command that cannot run here goes in NOT_RUN with the reason; any other command
runs, and must exit 0 (or N, with a `# exits N` comment).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.docs_examples import (
    COLLECT_ONLY,
    IN_REPOSITORY,
    NOT_RUN,
    REPO,
    all_examples,
    documents,
    examples,
    shell_blocks,
)


def test_command_examples_use_console_blocks() -> None:
    """A bash/sh block would escape the harness: commands go in ```console with `$ `."""
    offenders = [f"{b.doc}:{b.line} (```{b.lang})" for d in documents() for b in shell_blocks(d)]
    assert not offenders, (
        "command examples must be ```console blocks with `$ ` prompts: " + ", ".join(offenders)
    )


def test_not_run_entries_still_match_a_doc() -> None:
    commands = all_examples()
    stale = [p for p in NOT_RUN if not any(re.match(p, e.command) for e in commands)]
    assert not stale, f"NOT_RUN entries matching no doc command (remove them): {stale}"


def test_in_repository_entries_still_match_a_doc() -> None:
    commands = all_examples()
    stale = [p for p in IN_REPOSITORY if not any(re.match(p, e.command) for e in commands)]
    assert not stale, f"IN_REPOSITORY entries matching no doc command (remove them): {stale}"


def test_collect_only_entries_match_a_doc_command_run_in_the_repository() -> None:
    commands = all_examples()
    for pattern in COLLECT_ONLY:
        matched = [e for e in commands if re.match(pattern, e.command)]
        assert matched, f"COLLECT_ONLY entry matching no doc command (remove it): {pattern}"
        assert all(e.in_repository for e in matched), matched
        assert all(e.command_run == f"{e.command} --collect-only" for e in matched)
    other = next(e for e in commands if e.command == "tableflow plan")
    assert other.command_run == "tableflow plan"


def test_extraction_finds_the_readme_examples() -> None:
    readme = [e.command for e in examples(REPO / "README.md")]
    assert "tableflow plan" in readme
    assert any(c.startswith("tableflow apply --select tag:sales") for c in readme)


def test_extraction_rules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import tests.docs_examples as harness

    monkeypatch.setattr(harness, "REPO", tmp_path)
    doc = tmp_path / "guide.md"
    doc.write_text(
        "Text\n\n```console\n$ tableflow plan --detailed-exitcode   # exits 2 with changes\n"
        "Plan: 1 to create\n$ tableflow query \\\n    'SELECT 1'\n```\n\n"
        "```yaml\n$ not: a command\n```\n\n```bash\ntableflow apply\n```\n"
    )
    found = harness.examples(doc)
    assert [(e.line, e.command, e.expected_exit) for e in found] == [
        (4, "tableflow plan --detailed-exitcode   # exits 2 with changes", 2),
        (6, "tableflow query 'SELECT 1'", 0),
    ]
    (shell,) = harness.shell_blocks(doc)
    assert (shell.line, shell.lang) == (14, "bash")
