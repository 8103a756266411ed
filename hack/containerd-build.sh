#!/usr/bin/env bash
# Builds containerd 2.x (containerd, containerd-shim-runc-v2, ctr) from the Go module
# github.com/containerd/containerd/v2 at $CONTAINERD_VERSION (lib.sh) into
# $GCSFUSE_CSI_CACHE/containerd-<ver>/bin: the default runtime of the local cluster (Debian's
# containerd is 1.6). The module has no replace directives, so `go install pkg@version` takes
# it as is. Everything is pure Go (CGO_ENABLED=0, like upstream's shim): the only cgo part,
# the btrfs snapshotter, is left out (no_btrfs), and so are devmapper and zfs (unused here).
# Tags and ldflags as upstream's Makefile; the shim also without its gRPC server (no_grpc).
# Idempotent: skipped when the cached binaries report the wanted version.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/cluster-lib.sh"

CTRD_BINS=(containerd containerd-shim-runc-v2 ctr)
if bins_cached "$CONTAINERD_BIN" "$CONTAINERD_VERSION" "${CTRD_BINS[@]}"; then
  step "containerd v$CONTAINERD_VERSION binaries cached in $CONTAINERD_BIN"
  exit 0
fi

mkdir -p "$CONTAINERD_BIN"
mod=github.com/containerd/containerd/v2
ld="-s -w -X $mod/version.Version=v$CONTAINERD_VERSION -X $mod/version.Package=$mod"
tags="urfave_cli_no_docs no_btrfs no_devmapper no_zfs"
step "containerd v$CONTAINERD_VERSION: go install containerd, ctr (~3 min cold on 2 cores)"
GOBIN=$CONTAINERD_BIN CGO_ENABLED=0 go install -trimpath -tags "$tags" -ldflags "$ld" \
  "$mod/cmd/containerd@v$CONTAINERD_VERSION" "$mod/cmd/ctr@v$CONTAINERD_VERSION"
step "containerd v$CONTAINERD_VERSION: go install containerd-shim-runc-v2"
GOBIN=$CONTAINERD_BIN CGO_ENABLED=0 go install -trimpath -tags "$tags no_grpc" -ldflags "$ld" \
  "$mod/cmd/containerd-shim-runc-v2@v$CONTAINERD_VERSION"
touch "$CONTAINERD_BIN/.built-v$CONTAINERD_VERSION"
"$CONTAINERD_BIN/containerd" --version
step "containerd v$CONTAINERD_VERSION built"
