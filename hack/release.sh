#!/usr/bin/env bash
# The release artifacts a team can mirror, built offline by one command:
#
#   VERSION=v0.2.0 IMAGE_REPO=registry.example.com/team/gcsfuse-csi \
#     DOWNLOAD_URL=https://example.com/gcsfuse-csi/v0.2.0 hack/release.sh
#
# into $RELEASE_OUT (default _out/release/$VERSION, which must not exist):
#   images/<name>-$VERSION.oci.tar   node, sidecar, webhook and controller for linux/amd64
#                                    and linux/arm64 (hack/release-images.sh): `ctr -n k8s.io
#                                    images import` takes them, `skopeo copy --all
#                                    --preserve-digests oci-archive:FILE docker://REF`
#                                    pushes them whole (the chart pins the index's digest)
#   sbom/<name>-$VERSION.cdx.json    a CycloneDX SBOM per image: each Go binary of each
#                                    platform with its modules, from its build information
#   gcsfuse-csi-<version>.tgz        the Helm chart, every image pinned by digest
#   kubectl-gcsfuse_<os>_<arch>.tar.gz  the plugin for linux and darwin, amd64 and arm64
#   krew/gcsfuse.yaml                its krew manifest (archives under $DOWNLOAD_URL)
#   SHA256SUMS                       of all of them (sha256sum -c SHA256SUMS)
# The OCI image layouts stay in $RELEASE_OUT.oci (`crane push DIR/<name> REF` takes one). The
# same tree and images give the same bytes: every file's time is the commit's. Offline once
# the Go module and gcsfuse caches are warm; cold, the pinned gcsfuse is cross-built for arm64
# (~4-6 min), the binaries for both, the plugin four times. RELEASE_PLATFORMS (the images')
# and RELEASE_PLUGIN_PLATFORMS (the plugin's, OS/ARCH,...) narrow a release to fewer
# platforms: hack/e2e.sh's E2E_FROM_RELEASE=1 builds this machine's only.
source "$(dirname "$0")/lib.sh"
set -euo pipefail
: "${VERSION:?VERSION=vX.Y.Z}" "${IMAGE_REPO:?IMAGE_REPO=registry/path}" "${DOWNLOAD_URL:?DOWNLOAD_URL=https://...}"
out=${RELEASE_OUT:-$REPO_ROOT/_out/release/$VERSION}
[ ! -e "$out" ] || { echo "$out exists: remove it or set RELEASE_OUT" >&2; exit 2; }
ensure_helm
IMAGE_TAG=$VERSION RELEASE_DIR=$out.oci bash "$REPO_ROOT/hack/release-images.sh"
step "release artifacts -> ${out#"$REPO_ROOT"/}"
cd "$REPO_ROOT"
go run ./hack/release -version "$VERSION" -repo "$IMAGE_REPO" -oci "$out.oci" -out "$out" \
  -download-url "$DOWNLOAD_URL" -helm "$HELM_DIR/helm" -platforms "${RELEASE_PLATFORMS:-linux/amd64,linux/arm64}" \
  ${RELEASE_PLUGIN_PLATFORMS:+-plugin-platforms "$RELEASE_PLUGIN_PLATFORMS"} \
  -source-date-epoch "$(git log -1 --format=%ct)"
(cd "$out" && sha256sum -c --quiet SHA256SUMS)
step "release $VERSION ready: $(find "$out" -type f | wc -l) files, $(du -sh "$out" | cut -f1)"
