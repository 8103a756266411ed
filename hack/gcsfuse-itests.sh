#!/usr/bin/env bash
# gcsfuse's own integration tests (tools/integration_tests of the pinned gcsfuse module, as
# released) against mounts backed by the project's GCS emulator, through
# test/gcsfuse-itests (its doc comment has the whole story). Issue 28, item 2.
#
#   hack/gcsfuse-itests.sh build                 # the test binaries, once (cached)
#   hack/gcsfuse-itests.sh list                  # the suites: package, mount options, -test.run
#   hack/gcsfuse-itests.sh flags [PKG|SUITE...]  # each suite's mountOptions, for a pod's volume
#   hack/gcsfuse-itests.sh standalone [SUITE...] # against gcsfuse itself (emulator in process)
#   hack/gcsfuse-itests.sh driver [SUITE...]     # through the node plugin and sidecar, no cluster
#   hack/gcsfuse-itests.sh cluster [SUITE...]    # through pods' volumes on the local cluster
#   hack/gcsfuse-itests.sh mounted -suite S -dir D -bucket B -emulator URL  # a mount you made
#   hack/gcsfuse-itests.sh compare STANDALONE.json MOUNTED.json  # exit 1 on a driver bug
#   hack/gcsfuse-itests.sh compare-cluster CLUSTER.json  # against the reference: exit 1 on a driver bug
#   hack/gcsfuse-itests.sh reference             # every suite standalone, kept as the reference
#
# The reference (test/gcsfuse-itests/testdata/reference-v<gcsfuse version>.json) is a
# standalone run of every default suite kept in the repository: compare-cluster judges a
# cluster run by it, and runs standalone again only the suites with a test that passed
# there and failed through a pod (the runner's suspects), then compares with that fresh run,
# and on a test that still passes standalone and fails through a pod runs those suites'
# pods once more: a driver bug fails twice. Refresh it (`reference`) when gcsfuse's version
# or the suites change; the runner's TestReferenceOfThePinnedGcsfuse fails until then.
#
# Results go to $GCSFUSE_CSI_CACHE/gcsfuse-itests/results/<mode>.json (RESULTS=FILE
# overrides; each run merges the suites it ran into it, a suite run again replacing its
# earlier results), logs to .../work/<mode>/<suite>/ (test.log,
# test.json, and gcsfuse.log standalone). The modes that mount need root and /dev/fuse;
# mounted needs the tests to reach the emulator from this host, and runs as root against a
# mount that must let root in (the driver's mounts carry allow_other).
#
# The binaries: `go test -c` of each package the runner lists (`packages`), in the gcsfuse
# module's own directory in the module cache (read only, its own go.mod and go.sum, with
# gcsfuse's toolchain, as upstream builds them), into
# $GCSFUSE_CSI_CACHE/gcsfuse-itests/tests-v<version>-<key>/ with upstream's test_config.yaml
# and test2json. The key is the gcsfuse version, its toolchain and the package list: what
# decides what is built (a change to the runner's other sources rebuilds the runner only,
# which `go build` caches). Built under the machine's heavy-build lock.
source "$(dirname "$0")/lib.sh"

ITEST_DIR=$GCSFUSE_CSI_CACHE/gcsfuse-itests
mkdir -p "$ITEST_DIR/bin"
runner=$ITEST_DIR/bin/gcsfuse-itests

build_runner() {
  (cd "$REPO_ROOT" && go build -o "$runner" ./test/gcsfuse-itests)
}

# tests_dir: the directory of the cached binaries for the current key.
tests_dir() {
  local key
  key=$(printf '%s\n' "$GCSFUSE_VERSION" "$GCSFUSE_TOOLCHAIN" "$("$runner" packages)" | sha256sum | cut -c1-12)
  echo "$ITEST_DIR/tests-v$GCSFUSE_VERSION-$key"
}

build_tests() {
  local dir mod pkgs p start
  dir=$(tests_dir)
  if [ -f "$dir/.built" ]; then
    step "gcsfuse $GCSFUSE_VERSION integration test binaries cached in $dir"
    return 0
  fi
  if [ -z "${GCSFUSE_HEAVY_LOCKED:-}" ]; then
    step "gcsfuse integration test binaries: waiting for the heavy-build lock"
    GCSFUSE_HEAVY_LOCKED=1 flock -w "$HEAVY_LOCK_WAIT" "$HEAVY_LOCK" "$0" build
    return
  fi
  mod=$(GOTOOLCHAIN=$GCSFUSE_TOOLCHAIN go mod download -json "github.com/googlecloudplatform/gcsfuse/v3@v$GCSFUSE_VERSION" | sed -n 's/^\s*"Dir": "\(.*\)",$/\1/p')
  [ -d "$mod/tools/integration_tests" ] || { echo "no tools/integration_tests in $mod" >&2; return 1; }
  pkgs=()
  for p in $("$runner" packages); do pkgs+=("./tools/integration_tests/$p"); done
  rm -rf "$ITEST_DIR"/tests-v*
  mkdir -p "$dir"
  step "go test -c ${#pkgs[@]} packages of gcsfuse v$GCSFUSE_VERSION ($GCSFUSE_TOOLCHAIN)"
  start=$(date +%s)
  # -s -w: a third smaller; stack traces and testify's Error Trace keep file:line (pclntab).
  (cd "$mod" && GOTOOLCHAIN=$GCSFUSE_TOOLCHAIN CGO_ENABLED=0 GOFLAGS=-mod=readonly \
    go test -c -ldflags "-s -w" -o "$dir/" "${pkgs[@]}")
  cp "$mod/tools/integration_tests/test_config.yaml" "$dir/"
  chmod u+w "$dir/test_config.yaml"
  GOTOOLCHAIN=local go build -o "$dir/test2json" cmd/test2json
  step "built in $(( $(date +%s) - start )) s ($(du -sh "$dir" | cut -f1))"
  touch "$dir/.built"
}

# run_mode MODE ARGS...: the runner in MODE with the cached binaries, results and logs.
run_mode() {
  local mode=$1 dir out work
  shift
  dir=$(tests_dir)
  out=${RESULTS:-$ITEST_DIR/results/$mode.json}
  work=${ITEST_WORK:-$ITEST_DIR/work/$mode}
  mkdir -p "$(dirname "$out")"
  # A standalone run that was killed may have left its mounts (under the work directory, its
  # own): the runner empties each suite's directory before it runs it, and refuses to while
  # something is mounted there.
  awk -v w="$work/" 'index($2, w) == 1 {print $2}' /proc/self/mounts | while read -r m; do
    step "unmounting $m, left by an earlier run"
    umount -l "$m"
  done
  local extra=()
  case $mode in
    standalone) extra=(-gcsfuse "$BIN/gcsfuse") ;;
    driver)
      (cd "$REPO_ROOT" && go build -o "$ITEST_DIR/bin/gcsfuse-sidecar" ./cmd/gcsfuse-sidecar)
      extra=(-sidecar "$ITEST_DIR/bin/gcsfuse-sidecar") ;;
  esac
  step "gcsfuse integration tests, $mode: results in $out, logs in $work"
  "$runner" "$mode" -bin "$dir" -test2json "$dir/test2json" -work "$work" -out "$out" "${extra[@]}" "$@"
}

# run_cluster [SUITE...]: each suite (the default set without arguments) through a pod's
# volume on the running local cluster (hack/cluster-up.sh, hack/deploy.sh): a fresh bucket in
# the cluster's emulator, a pod in namespace $CLUSTER_NS whose inline volume carries the
# suite's mountOptions (the webhook injects the sidecar, the node plugin mounts, gcsfuse
# serves in the pod), the mounted mode on the volume's host path, the pod deleted. Results
# go to results/cluster.json (CLUSTER_RESULTS). A pod that is not Ready within
# POD_READY_TIMEOUT fails the run, naming the suite.
#
# The suites in CLUSTER_EXCLUDE are left out of a run of every suite (named, they run): the
# standalone reference has them, the comparison says "suite not run mounted". list_large_dir
# is: the test's teardown deletes its 12,000 objects one by one, and fake-gcs-server's
# in-memory bucket scans every object on each delete (and insert) under the one lock all its
# clients share, so beside the e2e tests and the storage suites it outlasted its 10 minutes
# in two CI runs of three (2026-12-06 and 07), and the emulator answered everyone else late
# meanwhile; gcsfuse's own CI runs it against Cloud Storage, and the driver is not in a
# listing's path (the other suites list through pods).
# The suites in CLUSTER_SOLO run in a lane of their own beside the others (their results
# merged in after). The suites in CLUSTER_LATE run last (in the other lane beside a solo
# one): their 500 MiB uploads fail at close when the emulator is busy (suites.go), as it is
# while the storage suites' shards start beside the first suites.
CLUSTER_NS=gcsfuse-itests
CLUSTER_RESULTS=$ITEST_DIR/results/cluster.json
CLUSTER_EXCLUDE=${CLUSTER_EXCLUDE-list_large_dir}
CLUSTER_SOLO=${CLUSTER_SOLO-}
CLUSTER_LATE=${CLUSTER_LATE-read_large_files write_large_files}
POD_READY_TIMEOUT=120s

# cluster_suite N SUITE OPTIONS RESULTS: one suite through pod itest-N (gcs: the emulator).
cluster_suite() {
  local n=$1 suite=$2 opts=$3 results=$4 bucket pod uid rc=0
  bucket=itests-$n-$(date +%s%N | tail -c 7)
  pod=itest-$n
  curl -fsS --max-time 30 -X POST -H 'Content-Type: application/json' -d "{\"name\": \"$bucket\"}" \
    "$gcs/storage/v1/b?project=itests" >/dev/null
  step "$suite: pod $CLUSTER_NS/$pod, bucket $bucket, mountOptions $opts"
  kctl -n "$CLUSTER_NS" delete pod "$pod" --ignore-not-found --grace-period=0 --force >/dev/null 2>&1
  kctl -n "$CLUSTER_NS" apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata: {name: $pod}
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 5
  containers:
    - name: app
      image: $IMAGE_REPO/workload:$IMAGE_TAG
      imagePullPolicy: Never
      command: [/workload, pause]
      volumeMounts: [{name: data, mountPath: /data}]
  volumes:
    - name: data
      csi: {driver: gcsfuse.csi.storage, volumeAttributes: {bucketName: $bucket, mountOptions: "$opts"}}
EOF
  if ! kctl -n "$CLUSTER_NS" wait --for=condition=Ready "pod/$pod" --timeout="$POD_READY_TIMEOUT" >/dev/null; then
    echo "$suite: pod $pod not Ready in $POD_READY_TIMEOUT" >&2
    kctl -n "$CLUSTER_NS" describe pod "$pod" >&2 || true
    return 1
  fi
  uid=$(kctl -n "$CLUSTER_NS" get pod "$pod" -o jsonpath='{.metadata.uid}')
  RESULTS=$results run_mode mounted -suite "$suite" \
    -dir "/var/lib/kubelet/pods/$uid/volumes/kubernetes.io~csi/data/mount" -bucket "$bucket" -emulator "$gcs" || rc=1
  kctl -n "$CLUSTER_NS" delete pod "$pod" --wait=true --timeout=60s >/dev/null || rc=1
  return "$rc"
}

run_cluster() {
  source "$REPO_ROOT/hack/cluster-lib.sh"
  local gcs=${E2E_GCS_URL:-http://$NODE_IP:14443} line rc=0 n=0 lines=() solo=() rest=() solo_pid=""
  local solo_results=$ITEST_DIR/results/cluster-solo.json
  kctl create namespace "$CLUSTER_NS" --dry-run=client -o yaml | kctl apply -f - >/dev/null
  # Every suite: a fresh file; named suites (a rerun) replace their earlier results in it.
  [ $# = 0 ] && rm -f "$CLUSTER_RESULTS"
  mapfile -t lines < <("$runner" flags "$@")
  if [ $# = 0 ] && [ -n "$CLUSTER_EXCLUDE" ]; then
    local kept=()
    for line in "${lines[@]}"; do
      [[ " $CLUSTER_EXCLUDE " == *" ${line%%$'\t'*} "* ]] || kept+=("$line")
    done
    step "left out of the cluster run (CLUSTER_EXCLUDE; name one to run it): $CLUSTER_EXCLUDE"
    lines=("${kept[@]}")
  fi
  local late=()
  for line in "${lines[@]}"; do
    if [ ${#lines[@]} -gt 1 ] && [[ " $CLUSTER_SOLO " == *" ${line%%$'\t'*} "* ]]; then
      solo+=("$line")
    fi
  done
  for line in "${lines[@]}"; do
    if [ ${#solo[@]} -gt 0 ] && [[ " $CLUSTER_SOLO " == *" ${line%%$'\t'*} "* ]]; then
      continue
    elif [[ " $CLUSTER_LATE " == *" ${line%%$'\t'*} "* ]]; then
      late+=("$line")
    else
      rest+=("$line")
    fi
  done
  rest+=("${late[@]}")
  if [ ${#solo[@]} -gt 0 ]; then
    rm -f "$solo_results"
    step "in a lane of their own, beside the others: ${solo[*]%%$'\t'*}"
    # A work directory of its own: each runner writes its control plane's CA and
    # credentials there, which its tests read.
    (
      r=0 k=100
      for line in "${solo[@]}"; do
        k=$((k + 1))
        ITEST_WORK=$ITEST_DIR/work/mounted-solo cluster_suite "$k" "${line%%$'\t'*}" "${line#*$'\t'}" "$solo_results" || r=1
      done
      exit "$r"
    ) &
    solo_pid=$!
    trap 'kill "$solo_pid" 2>/dev/null; exit 143' INT TERM
  fi
  for line in "${rest[@]}"; do
    n=$((n + 1))
    cluster_suite "$n" "${line%%$'\t'*}" "${line#*$'\t'}" "$CLUSTER_RESULTS" || rc=1
  done
  if [ -n "$solo_pid" ]; then
    wait "$solo_pid" || rc=1
    trap - INT TERM
    if [ -f "$solo_results" ]; then
      "$runner" merge "$CLUSTER_RESULTS" "$solo_results" || rc=1
    fi
  fi
  return "$rc"
}

cmd=${1:-}
shift || true
case $cmd in
  list | flags | packages)
    build_runner
    exec "$runner" "$cmd" "$@" ;;
  compare)
    build_runner
    exec "$runner" compare "$@" ;;
  build)
    build_runner
    build_tests ;;
  cluster)
    build_runner
    build_tests
    run_cluster "$@" ;;
  compare-cluster)
    # CLUSTER.json: judged by the reference; the suspects run standalone now, compared;
    # on a test that passed standalone and failed through a pod, those suites' pods run
    # once more, then compared again. The emulator's resumable uploads fail by the
    # machine's load (suites.go: a 500 MiB file's close answered "stale file handle" under a
    # busy CI), on either side; a driver bug fails twice.
    [ $# = 1 ] || { echo "usage: $0 compare-cluster CLUSTER.json" >&2; exit 2; }
    cluster=$1
    CLUSTER_RESULTS=$cluster
    build_runner
    ref=$REPO_ROOT/test/gcsfuse-itests/testdata/reference-v$GCSFUSE_VERSION.json
    fresh=$ITEST_DIR/results/standalone.json
    rm -f "$fresh"
    if [ ! -f "$ref" ]; then
      # Never a silent pass: without a reference, every suite runs standalone (the slow way).
      echo "warning: no reference for gcsfuse $GCSFUSE_VERSION ($ref): every suite runs standalone; keep one with $0 reference" >&2
      build_tests
      RESULTS=$fresh run_mode standalone
      suites=()
    else
      # Exits 1, naming them, when the cluster run lacks a suite of the reference.
      list=$("$runner" suspects -left-out "$CLUSTER_EXCLUDE" "$ref" "$cluster") || exit 1
      suites=()
      [ -n "$list" ] && mapfile -t suites <<<"$list"
      if [ ${#suites[@]} = 0 ]; then
        step "every test that passed in the reference ($(basename "$ref")) passed through a pod"
        exec "$runner" compare "$ref" "$cluster"
      fi
      step "suites with a test that passed in the reference and not through a pod, run standalone now: ${suites[*]}"
      build_tests
      RESULTS=$fresh run_mode standalone "${suites[@]}"
    fi
    only=()
    [ ${#suites[@]} -gt 0 ] && only=(-only-reference-suites)
    rc=0
    "$runner" compare "${only[@]}" "$fresh" "$cluster" || rc=$?
    [ "$rc" = 1 ] || exit "$rc"
    step "a test passed standalone and failed through a pod: the cluster run again, once"
    rerun=0
    run_cluster "${suites[@]}" || rerun=$?
    "$runner" compare "${only[@]}" "$fresh" "$cluster" || exit $?
    [ "$rerun" = 0 ] || { echo "the cluster run again failed (rc=$rerun): a suite's pod did not become Ready" >&2; exit 1; }
    exit 0 ;;
  reference)
    # Every default suite standalone, then kept as the reference of this gcsfuse version.
    [ -x "$BIN/gcsfuse" ] || "$REPO_ROOT/hack/install-deps.sh"
    build_runner
    build_tests
    out=$ITEST_DIR/results/reference-run.json
    rm -f "$out"
    RESULTS=$out run_mode standalone
    # Checked (every default suite, none failed to run) before the old one goes.
    "$runner" reference "$out" "$out.trimmed"
    rm -f "$REPO_ROOT"/test/gcsfuse-itests/testdata/reference-v*.json
    mv "$out.trimmed" "$REPO_ROOT/test/gcsfuse-itests/testdata/reference-v$GCSFUSE_VERSION.json"
    step "test/gcsfuse-itests/testdata/reference-v$GCSFUSE_VERSION.json written" ;;
  standalone | driver | mounted)
    if [ "$cmd" != mounted ] && [ ! -x "$BIN/gcsfuse" ]; then "$REPO_ROOT/hack/install-deps.sh"; fi
    build_runner
    build_tests
    run_mode "$cmd" "$@" ;;
  *)
    sed -n '2,/^source/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
    exit 2 ;;
esac
