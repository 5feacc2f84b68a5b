"""Every command example in README.md and docs/*.md is run, so docs cannot drift.

Examples are ```console blocks with `$ ` lines (see tests/docs_examples.py). Each doc
runs in a fresh copy of the example project (tableflow_project.yml, tables/) with its
own local stack, as a user's checkout has: `tableflow dev up` before the doc's commands
(Apache Kafka, registry, catalog, S3 on ports chosen for that copy), 2,000 sample orders,
and `tableflow dev down` after. A doc whose commands are only `export`s or run in the
repository gets no stack. `tableflow` on PATH runs this checkout. Commands of one doc run
in order, in one directory (a `cd` or an `export` carries over to the next command).

A command that cannot run here goes in NOT_RUN with the reason; any other command
runs, and must exit 0 (or N, with a `# exits N` comment). The unit tests' command runs
with `--collect-only` (COLLECT_ONLY: the same pytest run runs those tests itself).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.docs_examples import REPO, Example, all_examples, examples


def docs_with_runnable_examples() -> list[str]:
    return sorted(
        {e.doc for e in all_examples() if e.reason_not_run() is None},
        key=lambda d: (d != "README.md", d),
    )


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
def docs_stack(tmp_path_factory: pytest.TempPathFactory) -> DocsStack:
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
    }
    for name in ("TABLEFLOW_TARGET", "TABLEFLOW_PROJECT_DIR"):
        env.pop(name, None)
    return DocsStack(env=env, base=base)


def needs_stack(doc: str) -> bool:
    """A doc with a command that may talk to Kafka, the registry or the catalog."""
    return any(
        e.reason_not_run() is None and not e.in_repository and not e.command.startswith("export ")
        for e in examples(REPO / doc)
    )


def _tableflow(cwd: Path, env: dict[str, str], *args: str) -> None:
    result = subprocess.run(
        ["tableflow", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, f"tableflow {' '.join(args)}: {result.stderr[-3000:]}"


@contextmanager
def own_stack(project: Path, env: dict[str, str]) -> Iterator[None]:
    """The copy's own stack, with the example project's topic filled (what `dev produce`
    gives users), stopped afterwards whatever the doc did."""
    try:
        _tableflow(project, env, "dev", "up")
        _tableflow(project, env, "dev", "produce", "orders", "--count", "2000", "--seed", "13")
        yield
    finally:
        subprocess.run(
            ["tableflow", "dev", "down"], cwd=project, env=env, capture_output=True, timeout=300
        )


@pytest.mark.slow
@pytest.mark.parametrize("doc", docs_with_runnable_examples())
def test_doc_examples_run(doc: str, docs_stack: DocsStack) -> None:
    project = example_project(docs_stack.base / doc.replace("/", "_"))
    with own_stack(project, docs_stack.env) if needs_stack(doc) else nullcontext():
        _run_doc(doc, project, docs_stack)


def _run_doc(doc: str, cwd: Path, docs_stack: DocsStack) -> None:
    cwd_file = docs_stack.base / f"{doc.replace('/', '_')}.cwd"
    env_file = docs_stack.base / f"{doc.replace('/', '_')}.env"
    for example in examples(REPO / doc):
        if example.reason_not_run() is not None:
            continue
        if example.in_repository:  # about the checkout (e.g. the unit tests): from its root
            _run_example(example, example.command_run, REPO, docs_stack.env)
            continue
        # The directory and exported variables carry over to the doc's next command.
        script = (
            f"[ -f '{env_file}' ] && source '{env_file}'\n{example.command}\nstatus=$?\n"
            f"pwd > '{cwd_file}'\nexport -p | grep -v -E ' (PWD|OLDPWD|SHLVL)=' > '{env_file}'\n"
            "exit $status\n"
        )
        _run_example(example, script, cwd, docs_stack.env)
        if cwd_file.is_file():
            cwd = Path(cwd_file.read_text().strip())


def _run_example(example: Example, script: str, cwd: Path, env: dict[str, str]) -> None:
    """`script` (the example's command, or a script around it) must exit as the doc says."""
    result = subprocess.run(
        ["bash", "-c", script], cwd=cwd, env=env, capture_output=True, text=True, timeout=900
    )
    assert result.returncode == example.expected_exit, (
        f"{example}\nexit {result.returncode}, expected {example.expected_exit}\n"
        f"stdout:\n{result.stdout[-3000:]}\nstderr:\n{result.stderr[-3000:]}"
    )
