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
# host end is a port of HOST_BRIDGE, which carries HOST_IP (node_netns_up). Nothing of the cluster listens on this machine's own addresses, and
# test traffic (kubectl, the e2e tests, the emulator) stays on that veth, inside the machine.
NETNS=gcsfuse-csi
HOST_VETH=gcsfuse-host
NODE_VETH=gcsfuse-node
HOST_IP=10.241.0.1
NODE_IP=10.241.0.2
NET_PREFIX=24
SERVICE_CIDR=10.96.0.0/16
# The host ends of every node's veth are ports of one bridge, which carries HOST_IP: the
# nodes reach each other (and this machine) on it, and nothing else.
HOST_BRIDGE=gcsfuse-br
# Pods: node N's bridge CNI network is 10.(87+N).0.0/16, all within CLUSTER_CIDR.
CLUSTER_CIDR=10.88.0.0/14

# NODES: how many nodes the cluster has, 1 (default) to MAX_NODES. Node 1 runs the control
# plane beside its kubelet, in $NETNS, with the state directories this machine's own are
# (/var/lib/kubelet, /var/lib/containerd, ...). Nodes 2 and up (hack/node-up.sh) run in
# network namespaces of their own, each its kubelet, containerd and kube-proxy under its own
# hack/nodeinit with state directories of its own bound where a node has them (nodeinit
# -private -bind): a second machine, sharing only the kernel. They register with the taint
# EXTRA_NODE_TAINT, so that pods that do not tolerate it (every test written for one node)
# stay on node 1; the driver's DaemonSets tolerate every taint and run on each node.
NODES=${NODES:-1}
MAX_NODES=4
EXTRA_NODE_TAINT_KEY=gcsfuse-csi.local/extra-node
# nodes_check: NODES is a node count this cluster can have (cluster-up.sh; the scripts that
# only stop nodes take whatever runs).
nodes_check() {
  case $NODES in
    [1-4]) ;;
    *) echo "NODES=$NODES: want 1 to $MAX_NODES" >&2; return 1 ;;
  esac
}

# node_vars N: sets N_* to node N's names, addresses and directories, which the node_*
# helpers below act on (node 1 unless a script selects another: node-up.sh, node-down.sh,
# node-systemctl.sh for hack/nodessh's commands of node N).
node_vars() {
  N_INDEX=$1
  N_IP=10.241.0.$(( $1 + 1 ))
  N_POD_CIDR=10.$(( 87 + $1 )).0.0/16
  if [ "$1" = 1 ]; then
    N_NAME=$NODE_NAME N_NETNS=$NETNS N_HOST_VETH=$HOST_VETH N_RUN=$RUN N_ETC=$ETC N_LOGS=$LOGS
    N_STATE="" N_CGROUP=""
  else
    N_NAME=$NODE_NAME-$1 N_NETNS=$NETNS-$1 N_HOST_VETH=$HOST_VETH$1
    N_RUN=$RUN/node$1 N_ETC=$ETC/node$1 N_LOGS=$LOGS/node$1
    # Its kubelet's, CNI's and logs' directories (removed by cluster-down.sh); its
    # containerd's root is kept with the caches, as node 1's /var/lib/containerd is (the
    # images).
    N_STATE=$CLUSTER_DIR/node$1
    N_CGROUP=gcsfuse-csi-node$1
  fi
}
# extra_nodes: the indexes of the nodes above 1 that cluster-up.sh started (their run dirs).
extra_nodes() {
  local d
  for d in "$RUN"/node[0-9]; do [ -d "$d" ] && echo "${d##*/node}"; done
}
# node_netns_up: node N_INDEX's network namespace: a veth pair, N_IP inside, the host end a
# port of HOST_BRIDGE (made here first); no default route inside, so nothing the cluster
# sends can leave the machine; routes to the pods of the nodes already up, and theirs to its.
node_netns_up() {
  local i me=$N_INDEX
  if [ -n "$(ip netns identify "$BASHPID" 2>/dev/null)" ]; then
    echo "node_netns_up: run from this machine's network namespace, not a node's ($(ip netns identify "$BASHPID"))" >&2
    return 1
  fi
  if ! ip link show "$HOST_BRIDGE" >/dev/null 2>&1; then
    ip link add "$HOST_BRIDGE" type bridge
    ip addr add "$HOST_IP/$NET_PREFIX" dev "$HOST_BRIDGE"
    ip link set "$HOST_BRIDGE" up
  fi
  if ! [ -e "/run/netns/$N_NETNS" ]; then
    step "network namespace $N_NETNS: node $N_IP, host end on $HOST_BRIDGE ($HOST_IP)"
    ip netns add "$N_NETNS"
    ip link add "$N_HOST_VETH" type veth peer name "$NODE_VETH"
    ip link set "$NODE_VETH" netns "$N_NETNS"
    ip link set "$N_HOST_VETH" master "$HOST_BRIDGE" up
    ip -n "$N_NETNS" link set lo up
    ip -n "$N_NETNS" addr add "$N_IP/$NET_PREFIX" dev "$NODE_VETH"
    ip -n "$N_NETNS" link set "$NODE_VETH" up
    # Locally sent packets need a route before kube-proxy's DNAT rewrites them: Service IPs
    # route to the host end, where an unreachable route drops any that no rule rewrote.
    ip -n "$N_NETNS" route add "$SERVICE_CIDR" via "$HOST_IP"
  fi
  ip route replace unreachable "$SERVICE_CIDR"
  for ((i = 1; i <= MAX_NODES; i++)); do
    [ "$i" = "$me" ] && continue
    node_vars "$i"
    [ -e "/run/netns/$N_NETNS" ] || continue
    local their_ip=$N_IP their_pods=$N_POD_CIDR their_ns=$N_NETNS
    node_vars "$me"
    ip -n "$N_NETNS" route replace "$their_pods" via "$their_ip"
    ip -n "$their_ns" route replace "$N_POD_CIDR" via "$N_IP"
  done
  node_vars "$me"
}
# cni_conf DIR CIDR: the bridge CNI network of a node whose pods are in CIDR, in DIR.
cni_conf() {
  mkdir -p "$1"
  cat > "$1/10-bridge.conflist" <<EOF2
{"cniVersion": "0.4.0", "name": "gcsfuse-csi-bridge", "plugins": [
  {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": true, "hairpinMode": true,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": "$2"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
  {"type": "portmap", "capabilities": {"portMappings": true}},
  {"type": "loopback"}]}
EOF2
}
# pki_cert NAME CN [O] [SANs]: in the current directory (the PKI), signed by its ca.key: a
# client certificate, or a serving+client one when SANs are given.
pki_cert() {
  local subj="/CN=$2"
  [ -n "${3:-}" ] && subj="/O=$3/CN=$2"
  openssl genrsa -out "$1.key" 2048 2>/dev/null
  openssl req -new -key "$1.key" -subj "$subj" -out "$1.csr"
  {
    echo "basicConstraints=CA:FALSE"
    echo "keyUsage=critical,digitalSignature,keyEncipherment"
    if [ -n "${4:-}" ]; then
      echo "extendedKeyUsage=serverAuth,clientAuth"
      echo "subjectAltName=$4"
    else
      echo "extendedKeyUsage=clientAuth"
    fi
  } > "$1.ext"
  openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 \
    -extfile "$1.ext" -out "$1.crt" 2>/dev/null
  rm -f "$1.csr" "$1.ext"
}
# pki_kubeconfig NAME CERT SERVER: $PKI/NAME.kubeconfig, the client certificate CERT's, for
# the API server at SERVER.
pki_kubeconfig() {
  cat > "$PKI/$1.kubeconfig" <<EOK
apiVersion: v1
kind: Config
clusters: [{name: local, cluster: {server: "$3", certificate-authority: $PKI/ca.crt}}]
users: [{name: u, user: {client-certificate: $PKI/$2.crt, client-key: $PKI/$2.key}}]
contexts: [{name: local, context: {cluster: local, user: u}}]
current-context: local
EOK
}

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
  local dir d avail size line spare dirs=("$KUBELET_ROOT" "$CONTAINERD_ROOT")
  # Nodes above 1 keep their kubelet's and containerd's state under the cache.
  [ "$NODES" -gt 1 ] && dirs+=("$GCSFUSE_CSI_CACHE")
  for dir in "${dirs[@]}"; do
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
# The node_* helpers act on node N_INDEX (node_vars); its pid files are in $N_RUN.
node_init_pid() { cat "$N_RUN/nodeinit.pid" 2>/dev/null || true; }
# node_running: the init of $N_RUN/nodeinit.pid runs, and is ours (not a pid reused since).
node_running() {
  local p
  p=$(node_init_pid)
  [ -n "$p" ] && [ "$(readlink "/proc/$p/exe" 2>/dev/null)" = "$N_RUN/nodeinit" ]
}
# node_exec CMD...: runs CMD as a process of the node (all of its init's namespaces).
node_exec() { nsenter -t "$(node_init_pid)" -a -- "$@"; }
# node_start NAME LOG CMD...: starts CMD in the background as a process of the node, in a
# session of its own (an interrupt of the script that started it must not stop it), and
# writes its pid on this machine to $RUN/NAME.pid, so that kill, kill -0 and /proc work from
# here as for any other process. nsenter forks CMD into the node's PID namespace and waits
# for it: CMD is nsenter's only child. NAME.pid is in $N_RUN.
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
  echo "$pid" >"$N_RUN/$n.pid"
}
# A node that ended without cluster-down.sh (killed, or this machine's processes stopped)
# leaves its pid files, node 1 this side's binds (private once the node's copies are gone)
# and the mounts they received: a new node on them would inherit stale mounts and pids.
# node_leftovers names those of node N_INDEX.
node_leftovers() {
  local f left=""
  for f in nodeinit.pid node-unshare.pid containerd.pid kubelet.pid kube-proxy.pid shared-mounts; do
    [ -e "$N_RUN/$f" ] && left+=" $f"
  done
  echo "$left"
}

# node_boot [NODEINIT_FLAG...]: starts node N_INDEX: hack/nodeinit (with the flags given) as
# PID 1 of new PID, mount, UTS and IPC namespaces inside the node's network namespace, in a
# session of its own; its pid here in $N_RUN/nodeinit.pid, unshare's in node-unshare.pid.
node_boot() {
  node_running && return 0
  local unshare init="" i
  mkdir -p "$N_RUN" "$N_LOGS"
  (cd "$REPO_ROOT" && go build -o "$N_RUN/nodeinit" ./hack/nodeinit)
  step "start node $N_NAME: PID, mount, UTS, IPC namespaces of its own under hack/nodeinit"
  setsid nohup nsenter "--net=/run/netns/$N_NETNS" -- unshare --pid --mount --uts --ipc --fork --kill-child --mount-proc --propagation unchanged \
    -- "$N_RUN/nodeinit" -hostname "$N_NAME" -grace "${NODE_STOP_GRACE_SECONDS}s" "$@" >"$N_LOGS/node.log" 2>&1 &
  unshare=$!
  echo "$unshare" >"$N_RUN/node-unshare.pid"
  for ((i = 0; i < 100; i++)); do
    init=$(tr -d ' ' <"/proc/$unshare/task/$unshare/children" 2>/dev/null || true)
    [ -n "$init" ] && grep -q "node up" "$N_LOGS/node.log" && break
    kill -0 "$unshare" 2>/dev/null || break
    sleep 0.05
  done
  if [ -z "$init" ] || ! grep -q "node up" "$N_LOGS/node.log"; then
    echo "node $N_NAME did not start: $(cat "$N_LOGS/node.log")" >&2
    return 1
  fi
  echo "$init" >"$N_RUN/nodeinit.pid"
  # What the node is for: a privileged pod's way into the node's mounts works there.
  if ! node_exec nsenter --mount=/proc/1/ns/mnt -- true; then
    echo "node $N_NAME's PID 1 refuses nsenter --mount=/proc/1/ns/mnt" >&2
    return 1
  fi
  step "node up: init pid $init here, $(node_exec hostname); PID 1 of the node is $(node_exec cat /proc/1/comm)"
}

# unit_up NAME CMD...: node N_INDEX's NAME (containerd, kubelet) running CMD, its command
# kept in $N_RUN/NAME.sh so that hack/node-systemctl.sh (the storage testsuites' disruptive
# tests stop and start the kubelet over SSH; the chaos soak restarts either) starts it again
# the same way; started unless it runs.
unit_up() {
  local n=$1
  shift
  printf 'exec' >"$N_RUN/$n.sh"
  printf ' %q' "$@" >>"$N_RUN/$n.sh"
  echo >>"$N_RUN/$n.sh"
  [ -f "$N_RUN/$n.pid" ] && kill -0 "$(cat "$N_RUN/$n.pid")" 2>/dev/null && return 0
  node_start "$n" "$N_LOGS/$n.log" bash "$N_RUN/$n.sh"
}
# kubelet_up KUBELET_ARGS...: node N_INDEX's kubelet ($K8S_BIN/kubelet KUBELET_ARGS).
kubelet_up() { unit_up kubelet "$K8S_BIN/kubelet" "$@"; }
# containerd_up CONFIG: node N_INDEX's containerd ($CTRD_DIR's, its own directory first on
# PATH, for anything it resolves by name).
containerd_up() { unit_up containerd env "PATH=$CTRD_DIR:$PATH" "$CTRD_DIR/containerd" --config "$1"; }

# node_power_off: stops node N_INDEX whole: its init sends what is left in it SIGTERM, then
# SIGKILL past NODE_STOP_GRACE_SECONDS, and exits; a node whose init's pid was never written
# (its start stopped half way) ends with its unshare (--kill-child). Fails when it still runs
# after SIGKILL (a process stuck in the kernel); says "stopped" when there was one to stop.
node_power_off() {
  local node_pid="" i
  if node_running; then
    node_pid=$(node_init_pid)
  elif [ -f "$N_RUN/node-unshare.pid" ] && [ "$(readlink "/proc/$(cat "$N_RUN/node-unshare.pid")/exe" 2>/dev/null)" = "$(command -v unshare)" ]; then
    node_pid=$(cat "$N_RUN/node-unshare.pid")
  fi
  [ -n "$node_pid" ] || return 0
  kill -TERM "$node_pid" 2>/dev/null
  for ((i = 0; i < (NODE_STOP_GRACE_SECONDS + NODE_STOP_SLACK_SECONDS) * 5; i++)); do
    kill -0 "$node_pid" 2>/dev/null || break
    sleep 0.2
  done
  if kill -0 "$node_pid" 2>/dev/null; then
    echo "node $N_NAME ($node_pid) still running past its grace; SIGKILL" >&2
    kill -KILL "$node_pid" 2>/dev/null
    for ((i = 0; i < 50; i++)); do kill -0 "$node_pid" 2>/dev/null || break; sleep 0.2; done
  fi
  if kill -0 "$node_pid" 2>/dev/null; then
    echo "node $N_NAME ($node_pid) did not end after SIGKILL (a process stuck in the kernel?)" >&2
    return 1
  fi
  step "stopped node $N_NAME"
}

# ctr ARGS...: the ctr of the containerd that cluster-up.sh started (it records it in
# $RUN/ctr), else the one of the runtime chosen by $CONTAINERD, on node N_INDEX's containerd
# (from inside the node for a node above 1: its socket is in its own /run/containerd).
# Without the cgroup v1 deprecation warning that 2.x's ctr prints on every call (containerd
# logs it once).
ctr() {
  local c=$CTRD_DIR/ctr
  [ -f "$RUN/ctr" ] && c=$(cat "$RUN/ctr")
  if [ "$N_INDEX" = 1 ]; then
    CONTAINERD_SUPPRESS_DEPRECATION_WARNINGS=1 "$c" --address "$CONTAINERD_SOCK" "$@"
  else
    node_exec env CONTAINERD_SUPPRESS_DEPRECATION_WARNINGS=1 "$c" --address "$CONTAINERD_SOCK" "$@"
  fi
}
# each_node CMD...: CMD (a function of these, acting on node N_INDEX) for node 1 and every
# other node that runs, each in a subshell; fails on the first that fails.
each_node() {
  local i
  for i in 1 $(extra_nodes); do
    (
      node_vars "$i"
      if [ "$i" = 1 ] || node_running; then "$@"; fi
    ) || return 1
  done
}
# ctr_each ARGS...: ctr ARGS on every node's containerd that runs (images go to each).
ctr_each() { each_node ctr "$@"; }

# CUSTOM_SIDECAR_IMAGE is the sidecar image under a name of the user's own, as a pod that
# brings its own sidecar image names it (a container called gcsfuse-sidecar lends the webhook
# its image): e2e TestCustomSidecarImage runs it and checks the sidecar ran from that name.
CUSTOM_SIDECAR_IMAGE=$IMAGE_REPO/sidecar-custom:$IMAGE_TAG

# import_images TAR...: imports the images into node N_INDEX's containerd's k8s.io namespace,
# and tags the sidecar as CUSTOM_SIDECAR_IMAGE too.
import_images() {
  local t
  for t in "$@"; do ctr -n k8s.io images import "$t" >/dev/null || { echo "import $t into node $N_INDEX's containerd failed" >&2; return 1; }; done
  ctr -n k8s.io images tag --force "$IMAGE_REPO/sidecar:$IMAGE_TAG" "$CUSTOM_SIDECAR_IMAGE" >/dev/null
}
# import_images_each TAR...: import_images on every node that runs.
import_images_each() { each_node import_images "$@"; }

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

node_vars 1
