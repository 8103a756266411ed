#!/usr/bin/env bash
# Builds the test images that Kubernetes' storage e2e suite (hack/conformance.sh) runs, without
# a registry, and writes the registry mapping file that points the suite at them
# (KUBE_TEST_REPO_LIST): the suite asks for registry.k8s.io/e2e-test-images/<name>:<tag> with
# the IfNotPresent pull policy; the mapping renames that registry gcsfuse-csi.local/e2e-test-images,
# and the images are imported under those names into the cluster's containerd (k8s.io
# namespace) when it is running, so no pull ever happens.
#
#   busybox:<tag>  Debian's busybox-static (apt) with every applet linked in /bin, Cmd sh,
#                  as upstream's image.
#   jessie-dnsutils:<tag>  the same root: the multiVolume suite runs shell, dd, diff and
#                  sha256sum in it, which busybox has (upstream's is a Debian jessie with
#                  dnsutils, for the DNS tests, which do not run here).
#   agnhost:<tag>  agnhost built from test/images/agnhost of this Kubernetes version
#                  (hack/conformance-build.sh) on the busybox root (its alpine base gave it a
#                  shell), with upstream's extras: /agnhost-2, /uploads, porter's TLS pair, the
#                  user-defined-in-image (1000) and group-defined-in-image (50000) entries.
#
# Each root is packed by hack/images (`images pack`: one reproducible layer, a `docker save`
# tar, as hack/images.sh packs the project's images) for this machine's platform. The tags are
# read from test/utils/image/manifest.go of $K8S_VERSION. Output:
# $GCSFUSE_CSI_CACHE/k8s-<ver>/e2e/images/*.tar and repo-list.yaml. Cheap: always rebuilds.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/cluster-lib.sh"

E2E_DIR=$K8S_DIR/e2e
out=$E2E_DIR/images
TEST_REGISTRY=gcsfuse-csi.local/e2e-test-images
src=$(go env GOMODCACHE)/k8s.io/kubernetes@v$K8S_VERSION
[ -x "$E2E_DIR/agnhost" ] || { echo "missing $E2E_DIR/agnhost: run hack/conformance-build.sh" >&2; exit 1; }
if [ ! -x /bin/busybox ] || ! /bin/busybox --list | grep -qx sh; then
  step "apt-get install busybox-static"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq busybox-static >/dev/null
fi

# image_tag NAME: the tag this version's suite asks for (Config{list.PromoterE2eRegistry, NAME, TAG}).
image_tag() {
  grep -oE "Config\{list\.PromoterE2eRegistry, \"$1\", \"[^\"]+\"\}" "$src/test/utils/image/manifest.go" |
    head -1 | sed -E 's/.*, "([^"]+)"\}$/\1/'
}
busybox_tag=$(image_tag busybox)
agnhost_tag=$(image_tag agnhost)
jessie_tag=$(image_tag jessie-dnsutils)
[ -n "$busybox_tag" ] && [ -n "$agnhost_tag" ] && [ -n "$jessie_tag" ] ||
  { echo "cannot read the busybox/agnhost/jessie-dnsutils tags of $src/test/utils/image/manifest.go" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$out"
# pack_root REF ROOT OUT CONFIG_JSON: packs the directory ROOT as the image REF into the tar OUT
# (hack/images pack; CONFIG_JSON is the image's runtime config: Cmd, Entrypoint, Env...).
step "build hack/images"
(cd "$REPO_ROOT" && go build -o "$work/images" ./hack/images)
pack_root() {
  "$work/images" pack -platform "linux/$(go env GOARCH)" -ref "$1" -rootfs "$2" -out "$3" -config "$4"
}

# busybox_root DIR: /bin/busybox and a link per applet, /etc/passwd and /etc/group, /tmp.
busybox_root() {
  local r=$1 a
  mkdir -p "$r/bin" "$r/etc" "$r/tmp" "$r/root"
  chmod 1777 "$r/tmp"
  install -m 0755 /bin/busybox "$r/bin/busybox"
  for a in $(/bin/busybox --list); do [ "$a" = busybox ] || ln -s busybox "$r/bin/$a"; done
  printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n' > "$r/etc/passwd"
  printf 'root:x:0:\nnogroup:x:65534:\n' > "$r/etc/group"
}
env_path='"Env":["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]'

step "pack $TEST_REGISTRY/busybox:$busybox_tag (Debian's busybox-static $(dpkg-query -W -f '${Version}' busybox-static))"
busybox_root "$work/busybox"
pack_root "$TEST_REGISTRY/busybox:$busybox_tag" "$work/busybox" "$out/busybox.tar" "{\"Cmd\":[\"sh\"],$env_path}"
step "pack $TEST_REGISTRY/jessie-dnsutils:$jessie_tag (the busybox root)"
pack_root "$TEST_REGISTRY/jessie-dnsutils:$jessie_tag" "$work/busybox" "$out/jessie-dnsutils.tar" "{\"Cmd\":[\"sh\"],$env_path}"

step "pack $TEST_REGISTRY/agnhost:$agnhost_tag (agnhost of v$K8S_VERSION)"
r=$work/agnhost
busybox_root "$r"
install -m 0755 "$E2E_DIR/agnhost" "$r/agnhost"
ln -s agnhost "$r/agnhost-2"
mkdir -p "$r/uploads"
cp "$src/test/images/agnhost/porter/localhost.crt" "$src/test/images/agnhost/porter/localhost.key" "$r/"
printf 'user-defined-in-image:x:1000:1000::/home/user-defined-in-image:/bin/sh\n' >> "$r/etc/passwd"
printf 'user-defined-in-image:x:1000:\ngroup-defined-in-image:x:50000:user-defined-in-image\n' >> "$r/etc/group"
pack_root "$TEST_REGISTRY/agnhost:$agnhost_tag" "$r" "$out/agnhost.tar" \
  "{\"Entrypoint\":[\"/agnhost\"],\"Cmd\":[\"pause\"],$env_path}"

# The suite's registry mapping (test/utils/image/manifest.go RegistryList): only the e2e test
# images' registry moves; an image of another registry would still be pulled, and fail here,
# which names it.
printf 'promoterE2eRegistry: %s\n' "$TEST_REGISTRY" > "$out/repo-list.yaml"

if [ -S "$CONTAINERD_SOCK" ] && ctr version >/dev/null 2>&1; then
  step "import test images into containerd (k8s.io namespace)"
  for t in "$out"/*.tar; do ctr_each -n k8s.io images import "$t" >/dev/null; done
fi
ls -la "$out"
step "test images ready"
