#!/usr/bin/env bash
# go test -race ./... ./test/... (the product module and the tests' module, joined by go.work):
# the unit tests, the Helm chart's checks (deploy/chart, with $HELM),
# the fuzz seeds, csi-sanity, and the integration tests with real /dev/fuse mounts, real
# gcsfuse and the emulator (root; GCSFUSE_CSI_REQUIRE_INTEGRATION=1 makes a missing piece a
# failure, not a skip). TestReleasePush runs once, in hack/checks.sh. hack/test.sh runs this
# in the foreground, or, on warm caches with the e2e runs ahead, in the background beside the
# first of them (its tests leave a core idle for much of their ~200 s: integration tests
# waiting on mounts and timers).
# UNITS_DONE=FILE: in the background, write the exit code to FILE at the end (hack/e2e.sh
# waits for it before the storage suites' disruptive tests, which must run alone) and, with
# CI_RECORDS=FILE (hack/test.sh's CI_MARKDOWN), append the duration there (ci_record in
# lib.sh).
source "$(dirname "$0")/lib.sh"
cd "$REPO_ROOT"

rc=0
go test -race -count=1 -timeout 20m -skip '^TestReleasePush$' ./... ./test/... || rc=$?
# In the background only (UNITS_DONE=FILE, hack/test.sh): a foreground run is a stage of
# its own in the figures.
if [ -n "${UNITS_DONE:-}" ]; then
  ci_record background units "$(( ($(date +%s%N) - _t0) / 1000000 ))"
  echo "$rc" >"$UNITS_DONE"
fi
exit "$rc"
