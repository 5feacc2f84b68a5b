"""Every command example in README.md and docs/*.md is run, so docs cannot drift.

Examples are ```console blocks with `$ ` lines (see tests/docs_examples.py). Each doc
runs in a fresh copy of the example project (tableflow_project.yml, tables/) whose
dev stack is this test session's broker and registry: the ports move through the
environment variables the project reads (TABLEFLOW_KAFKA_PORT, ...); the embedded
catalog starts in-process on a free port, over the copy's own warehouse: a bucket of its
own on the session's S3 server (TABLEFLOW_S3_PORT, TABLEFLOW_S3_BUCKET; the catalog takes
the keys from TABLEFLOW_S3_ACCESS_KEY_ID / _SECRET_ACCESS_KEY, as from `dev up`). `tableflow`
on PATH runs this checkout. Commands of one doc run in order, in one directory (a
`cd` or an `export` carries over to the next command).

A command that cannot run here goes in NOT_RUN with the reason; any other command
runs, and must exit 0 (or N, with a `# exits N` comment).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tableflow_core.catalog.storage import ObjectStorage
from tableflow_core.dev.processes import free_port
from tableflow_core.dev.s3_server import RunningS3Server
from tests.docs_examples import REPO, Example, all_examples, examples
from tests.fixtures.stack import KafkaBroker, SchemaRegistryServer


def docs_with_runnable_examples() -> list[str]:
    return sorted(
        {e.doc for e in all_examples() if e.reason_not_run() is None},
        key=lambda d: (d != "README.md", d),
    )


@dataclass(frozen=True)
class DocsStack:
    env: dict[str, str]
    base: Path
    s3: RunningS3Server


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
    s3_server: RunningS3Server,
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
        "TABLEFLOW_S3_PORT": str(s3_server.port),
        **ObjectStorage(
            access_key_id=s3_server.credentials.access_key_id,
            secret_access_key=s3_server.credentials.secret_access_key,
        ).environment(),
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
    yield DocsStack(env=env, base=base, s3=s3_server)


@pytest.mark.slow
@pytest.mark.parametrize("doc", docs_with_runnable_examples())
def test_doc_examples_run(doc: str, docs_stack: DocsStack) -> None:
    cwd = example_project(docs_stack.base / doc.replace("/", "_"))
    cwd_file = docs_stack.base / f"{doc.replace('/', '_')}.cwd"
    env_file = docs_stack.base / f"{doc.replace('/', '_')}.env"
    bucket = "docs-" + "".join(c if c.isalnum() else "-" for c in doc.lower()).strip("-")
    docs_stack.s3.client().create_bucket(Bucket=bucket)
    env = {**docs_stack.env, "TABLEFLOW_S3_BUCKET": bucket}
    for example in examples(REPO / doc):
        if example.reason_not_run() is not None:
            continue
        if example.in_repository:
            _run_in_repository(example, env)
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
            env=env,
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


def _run_in_repository(example: Example, env: dict[str, str]) -> None:
    """A command about the checkout (e.g. the unit tests), from the repository's root."""
    result = subprocess.run(
        ["bash", "-c", example.command],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == example.expected_exit, (
        f"{example}\nexit {result.returncode}, expected {example.expected_exit}\n"
        f"stdout:\n{result.stdout[-3000:]}\nstderr:\n{result.stderr[-3000:]}"
    )
