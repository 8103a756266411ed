#!/usr/bin/env bash
# Cluster demo: brings the local cluster up (building what is missing), deploys the driver,
# runs an Airflow-style pod (restartPolicy Never, writes a result file to the bucket, exits)
# and a Job, each with a native and a legacy sidecar, in the shared mount mode (the first pod
# of a key on the node, and a pod joining a running key), and without any volume for comparison,
# prints a table (create -> app running, app exit -> pod/Job done, objects in the bucket),
# and takes the cluster down again. The demo itself is TestDemo in test/e2e/demo_test.go,
# run through the same phases as hack/e2e.sh.
# Env: as hack/e2e.sh (K8S_VERSION, E2E_KEEP_CLUSTER=1 to keep the cluster afterwards);
# DEMO_MARKDOWN=FILE also writes the table as docs/performance.md's generated block of that
# Kubernetes version (demo-cluster-1.34...): go run ./hack/readme -file docs/performance.md < FILE.
export E2E_DEMO=1 E2E_RUN='^TestDemo$'
if [ -n "${DEMO_MARKDOWN:-}" ]; then
  # go test runs in test/e2e: the path must not be relative.
  E2E_DEMO_MARKDOWN=$(realpath -m "$DEMO_MARKDOWN")
  export E2E_DEMO_MARKDOWN
fi
exec "$(dirname "$0")/e2e.sh"
