#!/usr/bin/env bash
# Runs the end-to-end suite in a real single-node cluster on this machine, from nothing:
#   deps (apt + gcsfuse) -> kubernetes build (cached per version) -> images -> cluster up ->
#   deploy the driver -> go test ./test/e2e -> cluster down (always, by trap)
# and prints each phase's duration. Exit code: the tests' (or the first failing phase's).
#
# Env: K8S_VERSION (default 1.34.4; 1.37.2 and 1.28.15 also supported: on 1.28 the webhook
#      injects legacy sidecars only and the native subtests skip, naming the kubelet version,
#      and deploy.sh leaves out the ValidatingAdmissionPolicy), CONTAINERD (default 2: containerd
#      $CONTAINERD_VERSION built from its module; 1.6: Debian's), ETCD_VERSION (default: the one
#      K8S_VERSION pins, etcd_version_for in lib.sh), E2E_RUN (go test -run regexp),
#      E2E_PARALLEL (default 4), E2E_TIMEOUT (go test's -timeout, default 30m),
#      E2E_KEEP_CLUSTER=1 (skip the final cluster-down),
#      UPGRADE_FROM=previous (install the previous release, hack/previous-release.sh, for
#      TestUpgradeFromPreviousRelease, which upgrades it to this tree), E2E_UNINSTALL=1 (after
#      the tests, helm uninstall and check the node: hack/uninstall-check.sh),
#      IMAGE_REPO, IMAGE_TAG (the images' names, built, imported and installed: default
#      gcsfuse-csi.local/<name>:e2e; TestImages checks the driver runs from them),
#      E2E_GCSFUSE_ITESTS=1 (with E2E_CONFORMANCE: gcsfuse's own integration tests through
#      pods' volumes beside the storage suites, judged by the reference standalone run:
#      hack/gcsfuse-itests.sh compare-cluster), E2E_CONFORMANCE=1 (after the tests, Kubernetes' storage e2e suite against the driver:
#      hack/conformance.sh, its binaries built in the background while the tests run; =only
#      runs it instead of the tests), E2E_PREBUILD_PREVIOUS=1 (build the previous release's
#      images in the background too, for a later UPGRADE_FROM=previous run),
#      E2E_FROM_RELEASE=1 (install the driver from release artifacts built by hack/release.sh
#      for this machine's platform, its packaged chart and imported OCI archives, instead of
#      the source tree: IMAGE_TAG must then be the chart's version, vX.Y.Z[-suffix];
#      TestImages checks the images run pinned by the chart's digests),
#      E2E_LOCK_TAKEN=FILE (written once this run's background builds hold the heavy-build
#      lock, or at once when it has none: hack/test.sh's checks wait for it),
#      GCSFUSE_CSI_CACHE (default /var/cache/gcsfuse-csi), CI_RECORDS=FILE (append this run's
#      cluster, phases and test counts to FILE, as hack/test.sh's CI_MARKDOWN has it do:
#      ci_record in lib.sh).
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/cluster-lib.sh"
hack=$REPO_ROOT/hack

# The release artifacts of E2E_FROM_RELEASE=1 (release_build).
release_dir=$CLUSTER_DIR/release
if [ "${E2E_FROM_RELEASE:-}" = 1 ] && ! [[ $IMAGE_TAG =~ ^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]]; then
  echo "E2E_FROM_RELEASE=1: IMAGE_TAG=$IMAGE_TAG is not a release version, vX.Y.Z[-suffix] with the chart's X.Y.Z (deploy/chart/gcsfuse-csi/Chart.yaml)" >&2
  exit 2
fi
if [ "${E2E_FROM_RELEASE:-}" = 1 ] && { [ "${DEPLOY_WITH:-helm}" != helm ] || [ -n "${UPGRADE_FROM:-}" ]; }; then
  echo "E2E_FROM_RELEASE=1 installs the packaged chart: not with DEPLOY_WITH=${DEPLOY_WITH:-helm} or UPGRADE_FROM=${UPGRADE_FROM:-}" >&2
  exit 2
fi
containerd_name=$([ "$CONTAINERD" = 1.6 ] && echo "1.6 (Debian)" || echo "v$CONTAINERD_VERSION")
ci_record e2e "v$K8S_VERSION" "$containerd_name"
phases=()
phase() { # NAME CMD...: run one phase, timed
  local name=$1 start rc=0 ms
  shift
  start=$(date +%s%N)
  step "phase $name"
  "$@" || rc=$?
  ms=$(( ($(date +%s%N) - start) / 1000000 ))
  phases+=("$(printf '%-14s %8.1f s  rc=%d' "$name" "${ms}e-3" "$rc")")
  ci_record phase "$name" "$ms" "$rc"
  return "$rc"
}
summary() {
  echo
  echo "=== e2e phases (kubernetes v$K8S_VERSION, containerd $containerd_name)"
  printf '    %s\n' "${phases[@]}"
}
finish() {
  local rc=$?
  # The clean-up ignores INT and TERM, and so do the commands it runs: CI's budget guard
  # (budget_run, lib.sh) TERMs this script's whole process group, and one that arrived while
  # cluster-down ran killed it halfway (a cold run of f29b001 left the containerd shims and
  # six kubelet mounts behind). The guard's KILL, CI_BUDGET_GRACE later, still ends it; a
  # Ctrl-C during the clean-up does nothing (a second terminal's kill -KILL does).
  trap '' INT TERM
  background_stop "$prebuild_pid"
  background_stop "$previous_pid"
  background_stop "$tests_pid"
  background_stop "$beside_pid"
  if [ "${E2E_KEEP_CLUSTER:-}" = 1 ]; then
    echo "E2E_KEEP_CLUSTER=1: cluster left running; stop it with hack/cluster-down.sh"
  else
    phase cluster-down "$hack/cluster-down.sh" || true
  fi
  summary
  exit "$rc"
}
prebuild_pid=
previous_pid=
# The tests and the storage suites beside them (tests_with_storage_beside): process groups of
# their own (set -m), which finish stops with everything under them.
tests_pid=
beside_pid=
trap finish EXIT

# Builds the later stages need, run in the background while this one's cluster starts and its
# tests run: the tests leave the cores ~90% idle warm (vmstat during a run), the builds are
# ~6 min of CPU cold (storage-e2e.test and agnhost for the storage suites, gcsfuse's test
# binaries, the previous release's images for the upgrade run; all cached, so nothing warm).
# At nice 19 the cluster's processes, started by this script at nice 0, come first. The builds
# hold the heavy-build lock (lib.sh): the storage suites' and gcsfuse's test builds from first
# to last, then the previous release's, which asks for it a second later. E2E_LOCK_TAKEN=FILE
# is written once the last of them holds it: hack/test.sh's checks (hack/checks.sh, beside
# this run, under the same lock) wait for it, so that they queue behind these builds, which
# this run needs sooner, rather than slow them down.
prebuild_start() {
  local builds="" script="" taken=""
  [ -n "${E2E_LOCK_TAKEN:-}" ] && taken="touch '$E2E_LOCK_TAKEN' && "
  [ -n "${E2E_CONFORMANCE:-}" ] && builds+="'$hack/conformance-build.sh' && "
  [ "${E2E_GCSFUSE_ITESTS:-}" = 1 ] && builds+="'$hack/gcsfuse-itests.sh' build && "
  # The lock's last holder writes E2E_LOCK_TAKEN: the previous release's build when there is one.
  local first_taken=$taken last_taken=""
  if [ "${E2E_PREBUILD_PREVIOUS:-}" = 1 ]; then first_taken="" last_taken=$taken; fi
  if [ -n "$builds" ]; then
    script+="flock -w $HEAVY_LOCK_WAIT $HEAVY_LOCK env GCSFUSE_HEAVY_LOCKED=1 bash -c \"${first_taken}${builds}true\" && "
  elif [ -n "$first_taken" ]; then
    touch "$E2E_LOCK_TAKEN"
  fi
  script+=true
  step "prebuild at nice 19 in the background, log $CLUSTER_DIR/prebuild.log: ${script//\'/}"
  # A process group of its own, which finish stops with the go builds under it.
  background_start prebuild_pid "$CLUSTER_DIR/prebuild.log" "$script"
  # The previous release's images, for a later UPGRADE_FROM=previous run (build only: that run
  # imports them into its own cluster): a job of its own, under the lock a second after the
  # builds above ask for it (the storage suites need theirs sooner), waited for at the end of
  # this run, so that the storage suites never wait for it.
  if [ "${E2E_PREBUILD_PREVIOUS:-}" = 1 ]; then
    step "previous release at nice 19 in the background, after the builds above, log $CLUSTER_DIR/prebuild-previous.log"
    background_start previous_pid "$CLUSTER_DIR/prebuild-previous.log" \
      "sleep 1 && flock -w $HEAVY_LOCK_WAIT $HEAVY_LOCK bash -c \"${last_taken}PREVIOUS_RELEASE_IMPORT=0 '$hack/previous-release.sh'\""
  fi
}

# release_build: the release artifacts of this tree for this machine's platform (images and
# plugin; the other platforms' images are hack/checks.sh's TestReleasePush), as a team
# would build them to mirror: hack/release.sh, into $release_dir.
release_build() {
  local platform
  platform=linux/$(go env GOARCH)
  rm -rf "$release_dir" "$release_dir.oci"
  VERSION=$IMAGE_TAG IMAGE_REPO=$IMAGE_REPO DOWNLOAD_URL=https://downloads.example.test/gcsfuse-csi/$IMAGE_TAG \
    RELEASE_OUT=$release_dir RELEASE_PLATFORMS=$platform RELEASE_PLUGIN_PLATFORMS=$platform bash "$hack/release.sh"
}
# release_digests: name=digest,... of the release's images as its packaged chart pins them
# (values.yaml's images.<name>.digest), for TestImages; each must be the digest of the
# image deploy.sh imported under that name, which it checks first.
release_digests() {
  local tgz=$release_dir/gcsfuse-csi-${IMAGE_TAG#v}.tgz pins name digest imported list=()
  pins=$(tar -xzOf "$tgz" gcsfuse-csi/values.yaml | awk '
    /^images:/ { inside = 1; next }
    inside && /^[^ #]/ { inside = 0 }
    inside && /^  [a-z]+:[ \t]*$/ { name = $1; sub(/:$/, "", name) }
    inside && /^    digest:/ { d = $2; gsub(/"/, "", d); print name, d }')
  while read -r name digest; do
    imported=$(ctr -n k8s.io images ls | awk -v r="$IMAGE_REPO/$name:$IMAGE_TAG" '$1 == r { print $3 }')
    if [ "$imported" != "$digest" ]; then
      echo "the packaged chart pins $name at $digest; containerd holds $IMAGE_REPO/$name:$IMAGE_TAG at ${imported:-nothing}" >&2
      return 1
    fi
    list+=("$name=$digest")
  done <<<"$pins"
  (IFS=,; echo "${list[*]}")
}

run_tests() {
  local args=(-count=1 -v -timeout "${E2E_TIMEOUT:-30m}" -parallel "${E2E_PARALLEL:-4}")
  [ -n "${E2E_RUN:-}" ] && args+=(-run "$E2E_RUN")
  (
    cd "$REPO_ROOT" || exit 1
    helm_env=()
    if [ "${DEPLOY_WITH:-helm}" = helm ]; then
      helm_env=(E2E_HELM="$HELM_DIR/helm" E2E_HELM_CHART="$REPO_ROOT/deploy/chart/gcsfuse-csi")
    fi
    if [ "${E2E_FROM_RELEASE:-}" = 1 ]; then
      digests=$(release_digests) || exit 1
      helm_env=(E2E_HELM="$HELM_DIR/helm" E2E_HELM_CHART="$release_dir/gcsfuse-csi-${IMAGE_TAG#v}.tgz" E2E_IMAGE_DIGESTS="$digests")
    fi
    if [ "${UPGRADE_FROM:-}" = previous ]; then
      helm_env+=(E2E_PREVIOUS_RELEASE="$PREVIOUS_RELEASE" E2E_UPGRADE_CMD="bash $hack/deploy.sh")
    fi
    env "${helm_env[@]}" E2E_REQUIRE=1 E2E_IMAGE_REPO="$IMAGE_REPO" E2E_IMAGE_TAG="$IMAGE_TAG" E2E_KUBECONFIG="$KUBECONFIG" E2E_GCS_URL="http://$NODE_IP:14443" E2E_PROMETHEUS="$(command -v prometheus)" E2E_NETNS="/run/netns/$NETNS" E2E_NODE_SYSTEMCTL="$hack/node-systemctl.sh" E2E_KUBECTL="$K8S_BIN/kubectl" E2E_NODES="$NODES" go test "${args[@]}" ./test/e2e
  ) 2>&1 | tee "$CLUSTER_DIR/e2e-test.log"
  local rc=${PIPESTATUS[0]}
  ci_record_tests test "$CLUSTER_DIR/e2e-test.log"
  echo "=== test results:"
  grep -E '^\s*--- (PASS|FAIL|SKIP)' "$CLUSTER_DIR/e2e-test.log" || true
  # cluster-up checks the API server's watch cache at start; a lag that begins later in the
  # run (the etcd it talks to falling behind) fails the run too, naming the first lines.
  if grep -q "Too large resource version" "$LOGS/kube-apiserver.log" 2>/dev/null; then
    echo "kube-apiserver logged \"Too large resource version\" during the run: its watch cache fell behind etcd:" >&2
    grep -h "Too large resource version" "$LOGS/kube-apiserver.log" | head -3 | cut -c1-300 >&2
    [ "$rc" = 0 ] && rc=1
  fi
  # Pods the kubelet evicted (disk or memory short on the node) fail tests that say nothing of
  # why; name the resource and the pods, and fail the run even if every test passed.
  # Every node's kubelet (node 1's log, then those of hack/node-up.sh's nodes).
  local kubelet_logs=("$LOGS/kubelet.log" "$LOGS"/node[0-9]/kubelet.log)
  if grep -q "Eviction manager: must evict" "${kubelet_logs[@]}" 2>/dev/null; then
    echo "a kubelet evicted pods during the run (its node ran short of a resource; see disk_preflight in hack/cluster-lib.sh):" >&2
    grep -E "Eviction manager: (must evict|pod is evicted)" "${kubelet_logs[@]}" 2>/dev/null | head -6 | cut -c1-300 >&2
    [ "$rc" = 0 ] && rc=1
  fi
  return "$rc"
}

# tests_with_storage_beside: the tests (run_tests), and once their serial part is over (the
# first top-level test resumed from parallel(t) writes E2E_PARALLEL_STARTED; every test that
# stops a component, reads a node-wide total or restarts the kubelet is serial), the storage
# suites' shards and CONFORMANCE_ALONGSIDE beside the parallel tests (hack/conformance.sh
# CONFORMANCE_PART=beside, in the background: beside_pid). Both mostly wait on the cluster;
# one after the other they took ~590 + ~420 s. Returns the tests' result; a prebuild that
# failed fails it too (the storage suites then never start).
tests_with_storage_beside() {
  local started=$CLUSTER_DIR/parallel-started rc=0 prc=0 t0
  rm -f "$started"
  t0=$(date +%s)
  set -m
  E2E_PARALLEL_STARTED=$started run_tests &
  tests_pid=$!
  set +m
  # Bounded by the tests' own end (go test -timeout).
  while [ ! -e "$started" ] && kill -0 "$tests_pid" 2>/dev/null; do sleep 1; done
  if [ -n "$prebuild_pid" ]; then
    background_wait_var prebuild_pid "$CLUSTER_DIR/prebuild.log" prebuild || prc=$?
  fi
  if [ "$prc" = 0 ]; then
    step "the storage suites beside the parallel tests from $(( $(date +%s) - t0 )) s into the tests ($([ -e "$started" ] && echo "the serial tests are over" || echo "no parallel test ran")): hack/conformance.sh CONFORMANCE_PART=beside, log $CLUSTER_DIR/conformance-beside.log"
    set -m
    CONFORMANCE_PART=beside "$hack/conformance.sh" >"$CLUSTER_DIR/conformance-beside.log" 2>&1 &
    beside_pid=$!
    set +m
  fi
  wait "$tests_pid" || rc=$?
  tests_pid=
  [ "$rc" = 0 ] && rc=$prc
  return "$rc"
}
# conformance_after_tests: waits for the storage suites' part beside the tests, prints it,
# then runs their disruptive tests and the report (CONFORMANCE_PART=disruptive).
conformance_after_tests() {
  local rc=0
  [ -n "$beside_pid" ] || { echo "the storage suites did not start beside the tests" >&2; return 1; }
  wait "$beside_pid" || rc=$?
  beside_pid=
  cat "$CLUSTER_DIR/conformance-beside.log"
  [ "$rc" = 0 ] || { echo "hack/conformance.sh CONFORMANCE_PART=beside failed (rc=$rc)" >&2; return "$rc"; }
  CONFORMANCE_PART=disruptive "$hack/conformance.sh"
}

mkdir -p "$CLUSTER_DIR"
phase deps bash -c "'$hack/install-deps.sh' && '$hack/cluster-deps.sh'"
phase k8s-build "$hack/k8s-build.sh"
if [ "${E2E_CONFORMANCE:-}" = only ]; then
  phase storage-e2e-build "$hack/conformance-build.sh"
elif [ -n "${E2E_CONFORMANCE:-}" ] || [ "${E2E_PREBUILD_PREVIOUS:-}" = 1 ]; then
  prebuild_start
elif [ -n "${E2E_LOCK_TAKEN:-}" ]; then
  touch "$E2E_LOCK_TAKEN"
fi
phase images "$hack/images.sh"
if [ "${E2E_FROM_RELEASE:-}" = 1 ]; then phase release release_build; fi
phase cluster-up "$hack/cluster-up.sh"
if [ "${UPGRADE_FROM:-}" = previous ]; then
  # The upgrade run: the previous release is installed, the test upgrades it to this tree
  # with hack/deploy.sh (TestUpgradeFromPreviousRelease).
  phase previous-release "$hack/previous-release.sh"
  phase deploy env DEPLOY_RELEASE=previous "$hack/deploy.sh"
elif [ "${E2E_FROM_RELEASE:-}" = 1 ]; then
  phase deploy env DEPLOY_RELEASE_DIR="$release_dir" RELEASE_VERSION="$IMAGE_TAG" RELEASE_REPO="$IMAGE_REPO" "$hack/deploy.sh"
else
  phase deploy "$hack/deploy.sh"
fi
# With E2E_GCSFUSE_ITESTS=1, gcsfuse's integration tests run through pods' volumes while
# the storage suites' shards run (both mostly wait on the cluster), then are judged by the
# reference standalone run kept in the repository, the suspect suites run standalone
# again (hack/gcsfuse-itests.sh compare-cluster): a test that passes standalone and fails
# through the driver fails the run.
if [ -n "${E2E_CONFORMANCE:-}" ] && [ "${E2E_GCSFUSE_ITESTS:-}" = 1 ]; then
  export CONFORMANCE_ALONGSIDE="'$hack/gcsfuse-itests.sh' cluster"
fi
if [ -n "${E2E_CONFORMANCE:-}" ] && [ "$E2E_CONFORMANCE" != only ]; then
  # The tests, and beside their parallel part the storage suites' shards and gcsfuse's
  # integration tests (tests_with_storage_beside); then the disruptive storage tests, alone.
  phase test tests_with_storage_beside
  phase conformance conformance_after_tests
else
  if [ "${E2E_CONFORMANCE:-}" != only ]; then phase test run_tests; fi
  if [ -n "$prebuild_pid" ]; then phase prebuild-wait background_wait_var prebuild_pid "$CLUSTER_DIR/prebuild.log" prebuild; fi
  if [ -n "${E2E_CONFORMANCE:-}" ]; then phase conformance "$hack/conformance.sh"; fi
fi
if [ -n "${E2E_CONFORMANCE:-}" ]; then
  ci_record_suite conformance "${CONFORMANCE_OUT:-$GCSFUSE_CSI_CACHE/conformance}/table.md"
  if [ "${E2E_GCSFUSE_ITESTS:-}" = 1 ]; then
    phase gcsfuse-itests-compare "$hack/gcsfuse-itests.sh" compare-cluster "$GCSFUSE_CSI_CACHE/gcsfuse-itests/results/cluster.json"
  fi
fi
# Uninstalling leaves nothing on the node (hack/uninstall-check.sh): after the tests, whose
# pods are gone by then.
if [ "${E2E_UNINSTALL:-}" = 1 ]; then phase uninstall "$hack/uninstall-check.sh"; fi
if [ -n "$previous_pid" ]; then phase previous-wait background_wait_var previous_pid "$CLUSTER_DIR/prebuild-previous.log" "the previous release's build"; fi
