#!/usr/bin/env bash
# hack/node-up.sh N: starts node N (2 to MAX_NODES, cluster-lib.sh) of the cluster that
# hack/cluster-up.sh started, and joins it: another machine as kind makes one, sharing only
# the kernel with node 1. cluster-up.sh runs it for each node up to NODES; run alone, it starts
# a node stopped by hack/node-down.sh again (a reboot).
#
# The node: network namespace $NETNS-N (its address on the bridge every node is on, routes to
# the other nodes' pods), then hack/nodeinit as its PID 1 with state directories of its own
# where a node has them (/var/lib/kubelet, /var/lib/containerd, /var/lib/cni, /var/log/pods
# and /var/log/containers from $CLUSTER_DIR/nodeN and the cache; /run/containerd, /run/netns
# and /run/crio empty tmpfs, gone with the node), in it containerd (the images imported
# again: its root is its own), the kubelet (its cgroups under /gcsfuse-csi-nodeN, its own
# certificates; registered with the taint $EXTRA_NODE_TAINT_KEY) and kube-proxy, and its SSH
# endpoint on its address. Waits until the node is Ready. Idempotent, like cluster-up.sh.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/cluster-lib.sh"

n=${1:-}
if ! [[ $n =~ ^[0-9]+$ ]] || [ "$n" -lt 2 ] || [ "$n" -gt "$MAX_NODES" ]; then
  echo "usage: hack/node-up.sh N (2 to $MAX_NODES): node 1 is hack/cluster-up.sh's" >&2
  exit 2
fi
node_vars 1
api=https://$N_IP:6443
[ -f "$RUN/kube-apiserver.pid" ] && kill -0 "$(cat "$RUN/kube-apiserver.pid")" 2>/dev/null ||
  { echo "node $n: the cluster's API server is not running (hack/cluster-up.sh starts it)" >&2; exit 1; }
if [ "$(cat "$RUN/ctr" 2>/dev/null)" != "$CTRD_DIR/ctr" ]; then
  echo "node $n: node 1 runs $(cat "$RUN/ctr" 2>/dev/null || echo "no containerd"), not $CTRD_DIR's (CONTAINERD=$CONTAINERD): every node runs the same runtime" >&2
  exit 1
fi
node_vars "$n"
mkdir -p "$N_RUN" "$N_LOGS" "$N_ETC" "$N_STATE"/{kubelet,cni,log-pods,log-containers}
ctrd_root=$GCSFUSE_CSI_CACHE/node$n-containerd
mkdir -p "$ctrd_root"

running() { [ -f "$N_RUN/$1.pid" ] && kill -0 "$(cat "$N_RUN/$1.pid")" 2>/dev/null; }

# Certificates of its own: the Node authorizer lets a kubelet touch only its own Node.
if ! [ -f "$PKI/kubelet-$n.kubeconfig" ] || ! [ -f "$PKI/.node$n-$N_IP" ]; then
  step "node $n: kubelet certificates ($N_NAME, $N_IP)"
  (
    cd "$PKI" || exit 1
    pki_cert "kubelet-client-$n" "system:node:$N_NAME" system:nodes
    pki_cert "kubelet-server-$n" "$N_NAME" "" "DNS:$N_NAME,DNS:localhost,IP:127.0.0.1,IP:$N_IP"
  )
  pki_kubeconfig "kubelet-$n" "kubelet-client-$n" "$api"
  touch "$PKI/.node$n-$N_IP"
fi
pki_kubeconfig "kube-proxy-$n" kube-proxy "$api"

# Configuration: node 1's, with this node's pods, certificates and cgroups.
cni_conf "$N_ETC/cni" "$N_POD_CIDR"
sed "s|conf_dir = \"$ETC/cni\"|conf_dir = \"$N_ETC/cni\"|" "$ETC/containerd.toml" >"$N_ETC/containerd.toml"
grep -q "conf_dir = \"$N_ETC/cni\"" "$N_ETC/containerd.toml" || { echo "node $n: no CNI conf_dir in $ETC/containerd.toml to replace" >&2; exit 1; }
{
  sed "s|$PKI/kubelet-server\.|$PKI/kubelet-server-$n.|g" "$ETC/kubelet.yaml"
  echo "cgroupRoot: /$N_CGROUP"
  echo "registerWithTaints: [{key: $EXTRA_NODE_TAINT_KEY, value: \"true\", effect: NoSchedule}]"
} >"$N_ETC/kubelet.yaml"
node_netns_up
# Frames between two nodes cross this machine's bridge, which br_netfilter hands to its
# FORWARD chain (restored by cluster-down.sh from its snapshot).
iptables -C FORWARD -i "$HOST_BRIDGE" -o "$HOST_BRIDGE" -j ACCEPT 2>/dev/null ||
  iptables -I FORWARD -i "$HOST_BRIDGE" -o "$HOST_BRIDGE" -j ACCEPT

if ! node_running; then
  # A node that ended without node-down.sh (its init killed: a power cut) left only its pid
  # files and cgroups here (its mounts were its own): node-down.sh clears them, and the node
  # boots as after a reboot.
  left=$(node_leftovers)
  if [ -n "$left" ]; then
    step "node $n went down without hack/node-down.sh (left in $N_RUN:$left): clearing that first"
    "$REPO_ROOT/hack/node-down.sh" "$n"
    left=$(node_leftovers)
    [ -z "$left" ] || { echo "node $n: its previous run's state is still in $N_RUN:$left" >&2; exit 1; }
  fi
  # As node 1's (cluster-up.sh's containerd_state): a root another containerd wrote may not
  # be readable by this one; only images are there. Nothing is mounted on it here (the
  # node's mounts were its own).
  want=$("$CTRD_DIR/containerd" --version | awk '{print $3}')
  if [ "$(cat "$ctrd_root/.gcsfuse-csi-runtime" 2>/dev/null)" != "$want" ]; then
    find "$ctrd_root" -mindepth 1 -maxdepth 1 -exec rm -rf {} +
    echo "$want" >"$ctrd_root/.gcsfuse-csi-runtime"
  fi
  node_boot -private \
    -bind "$N_STATE/kubelet:/var/lib/kubelet" -bind "$ctrd_root:/var/lib/containerd" -bind "$N_STATE/cni:/var/lib/cni" \
    -bind "$N_STATE/log-pods:/var/log/pods" -bind "$N_STATE/log-containers:/var/log/containers" \
    -tmpfs /run/containerd -tmpfs /run/netns -tmpfs /run/crio -tmpfs /run/nri
fi

step "node $n: start containerd"
containerd_up "$N_ETC/containerd.toml"
waitfor "node $n containerd" 30 ctr version
step "node $n: import images"
shopt -s nullglob
imgs=("$IMAGES_DIR"/*.tar)
[ ${#imgs[@]} -gt 0 ] || { echo "no images in $IMAGES_DIR: run hack/images.sh" >&2; exit 1; }
import_images "${imgs[@]}"

# The kubelet wants its cgroup root in every hierarchy before it starts (cgroupfs driver).
if [ "$(stat -fc %T /sys/fs/cgroup)" = cgroup2fs ]; then
  mkdir -p "/sys/fs/cgroup/$N_CGROUP"
else
  for h in /sys/fs/cgroup/*/; do
    [ -L "${h%/}" ] && continue
    mkdir -p "$h$N_CGROUP" 2>/dev/null || true
  done
fi

step "node $n: start kubelet, kube-proxy, SSH endpoint"
kubelet_started=$(date +%s)
kubelet_up --config="$N_ETC/kubelet.yaml" --kubeconfig="$PKI/kubelet-$n.kubeconfig" \
  --node-ip="$N_IP" --hostname-override="$N_NAME" --root-dir=/var/lib/kubelet
running kube-proxy || node_start kube-proxy "$N_LOGS/kube-proxy.log" "$K8S_BIN/kube-proxy" --kubeconfig="$PKI/kube-proxy-$n.kubeconfig" \
  --hostname-override="$N_NAME" --cluster-cidr="$CLUSTER_CIDR" --proxy-mode=iptables --conntrack-max-per-core=0 \
  --metrics-bind-address=127.0.0.1:10249 --healthz-bind-address=127.0.0.1:10256
# Its SSH endpoint, as node 1's (cluster-up.sh): the same key; node-systemctl.sh acts on this
# node (GCSFUSE_CSI_NODE).
mkdir -p "$N_RUN/ssh/bin"
ln -sf "$REPO_ROOT/hack/node-systemctl.sh" "$N_RUN/ssh/bin/systemctl"
ln -sf "$REPO_ROOT/hack/node-systemctl.sh" "$N_RUN/ssh/bin/sudo"
if ! running nodessh; then
  setsid nohup env GCSFUSE_CSI_NODE="$n" nsenter "--net=/run/netns/$N_NETNS" -- "$RUN/nodessh" -listen "$N_IP:22" -key "$RUN/ssh/id_ed25519" \
    -path "$N_RUN/ssh/bin" >"$N_LOGS/nodessh.log" 2>&1 &
  echo $! >"$N_RUN/nodessh.pid"
fi
# This kubelet up (its own health endpoint), then the Node Ready as this kubelet reported it:
# after a reboot the Node object still says Ready from before.
waitfor "node $n kubelet healthy" 60 node_exec curl -sf http://127.0.0.1:10248/healthz
node_ready() {
  local ready beat
  read -r ready beat < <(kctl get node "$N_NAME" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status} {.status.conditions[?(@.type=="Ready")].lastHeartbeatTime}')
  [ "$ready" = True ] && [ "$(date -d "$beat" +%s)" -ge "$kubelet_started" ]
}
waitfor "node $N_NAME" 180 node_ready
step "node $n up: $N_NAME, $N_IP, pods $N_POD_CIDR, $(kctl get node "$N_NAME" -o jsonpath='{.status.nodeInfo.kubeletVersion} {.status.nodeInfo.containerRuntimeVersion}')"
