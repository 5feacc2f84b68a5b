"""The DAG executor and the per-table lock (no Spark)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tableflow_core.runner.lock import LockTimeoutError, table_locks


def test_lock_of_a_killed_process_is_free(tmp_path):
    holder = subprocess.Popen(
        [sys.executable, "-c", (
            "import sys, time; from pathlib import Path; from tableflow_core.runner.lock import table_locks\n"
            f"with table_locks(Path({str(tmp_path)!r}), ['orders']):\n"
            "    print('held', flush=True); time.sleep(60)"
        )],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with (
            pytest.raises(LockTimeoutError, match=f"pid {holder.pid}"),
            table_locks(tmp_path, ["orders"]),
        ):
            pass
        holder.kill()
        holder.wait()
        with table_locks(tmp_path, ["orders"], timeout_s=2):
            pass
    finally:
        if holder.poll() is None:
            holder.kill()
