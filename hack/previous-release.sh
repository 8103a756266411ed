#!/usr/bin/env bash
# Builds the previous release's images (PREVIOUS_RELEASE at PREVIOUS_RELEASE_COMMIT, hack/lib.sh)
# for the upgrade e2e test, and imports them into the local cluster's containerd when it runs
# (PREVIOUS_RELEASE_IMPORT=0: build only, as hack/e2e.sh's background prebuild does).
#
# The release is built by its own scripts from its own sources (`git archive` of the commit,
# then its hack/images.sh with IMAGE_TAG=<version>), so what runs is what that release
# shipped: tags gcsfuse-csi.local/<img>:<version>. Its sources (chart and local values
# included) and images are cached in $PREVIOUS_RELEASE_DIR, keyed by the commit.
#
# Needs the commit in this clone's history (a shallow clone fetches it from its origin): without
# it this fails, saying so, rather than testing an upgrade from something else.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/cluster-lib.sh"

dir=$PREVIOUS_RELEASE_DIR
marker=$dir/.built-$PREVIOUS_RELEASE_COMMIT
if [ ! -f "$marker" ]; then
  if ! git -C "$REPO_ROOT" cat-file -e "$PREVIOUS_RELEASE_COMMIT^{commit}" 2>/dev/null &&
    [ "$(git -C "$REPO_ROOT" rev-parse --is-shallow-repository)" = true ]; then
    step "shallow clone: fetching the history for the previous release's commit"
    git -C "$REPO_ROOT" fetch --quiet --unshallow || true
  fi
  if ! git -C "$REPO_ROOT" cat-file -e "$PREVIOUS_RELEASE_COMMIT^{commit}" 2>/dev/null; then
    echo "previous release $PREVIOUS_RELEASE: commit $PREVIOUS_RELEASE_COMMIT is not in this clone's history (shallow clone? git fetch --unshallow)" >&2
    exit 1
  fi
  step "previous release $PREVIOUS_RELEASE: sources of ${PREVIOUS_RELEASE_COMMIT:0:12}"
  rm -rf "$dir"
  mkdir -p "$dir/src" "$dir/cache"
  git -C "$REPO_ROOT" archive "$PREVIOUS_RELEASE_COMMIT" -- . ":(exclude)demo" | tar -x -C "$dir/src"
  # Its images.sh writes to $GCSFUSE_CSI_CACHE/images: give it a cache of its own that shares
  # the pinned tools (gcsfuse) with ours.
  ln -s "$BIN" "$dir/cache/bin"
  step "previous release $PREVIOUS_RELEASE: images, built by its own hack/images.sh"
  # Without a running containerd in sight (RUN points nowhere), it only packs the images.
  GCSFUSE_CSI_CACHE=$dir/cache IMAGE_TAG=$PREVIOUS_RELEASE CLUSTER_DIR=$dir/no-cluster \
    bash "$dir/src/hack/images.sh" >"$dir/images.log" 2>&1 || {
    tail -20 "$dir/images.log" >&2
    echo "previous release $PREVIOUS_RELEASE: its hack/images.sh failed (log: $dir/images.log)" >&2
    exit 1
  }
  touch "$marker"
fi
ls "$dir/cache/images/"{node,sidecar,webhook}.tar >/dev/null

if [ "${PREVIOUS_RELEASE_IMPORT:-1}" = 1 ] && ctr version >/dev/null 2>&1; then
  step "previous release $PREVIOUS_RELEASE: import its node, sidecar and webhook images"
  for img in node sidecar webhook; do
    ctr_each -n k8s.io images import "$dir/cache/images/$img.tar" >/dev/null
  done
fi
step "previous release $PREVIOUS_RELEASE ready: chart $dir/src/deploy/chart/gcsfuse-csi, images tag $PREVIOUS_RELEASE"
