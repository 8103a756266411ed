#!/usr/bin/env bash
# The test command: installs what is missing, then runs gofmt, the unit tests with the race
# detector (hack/units.sh; among them the Helm chart's checks in deploy/chart: lint, edge
# values, bad values, drift of deploy/base), the fuzz seeds, the integration tests (real
# /dev/fuse mounts, real gcsfuse, the emulator; root required; csi-sanity's Identity and
# Node suites among them, publish and unpublish included; before the e2e runs, warm or
# cold), the checks that need only CPU (hack/checks.sh: go vet,
# staticcheck, deadcode, each fuzz target for 10 s, and the release images for amd64 and
# arm64 pushed to a loopback registry and pulled back; beside the first e2e run's tests when
# those run) and, when present and not disabled, the end-to-end tests on a local cluster
# (hack/e2e.sh; SKIP_E2E=1 skips them): all of them on containerd 2.x, installed from the
# release artifacts of this tree (hack/release.sh) under a repository other than the default, with Kubernetes' own storage testsuites through the
# driver's Go test driver beside the tests that disrupt nothing, their disruptive ones after
# (hack/conformance.sh; its storage-e2e.test is built once, in the background) and gcsfuse's
# own integration tests through pods' volumes beside the storage suites,
# judged by a standalone gcsfuse run kept as the reference (hack/gcsfuse-itests.sh), the
# upgrade from the previous release, then the lifecycle ones on containerd 1.6 with the
# default names.
#
# CI stops a run at 90 minutes and lands nothing: with CI_BUDGET_SECONDS set (.ci/run sets 80
# min), a run on course to pass it fails before that, naming the step (budget_check,
# budget_run in lib.sh).
#
# CI_MARKDOWN=FILE: at the end of a run that passed, also write its figures to FILE as
# CONTRIBUTING.md's generated block ci-timing-cold or ci-timing-warm, by whether the run began from
# empty caches (cache_state below; hack/citiming formats them: each step's start and
# duration, each e2e run's phases and test counts, the background builds, the total, the
# date and the commit); then go run ./hack/readme -file CONTRIBUTING.md < FILE. .ci/run sets it.
# Resolved before anything changes directory: a relative CI_MARKDOWN is the caller's.
ci_markdown=${CI_MARKDOWN:+$(realpath -m "$CI_MARKDOWN")}
source "$(dirname "$0")/lib.sh"
cd "$REPO_ROOT"
# cache_state: cold when nothing of an earlier run is cached, as on a fresh machine: no Go
# module cache, no staticcheck cache, nothing in $GCSFUSE_CSI_CACHE but the empty bin/ lib.sh
# makes, and a Go build cache of at most COLD_GOCACHE_MIB (a fresh machine's Go may have built
# a tool or two; this project's builds fill GiBs); warm otherwise. A cold run builds
# everything, which is what CI's time limit is held to (hack/ci-cold.sh runs one).
cache_state() {
  local COLD_GOCACHE_MIB=${COLD_GOCACHE_MIB:-256}
  if [ -n "$(ls -A "$GOMODCACHE" 2>/dev/null)" ] ||
    [ -n "$(ls -A "${XDG_CACHE_HOME:-$HOME/.cache}/staticcheck" 2>/dev/null)" ] ||
    [ -n "$(ls -A "$BIN" 2>/dev/null)" ] || [ -n "$(ls -A "$GCSFUSE_CSI_CACHE" 2>/dev/null | grep -vx bin)" ] ||
    [ "$(du -sm "$GOCACHE" 2>/dev/null | cut -f1 || true)" -gt "$COLD_GOCACHE_MIB" ] 2>/dev/null; then
    echo warm
  else
    echo cold
  fi
}
caches=$(cache_state)
# The figures accumulate in CI_RECORDS, one line each (ci_record, lib.sh), from this script,
# hack/e2e.sh, hack/checks.sh, hack/lint.sh and hack/fuzz.sh; kept after the run, rewritten by
# the next one.
if [ -n "$ci_markdown" ]; then
  mkdir -p "$(dirname "$ci_markdown")"
  export CI_RECORDS=$GCSFUSE_CSI_CACHE/ci-records.tsv
  : >"$CI_RECORDS"
  ci_record_start "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)" \
    "$([ -z "$(git status --porcelain --untracked-files=no 2>/dev/null)" ] && echo clean || echo modified)" "$(nproc)" "$caches"
else
  unset CI_RECORDS
fi
# stage LABEL [DESCRIPTION]: step DESCRIPTION (default LABEL), and the start of the stage
# LABEL for CI_MARKDOWN: each stage lasts until the next one starts.
stage() {
  ci_record_at step "$1"
  step "${2:-$1}"
}
step "caches: $caches (GOCACHE $GOCACHE, GOMODCACHE $GOMODCACHE, GCSFUSE_CSI_CACHE $GCSFUSE_CSI_CACHE)"
# The least each part of the run still takes from a stage on, in seconds: a warm run's
# figures (the ci-timing-warm block of 7bab5b9, 2026-12-06, then in README.md, now in
# CONTRIBUTING.md), for budget_check
# (lib.sh). A run whose time so far plus these passes CI_BUDGET_SECONDS cannot end in time
# and fails there.
LEAST_FROM_UNITS=1550   # go test -race 250-312 warm (312 on 68b06fd), then the e2e runs below
LEAST_FROM_E2E=1250     # e2e run 1 ~835 (tests, the storage suites beside them), runs 2 and 3 ~420
LEAST_FROM_UPGRADE=420  # run 2 ~83, run 3 ~340
LEAST_FROM_POLLING=340  # run 3: two nodes, their drain, reboot, kubelet restart and a 60 s chaos soak (~360-390)
CI_IMAGE_REPO=registry.example.test/team/gcsfuse-csi
# The first e2e run installs from release artifacts of this tree (E2E_FROM_RELEASE=1), whose
# version is the chart's: v<Chart.yaml's version>-ci.
chart_version=$(sed -n 's/^version: *"\{0,1\}\([0-9]*\.[0-9]*\.[0-9]*\)\(-[0-9A-Za-z.-]*\)\{0,1\}"\{0,1\}$/\1/p' deploy/chart/gcsfuse-csi/Chart.yaml)
[ -n "$chart_version" ] || { echo "deploy/chart/gcsfuse-csi/Chart.yaml: no version X.Y.Z[-suffix] line" >&2; exit 1; }
CI_IMAGE_TAG=v$chart_version-ci
# e2e_run NAME LABEL: hack/e2e.sh with the variables of CI's e2e run NAME, declared and
# checked as a typed value in test/e2e/e2econfig (CI: the matrix), under the budget as LABEL;
# the caller's own variables (IMAGE_REPO, E2E_LOCK_TAKEN) come before it.
e2e_run() {
  local name=$1 label=$2 vars
  vars=$(go run ./test/e2e/e2erun "$name") || { echo "go run ./test/e2e/e2erun $name failed (its error above): CI's e2e runs are test/e2e/e2econfig's CI" >&2; exit 1; }
  local -a env_vars=()
  [ -z "$vars" ] || mapfile -t env_vars <<<"$vars"
  step "e2e run $name: ${env_vars[*]}"
  budget_run "$label" env "${env_vars[@]}" bash hack/e2e.sh
}

# gcsfuse for this machine's architecture only: the arm64 one is for TestReleasePush
# (hack/images), which builds it itself (hack/release-images.sh) in the background of the
# first e2e run (hack/checks.sh), when the cluster's tests leave the cores idle.
stage "install what is missing (hack/install-deps.sh)"
bash hack/install-deps.sh
# The local cluster's components (containerd, etcd, Kubernetes: ~13 min of both cores cold,
# cached after) build in the background from here on, in whatever the checks and tests below
# leave idle (downloads, tests that wait); at nice 19 those come first. hack/e2e.sh then finds
# them built. After install-deps.sh: both run apt-get.
cluster_build_pid=
cluster_build_log=$GCSFUSE_CSI_CACHE/cluster-build.log
# When the build ended (date +%s%N), for CI_MARKDOWN: how long it took tells cached from built.
cluster_build_end=$GCSFUSE_CSI_CACHE/cluster-build.end
if [ "${SKIP_E2E:-0}" != 1 ] && [ -x hack/e2e.sh ]; then
  step "build the local cluster's components in the background at nice 19 (log $cluster_build_log)"
  # A session and process group of its own (background_start, lib.sh), stopped with the builds
  # under it if this script ends first.
  rm -f "$cluster_build_end"
  cluster_build_start=$(date +%s%N)
  background_start cluster_build_pid "$cluster_build_log" hack/cluster-deps.sh "&&" hack/k8s-build.sh "&&" "date +%s%N >'$cluster_build_end'"
  trap 'background_stop "$cluster_build_pid"' EXIT
fi

stage "gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go'))
if [ -n "$unformatted" ]; then echo "gofmt needed:"; echo "$unformatted"; exit 1; fi

# The Helm chart's checks (lint, edge values, bad values, deploy/base rendered from it) are Go
# tests in deploy/chart, run once, in go test below, with the helm pinned here (HELM_VERSION):
# without $HELM they would fail there (GCSFUSE_CSI_REQUIRE_INTEGRATION=1), not skip.
stage "helm v$HELM_VERSION for the chart's tests (deploy/chart)"
ensure_helm
export HELM=$HELM_DIR/helm

budget_check "go test -race ./... ./test/..." "$LEAST_FROM_UNITS"
export GCSFUSE_CSI_REQUIRE_INTEGRATION=1
# go test -race ./... ./test/... (hack/units.sh), in the foreground, warm or cold. Cold, the
# cores are busy building the cluster's components behind it and nothing is idle to lend it.
# Warm, it ran beside the first e2e run at nice 19 until c4e4825: there its integration tests
# (real mounts, gcsfuse, timers of a few seconds) got what the e2e run's own tests and the
# checks' arm64 build left, which was nothing for minutes at a time on a busy day (the stop
# run of c4e4825: 8 integration tests failed in one 10-minute window, mounts not ready after
# 20 s, a 2 s drain taking 3 s). A red run costs more than the minutes it saved.
stage "go test -race ./... ./test/..." "go test -race (unit, the Helm chart's checks, fuzz seeds, csi-sanity, integration with real mounts)"
budget_run "go test -race ./... ./test/..." bash hack/units.sh
# The checks that need only CPU (hack/checks.sh: vet, staticcheck, deadcode, each fuzz target
# for 10 s, the release images of both architectures). Without the e2e stage, here; with it,
# in the background at nice 19 while the first e2e run's tests leave the cores mostly idle
# (cold they are ~15 min of one core; in the foreground they kept the cluster's components,
# building at nice 19 behind them, waiting). Their result is waited for, and fails the run,
# after the last e2e run.
checks_pid=
checks_log=$GCSFUSE_CSI_CACHE/checks.log
# checks_result: waits for the checks' job and fails the run (exit) when it failed, saying
# whether the budget stopped it.
checks_result() {
  local rc=0
  background_wait_var checks_pid "$checks_log" "the checks (hack/checks.sh)" || rc=$?
  [ "$rc" = 0 ] && return 0
  budget_stopped "$rc" "hack/checks.sh"
  exit "$rc"
}
# checks_if_done: when the checks' job has ended already, its result now (a failed lint fails
# the run between e2e runs, not after the last one).
checks_if_done() {
  if [ -n "$checks_pid" ] && ! kill -0 "$checks_pid" 2>/dev/null; then
    checks_result
  fi
}
if [ "${SKIP_E2E:-0}" = 1 ] || [ ! -x hack/e2e.sh ]; then
  stage "vet, staticcheck, deadcode, fuzzing, release images (hack/checks.sh)"
  budget_run "hack/checks.sh" bash hack/checks.sh
fi

if [ -n "$cluster_build_pid" ]; then
  stage "wait for the background build of the cluster's components" "waiting for the background build of the cluster's components"
  background_wait_var cluster_build_pid "$cluster_build_log" "building the cluster's components"
  if [ -s "$cluster_build_end" ]; then
    ci_record cluster-build "$(( ($(<"$cluster_build_end") - cluster_build_start) / 1000000 ))"
  fi
fi

if [ "${SKIP_E2E:-0}" != 1 ] && [ -x hack/e2e.sh ]; then
  budget_check "the e2e runs" "$LEAST_FROM_E2E"
  # The e2e tests' packages, compiled here (nice 0) so that go vet in the background reuses
  # them instead of compiling the same packages at the same time; the test phase then links.
  # With the images' flags (lib.sh: static, -trimpath), the first e2e run's images reuse them
  # too.
  stage "build the e2e tests (go test -c ./test/e2e)"
  go test -c -o "$GCSFUSE_CSI_CACHE/e2e.test" ./test/e2e
  rm -f "$GCSFUSE_CSI_CACHE/e2e.test"
  step "vet, staticcheck, deadcode, fuzzing (one worker), release images (hack/checks.sh) in the background at nice 19 (log $checks_log)"
  # Its checks ask for the heavy-build lock once hack/e2e.sh below holds it for its own
  # builds, needed sooner (E2E_LOCK_TAKEN); with a budget, the job is stopped when that is used
  # up, so that the wait for it below is bounded too.
  lock_taken=$GCSFUSE_CSI_CACHE/e2e-lock-taken
  rm -f "$lock_taken"
  bounded=()
  if [ -n "$CI_BUDGET_SECONDS" ]; then
    left=$(( CI_BUDGET_SECONDS - $(ci_elapsed) ))
    (( left > 0 )) || { echo "CI budget: $(( CI_BUDGET_SECONDS / 60 )) min used up before the e2e runs; failing now" >&2; exit 1; }
    bounded=(timeout --kill-after="$CI_BUDGET_GRACE" "$left")
  fi
  background_start checks_pid "$checks_log" "${bounded[@]}" env FUZZ_PARALLEL=1 "CHECKS_AFTER='$lock_taken'" bash hack/checks.sh
  trap 'background_stop "$cluster_build_pid"; background_stop "$checks_pid"' EXIT
  # From the release artifacts of this tree (hack/release.sh for this machine's platform:
  # the packaged chart, images pinned by digest, and the images' OCI archives imported), under
  # a repository and tag other than the default, as a team installing from its own registry
  # would (imported, not pulled): TestImages checks the driver and the sidecar the webhook
  # injects run from them, pinned by the chart's digests. Then Kubernetes' storage e2e suite on the same cluster.
  # What the later stages build (storage-e2e.test, the previous release) is built while the tests run.
  # Then uninstalling leaves nothing on the node (hack/uninstall-check.sh) after every
  # fault the tests made: shared mounts' gcsfuse killed, the mounter replaced, the node
  # plugin restarted under live shared mounts.
  stage "e2e: every test, installed from the release artifacts, then the storage suite" "end-to-end tests on a local cluster, installed from release artifacts $CI_IMAGE_REPO/<name>:$CI_IMAGE_TAG, then Kubernetes' storage e2e suite (hack/conformance.sh), then the uninstall"
  IMAGE_REPO=$CI_IMAGE_REPO IMAGE_TAG=$CI_IMAGE_TAG E2E_LOCK_TAKEN=$lock_taken e2e_run release "the first e2e run"
  # Upgrade from the previous release (its chart and images, built from its commit): running
  # pods keep their mounts and end correctly under the new node plugin (docs/upgrade.md);
  # then uninstalling it leaves nothing on the node (hack/uninstall-check.sh).
  checks_if_done
  stage "e2e: upgrade from the previous release $PREVIOUS_RELEASE" "upgrade end-to-end test: previous release $PREVIOUS_RELEASE -> this tree (helm upgrade)"
  budget_check "the upgrade run" "$LEAST_FROM_UPGRADE"
  e2e_run upgrade "the upgrade run"
  # The node plugin polls runtimes without a broadcast event stream: keep that path proven
  # on a real one (Debian's containerd 1.6) with the lifecycle tests. The driver is installed
  # there with the kustomize overlay, the first run having installed the Helm chart, on two
  # nodes: a Job of each mode on each; under Jobs or Deployments of each mode the second node
  # rebooted, drained, its kubelet restarted; and a short chaos soak.
  checks_if_done
  stage "e2e: lifecycle tests on containerd 1.6 (the polling path), installed with kustomize, on two nodes" "lifecycle end-to-end tests on containerd 1.6 (the polling path), installed with kustomize, on two nodes (TestEveryNode, TestNodeReboot, TestNodeDrain, TestKubeletRestart, TestChaosSoak)"
  budget_check "the containerd 1.6 run" "$LEAST_FROM_POLLING"
  e2e_run polling "the containerd 1.6 run"
  # Waited for last: the later e2e runs leave the cores idle too (cold, the checks need all of
  # the three runs' spare CPU).
  if [ -n "$checks_pid" ]; then
    stage "wait for hack/checks.sh (in the background since the first e2e run began)" "waiting for the checks (hack/checks.sh)"
    checks_result
  fi
fi
ci_record_at end
step "all tests passed"
if [ -n "$ci_markdown" ]; then
  # Named after the command that ran: .ci/run sets CI_COMMAND.
  ci_by="CI_MARKDOWN=FILE ${CI_COMMAND:-hack/test.sh}"
  [ "${SKIP_E2E:-0}" = 1 ] && ci_by="SKIP_E2E=1 $ci_by"
  # The tests passed: a block that cannot be written is a warning, never a red run.
  if go run ./hack/citiming -records "$CI_RECORDS" -by "$ci_by" -markdown "$ci_markdown"; then
    echo "the figures of this run are in $ci_markdown: go run ./hack/readme -file CONTRIBUTING.md < $ci_markdown"
  else
    echo "warning: the figures of this run could not be written to $ci_markdown (records: $CI_RECORDS)" >&2
  fi
fi
