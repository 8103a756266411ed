#!/usr/bin/env bash
# go test -race ./... ./test/... (the product module and the tests' module, joined by go.work):
# the unit tests, the Helm chart's checks (deploy/chart, with $HELM),
# the fuzz seeds, csi-sanity, and the integration tests with real /dev/fuse mounts, real
# gcsfuse and the emulator (root; GCSFUSE_CSI_REQUIRE_INTEGRATION=1 makes a missing piece a
# failure, not a skip). TestReleasePush runs once, in hack/checks.sh. hack/test.sh runs this
# in the foreground, before the e2e runs.
source "$(dirname "$0")/lib.sh"
cd "$REPO_ROOT"

# The race detector needs cgo (lib.sh turns it off for every other build); the binaries the
# tests build themselves are static again (testenv.GoBuild).
CGO_ENABLED=1 go test -race -count=1 -timeout 20m -skip '^TestReleasePush$' ./... ./test/...
