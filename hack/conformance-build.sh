#!/usr/bin/env bash
# Builds Kubernetes' own e2e suite binary, e2e.test, and the binary of its agnhost test image
# from the k8s.io/kubernetes module at $K8S_VERSION (the local cluster's) into
# $GCSFUSE_CSI_CACHE/k8s-<ver>/e2e, for hack/conformance.sh. No release download is reachable
# here, only the Go module proxy.
#
# As in k8s-build.sh, k8s.io/kubernetes' own go.mod replaces its staging modules with
# ./staging/... paths; a scratch module that requires it and maps every staging module to its
# published v0.<minor>.<patch> tag builds it. test/e2e is a test package, so the scratch
# module imports what its e2e_test.go imports (tools.go, generated from that file) for
# `go mod tidy` to pin them, and `go test -c` builds the binary.
# Idempotent: skipped when the cached binary was built for the wanted version (.built-vX).
# Runs under the machine's heavy-build lock (/tmp/gcsfuse-heavy.lock): ~8.5 min cold on 2
# shared cores after hack/k8s-build.sh (whose build cache it shares), nothing warm.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/cluster-lib.sh"

E2E_DIR=$K8S_DIR/e2e
if bins_cached "$E2E_DIR" "$K8S_VERSION" e2e.test agnhost; then
  step "e2e.test and agnhost v$K8S_VERSION cached in $E2E_DIR"
  exit 0
fi
if [ -z "${GCSFUSE_HEAVY_LOCKED:-}" ]; then
  step "e2e.test v$K8S_VERSION: waiting for the heavy-build lock"
  exec env GCSFUSE_HEAVY_LOCKED=1 flock -w 3600 /tmp/gcsfuse-heavy.lock "$0" "$@"
fi

mod=$E2E_DIR/mod
mkdir -p "$mod"
cd "$mod" || exit 1
step "e2e.test v$K8S_VERSION: download module"
k8s_scratch_module gcsfuse-csi.local/k8se2e
src=$(go env GOMODCACHE)/k8s.io/kubernetes@v$K8S_VERSION
# test/e2e itself, every non-standard import of its e2e_test.go (the suite's test sources) and
# agnhost, the suite's multi-purpose test image binary (hack/conformance-images.sh packs it).
{
  printf '//go:build tools\n\npackage tools\n\nimport (\n\t_ "k8s.io/kubernetes/test/e2e"\n\t_ "k8s.io/kubernetes/test/images/agnhost"\n'
  sed -n '/^import (/,/^)/p' "$src/test/e2e/e2e_test.go" | grep -oE '"[a-z0-9.-]+\.[a-z]+/[^"]+"' | sort -u |
    while read -r p; do printf '\t_ %s\n' "$p"; done
  printf ')\n'
} > tools.go
step "e2e.test v$K8S_VERSION: go mod tidy ($(grep -c '^	_ ' tools.go) imports)"
GOFLAGS=-mod=mod go mod tidy

ld=$(k8s_version_ldflags)
step "e2e.test v$K8S_VERSION: go test -c (~8.5 min cold on 2 shared cores)"
start=$(date +%s)
CGO_ENABLED=0 go test -c -trimpath -ldflags "$ld" -o "$E2E_DIR/e2e.test" k8s.io/kubernetes/test/e2e
step "e2e.test v$K8S_VERSION built in $(( $(date +%s) - start )) s ($(du -h "$E2E_DIR/e2e.test" | cut -f1))"
step "agnhost of v$K8S_VERSION (test/images/agnhost): go build, static"
start=$(date +%s)
CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$E2E_DIR/agnhost" k8s.io/kubernetes/test/images/agnhost
touch "$E2E_DIR/.built-v$K8S_VERSION"
step "agnhost built in $(( $(date +%s) - start )) s"
