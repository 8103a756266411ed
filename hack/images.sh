#!/usr/bin/env bash
# Builds the local cluster's container images without Docker or a registry, for this
# machine's architecture: `go run ./hack/images` (go-containerregistry; spec.go there lists
# what each image holds) cross-builds nothing here, packs one reproducible layer of static
# binaries per image and writes `docker save` tars named $IMAGE_REPO/<name>:$IMAGE_TAG
# (cluster-lib.sh; default gcsfuse-csi.local/<name>:e2e) to $IMAGES_DIR. When the
# cluster's containerd is running they are imported into its k8s.io namespace too
# (cluster-up.sh imports them otherwise); pods use imagePullPolicy Never, so any repository
# name works without a registry. An unchanged tree rebuilds in seconds (Go's build cache).
# hack/release-images.sh builds the release images (amd64 and arm64) with the same tool.
#
# Images: node (CSI node plugin), sidecar (+ the static gcsfuse at /gcsfuse), webhook,
# controller (dynamic provisioner), emulator (GCS emulator), workload (e2e application),
# pause (pod sandbox).
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/cluster-lib.sh"

gcsfuse_bin=$BIN/gcsfuse
if [ ! -x "$gcsfuse_bin" ]; then
  echo "missing $gcsfuse_bin: run hack/install-deps.sh first" >&2
  exit 1
fi

step "build and pack images $IMAGE_REPO/<name>:$IMAGE_TAG (go run ./hack/images)"
mkdir -p "$IMAGES_DIR"
(
  cd "$REPO_ROOT" || exit 1
  go run ./hack/images -repo "$IMAGE_REPO" -tag "$IMAGE_TAG" -images all -uncompressed \
    -platforms "linux/$(go env GOARCH)" -gcsfuse "$(go env GOARCH)=$gcsfuse_bin" -docker "$IMAGES_DIR"
)
ls -la "$IMAGES_DIR"

if [ -S /run/containerd/containerd.sock ] && ctr version >/dev/null 2>&1; then
  step "import images into containerd (k8s.io namespace)"
  import_images_each "$IMAGES_DIR"/*.tar
fi
step "images ready"
