#!/usr/bin/env bash
# The static checks of both modules (the product's and test/'s, joined by go.work), each a failure of its own: go vet, staticcheck and
# deadcode (functions that nothing, not even a test, reaches), the tools pinned in lib.sh and
# installed into $GCSFUSE_CSI_CACHE/bin when missing. gofmt is hack/test.sh's first check.
# hack/checks.sh runs this first (beside the e2e runs in hack/test.sh, in the foreground with
# SKIP_E2E=1).
# With CI_RECORDS=FILE (hack/test.sh's CI_MARKDOWN) it appends its duration to FILE at the
# end (ci_record in lib.sh).
source "$(dirname "$0")/lib.sh"
cd "$REPO_ROOT"

if [ ! -x "$BIN/staticcheck" ] || ! "$BIN/staticcheck" -version 2>/dev/null | grep -q "${STATICCHECK_VERSION#v}"; then
  step "go install staticcheck $STATICCHECK_VERSION"
  GOBIN=$BIN go install "honnef.co/go/tools/cmd/staticcheck@$STATICCHECK_VERSION"
fi
if [ ! -x "$BIN/deadcode" ] || [ ! -f "$BIN/.deadcode-$DEADCODE_VERSION" ]; then
  step "go install deadcode $DEADCODE_VERSION"
  GOBIN=$BIN go install "golang.org/x/tools/cmd/deadcode@$DEADCODE_VERSION"
  touch "$BIN/.deadcode-$DEADCODE_VERSION"
fi

step "go vet"
go vet ./... ./test/...
step "staticcheck"
"$BIN/staticcheck" ./... ./test/...
step "deadcode (functions that nothing, not even a test, reaches)"
dead=$("$BIN/deadcode" -test ./... ./test/...)
if [ -n "$dead" ]; then
  echo "deadcode: these functions are reached by nothing, not even a test:"
  echo "$dead"
  exit 1
fi
step "go vet, staticcheck and deadcode clean"
ci_record background lint "$(( ($(date +%s%N) - _t0) / 1000000 ))"
