#!/usr/bin/env bash
# The chaos soak (test/e2e's TestChaosSoak) on a fresh local cluster of two nodes, a
# benchmark that prints and exits 1 on a loss: hack/chaos.sh [DURATION] (a Go duration,
# default 10m; CI's polling run soaks e2econfig.CIChaos). For that long, Jobs of every mode on
# both nodes write while a fault strikes every few seconds (gcsfuse, a sidecar, the shared
# mounter and the node plugin killed; a webhook replica and the controller deleted; a
# kubelet restarted; node 2 drained and uncordoned; the backend's 503s, dropped connections
# and late answers). It prints a table per fault (pods running at it, Succeeded, failed
# loudly, lost, hung) and the totals, then checks nothing is left once the Jobs are deleted.
# CHAOS_MARKDOWN=FILE also writes the table as docs/performance.md's generated block (chaos):
# go run ./hack/readme -file docs/performance.md < FILE. Everything else as hack/e2e.sh
# (E2E_KEEP_CLUSTER=1 keeps the cluster).
set -euo pipefail
duration=${1:-10m}
if [ -n "${CHAOS_MARKDOWN:-}" ]; then
  # go test runs in test/e2e: the path must not be relative.
  E2E_CHAOS_MARKDOWN=$(realpath -m "$CHAOS_MARKDOWN")
  export E2E_CHAOS_MARKDOWN
fi
NODES=2 E2E_CHAOS="$duration" E2E_RUN='^TestChaosSoak$' exec bash "$(dirname "$(readlink -f "$0")")/e2e.sh"
