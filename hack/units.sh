#!/usr/bin/env bash
# go test -race ./...: the unit tests, the Helm chart's checks (deploy/chart, with $HELM),
# the fuzz seeds, csi-sanity, and the integration tests with real /dev/fuse mounts, real
# gcsfuse and the emulator (root; GCSFUSE_CSI_REQUIRE_INTEGRATION=1 makes a missing piece a
# failure, not a skip). TestReleasePush runs once, in hack/checks.sh. hack/test.sh runs this
# in the foreground, or, on warm caches with the e2e runs ahead, in the background beside the
# first of them (its tests leave a core idle for much of their ~200 s: integration tests
# waiting on mounts and timers).
# With CI_RECORDS=FILE (hack/test.sh's CI_MARKDOWN) it appends its duration to FILE at the
# end, whether it passed or not (ci_record in lib.sh).
source "$(dirname "$0")/lib.sh"
cd "$REPO_ROOT"

rc=0
go test -race -count=1 -timeout 20m -skip '^TestReleasePush$' ./... || rc=$?
ci_record background units "$(( ($(date +%s%N) - _t0) / 1000000 ))"
exit "$rc"
