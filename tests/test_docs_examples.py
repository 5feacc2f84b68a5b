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

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tableflow_core.dev.processes import free_port
from tests.docs_examples import REPO, Example, documents, examples, shell_blocks
from tests.fixtures.stack import KafkaBroker, SchemaRegistryServer

# Regular expression (matched at the start of the command) -> why it is not run. Short.
NOT_RUN: dict[str, str] = {
    r"bash scripts/demo\.sh": "creates .venv and a stack on the default ports; CI runs it as its own job",
    r"bash scripts/test\.sh": "is the test suite itself",
    r"tableflow dev (up|down|status)\b": "the test session's fixtures are the stack (tests/test_cli_dev.py runs these)",
    r"python -m tableflow_core\.catalog\.server\b": "serves in the foreground until stopped",
    r'"\$SPARK_HOME"/bin/spark-class\b': "a long-running Spark master/worker (tests/test_cluster.py starts them)",
}


def reason_not_run(example: Example) -> str | None:
    for pattern, reason in NOT_RUN.items():
        if re.match(pattern, example.command):
            return reason
    return None


def all_examples() -> list[Example]:
    return [example for doc in documents() for example in examples(doc)]


def docs_with_runnable_examples() -> list[str]:
    return sorted(
        {e.doc for e in all_examples() if reason_not_run(e) is None},
        key=lambda d: (d != "README.md", d),
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


def test_extraction_finds_the_readme_examples() -> None:
    readme = [e.command for e in examples(REPO / "README.md")]
    assert "tableflow plan" in readme
    assert any(c.startswith("tableflow apply --select tag:sales") for c in readme)


@dataclass(frozen=True)
class DocsStack:
    env: dict[str, str]
    base: Path


def example_project(destination: Path) -> Path:
    destination.mkdir(parents=True)
    shutil.copy(REPO / "tableflow_project.yml", destination)
    shutil.copytree(REPO / "tables", destination / "tables")
    return destination


@pytest.fixture(scope="module")
def docs_stack(
    tmp_path_factory: pytest.TempPathFactory,
    kafka_broker: KafkaBroker,
    schema_registry: SchemaRegistryServer,
) -> Iterator[DocsStack]:
    base = tmp_path_factory.mktemp("docs")
    bin_dir = base / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "tableflow"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m tableflow_core "$@"\n')
    shim.chmod(0o755)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{Path(sys.executable).parent}:{os.environ.get('PATH', '')}",
        "PYTHONPATH": str(REPO),
        "NO_COLOR": "1",
        "TABLEFLOW_KAFKA_PORT": kafka_broker.bootstrap.rsplit(":", 1)[1],
        "TABLEFLOW_REGISTRY_PORT": schema_registry.url.rstrip("/").rsplit(":", 1)[1],
        "TABLEFLOW_CATALOG_PORT": str(free_port()),
    }
    env.pop("TABLEFLOW_TARGET", None)
    env.pop("TABLEFLOW_PROJECT_DIR", None)
    # The example project's topic, with sample orders (what `dev produce` gives users).
    seed_project = example_project(base / "seed")
    produced = subprocess.run(
        ["tableflow", "dev", "produce", "orders", "--count", "2000", "--seed", "13"],
        cwd=seed_project,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert produced.returncode == 0, produced.stderr
    yield DocsStack(env=env, base=base)


@pytest.mark.slow
@pytest.mark.parametrize("doc", docs_with_runnable_examples())
def test_doc_examples_run(doc: str, docs_stack: DocsStack) -> None:
    cwd = example_project(docs_stack.base / doc.replace("/", "_"))
    cwd_file = docs_stack.base / f"{doc.replace('/', '_')}.cwd"
    env_file = docs_stack.base / f"{doc.replace('/', '_')}.env"
    for example in examples(REPO / doc):
        if reason_not_run(example) is not None:
            continue
        # The directory and exported variables carry over to the doc's next command.
        script = (
            f"[ -f '{env_file}' ] && source '{env_file}'\n{example.command}\nstatus=$?\n"
            f"pwd > '{cwd_file}'\nexport -p | grep -v -E ' (PWD|OLDPWD|SHLVL)=' > '{env_file}'\n"
            "exit $status\n"
        )
        result = subprocess.run(
            ["bash", "-c", script],
            cwd=cwd,
            env=docs_stack.env,
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert result.returncode == example.expected_exit, (
            f"{example}\nexit {result.returncode}, expected {example.expected_exit}\n"
            f"stdout:\n{result.stdout[-3000:]}\nstderr:\n{result.stderr[-3000:]}"
        )
        if cwd_file.is_file():
            cwd = Path(cwd_file.read_text().strip())


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
