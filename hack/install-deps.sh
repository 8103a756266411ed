#!/usr/bin/env bash
# Installs what the data path needs, idempotently: fuse3 (fusermount3) and ca-certificates
# (the images' CA bundle) from apt and the real
# gcsfuse, pinned, built statically with `go install` into $GCSFUSE_CSI_CACHE/bin (the same
# binary goes into the sidecar image). Safe to re-run: each step is skipped when done.
source "$(dirname "$0")/lib.sh"

need_apt=()
command -v fusermount3 >/dev/null || need_apt+=(fuse3)
# The CA bundle every image carries: without it gcsfuse cannot talk TLS to Google Cloud Storage.
[ -f /etc/ssl/certs/ca-certificates.crt ] || need_apt+=(ca-certificates)
if [ ${#need_apt[@]} -gt 0 ]; then
  step "apt-get install ${need_apt[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

stamp=$BIN/.gcsfuse-$GCSFUSE_VERSION-static
if [ -x "$BIN/gcsfuse" ] && [ -f "$stamp" ]; then
  step "gcsfuse $GCSFUSE_VERSION cached in $BIN"
else
  step "go install gcsfuse v$GCSFUSE_VERSION (static; ~6 min cold on 2 cores)"
  # GOFLAGS= : exactly the flags below, as build/sidecar/Dockerfile builds it (not lib.sh's
  # -trimpath, which would change the shipped binary with the cache's history); gcsfuse's
  # own toolchain shares no compiled package with the scripts' builds anyway.
  GOFLAGS= GOBIN=$BIN CGO_ENABLED=0 GOTOOLCHAIN=$GCSFUSE_TOOLCHAIN go install \
    -ldflags "-s -w -X github.com/googlecloudplatform/gcsfuse/v3/common.gcsfuseVersion=$GCSFUSE_VERSION" \
    "github.com/googlecloudplatform/gcsfuse/v3@v$GCSFUSE_VERSION"
  touch "$stamp"
fi
"$BIN/gcsfuse" --version

# GCSFUSE_ARCHES="amd64 arm64" (hack/release-images.sh sets it): also cross-build gcsfuse for
# each other architecture, the same pinned version and flags, into $BIN/linux_ARCH/gcsfuse
# (~6 min cold per architecture on 2 cores; `go install` refuses GOBIN when cross-compiling,
# so it installs under a scratch GOPATH and the binary is moved).
for arch in ${GCSFUSE_ARCHES:-}; do
  [ "$arch" = "$(go env GOARCH)" ] && continue
  dir=$BIN/linux_$arch
  if [ -x "$dir/gcsfuse" ] && [ -f "$dir/.gcsfuse-$GCSFUSE_VERSION-static" ]; then
    step "gcsfuse $GCSFUSE_VERSION linux/$arch cached in $dir"
    continue
  fi
  step "go install gcsfuse v$GCSFUSE_VERSION for linux/$arch (static, cross-compiled; ~6 min cold on 2 cores)"
  gopath=$(mktemp -d)
  GOFLAGS= GOPATH=$gopath GOBIN= CGO_ENABLED=0 GOOS=linux GOARCH=$arch GOTOOLCHAIN=$GCSFUSE_TOOLCHAIN go install \
    -ldflags "-s -w -X github.com/googlecloudplatform/gcsfuse/v3/common.gcsfuseVersion=$GCSFUSE_VERSION" \
    "github.com/googlecloudplatform/gcsfuse/v3@v$GCSFUSE_VERSION"
  mkdir -p "$dir"
  mv "$gopath/bin/linux_$arch/gcsfuse" "$dir/gcsfuse"
  rm -rf "$gopath"
  touch "$dir/.gcsfuse-$GCSFUSE_VERSION-static"
done
step "dependencies ready"
