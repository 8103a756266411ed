#!/usr/bin/env bash
# Cluster demo: brings the local cluster up (building what is missing), deploys the driver,
# runs an Airflow-style pod (restartPolicy Never, writes a result file to the bucket, exits)
# and a Job, each with a native and a legacy sidecar and without any volume for comparison,
# prints a table (create -> app running, app exit -> pod/Job done, objects in the bucket),
# and takes the cluster down again. The demo itself is TestDemo in test/e2e/demo_test.go,
# run through the same phases as hack/e2e.sh.
# Env: as hack/e2e.sh (K8S_VERSION, E2E_KEEP_CLUSTER=1 to keep the cluster afterwards).
export E2E_DEMO=1 E2E_RUN='^TestDemo$'
exec "$(dirname "$0")/e2e.sh"
