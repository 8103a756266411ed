#!/usr/bin/env bash
# The test command: installs what is missing, then runs formatting, vet, staticcheck, the
# Helm chart's checks (hack/chart.sh: lint, edge values, drift of deploy/base), unit
# tests with the race detector, the fuzz seeds, the integration tests (real /dev/fuse
# mounts, real gcsfuse, the emulator; root required; csi-sanity's Identity and Node suites
# among them, publish and unpublish included) and, when present and not
# disabled, the end-to-end tests on a local cluster (hack/e2e.sh; SKIP_E2E=1 skips them): all
# of them on containerd 2.x, the upgrade from the previous release, then the lifecycle ones on
# containerd 1.6.
source "$(dirname "$0")/lib.sh"
cd "$REPO_ROOT"
E2E_POLLING_TESTS='^(TestRuntimeWatchSource|TestJobNever|TestJobOnFailure|TestBarePodNever|TestEarlyDelete|TestDeadlineExceeded|TestDeleteGracePeriod)$'

bash hack/install-deps.sh
if [ ! -x "$BIN/staticcheck" ] || ! "$BIN/staticcheck" -version 2>/dev/null | grep -q "${STATICCHECK_VERSION#v}"; then
  step "go install staticcheck $STATICCHECK_VERSION"
  GOBIN=$BIN go install "honnef.co/go/tools/cmd/staticcheck@$STATICCHECK_VERSION"
fi

if [ ! -x "$BIN/deadcode" ] || [ ! -f "$BIN/.deadcode-$DEADCODE_VERSION" ]; then
  step "go install deadcode $DEADCODE_VERSION"
  GOBIN=$BIN go install "golang.org/x/tools/cmd/deadcode@$DEADCODE_VERSION"
  touch "$BIN/.deadcode-$DEADCODE_VERSION"
fi

step "gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go'))
if [ -n "$unformatted" ]; then echo "gofmt needed:"; echo "$unformatted"; exit 1; fi
step "go vet"
go vet ./...
step "staticcheck"
"$BIN/staticcheck" ./...
step "deadcode (functions that nothing, not even a test, reaches)"
dead=$("$BIN/deadcode" -test ./...)
if [ -n "$dead" ]; then echo "$dead"; exit 1; fi

step "Helm chart: lint, edge values, bad values, deploy/base rendered from it (hack/chart.sh)"
bash hack/chart.sh

step "go test -race (unit, fuzz seeds, csi-sanity, integration with real mounts)"
export GCSFUSE_CSI_REQUIRE_INTEGRATION=1
go test -race -count=1 -timeout 20m ./...

if [ "${SKIP_E2E:-0}" != 1 ] && [ -x hack/e2e.sh ]; then
  step "end-to-end tests on a local cluster"
  bash hack/e2e.sh
  # Upgrade from the previous release (its chart and images, built from its commit): running
  # pods keep their mounts and end correctly under the new node plugin (docs/upgrade.md).
  step "upgrade end-to-end test: previous release $PREVIOUS_RELEASE -> this tree (helm upgrade)"
  UPGRADE_FROM=previous E2E_RUN='^TestUpgradeFromPreviousRelease$' bash hack/e2e.sh
  # The node plugin polls runtimes without a broadcast event stream: keep that path proven
  # on a real one (Debian's containerd 1.6) with the lifecycle tests. The driver is installed
  # there with the kustomize overlay, the first run having installed the Helm chart.
  step "lifecycle end-to-end tests on containerd 1.6 (the polling path), installed with kustomize"
  CONTAINERD=1.6 DEPLOY_WITH=kustomize E2E_RUN="$E2E_POLLING_TESTS" bash hack/e2e.sh
fi
step "all tests passed"
