#!/usr/bin/env bash
# PostgreSQL 15 for the change data capture tests and benchmark (docs/cdc.md): Debian's
# postgresql-15 package, and its `postgres` system user, which the servers run as when
# tests run as root (PostgreSQL refuses root). Idempotent; needs root only to install.
# The package's own cluster service is not used: tests/support/postgres.py runs a
# private cluster from a folder of its own on 127.0.0.1.
set -euo pipefail
BIN=/usr/lib/postgresql/15/bin
if [ ! -x "$BIN/postgres" ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "PostgreSQL 15 is missing: run this script as root (apt-get install postgresql-15)" >&2
    exit 1
  fi
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends postgresql-15
fi
if ! id postgres >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then
    adduser --system --group --home /var/lib/postgresql --no-create-home postgres
  else
    echo "note: no 'postgres' system user; the servers run as $(id -un)" >&2
  fi
fi
"$BIN/postgres" --version
