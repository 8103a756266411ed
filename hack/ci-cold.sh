#!/usr/bin/env bash
# CI as a fresh machine runs it: .ci/run on a clean clone of HEAD with every cache empty, the
# machine's own caches left where they are rather than deleted. Not beside another run of the
# tests: the local cluster (its network namespace, /var/lib/kubelet, containerd's socket) and
# the heavy-build lock are the machine's, one at a time.
#
#   hack/ci-cold.sh DIR      # DIR must not exist; ~20 GiB are written under it
#
# DIR/src is the clone; DIR/gocache, DIR/gomod, DIR/cache (GCSFUSE_CSI_CACHE) and DIR/xdg
# (staticcheck's cache) start empty; the run's log is DIR/run.log and, when every test
# passed, its figures DIR/ci.md, CONTRIBUTING.md's generated block ci-timing-cold (splice it with
# go run ./hack/readme -file CONTRIBUTING.md < DIR/ci.md). Debian packages stay installed: a fresh
# machine also spends ~25 s in apt-get. Remove DIR afterwards (rm -rf; the Go module cache
# is read-only: chmod -R u+w first).
set -euo pipefail
dir=${1:?usage: hack/ci-cold.sh DIR}
if [ -e "$dir" ]; then
  echo "$dir exists: give a new directory, so that nothing of an earlier run is cached" >&2
  exit 2
fi
repo=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
git clone --quiet "$repo" "$dir/src"
echo "cold CI of $(git -C "$dir/src" rev-parse --short HEAD) in $dir (log $dir/run.log)"
cd "$dir/src"
rc=0
env GOCACHE="$dir/gocache" GOMODCACHE="$dir/gomod" GCSFUSE_CSI_CACHE="$dir/cache" \
  XDG_CACHE_HOME="$dir/xdg" CI_MARKDOWN="$dir/ci.md" .ci/run >"$dir/run.log" 2>&1 || rc=$?
tail -3 "$dir/run.log"
echo "cold CI exit code $rc; figures in $dir/ci.md"
exit "$rc"
