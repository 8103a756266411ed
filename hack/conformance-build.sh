#!/usr/bin/env bash
# Builds, from the k8s.io/kubernetes module at $K8S_VERSION (the local cluster's), into
# $GCSFUSE_CSI_CACHE/k8s-<ver>/e2e, for hack/conformance.sh:
#   - storage-e2e.test: Kubernetes' storage testsuites through this driver's Go test driver
#     (test/conformance/storage, copied into the scratch module below and built there);
#   - agnhost, the binary of the suites' multi-purpose test image.
# No release download is reachable here, only the Go module proxy.
#
# As in k8s-build.sh, k8s.io/kubernetes' own go.mod replaces its staging modules with
# ./staging/... paths; a scratch module that requires it and maps every staging module to its
# published v0.<minor>.<patch> tag builds it; the driver's package in it imports the
# storage testsuites, `go mod tidy` pins what they need, and `go test -c` builds the binary.
# Idempotent: skipped when the cached binaries were built for the wanted version and driver
# sources (.built-storage-v<ver>-<sum>). Runs under the machine's heavy-build lock
# (/tmp/gcsfuse-heavy.lock), after hack/k8s-build.sh (whose build cache it shares).
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/cluster-lib.sh"

E2E_DIR=$K8S_DIR/e2e
driver_src=$REPO_ROOT/test/conformance/storage
# The driver's sources are part of the binary's identity: a change rebuilds it.
driver_sum=$(cat "$driver_src"/*.go "$driver_src/go.mod" | sha256sum | cut -c1-16)
stamp=$E2E_DIR/.built-storage-v$K8S_VERSION-$driver_sum
if [ -x "$E2E_DIR/storage-e2e.test" ] && [ -x "$E2E_DIR/agnhost" ] && [ -f "$stamp" ]; then
  step "storage-e2e.test and agnhost v$K8S_VERSION cached in $E2E_DIR (driver $driver_sum)"
  exit 0
fi
if [ -z "${GCSFUSE_HEAVY_LOCKED:-}" ]; then
  step "storage-e2e.test v$K8S_VERSION: waiting for the heavy-build lock"
  exec env GCSFUSE_HEAVY_LOCKED=1 flock -w "$HEAVY_LOCK_WAIT" "$HEAVY_LOCK" "$0" "$@"
fi

mod=$E2E_DIR/mod
mkdir -p "$mod"
cd "$mod" || exit 1
step "storage-e2e.test v$K8S_VERSION: download module"
k8s_scratch_module gcsfuse-csi.local/k8se2e
rm -rf storagee2e tools.go
mkdir storagee2e
cp "$driver_src"/*.go storagee2e/
# agnhost is a main package of the dependency: a tools import keeps it in the module graph.
printf '//go:build tools\n\npackage tools\n\nimport _ "k8s.io/kubernetes/test/images/agnhost"\n' > tools.go
step "storage-e2e.test v$K8S_VERSION: go mod tidy"
GOFLAGS=-mod=mod go mod tidy

ld=$(k8s_version_ldflags)
step "storage-e2e.test v$K8S_VERSION: go test -c"
start=$(date +%s)
CGO_ENABLED=0 go test -c -trimpath -ldflags "$ld" -o "$E2E_DIR/storage-e2e.test" ./storagee2e
step "storage-e2e.test v$K8S_VERSION built in $(( $(date +%s) - start )) s ($(du -h "$E2E_DIR/storage-e2e.test" | cut -f1))"
if [ ! -x "$E2E_DIR/agnhost" ] || [ ! -f "$E2E_DIR/.built-agnhost-v$K8S_VERSION" ]; then
  step "agnhost of v$K8S_VERSION (test/images/agnhost): go build, static"
  start=$(date +%s)
  CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$E2E_DIR/agnhost" k8s.io/kubernetes/test/images/agnhost
  touch "$E2E_DIR/.built-agnhost-v$K8S_VERSION"
  step "agnhost built in $(( $(date +%s) - start )) s"
fi
rm -f "$E2E_DIR"/.built-storage-v*
touch "$stamp"
