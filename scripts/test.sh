#!/usr/bin/env bash
# The test command: lint, format check, type check, then the whole pytest suite: tests/unit
# (no process at all, seconds), then tests/integration against real components (broker,
# registry, catalog, Spark). The suite runs in TABLEFLOW_TEST_WORKERS processes (default 3,
# pytest-xdist, a test file per process at a time: each process starts its own servers on
# free ports; many tests wait on servers, intervals and outages, and a third process fills
# those waits: on 2 cores the integration suite took 31 min against 42 with 2 processes,
# same host, same day, docs/performance.md). Extra args go to pytest
# (`TABLEFLOW_TEST_WORKERS=0`: one process, as pytest alone).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$repo/scripts/bootstrap.sh" test
cd "$repo"

echo "== ruff check";   .venv/bin/ruff check .
echo "== ruff format";  .venv/bin/ruff format --check .
echo "== mypy";         .venv/bin/mypy
echo "== pytest";       .venv/bin/python -m pytest -n "${TABLEFLOW_TEST_WORKERS:-3}" --dist loadfile "$@"
