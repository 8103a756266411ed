#!/usr/bin/env bash
# The node plugin at the kubelet's limits, measured: on the local single-node cluster (built
# and started as hack/e2e.sh does, every phase cached and idempotent, so this runs from a clean
# clone), go run ./hack/scale (its doc comment says the whole of it):
#   - fills the node: SCALE_N pods per run, by default the node's allocatable pods (the
#     kubelet's maxPods, MAX_PODS of cluster-up.sh, 250) minus the pods already on it (the node
#     plugin, the webhook's 2 replicas, the emulator: 246 on the default cluster); half of them
#     with two gcsfuse volumes, half with one, each writing SCALE_BYTES to each and exiting;
#   - burst: all at once; waves: the same again in waves of SCALE_WAVES pods, SCALE_WAVE_GAP
#     apart; each run after a twin run of the same pods with emptyDirs for volumes;
#   - shared: SCALE_SHARED_PODS pods (default 50; 0 skips) of one key of the shared mount mode,
#     each reading one SCALE_SHARED_BYTES object (default 8 MiB) through a file cache and
#     staying, against a twin with emptyDirs: the driver's memory per more pod, the key's
#     gcsfuse RSS, and whether later pods' reads reach the bucket (they must not);
#   - soak: SCALE_JOBS Jobs of one pod each (one volume, SCALE_JOB_BYTES), SCALE_JOBS_PARALLEL
#     at a time, back to back;
# checks that every pod and Job succeeded and every object is in the emulator with its bytes,
# and prints tables: pod created -> app start and app exit -> pod Succeeded against the twin
# (the sidecar's share), admission (webhook log, API server histogram), NodePublishVolume ->
# gcsfuse serving, node plugin peak RSS and CPU per pod (this host's samples, and a real
# Prometheus scraping it with deploy/monitoring/prometheus-scrape.yaml), gcsfuse and sidecar RSS, Jobs per
# minute and Job created -> Complete; then, once everything is gone and the node has settled,
# the leaks, before vs after: driver mounts, gcsfuse and sidecar processes, hand-off and
# metrics sockets, exit files, offer records, pod directories, node plugin goroutines
# (tolerance 5), open fds and published volumes, inotify instances per uid. Exit 1 on any
# leak or loss. A benchmark: not run by CI. ~40-60 min on 2 cores with the defaults, warm.
# The latencies inside the components come from their debug logs (deploy/overlays/local runs
# the node plugin with -v and the webhook at debug level) and their metrics; the node
# plugin's through the API server's pod proxy. All traffic goes to the API server and the
# emulator on the cluster's veth (cluster-lib.sh; hack/scale refuses any other address);
# every loop and wait in hack/scale is bounded in count and time.
#
# Env: SCALE_N (pods per run; default empty: fill the node), SCALE_BYTES (per volume, default
#      65536), SCALE_WAVES (pods per wave, default 25; 0: no wave run), SCALE_WAVE_GAP
#      (default 5s), SCALE_JOBS (default 1000; 0: no soak), SCALE_JOBS_PARALLEL (default 20),
#      SCALE_JOB_BYTES (default 4096), SCALE_TIMEOUT (per run, default 20m),
#      SCALE_SOAK_TIMEOUT (default 90m), SCALE_SETTLE (bound of the wait before the leaks are
#      counted, default 2m), SCALE_KEEP_CLUSTER=1 (leave the cluster running; default: down
#      at the end), SCALE_MARKDOWN=FILE (also write the figures as docs/performance.md's generated
#      block "scale"; then go run ./hack/readme -file docs/performance.md < FILE), and K8S_VERSION / CONTAINERD / MAX_PODS / GCSFUSE_CSI_CACHE as for
#      hack/e2e.sh and hack/cluster-up.sh.
# Resolved before anything changes directory: a relative SCALE_MARKDOWN is the caller's.
markdown=${SCALE_MARKDOWN:+$(realpath -m "$SCALE_MARKDOWN")}
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/cluster-lib.sh"
hack=$REPO_ROOT/hack

trap 'cluster_down_unless_kept SCALE_KEEP_CLUSTER' EXIT

step "cluster (deps, kubernetes build, images, cluster up, deploy: cached after the first run)"
cluster_ready

step "scale: ${SCALE_N:-a node full of} pods per run (burst, waves of ${SCALE_WAVES:-25}), ${SCALE_JOBS:-1000} Jobs"
cd "$REPO_ROOT"
go run ./hack/scale -kubeconfig "$KUBECONFIG" -gcs-url "http://$NODE_IP:14443" -workload-image "$IMAGE_REPO/workload:$IMAGE_TAG" \
  -n "${SCALE_N:-0}" -bytes "${SCALE_BYTES:-65536}" -wave "${SCALE_WAVES:-25}" -wave-gap "${SCALE_WAVE_GAP:-5s}" \
  -jobs "${SCALE_JOBS:-1000}" -jobs-parallel "${SCALE_JOBS_PARALLEL:-20}" -job-bytes "${SCALE_JOB_BYTES:-4096}" \
  -shared-pods "${SCALE_SHARED_PODS:-50}" -shared-bytes "${SCALE_SHARED_BYTES:-8388608}" \
  -timeout "${SCALE_TIMEOUT:-20m}" -soak-timeout "${SCALE_SOAK_TIMEOUT:-90m}" -settle "${SCALE_SETTLE:-2m}" \
  -prometheus "$(command -v prometheus)" -netns "/run/netns/$NETNS" -prometheus-listen "$NODE_IP:19091" \
  -scrape-config "$REPO_ROOT/deploy/monitoring/prometheus-scrape.yaml" -markdown "$markdown"
