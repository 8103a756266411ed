#!/usr/bin/env bash
# The checks that need only CPU: no cluster, no idle machine, no timing of their own.
#   1. hack/lint.sh: go vet, staticcheck, deadcode;
#   2. hack/fuzz.sh: each fuzz target for FUZZ_TIME (10 s) beyond its seeds;
#   3. TestReleasePush (hack/images): the documented release command,
#      hack/release-images.sh --push, for amd64 and arm64 (the pinned gcsfuse cross-built for
#      arm64 first, cached in $GCSFUSE_CSI_CACHE/bin/linux_arm64), pushed to a registry on
#      loopback and pulled back.
# hack/test.sh runs them beside the first e2e run, at nice 19 in the background (the
# cluster's tests leave the cores mostly idle; cold, these are ~15 min of one core), or in
# the foreground with SKIP_E2E=1. `go test -race ./...` skips TestReleasePush so that it runs
# once, here. Stops at the first failure, saying which check failed.
# With CI_RECORDS=FILE (hack/test.sh's CI_MARKDOWN) each appends its duration to FILE.
source "$(dirname "$0")/lib.sh"
cd "$REPO_ROOT"
# The longest CHECKS_AFTER is waited for, in seconds (hack/e2e.sh writes it within a minute).
CHECKS_AFTER_WAIT=600

# Beside an e2e run (hack/test.sh sets CHECKS_AFTER to a file hack/e2e.sh writes once its
# own builds, needed sooner, hold the heavy-build lock), wait for that first; bounded, since a
# run whose e2e.sh never got that far has failed and stops this job.
if [ -n "${CHECKS_AFTER:-}" ]; then
  step "waiting for $CHECKS_AFTER (hack/e2e.sh's builds take the heavy-build lock first)"
  waited=0
  while [ ! -e "$CHECKS_AFTER" ] && [ "$waited" -lt "$CHECKS_AFTER_WAIT" ]; do
    sleep 1
    waited=$((waited + 1))
  done
  [ -e "$CHECKS_AFTER" ] || echo "checks: no $CHECKS_AFTER after $CHECKS_AFTER_WAIT s; going on without it" >&2
fi
# Each check builds much (cold); each takes the machine's heavy-build lock, so that beside an
# e2e run they queue behind the storage suites' and gcsfuse's test builds rather than slow
# them down.
# heavy WHAT CMD...: CMD under the lock; the run stops at the first that fails, naming WHAT.
heavy() {
  local what=$1
  shift
  flock -w "$HEAVY_LOCK_WAIT" "$HEAVY_LOCK" "$@" || { echo "checks: $what failed" >&2; exit 1; }
}
heavy hack/lint.sh bash hack/lint.sh
heavy hack/fuzz.sh bash hack/fuzz.sh
start=$(date +%s%N)
# The pinned gcsfuse for arm64 first, outside the test's own time limit (~1-6 min cold).
heavy "gcsfuse for arm64 (hack/install-deps.sh)" env GCSFUSE_ARCHES="amd64 arm64" bash hack/install-deps.sh
step "TestReleasePush (hack/images): release images for amd64 and arm64, pushed and pulled back"
heavy "TestReleasePush (hack/images)" env CGO_ENABLED=1 GCSFUSE_CSI_REQUIRE_INTEGRATION=1 go test -race -count=1 -timeout 30m -run '^TestReleasePush$' -v ./hack/images
ci_record background release-images "$(( ($(date +%s%N) - start) / 1000000 ))"
step "checks passed"
