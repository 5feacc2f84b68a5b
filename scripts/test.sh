#!/usr/bin/env bash
# The test command: lint, format check, type check, then the whole pytest suite: tests/unit
# (no process at all, seconds), then tests/integration against real components (broker,
# registry, catalog, Spark). Extra args go to pytest.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$repo/scripts/bootstrap.sh" test
cd "$repo"

echo "== ruff check";   .venv/bin/ruff check .
echo "== ruff format";  .venv/bin/ruff format --check .
echo "== mypy";         .venv/bin/mypy
echo "== pytest";       .venv/bin/python -m pytest "$@"
