#!/usr/bin/env bash
# The main job: the example project end to end on the local stack.
#   dev stack up -> sample orders produced -> plan -> apply -> query through the catalog.
# The stack (Apache Kafka, registry, catalog, S3) runs on ports chosen once for this checkout
# and kept in .tableflow/dev/stack.json; `tableflow dev status` shows them.
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
