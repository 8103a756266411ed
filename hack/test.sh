#!/usr/bin/env bash
# The test command: installs what is missing, then runs formatting, vet, staticcheck, the
# unit tests with the race detector (among them the Helm chart's checks in deploy/chart: lint,
# edge values, bad values, drift of deploy/base; and the release images for amd64 and arm64,
# pushed to a loopback registry and pulled back), the fuzz seeds, the integration tests (real
# /dev/fuse mounts, real gcsfuse, the emulator; root required; csi-sanity's Identity and Node
# suites among them, publish and unpublish included), each fuzz target for 10 s
# (hack/fuzz.sh; behind the first e2e run's tests when those run) and, when present and not
# disabled, the end-to-end tests on a local cluster (hack/e2e.sh; SKIP_E2E=1 skips them): all
# of them on containerd 2.x with images under a repository other than the default, followed
# by Kubernetes' own storage testsuites through the driver's Go test driver (hack/conformance.sh;
# its storage-e2e.test is built once, in the background) with gcsfuse's own integration tests
# through pods' volumes beside them, compared with a standalone gcsfuse run in the background
# (hack/gcsfuse-itests.sh), the upgrade from the previous release, then the
# lifecycle ones on containerd 1.6 with the default names.
#
# CI_MARKDOWN=FILE: at the end of a run that passed, also write its figures to FILE as
# README.md's generated block ci-timing (hack/citiming formats them: each step's start and
# duration, each e2e run's phases and test counts, the background builds, the total, the
# date and the commit); then go run ./hack/readme -file README.md < FILE. .ci/run sets it.
# Resolved before anything changes directory: a relative CI_MARKDOWN is the caller's.
ci_markdown=${CI_MARKDOWN:+$(realpath -m "$CI_MARKDOWN")}
source "$(dirname "$0")/lib.sh"
cd "$REPO_ROOT"
# The figures accumulate in CI_RECORDS, one line each (ci_record, lib.sh), from this script,
# hack/e2e.sh and hack/fuzz.sh; kept after the run, rewritten by the next one.
if [ -n "$ci_markdown" ]; then
  mkdir -p "$(dirname "$ci_markdown")"
  export CI_RECORDS=$GCSFUSE_CSI_CACHE/ci-records.tsv
  : >"$CI_RECORDS"
  ci_record start "$_t0" "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)" \
    "$([ -z "$(git status --porcelain --untracked-files=no 2>/dev/null)" ] && echo clean || echo modified)" "$(nproc)"
else
  unset CI_RECORDS
fi
# stage LABEL [DESCRIPTION]: step DESCRIPTION (default LABEL), and the start of the stage
# LABEL for CI_MARKDOWN: each stage lasts until the next one starts.
stage() {
  ci_record step "$(date +%s%N)" "$1"
  step "${2:-$1}"
}
CI_IMAGE_REPO=registry.example.test/team/gcsfuse-csi
CI_IMAGE_TAG=v0.0.0-ci
E2E_POLLING_TESTS='^(TestRuntimeWatchSource|TestJobNever|TestJobOnFailure|TestBarePodNever|TestEarlyDelete|TestDeadlineExceeded|TestDeleteGracePeriod)$'

# gcsfuse for arm64 too: TestReleasePush (hack/images) builds and pushes the release images
# for both architectures (~4 min cold, once; cached in $GCSFUSE_CSI_CACHE/bin/linux_arm64).
stage "install what is missing (hack/install-deps.sh)"
GCSFUSE_ARCHES="amd64 arm64" bash hack/install-deps.sh
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
  # A session and process group of its own (BACKGROUND, lib.sh), stopped with the builds
  # under it if this script ends first.
  rm -f "$cluster_build_end"
  cluster_build_start=$(date +%s%N)
  "${BACKGROUND[@]}" hack/cluster-deps.sh "&&" hack/k8s-build.sh "&&" "date +%s%N >'$cluster_build_end'" >"$cluster_build_log" 2>&1 &
  cluster_build_pid=$!
  trap 'background_stop "$cluster_build_pid"' EXIT
fi

if [ ! -x "$BIN/staticcheck" ] || ! "$BIN/staticcheck" -version 2>/dev/null | grep -q "${STATICCHECK_VERSION#v}"; then
  stage "go install staticcheck $STATICCHECK_VERSION"
  GOBIN=$BIN go install "honnef.co/go/tools/cmd/staticcheck@$STATICCHECK_VERSION"
fi

if [ ! -x "$BIN/deadcode" ] || [ ! -f "$BIN/.deadcode-$DEADCODE_VERSION" ]; then
  stage "go install deadcode $DEADCODE_VERSION"
  GOBIN=$BIN go install "golang.org/x/tools/cmd/deadcode@$DEADCODE_VERSION"
  touch "$BIN/.deadcode-$DEADCODE_VERSION"
fi

stage "gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go'))
if [ -n "$unformatted" ]; then echo "gofmt needed:"; echo "$unformatted"; exit 1; fi
# vet compiles every dependency (default build) once; helm's build and the e2e suite's reuse
# much of it. (Loading the race build instead, to share the unit tests' compile, cost more
# cold: helm then built its Kubernetes dependencies alone, 554 s against 216 s.)
stage "go vet"
go vet ./...
stage "staticcheck"
"$BIN/staticcheck" ./...
stage "deadcode" "deadcode (functions that nothing, not even a test, reaches)"
dead=$("$BIN/deadcode" -test ./...)
if [ -n "$dead" ]; then echo "$dead"; exit 1; fi

# The Helm chart's checks (lint, edge values, bad values, deploy/base rendered from it) are Go
# tests in deploy/chart, run once, in go test below, with the helm pinned here (HELM_VERSION):
# without $HELM they would fail there (GCSFUSE_CSI_REQUIRE_INTEGRATION=1), not skip.
stage "helm v$HELM_VERSION for the chart's tests (deploy/chart)"
ensure_helm
export HELM=$HELM_DIR/helm

stage "go test -race ./..." "go test -race (unit, the Helm chart's checks, fuzz seeds, csi-sanity, integration with real mounts)"
export GCSFUSE_CSI_REQUIRE_INTEGRATION=1
go test -race -count=1 -timeout 20m ./...
# Beyond the seeds: each fuzz target for a bounded time (FUZZ_TIME, 10 s each). Without the
# e2e stage, here; with it, in the background at nice 19 with one fuzzing worker while the
# first e2e run's tests leave the cores ~90% idle (its instrumented build is ~200 s of CPU
# cold): in the foreground it kept the cluster's components, building at nice 19 behind it,
# waiting. Its result is waited for, and fails the run, after that e2e run.
fuzz_pid=
fuzz_log=$GCSFUSE_CSI_CACHE/fuzz.log
if [ "${SKIP_E2E:-0}" = 1 ] || [ ! -x hack/e2e.sh ]; then
  stage "fuzz every target for ${FUZZ_TIME:-10s} (hack/fuzz.sh)"
  bash hack/fuzz.sh
fi

if [ -n "$cluster_build_pid" ]; then
  stage "wait for the background build of the cluster's components" "waiting for the background build of the cluster's components"
  pid=$cluster_build_pid
  cluster_build_pid=
  background_wait "$pid" "$cluster_build_log" "building the cluster's components"
  if [ -s "$cluster_build_end" ]; then
    ci_record cluster-build "$(( ($(<"$cluster_build_end") - cluster_build_start) / 1000000 ))"
  fi
fi

if [ "${SKIP_E2E:-0}" != 1 ] && [ -x hack/e2e.sh ]; then
  step "fuzz every target for ${FUZZ_TIME:-10s} (hack/fuzz.sh) in the background at nice 19, one worker (log $fuzz_log)"
  "${BACKGROUND[@]}" FUZZ_PARALLEL=1 bash hack/fuzz.sh >"$fuzz_log" 2>&1 &
  fuzz_pid=$!
  trap 'background_stop "$cluster_build_pid"; background_stop "$fuzz_pid"' EXIT
  # Under a repository and tag other than the default, as a team installing from its own
  # registry would (imported, not pulled): TestImages checks the driver and the sidecar the
  # webhook injects run from them. Then Kubernetes' storage e2e suite on the same cluster.
  # What the later stages build (storage-e2e.test, the previous release) is built while the tests run.
  stage "e2e: every test, images under another repository, then the storage suite" "end-to-end tests on a local cluster, images $CI_IMAGE_REPO/<name>:$CI_IMAGE_TAG, then Kubernetes' storage e2e suite (hack/conformance.sh)"
  IMAGE_REPO=$CI_IMAGE_REPO IMAGE_TAG=$CI_IMAGE_TAG E2E_CONFORMANCE=1 E2E_GCSFUSE_ITESTS=1 E2E_PREBUILD_PREVIOUS=1 bash hack/e2e.sh
  stage "wait for the fuzz stage (in the background since the e2e run began)" "waiting for the fuzz targets"
  pid=$fuzz_pid
  fuzz_pid=
  background_wait "$pid" "$fuzz_log" "fuzzing"
  # Upgrade from the previous release (its chart and images, built from its commit): running
  # pods keep their mounts and end correctly under the new node plugin (docs/upgrade.md).
  stage "e2e: upgrade from the previous release $PREVIOUS_RELEASE" "upgrade end-to-end test: previous release $PREVIOUS_RELEASE -> this tree (helm upgrade)"
  UPGRADE_FROM=previous E2E_RUN='^TestUpgradeFromPreviousRelease$' bash hack/e2e.sh
  # The node plugin polls runtimes without a broadcast event stream: keep that path proven
  # on a real one (Debian's containerd 1.6) with the lifecycle tests. The driver is installed
  # there with the kustomize overlay, the first run having installed the Helm chart.
  stage "e2e: lifecycle tests on containerd 1.6 (the polling path), installed with kustomize" "lifecycle end-to-end tests on containerd 1.6 (the polling path), installed with kustomize"
  CONTAINERD=1.6 DEPLOY_WITH=kustomize E2E_RUN="$E2E_POLLING_TESTS" bash hack/e2e.sh
fi
ci_record end "$(date +%s%N)"
step "all tests passed"
if [ -n "$ci_markdown" ]; then
  # Named after the command that ran: .ci/run sets CI_COMMAND.
  ci_by="CI_MARKDOWN=FILE ${CI_COMMAND:-hack/test.sh}"
  [ "${SKIP_E2E:-0}" = 1 ] && ci_by="SKIP_E2E=1 $ci_by"
  # The tests passed: a block that cannot be written is a warning, never a red run.
  if go run ./hack/citiming -records "$CI_RECORDS" -by "$ci_by" -markdown "$ci_markdown"; then
    echo "the figures of this run are in $ci_markdown: go run ./hack/readme -file README.md < $ci_markdown"
  else
    echo "warning: the figures of this run could not be written to $ci_markdown (records: $CI_RECORDS)" >&2
  fi
fi
