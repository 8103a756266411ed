#!/usr/bin/env bash
# The test command: installs what is missing, then runs formatting, vet, staticcheck, unit
# tests with the race detector, the fuzz seeds, csi-sanity, the integration tests (real
# /dev/fuse mounts, real gcsfuse, the emulator; root required) and, when present and not
# disabled, the end-to-end tests on a local cluster (hack/e2e.sh; SKIP_E2E=1 skips them).
source "$(dirname "$0")/lib.sh"
cd "$REPO_ROOT"

bash hack/install-deps.sh
if [ ! -x "$BIN/staticcheck" ] || ! "$BIN/staticcheck" -version 2>/dev/null | grep -q "${STATICCHECK_VERSION#v}"; then
  step "go install staticcheck $STATICCHECK_VERSION"
  GOBIN=$BIN go install "honnef.co/go/tools/cmd/staticcheck@$STATICCHECK_VERSION"
fi

step "gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go'))
if [ -n "$unformatted" ]; then echo "gofmt needed:"; echo "$unformatted"; exit 1; fi
step "go vet"
go vet ./...
step "staticcheck"
"$BIN/staticcheck" ./...

step "go test -race (unit, fuzz seeds, csi-sanity, integration with real mounts)"
export GCSFUSE_CSI_REQUIRE_INTEGRATION=1
go test -race -count=1 -timeout 20m ./...

if [ "${SKIP_E2E:-0}" != 1 ] && [ -x hack/e2e.sh ]; then
  step "end-to-end tests on a local cluster"
  bash hack/e2e.sh
fi
step "all tests passed"
