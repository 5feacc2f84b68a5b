#!/usr/bin/env bash
# Create .venv and install tableflow with its dev tools; a no-op when up to date.
# Sourced by scripts/demo.sh and scripts/test.sh.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"

python_bin="${PYTHON:-python3}"
if ! "$python_bin" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' 2>/dev/null; then
  if command -v python3.11 >/dev/null 2>&1; then python_bin=python3.11; else
    echo "tableflow needs Python 3.11 (found: $("$python_bin" --version 2>&1))" >&2; exit 1
  fi
fi

# Spark needs a JVM (17). Install it from Debian's packages when we can.
if ! command -v java >/dev/null 2>&1; then
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    echo "Installing OpenJDK 17 (needed by Spark)..."
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jre-headless >/dev/null
  else
    echo "tableflow apply needs Java 17 on PATH (e.g. apt-get install openjdk-17-jre-headless)" >&2; exit 1
  fi
fi

# The docs-site test looks at `tableflow docs generate` in a real headless browser.
# Debian's chromium: ~33 s to install here (apt-get install, package lists already fetched).
if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  echo "Installing chromium (headless browser for the docs-site test)..."
  if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null 2>&1; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  fi
fi

if [ ! -x .venv/bin/python ]; then
  "$python_bin" -m venv .venv
fi
stamp=.venv/.tableflow-install-stamp
wanted="$(sha256sum pyproject.toml | cut -d' ' -f1)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$wanted" ]; then
  echo "Installing tableflow and its dependencies into .venv (log: .venv/install.log) ..."
  if ! { .venv/bin/python -m pip install --upgrade pip && .venv/bin/python -m pip install -e ".[dev]"; } \
      > .venv/install.log 2>&1; then
    tail -n 40 .venv/install.log >&2
    echo "Installing failed; the whole log is in .venv/install.log" >&2
    exit 1
  fi
  echo "$wanted" > "$stamp"
fi
