#!/usr/bin/env bash
# Builds the project's container images without Docker or a registry: each is one layer of
# static Go binaries (CGO_ENABLED=0) packed in the `docker save` format (layer tar, config
# JSON whose diff_id is the layer's sha256, manifest.json with the tag), written to
# $GCSFUSE_CSI_CACHE/images. When the cluster's containerd is running they are imported into
# its k8s.io namespace too (cluster-up.sh imports them otherwise); pods use imagePullPolicy
# Never. Rebuilding is cheap (Go's build cache), so this always rebuilds.
#
# Images (tag $IMAGE_TAG): node (CSI node plugin), sidecar (+ the static gcsfuse at /gcsfuse),
# webhook, emulator (GCS emulator), workload (e2e application), pause (pod sandbox).
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/cluster-lib.sh"

gcsfuse_bin=$BIN/gcsfuse
if [ ! -x "$gcsfuse_bin" ]; then
  echo "missing $gcsfuse_bin: run hack/install-deps.sh first" >&2
  exit 1
fi

# Every image carries the CA bundle: without it gcsfuse cannot reach Google Cloud Storage
# over TLS (an image built on a host without one used to ship without it, silently).
ca_bundle=/etc/ssl/certs/ca-certificates.crt
if [ ! -s "$ca_bundle" ]; then
  echo "missing $ca_bundle (Debian's ca-certificates): run hack/install-deps.sh first" >&2
  exit 1
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$IMAGES_DIR"

# mkimage REF ROOTFS_DIR OUT_TAR USER ENTRYPOINT...: one-layer image in `docker save` format.
mkimage() {
  local ref=$1 root=$2 out=$3 user=$4
  shift 4
  local ep
  ep=$(printf '"%s",' "$@")
  pack_image "$ref" "$root" "$out" "{\"User\":\"$user\",\"Entrypoint\":[${ep%,}],\"Env\":[\"PATH=/\"]}"
}

# rootfs NAME: a minimal root with /etc/passwd, /etc/group (uid 65534 resolves), /tmp and the
# CA bundle (for real Google Cloud Storage).
rootfs() {
  local r=$work/root-$1
  mkdir -p "$r/etc/ssl/certs" "$r/tmp"
  chmod 1777 "$r/tmp"
  printf 'root:x:0:0:root:/:/bin/false\nnobody:x:65534:65534:nobody:/:/bin/false\n' > "$r/etc/passwd"
  printf 'root:x:0:\nnogroup:x:65534:\n' > "$r/etc/group"
  cp "$ca_bundle" "$r/etc/ssl/certs/"
  echo "$r"
}

step "go build static binaries"
bins=$work/bin
mkdir -p "$bins"
(
  cd "$REPO_ROOT" || exit 1
  CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=$IMAGE_TAG" -o "$bins/" \
    ./cmd/gcsfuse-csi-node ./cmd/gcsfuse-sidecar ./cmd/gcsfuse-webhook ./cmd/gcs-emulator ./test/e2e/workload
)

step "pack images"
declare -A entry=(
  [node]=gcsfuse-csi-node [sidecar]=gcsfuse-sidecar [webhook]=gcsfuse-webhook
  [emulator]=gcs-emulator [workload]=workload [pause]=workload
)
for img in node sidecar webhook emulator workload pause; do
  r=$(rootfs "$img")
  install -m 0755 "$bins/${entry[$img]}" "$r/${entry[$img]}"
  user=0
  args=("/${entry[$img]}")
  case $img in
    sidecar) install -m 0755 "$gcsfuse_bin" "$r/gcsfuse"; user=65534 ;;
    webhook | emulator) user=65534 ;;
    pause) args+=(pause) ;;
  esac
  mkimage "$IMAGE_REPO/$img:$IMAGE_TAG" "$r" "$IMAGES_DIR/$img.tar" "$user" "${args[@]}"
done
ls -la "$IMAGES_DIR"

if [ -S /run/containerd/containerd.sock ] && ctr version >/dev/null 2>&1; then
  step "import images into containerd (k8s.io namespace)"
  for t in "$IMAGES_DIR"/*.tar; do ctr -n k8s.io images import "$t" >/dev/null; done
fi
step "images ready"
