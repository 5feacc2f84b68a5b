"""How long the CLI takes to answer when nothing heavy is needed.

    .venv/bin/python benchmarks/cli_startup.py [--runs 7]

Median wall-clock and CPU seconds of, each in a new process:
- baseline `python -c pass` (interpreter start-up alone);
- `tableflow --help` (lazy: only click and the CLI modules);
- `import tableflow_core.catalog` + `--help`: what --help cost when the CLI imported the
  catalog server eagerly (the old behaviour, measured in the same run);
- `tableflow plan` with nothing listening on the project's Kafka port (fails fast).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tableflow_core.dev.processes import free_port

REPO = Path(__file__).resolve().parents[1]


def closed_port() -> int:
    return free_port()


def timed(args: list[str], runs: int, cwd: Path, env: dict[str, str]) -> tuple[float, float]:
    """Median wall-clock and CPU (user + system) seconds; CPU is what to compare on a
    busy machine, where wall-clock mostly measures waiting for a core."""
    walls, cpus = [], []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        subprocess.run(args, cwd=cwd, env=env, capture_output=True, check=False)
        walls.append(time.perf_counter() - start)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return statistics.median(walls), statistics.median(cpus)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=7)
    runs = parser.parse_args().runs
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    python = sys.executable
    eager = (
        "import sys, tableflow_core.catalog; from tableflow_core.cli.main import cli; "
        "cli(['--help'], prog_name='tableflow')"
    )
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        subprocess.run(
            [python, "-m", "tableflow_core", "init", "p"],
            cwd=work,
            env=env,
            check=True,
            capture_output=True,
        )
        down = {
            **env,
            "TABLEFLOW_KAFKA_PORT": str(closed_port()),
            "TABLEFLOW_REGISTRY_PORT": str(closed_port()),
            "TABLEFLOW_CATALOG_PORT": str(closed_port()),
        }
        rows = [
            ("baseline: python -c pass", timed([python, "-c", "pass"], runs, work, env)),
            (
                "tableflow --help",
                timed([python, "-m", "tableflow_core", "--help"], runs, work, env),
            ),
            (
                "--help with the catalog imported (old)",
                timed([python, "-c", eager], runs, work, env),
            ),
            (
                "tableflow plan, Kafka down",
                timed(
                    [python, "-m", "tableflow_core", "plan"], max(1, runs // 2), work / "p", down
                ),
            ),
        ]
    print(f"load average {os.getloadavg()[0]:.1f}, median of {runs} runs")
    print(f"{'command':45} {'wall s':>8} {'CPU s':>8}")
    for name, (wall, cpu) in rows:
        print(f"{name:45} {wall:8.2f} {cpu:8.2f}")


if __name__ == "__main__":
    main()
