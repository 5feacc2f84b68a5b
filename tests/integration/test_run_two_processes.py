"""Two `tableflow run` processes on the same tables (issue 42): a standby started by
mistake on the same host, or one on a second host, never duplicate or lose a record.

Both are the CLI as users run it, each its own process and Spark JVM, against the same
broker, registry and REST catalog. The second runs from a copy of the project directory,
so it does not see the first's table locks (a second host): only the commit's check that
main did not move since the run read its offsets keeps them apart. Records are produced
while both run; at the end both get SIGTERM, end cleanly, and every record is in the table
exactly once.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tableflow_core.engine.test_hooks import CRASH_ENV
from tableflow_core.state.offsets import OFFSETS_KEY, decode_offsets
from tests.fixtures.apply_env import REPO, PaymentTopics, payments

pytestmark = pytest.mark.slow

PARTITIONS = 2


def start_run(root: Path, log: Path) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if k != CRASH_ENV}
    env["PYTHONPATH"] = str(REPO)
    return subprocess.Popen(
        [sys.executable, "-m", "tableflow_core", "--project-dir", str(root), "run"],
        cwd=REPO, env=env, start_new_session=True, text=True,
        stdout=log.open("w"), stderr=subprocess.STDOUT,
    )  # fmt: skip


def committed(table: Any) -> dict[int, int]:
    summary = table.current_snapshot().summary.additional_properties
    return decode_offsets(summary[OFFSETS_KEY], "test")[1] if OFFSETS_KEY in summary else {}


def test_two_run_processes_never_duplicate_or_lose_a_record(
    tmp_path: Path,
    make_env: Any,
    payment_topics: PaymentTopics,
) -> None:
    topic = payment_topics.create("tworuns", payments(0, 50), PARTITIONS)
    env = make_env(topic, refresh_interval="1s")
    second = tmp_path / "second_host"
    shutil.copytree(env.root, second, ignore=shutil.ignore_patterns("target"))
    runs = [start_run(env.root, tmp_path / "first.log"), start_run(second, tmp_path / "second.log")]
    try:
        produced = 50
        for _ in range(12):  # records keep coming while both run
            time.sleep(2)
            batch = payments(produced, 25)
            payment_topics.produce(topic, batch, PARTITIONS)
            produced += 25
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            with contextlib.suppress(Exception):
                if sum(committed(env.pyiceberg_table()).values()) >= produced:
                    break
            assert all(r.poll() is None for r in runs), "a run process exited"
            time.sleep(1)
        for run in runs:
            run.send_signal(signal.SIGTERM)
        codes = [run.wait(180) for run in runs]
    finally:
        for run in runs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(run.pid, signal.SIGKILL)
    outputs = [(tmp_path / f"{n}.log").read_text() for n in ("first", "second")]
    assert codes == [0, 0], outputs
    table = env.pyiceberg_table()
    ids = sorted(table.scan(selected_fields=("id",)).to_arrow()["id"].to_pylist())
    assert ids == list(range(produced)), outputs  # each record exactly once
    assert sum(committed(table).values()) == produced
    # Both ended cycles side by side. A cycle that lost the race to the other process
    # fails with nothing written (and is planned again at the next interval).
    assert all(("Apply " in out or "up to date" in out) for out in outputs), outputs
    for out in outputs:
        for line in out.splitlines():
            if line.startswith("Apply FAILED"):
                assert "0 records written" in line, out
