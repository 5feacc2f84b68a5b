#!/usr/bin/env bash
# The main job: the example project end to end on the local stack.
#   dev stack up (broker, registry, S3 server, catalog) -> sample orders produced -> plan
#   -> apply -> query through the catalog.
# Ports can be moved with TABLEFLOW_KAFKA_PORT / TABLEFLOW_REGISTRY_PORT / TABLEFLOW_CATALOG_PORT /
# TABLEFLOW_S3_PORT; the tables are written to the stack's S3 server (s3proxy).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$repo/scripts/bootstrap.sh" demo
cd "$repo"
tf() { .venv/bin/tableflow "$@"; }

count="${TABLEFLOW_DEMO_RECORDS:-100000}"
echo "== tableflow dev up";                      tf dev up
echo "== tableflow dev produce orders ($count)"; tf dev produce orders --count "$count"
echo "== tableflow plan";                        tf plan
echo "== tableflow apply";                       tf apply --auto-approve
echo "== tableflow plan (nothing left to do)";   tf plan
echo "== query through the catalog (DuckDB)"
tf query "SELECT status, count(*) AS orders, sum(amount) AS revenue FROM shop.orders GROUP BY status ORDER BY status"
echo
echo "The stack keeps running (tableflow dev status); stop it with: .venv/bin/tableflow dev down"
