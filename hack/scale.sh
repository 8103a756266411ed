#!/usr/bin/env bash
# A node full of pods, measured: on the local single-node cluster (built and started as
# hack/e2e.sh does, every phase cached and idempotent, so this runs from a clean clone), starts
# SCALE_N pods (default 100) with two gcsfuse volumes each at once, each writing a little to
# both and exiting, after a twin run of the same pods without volumes, and prints a table:
# pod created -> app start and app exit -> pod Succeeded (p50/p99, against the twin),
# webhook admission p99, NodePublishVolume p99, NodePublishVolume -> gcsfuse serving p99,
# node plugin peak RSS and CPU seconds, gcsfuse and sidecar RSS; then the leaks once the pods
# are gone (mounts, gcsfuse processes, sockets, exit files: must be 0, else exit 1).
# The latencies inside the components come from their debug logs (deploy/overlays/local runs
# the node plugin with -v and the webhook at debug level) and the node plugin's metrics.
# All traffic goes to the API server and the emulator on the cluster's veth (cluster-lib.sh);
# every request loop in hack/scale is bounded in count and time.
#
# Env: SCALE_N (default 100), SCALE_BYTES (per volume, default 65536), SCALE_TIMEOUT (per
#      run, default 10m), SCALE_KEEP_CLUSTER=1 (leave the cluster running; default: down at
#      the end), and K8S_VERSION / CONTAINERD / GCSFUSE_CSI_CACHE as for hack/e2e.sh.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/cluster-lib.sh"
hack=$REPO_ROOT/hack

finish() {
  local rc=$?
  if [ "${SCALE_KEEP_CLUSTER:-}" = 1 ]; then
    echo "SCALE_KEEP_CLUSTER=1: cluster left running; stop it with hack/cluster-down.sh"
  else
    "$hack/cluster-down.sh" || true
  fi
  exit "$rc"
}
trap finish EXIT

step "cluster (deps, kubernetes build, images, cluster up, deploy: cached after the first run)"
"$hack/install-deps.sh"
"$hack/cluster-deps.sh"
"$hack/k8s-build.sh"
"$hack/images.sh"
"$hack/cluster-up.sh"
"$hack/deploy.sh"

step "storm: ${SCALE_N:-100} pods x 2 volumes"
cd "$REPO_ROOT"
go run ./hack/scale -kubeconfig "$KUBECONFIG" -gcs-url "http://$NODE_IP:14443" -workload-image "$IMAGE_REPO/workload:$IMAGE_TAG" \
  -n "${SCALE_N:-100}" -bytes "${SCALE_BYTES:-65536}" -timeout "${SCALE_TIMEOUT:-10m}"
