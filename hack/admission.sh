#!/usr/bin/env bash
# What the webhook costs the admission of pods that are not the driver's, on a cluster full of
# another driver's volumes: on the local cluster (built, started and deployed as hack/e2e.sh
# does; every phase cached and idempotent, so this runs from a clean clone), go run
# ./hack/admission (its doc comment says the whole of it) makes ADMISSION_PVS PersistentVolumes
# of another driver (default 10000) and ADMISSION_CLAIMS pending claims of a no-provisioner
# class (default 200), then times server-side dry-run creates of pods without a claim, with
# one of those claims, with a claim made just before, and with a claim of the driver, and
# prints n, p50, p90, p99, max and the API server's reads per admission. A benchmark: not run
# by CI; ~5 min warm. Everything it made is deleted at the end.
#
# Env: ADMISSION_PVS, ADMISSION_CLAIMS, ADMISSION_N (samples per case, default 200),
#      ADMISSION_FRESH (samples of the new-claim case, default 40), ADMISSION_KEEP_CLUSTER=1
#      (leave the cluster running; default: down at the end), and K8S_VERSION / CONTAINERD /
#      GCSFUSE_CSI_CACHE as for hack/e2e.sh and hack/cluster-up.sh.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/cluster-lib.sh"

trap 'cluster_down_unless_kept ADMISSION_KEEP_CLUSTER' EXIT

step "cluster (deps, kubernetes build, images, cluster up, deploy: cached after the first run)"
cluster_ready

step "admission: ${ADMISSION_PVS:-10000} PersistentVolumes of another driver, ${ADMISSION_CLAIMS:-200} pending claims"
cd "$REPO_ROOT"
go run ./hack/admission -kubeconfig "$KUBECONFIG" -pvs "${ADMISSION_PVS:-10000}" -claims "${ADMISSION_CLAIMS:-200}" \
  -n "${ADMISSION_N:-200}" -fresh "${ADMISSION_FRESH:-40}"
