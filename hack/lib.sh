# Shared by the hack/ scripts: the cache directory, pinned versions and timed steps.
# Source it; do not run it.
set -euo pipefail
export GCSFUSE_CSI_CACHE=${GCSFUSE_CSI_CACHE:-/var/cache/gcsfuse-csi}
# Go caches live in one place that every script and CI reuse.
export GOMODCACHE=${GOMODCACHE:-$(go env GOMODCACHE)}
export GOCACHE=${GOCACHE:-$(go env GOCACHE)}
GCSFUSE_VERSION=3.13.0
GCSFUSE_TOOLCHAIN=go1.27.2
# containerd of the local cluster (hack/containerd-build.sh builds it from its Go module).
# v2.4.2: the newest release the module proxy has. cgroup v1, which this machine runs
# (cgroupfs driver), is deprecated since containerd 2.2 but still supported by every 2.x
# release here: removal is planned for no earlier than May 2029 (its RELEASES.md); 2.2+ only
# logs a deprecation warning. Checked by running the cluster on it (hack/cluster-up.sh).
CONTAINERD_VERSION=${CONTAINERD_VERSION:-2.4.2}
CONTAINERD_VERSION=${CONTAINERD_VERSION#v}
REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN=$GCSFUSE_CSI_CACHE/bin
mkdir -p "$BIN"
_t0=$(date +%s%N)
step() { local n; n=$(( ($(date +%s%N) - _t0) / 100000000 )); printf "=== [%4d.%ds] %s\n" $((n / 10)) $((n % 10)) "$*"; }
STATICCHECK_VERSION=v0.8.2
DEADCODE_VERSION=v0.52.0

# bins_cached DIR VERSION BIN...: true when every BIN is an executable in DIR and DIR records a
# build of VERSION (.built-vVERSION, written last by the build scripts).
bins_cached() {
  local dir=$1 version=$2 b
  shift 2
  for b in "$@"; do [ -x "$dir/$b" ] || return 1; done
  [ -f "$dir/.built-v$version" ]
}
