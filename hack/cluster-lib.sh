# shellcheck shell=bash disable=SC2034 # variables are used by the scripts that source this file
# Shared by the cluster scripts (source after lib.sh; do not run): versions, directories and
# small helpers for the local single-node Kubernetes cluster.
K8S_VERSION=${K8S_VERSION:-1.34.4}
K8S_VERSION=${K8S_VERSION#v}
# Minor version, for the configuration that differs between releases (1.28 is the oldest run
# here: the last release before native sidecars were on by default).
K8S_MINOR=$(echo "$K8S_VERSION" | cut -d. -f2)
K8S_DIR=$GCSFUSE_CSI_CACHE/k8s-$K8S_VERSION
K8S_BIN=$K8S_DIR/bin
# Container runtime: CONTAINERD=2 (default) runs containerd $CONTAINERD_VERSION (lib.sh), built
# from its Go module by containerd-build.sh; CONTAINERD=1.6 runs Debian's containerd 1.6 from
# /usr/bin with the old (version 2) configuration. Either runs Debian's runc. The scripts call
# every runtime binary by its absolute path.
CONTAINERD=${CONTAINERD:-2}
CONTAINERD_BIN=$GCSFUSE_CSI_CACHE/containerd-$CONTAINERD_VERSION/bin
case $CONTAINERD in
  2) CTRD_DIR=$CONTAINERD_BIN ;;
  1.6) CTRD_DIR=/usr/bin ;;
  *) echo "CONTAINERD=$CONTAINERD: want 2 (containerd v$CONTAINERD_VERSION) or 1.6 (Debian's)" >&2; exit 1 ;;
esac
RUNC=/usr/sbin/runc
# etcd at the version Kubernetes $K8S_VERSION pins (etcd_version_for, lib.sh), built from its Go
# module by etcd-build.sh.
ETCD_VERSION=${ETCD_VERSION:-$(etcd_version_for "$K8S_MINOR")}
ETCD_VERSION=${ETCD_VERSION#v}
ETCD_BIN=$GCSFUSE_CSI_CACHE/etcd-$ETCD_VERSION/bin
CONTAINERD_SOCK=/run/containerd/containerd.sock
# Cluster state (etcd data, configs, logs, pids). Removed by cluster-down.sh, except the PKI,
# which is kept so a warm `up` skips openssl (it is cheap either way).
CLUSTER_DIR=${CLUSTER_DIR:-$GCSFUSE_CSI_CACHE/cluster}
PKI=$CLUSTER_DIR/pki
LOGS=$CLUSTER_DIR/logs
RUN=$CLUSTER_DIR/run
ETC=$CLUSTER_DIR/etc
IMAGES_DIR=$GCSFUSE_CSI_CACHE/images
export KUBECONFIG=${E2E_KUBECONFIG:-$PKI/admin.kubeconfig}
# Every image we build is $IMAGE_REPO/<name>:$IMAGE_TAG: images.sh names them so, the local
# cluster imports them (pods use imagePullPolicy Never: no registry is asked, whatever the
# name), deploy.sh installs the driver with them and release-images.sh pushes them. E.g.
# IMAGE_REPO=registry.example.com/team/gcsfuse-csi IMAGE_TAG=v0.2.0.
IMAGE_REPO=${IMAGE_REPO:-gcsfuse-csi.local}
IMAGE_REPO=${IMAGE_REPO%/}
IMAGE_TAG=${IMAGE_TAG:-e2e}
NODE_NAME=$(hostname)
# The cluster runs in a network namespace of its own, made by cluster-up.sh: its own loopback
# (etcd, the API server's components), its CNI bridge and pods, and NODE_IP on a veth whose
# host end is HOST_IP. Nothing of the cluster listens on this machine's own addresses, and
# test traffic (kubectl, the e2e tests, the emulator) stays on that veth, inside the machine.
NETNS=gcsfuse-csi
HOST_VETH=gcsfuse-host
NODE_VETH=gcsfuse-node
HOST_IP=10.241.0.1
NODE_IP=10.241.0.2
NET_PREFIX=24
SERVICE_CIDR=10.96.0.0/16

# The kubelet's and containerd's roots, and the free space a run needs there. The kubelet
# (evictionHard nodefs.available/imagefs.available, 1% in cluster-up.sh) counts what statfs
# leaves to non-root users (f_bavail: a root-only reserve, however large, does not count).
# Below that line it evicts every pod, the emulator and the driver included, and deletes the
# images it then finds unused, which pods with imagePullPolicy Never cannot get back: a run
# that starts a few GiB above it fails as dozens of unrelated tests ("connection refused",
# ErrImageNeverPull). disk_preflight refuses to start instead. CLUSTER_MIN_FREE_GIB: the
# space a run may write above the line (images, containers, emptyDirs, the emulator's
# objects); a full CI run (.ci/run, 2026-12-05) took 2.5 GiB of it at its peak.
KUBELET_ROOT=/var/lib/kubelet
CONTAINERD_ROOT=/var/lib/containerd
EVICTION_NODEFS_PERCENT=1
CLUSTER_MIN_FREE_GIB=${CLUSTER_MIN_FREE_GIB:-10}

# disk_preflight: fails, saying how much is free and what to do, when the file system under
# the kubelet or containerd has less than CLUSTER_MIN_FREE_GIB above the eviction line.
disk_preflight() {
  local dir d avail size line spare
  for dir in "$KUBELET_ROOT" "$CONTAINERD_ROOT"; do
    d=$dir
    while [ ! -e "$d" ]; do d=$(dirname "$d"); done
    read -r avail size < <(df -k --output=avail,size "$d" | tail -n 1) && [ -n "$size" ] || { echo "df $d failed" >&2; return 1; }
    line=$(( size * EVICTION_NODEFS_PERCENT / 100 ))
    spare=$(( (avail - line) / 1024 / 1024 ))
    if [ "$spare" -lt "$CLUSTER_MIN_FREE_GIB" ]; then
      echo "not enough disk for a cluster run: the file system under $dir has $(( avail / 1024 / 1024 )) GiB free to non-root users (df's Avail), $spare GiB above the kubelet's eviction line (nodefs.available ${EVICTION_NODEFS_PERCENT}% of $(( size / 1024 / 1024 )) GiB); a run needs $CLUSTER_MIN_FREE_GIB GiB there (CLUSTER_MIN_FREE_GIB), or the kubelet evicts the emulator and the driver mid-run. Free some (e.g. go clean -cache, old clones, images under $GCSFUSE_CSI_CACHE) and run again." >&2
      return 1
    fi
  done
}

# nsexec CMD...: runs CMD inside the cluster's network namespace, and only there: unlike
# `ip netns exec`, nsenter leaves the mount namespace alone, so the kubelet, containerd and
# the node plugin share their mounts with each other and with this machine.
NSEXEC=(nsenter "--net=/run/netns/$NETNS" --)
nsexec() { "${NSEXEC[@]}" "$@"; }
netns_exists() { [ -e "/run/netns/$NETNS" ]; }

kctl() { "$K8S_BIN/kubectl" "$@"; }

# The node: its kubelet, containerd and kube-proxy run in PID, mount, UTS and IPC namespaces
# of their own (and the cluster's network namespace) under hack/nodeinit as PID 1, the way
# kind's node containers run under their init: a privileged pod's
# `nsenter --mount=/proc/1/ns/mnt` then reaches the node's mounts (this machine's own PID 1
# refuses that open) and the node can be stopped whole. hack/cluster-up.sh starts it
# (node_up); $RUN/nodeinit.pid holds its init's pid on this machine. The node's mounts under
# the directories of NODE_SHARED_DIRS propagate to this machine (cluster-up.sh makes them
# shared, then this side a slave), so whatever reads them here (tests, scripts) sees them.
NODE_SHARED_DIRS=(/var/lib/kubelet /var/lib/containerd /run/containerd /run/crio)
# NODE_STOP_GRACE_SECONDS: how long the node's processes get between SIGTERM and SIGKILL
# when the node stops (cluster-down.sh); the wait for the init is bounded by it plus
# NODE_STOP_SLACK_SECONDS.
NODE_STOP_GRACE_SECONDS=30
NODE_STOP_SLACK_SECONDS=10
node_init_pid() { cat "$RUN/nodeinit.pid" 2>/dev/null || true; }
# node_running: the init of $RUN/nodeinit.pid runs, and is ours (not a pid reused since).
node_running() {
  local p
  p=$(node_init_pid)
  [ -n "$p" ] && [ "$(readlink "/proc/$p/exe" 2>/dev/null)" = "$RUN/nodeinit" ]
}
# node_exec CMD...: runs CMD as a process of the node (all of its init's namespaces).
node_exec() { nsenter -t "$(node_init_pid)" -a -- "$@"; }
# node_start NAME LOG CMD...: starts CMD in the background as a process of the node, in a
# session of its own (an interrupt of the script that started it must not stop it), and
# writes its pid on this machine to $RUN/NAME.pid, so that kill, kill -0 and /proc work from
# here as for any other process. nsenter forks CMD into the node's PID namespace and waits
# for it: CMD is nsenter's only child.
node_start() {
  local n=$1 log=$2 launcher pid="" i
  shift 2
  node_running || { echo "$n: the node is not running (hack/cluster-up.sh starts it)" >&2; return 1; }
  setsid nohup nsenter -t "$(node_init_pid)" -a -- "$@" >>"$log" 2>&1 &
  launcher=$!
  for ((i = 0; i < 100; i++)); do
    pid=$(pgrep -P "$launcher" | head -1 || true)
    [ -n "$pid" ] && break
    kill -0 "$launcher" 2>/dev/null || break
    sleep 0.05
  done
  if [ -z "$pid" ]; then
    echo "$n did not start in the node (nsenter $launcher; log $log)" >&2
    return 1
  fi
  echo "$pid" >"$RUN/$n.pid"
}
# ctr ARGS...: the ctr of the containerd that cluster-up.sh started (it records it in
# $RUN/ctr), else the one of the runtime chosen by $CONTAINERD. Without the cgroup v1
# deprecation warning that 2.x's ctr prints on every call (containerd logs it once).
ctr() {
  local c=$CTRD_DIR/ctr
  [ -f "$RUN/ctr" ] && c=$(cat "$RUN/ctr")
  CONTAINERD_SUPPRESS_DEPRECATION_WARNINGS=1 "$c" --address "$CONTAINERD_SOCK" "$@"
}

# CUSTOM_SIDECAR_IMAGE is the sidecar image under a name of the user's own, as a pod that
# brings its own sidecar image names it (a container called gcsfuse-sidecar lends the webhook
# its image): e2e TestCustomSidecarImage runs it and checks the sidecar ran from that name.
CUSTOM_SIDECAR_IMAGE=$IMAGE_REPO/sidecar-custom:$IMAGE_TAG

# import_images TAR...: imports the images into containerd's k8s.io namespace, and tags the
# sidecar as CUSTOM_SIDECAR_IMAGE too.
import_images() {
  local t
  for t in "$@"; do ctr -n k8s.io images import "$t" >/dev/null; done
  ctr -n k8s.io images tag --force "$IMAGE_REPO/sidecar:$IMAGE_TAG" "$CUSTOM_SIDECAR_IMAGE" >/dev/null
}

# waitfor DESC TIMEOUT_SECONDS CMD...: polls CMD every 0.5 s until it succeeds or the timeout.
waitfor() {
  local desc=$1 timeout=$2 start
  shift 2
  start=$(date +%s)
  until "$@" >/dev/null 2>&1; do
    if (( $(date +%s) - start > timeout )); then
      echo "TIMEOUT after ${timeout}s waiting for $desc" >&2
      return 1
    fi
    sleep 0.5
  done
  step "$desc ready"
}

# cluster_ready builds what the cluster needs, brings it up and deploys the driver: every
# phase cached and idempotent, so a benchmark runs from a clean clone (hack/e2e.sh runs the
# same phases, timed one by one).
cluster_ready() {
  "$REPO_ROOT/hack/install-deps.sh"
  "$REPO_ROOT/hack/cluster-deps.sh"
  "$REPO_ROOT/hack/k8s-build.sh"
  "$REPO_ROOT/hack/images.sh"
  "$REPO_ROOT/hack/cluster-up.sh"
  "$REPO_ROOT/hack/deploy.sh"
}

# cluster_down_unless_kept VAR: a benchmark's EXIT trap: the cluster down, unless $VAR is 1
# (then said how to stop it); exits with the status the script had.
cluster_down_unless_kept() {
  local rc=$? keep=${!1:-}
  if [ "$keep" = 1 ]; then
    echo "$1=1: cluster left running; stop it with hack/cluster-down.sh"
  else
    "$REPO_ROOT/hack/cluster-down.sh" || true
  fi
  exit "$rc"
}
