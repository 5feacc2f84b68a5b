#!/usr/bin/env bash
# Create .venv and install tableflow; a no-op when up to date. Sourced by scripts/demo.sh
# and scripts/test.sh, each with what it needs:
#   demo  tableflow and what it runs (no test tools, no great-expectations, no browser)
#   test  (the default) also the test tools (`.[dev]`, great-expectations among them),
#         Debian's chromium for the docs-site test, and Debian's prometheus (the server and
#         promtool) for the metrics and alert-rule tests
# TABLEFLOW_BOOTSTRAP_DRY_RUN=1: print what a fresh machine would get installed, and exit.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"

install_profile="${1:-test}"
case "$install_profile" in
  demo) pip_target="."; want_browser=no ;;
  test) pip_target=".[dev]"; want_browser=yes ;;
  *) echo "scripts/bootstrap.sh: unknown profile '$install_profile' (demo or test)" >&2; exit 2 ;;
esac

if [ -n "${TABLEFLOW_BOOTSTRAP_DRY_RUN:-}" ]; then
  echo "profile: $install_profile"
  echo "apt-get install openjdk-17-jre-headless   (when java is missing)"
  [ "$want_browser" = yes ] && echo "apt-get install chromium   (when chromium is missing)"
  [ "$want_browser" = yes ] && echo "apt-get install prometheus   (when promtool is missing)"
  echo "python3.11 -m venv .venv"
  echo "pip install -e '$pip_target'"
  exit 0
fi

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
if [ "$want_browser" = yes ] && ! command -v chromium >/dev/null 2>&1 \
    && [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  echo "Installing chromium (headless browser for the docs-site test)..."
  if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null 2>&1; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  fi
fi

# The metrics tests scrape `tableflow run` with a real Prometheus server and check the
# shipped alert rules with promtool (docs/observability.md). Debian's package starts its
# own service on install: the tests never use it (they start their own on loopback).
if [ "$want_browser" = yes ] && ! command -v promtool >/dev/null 2>&1 \
    && [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  echo "Installing prometheus (server and promtool for the metrics tests)..."
  if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus >/dev/null 2>&1; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus >/dev/null
  fi
fi

if [ ! -x .venv/bin/python ]; then
  "$python_bin" -m venv .venv
fi
# The stamp holds the pyproject's hash and the profile installed; a test install covers
# the demo's needs, not the other way round.
stamp=.venv/.tableflow-install-stamp
wanted="$(sha256sum pyproject.toml | cut -d' ' -f1)"
installed="$(cat "$stamp" 2>/dev/null || true)"
if [ "$installed" != "$wanted test" ] && [ "$installed" != "$wanted $install_profile" ]; then
  echo "Installing tableflow ($install_profile) into .venv (log: .venv/install.log) ..."
  if ! { .venv/bin/python -m pip install --upgrade pip && .venv/bin/python -m pip install -e "$pip_target"; } \
      > .venv/install.log 2>&1; then
    tail -n 40 .venv/install.log >&2
    echo "Installing failed; the whole log is in .venv/install.log" >&2
    exit 1
  fi
  echo "$wanted $install_profile" > "$stamp"
fi
