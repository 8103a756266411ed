#!/usr/bin/env bash
# Builds the release images for amd64 and arm64, without Docker, and optionally pushes them:
#
#   IMAGE_REPO=registry.example.com/team/gcsfuse-csi IMAGE_TAG=v0.2.0 hack/release-images.sh [--push]
#
# node, sidecar, webhook and controller (RELEASE_IMAGES=all adds the emulator and the e2e
# images), each a multi-platform OCI index of linux/amd64 and linux/arm64 (RELEASE_PLATFORMS
# to change):
# static Go binaries cross-compiled, the pinned gcsfuse cross-built for the sidecar
# (hack/install-deps.sh, GCSFUSE_ARCHES; ~4-6 min cold per architecture, cached in
# $GCSFUSE_CSI_CACHE/bin/linux_<arch>), one reproducible layer each (hack/images, with
# go-containerregistry). Written as an OCI image layout per image in
# $RELEASE_DIR/<name> (default _out/images/$IMAGE_TAG); --push pushes each index to
# $IMAGE_REPO/<name>:$IMAGE_TAG with the credentials of ~/.docker/config.json (`crane auth
# login`, `docker login`); a registry on a loopback or private address is spoken to over
# plain HTTP (INSECURE=1 forces it). Then install with the chart:
#   helm install ... --set images.node.repository=$IMAGE_REPO/node,images.node.tag=$IMAGE_TAG (webhook, sidecar, controller alike)
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/cluster-lib.sh"

push=()
for a in "$@"; do
  case $a in
    --push) push=(-push) ;;
    *) echo "usage: IMAGE_REPO=... IMAGE_TAG=... $0 [--push]" >&2; exit 2 ;;
  esac
done
[ "${INSECURE:-0}" = 1 ] && push+=(-insecure)
platforms=${RELEASE_PLATFORMS:-linux/amd64,linux/arm64}
out=${RELEASE_DIR:-$REPO_ROOT/_out/images/$IMAGE_TAG}
host=$(go env GOARCH)

arches=() gcsfuse=()
for p in ${platforms//,/ }; do
  a=${p#linux/}
  arches+=("$a")
  if [ "$a" = "$host" ]; then gcsfuse+=("$a=$BIN/gcsfuse"); else gcsfuse+=("$a=$BIN/linux_$a/gcsfuse"); fi
done
GCSFUSE_ARCHES="${arches[*]}" bash "$REPO_ROOT/hack/install-deps.sh"

step "build $IMAGE_REPO/{${RELEASE_IMAGES:-node,sidecar,webhook,controller}}:$IMAGE_TAG for $platforms -> ${out#"$REPO_ROOT"/}${push:+, push}"
g=${gcsfuse[*]}
(
  cd "$REPO_ROOT" || exit 1
  go run ./hack/images -repo "$IMAGE_REPO" -tag "$IMAGE_TAG" -images "${RELEASE_IMAGES:-release}" \
    -platforms "$platforms" -gcsfuse "${g// /,}" -oci "$out" "${push[@]}"
)
step "release images ready"
