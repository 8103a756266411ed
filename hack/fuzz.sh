#!/usr/bin/env bash
# Runs every fuzz target of the module (func FuzzXxx in a _test.go) for FUZZ_TIME each
# (default 10s), one after the other, so that a new crash or a bad webhook patch is caught
# in the change that brings it rather than by whoever next fuzzes by hand. `go test` alone
# runs only the seed corpora (testdata/fuzz/<target>/). A failure leaves the input under
# the package's testdata/fuzz/<target>/: add it to the seed corpus with the fix.
#   FUZZ_TIME=30s hack/fuzz.sh          every target, 30 s each
#   hack/fuzz.sh ./pkg/webhook          the targets of one package
source "$(dirname "$0")/lib.sh"
cd "$REPO_ROOT"
FUZZ_TIME=${FUZZ_TIME:-10s}
pkgs=("$@")
if [ ${#pkgs[@]} -eq 0 ]; then
  mapfile -t pkgs < <(git grep -l '^func Fuzz[A-Z][A-Za-z0-9_]*(f \*testing.F)' -- '*_test.go' | xargs -n1 dirname | sort -u | sed 's|^|./|')
fi
[ ${#pkgs[@]} -gt 0 ] || { echo "no fuzz targets found" >&2; exit 1; }
n=0
for pkg in "${pkgs[@]}"; do
  for target in $(grep -ho '^func Fuzz[A-Z][A-Za-z0-9_]*(f \*testing.F)' "$pkg"/*_test.go | sed 's/^func \(Fuzz[A-Za-z0-9_]*\).*/\1/' | sort); do
    step "fuzz $pkg $target for $FUZZ_TIME"
    if ! go test -run '^$' -fuzz "^${target}\$" -fuzztime "$FUZZ_TIME" "$pkg"; then
      echo "fuzz target $target of $pkg failed: the input is under $pkg/testdata/fuzz/$target/ (add it to the seed corpus with the fix)" >&2
      exit 1
    fi
    n=$((n + 1))
  done
done
step "$n fuzz targets ran $FUZZ_TIME each without a failure"
