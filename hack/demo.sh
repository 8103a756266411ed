#!/usr/bin/env bash
# The demo on the embedded emulator: installs what is missing, then mounts a bucket through
# the node plugin and the real sidecar + gcsfuse, runs a task in native and legacy mode and
# prints timings and the objects that reached the bucket. Needs root and /dev/fuse.
source "$(dirname "$0")/lib.sh"
cd "$REPO_ROOT"
bash hack/install-deps.sh
step "demo"
go run ./test/demo
