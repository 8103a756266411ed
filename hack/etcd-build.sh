#!/usr/bin/env bash
# Builds etcd from the Go module go.etcd.io/etcd/server/v3 at $ETCD_VERSION (the version that
# Kubernetes $K8S_VERSION pins: etcd_version_for in lib.sh) into
# $GCSFUSE_CSI_CACHE/etcd-<ver>/bin: the etcd of the local cluster (Debian's is 3.4, too old).
#
# The module's root package is upstream's etcd main (it calls etcdmain.Main(os.Args)), but its
# go.mod replaces the other etcd modules (api, client, pkg) with ../ paths, which makes
# `go install go.etcd.io/etcd/server/v3@v...` refuse it. As in k8s-build.sh, a scratch module
# that requires it builds it as is: there those replaces do not apply, and every etcd module
# resolves to its published tag of the same version (the server's go.mod requires them so).
# Flags as upstream's build script: CGO_ENABLED=0, -trimpath; GitSHA names the module instead.
# Idempotent: skipped when the cached binary was built for the wanted version.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/cluster-lib.sh"

if bins_cached "$ETCD_BIN" "$ETCD_VERSION" etcd; then
  step "etcd v$ETCD_VERSION binary cached in $ETCD_BIN"
  exit 0
fi

mod=$GCSFUSE_CSI_CACHE/etcd-$ETCD_VERSION/mod
server=go.etcd.io/etcd/server/v3
mkdir -p "$mod" "$ETCD_BIN"
cd "$mod" || exit 1
step "etcd v$ETCD_VERSION: download module"
go mod download "$server@v$ETCD_VERSION"
gomod=$(go env GOMODCACHE)/cache/download/$server/@v/v$ETCD_VERSION.mod
{
  printf 'module gcsfuse-csi.local/etcdbuild\n\n'
  # Same go / godebug lines as the server module, so the binary behaves like upstream's.
  grep -E '^(go|godebug) ' "$gomod"
  printf '\nrequire %s v%s\n' "$server" "$ETCD_VERSION"
} > go.mod
printf '//go:build tools\n\npackage tools\n\nimport _ "%s"\n' "$server" > tools.go
step "etcd v$ETCD_VERSION: go mod tidy"
GOFLAGS=-mod=mod go mod tidy
step "etcd v$ETCD_VERSION: go build (~1-2 min cold on 2 cores)"
CGO_ENABLED=0 go build -trimpath \
  -ldflags "-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=module-v$ETCD_VERSION" \
  -o "$ETCD_BIN/etcd" "$server"
touch "$ETCD_BIN/.built-v$ETCD_VERSION"
"$ETCD_BIN/etcd" --version
step "etcd v$ETCD_VERSION built"
