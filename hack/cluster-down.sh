#!/usr/bin/env bash
# Stops the local cluster started by cluster-up.sh, every node (either runtime: containerd 2.x or
# CONTAINERD=1.6; the ctr of the one that runs is used) and returns the machine to how it was:
# workload pods are deleted first (so the CSI driver unmounts their volumes while it still
# runs), then every process is stopped by its pid, in order (the API server before etcd, or
# it hangs for minutes), containers are killed, the node's init stopped, mounts under the kubelet and containerd state
# dirs are unmounted, the cluster's network namespace is deleted, the saved iptables rules
# and sysctls are restored, and the cluster
# state (etcd data, kubelet dir, CNI state, logs are kept in $CLUSTER_DIR/logs.last) removed.
# Safe to run when nothing is running. Never fails half way: each step is best effort.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/cluster-lib.sh"
set +e +o pipefail

running() { [ -f "$RUN/$1.pid" ] && kill -0 "$(cat "$RUN/$1.pid")" 2>/dev/null; }
# stop NAME...: SIGTERM to each (only the pids we started), wait up to 30 s for all, then
# SIGKILL the ones left. Names given together are independent and stop in parallel.
stop() {
  local n pid i alive
  declare -A pids=()
  for n in "$@"; do
    [ -f "$RUN/$n.pid" ] || continue
    pid=$(cat "$RUN/$n.pid")
    kill "$pid" 2>/dev/null && pids[$n]=$pid
    rm -f "$RUN/$n.pid"
  done
  for ((i = 0; i < 150; i++)); do
    alive=0
    for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    [ "$alive" = 0 ] && break
    sleep 0.2
  done
  for n in "${!pids[@]}"; do
    if kill -0 "${pids[$n]}" 2>/dev/null; then
      echo "$n (${pids[$n]}) ignored SIGTERM for 30 s; SIGKILL" >&2
      kill -9 "${pids[$n]}" 2>/dev/null
    fi
  done
  step "stopped $*"
}

step "cluster down"
# The kubelet asked by its health endpoint, not its pid file: pods are deleted whenever it
# runs to unmount their volumes.
if running kube-apiserver && node_running && node_exec curl -sf --max-time 5 http://127.0.0.1:10248/healthz >/dev/null 2>&1; then
  step "delete workload pods (the driver unmounts their volumes)"
  for ns in $(kctl get ns -o jsonpath='{.items[*].metadata.name}' 2>/dev/null); do
    case $ns in kube-system | kube-public | kube-node-lease | gcsfuse-csi) continue ;; esac
    kctl -n "$ns" delete jobs,deployments,pods --all --wait=false >/dev/null 2>&1
  done
  # Pods outside our namespace gone (or 60 s), then our driver.
  for ((i = 0; i < 120; i++)); do
    n=$(kctl get pods -A --no-headers 2>/dev/null | grep -vc '^gcsfuse-csi ')
    [ "$n" = 0 ] && break
    sleep 0.5
  done
  # Keep the driver's logs for debugging (the kubelet deletes them with the pods).
  for p in $(kctl -n gcsfuse-csi get pods -o name 2>/dev/null); do
    kctl -n gcsfuse-csi logs "$p" --all-containers --timestamps > "$LOGS/${p#pod/}.log" 2>&1
  done
  # The driver's own pods are not deleted through the API: deleting its namespace took ~20 s
  # (the namespace controller's passes) and left nothing the steps below do not remove; they
  # kill every container of the node, the driver's with them.
  sleep 1 # let the kubelet tear down the last sandboxes (CNI DEL)
fi

# The nodes above 1 (hack/node-up.sh), whole: their init stops what runs in them.
for n in $(extra_nodes); do "$REPO_ROOT/hack/node-down.sh" --remove "$n"; done

step "stop processes"
# The node agents and controllers first (together), then the API server, then etcd: an API
# server still shutting down when etcd is gone hangs for minutes and keeps :6443 busy.
stop nodessh kube-proxy kubelet kube-scheduler kube-controller-manager
# The containers still running (the driver's) go before the API server: with their clients
# connected it ignored SIGTERM for 30 s.
if running containerd; then
  for id in $(ctr -n k8s.io tasks ls -q 2>/dev/null); do ctr -n k8s.io tasks kill -s SIGKILL "$id" >/dev/null 2>&1; done
fi
stop kube-apiserver
stop etcd
if running containerd; then
  for ((i = 0; i < 20; i++)); do
    [ -z "$(ctr -n k8s.io tasks ls -q 2>/dev/null | head -1)" ] && break
    for id in $(ctr -n k8s.io tasks ls -q 2>/dev/null); do ctr -n k8s.io tasks rm -f "$id" >/dev/null 2>&1; done
    sleep 0.5
  done
  # containerd 2.x keeps pod sandboxes in a store of their own (1.6 has no such command):
  # removing one removes its pause container too.
  for id in $(ctr -n k8s.io sandboxes ls 2>/dev/null | awk 'NR > 1 {print $1}'); do
    ctr -n k8s.io sandboxes rm -f "$id" >/dev/null 2>&1
  done
  for id in $(ctr -n k8s.io containers ls -q 2>/dev/null); do ctr -n k8s.io containers rm "$id" >/dev/null 2>&1; done
  # Sandboxes' network namespaces are released by containerd; the shims exit with their tasks.
  stop containerd
fi
# A containerd that died with its node (a power cut) leaves its pid file; a new node refuses
# to start over a previous one's.
rm -f "$RUN/ctr" "$RUN/containerd.pid"
# The node itself (cluster-lib.sh's node_power_off). Its mounts' copies on this side outlive
# it: unmounted below.
node_power_off
rm -f "$RUN/nodeinit.pid" "$RUN/node-unshare.pid"
# A shim of this containerd (1.6 or 2.x: they serve $CONTAINERD_SOCK) still alive, e.g. whose
# task could not be removed, is stopped by its pid, and the containers it ran with it.
shims() {
  local p exe
  for p in /proc/[0-9]*; do
    exe=$(readlink "$p/exe" 2>/dev/null) || continue
    exe=${exe% (deleted)}
    [ "${exe##*/}" = containerd-shim-runc-v2 ] || continue
    tr '\0' ' ' < "$p/cmdline" 2>/dev/null | grep -q -- "-address $CONTAINERD_SOCK" && echo "${p#/proc/}"
  done
}
left=$(shims)
if [ -n "$left" ]; then
  step "stop containerd shims left: ${left//$'\n'/ }"
  for pid in $left; do pkill -KILL -P "$pid" 2>/dev/null; kill -KILL "$pid" 2>/dev/null; done
  for ((i = 0; i < 50; i++)); do [ -z "$(shims)" ] && break; sleep 0.2; done
fi

step "unmount and clean network state"
# The cluster's network namespace takes its iptables rules, its bridge and the veth with it.
if netns_exists; then
  ip netns del "$NETNS" 2>/dev/null || umount -l "/run/netns/$NETNS" 2>/dev/null
  rm -f "/run/netns/$NETNS"
fi
ip link del "$HOST_VETH" 2>/dev/null
ip link del "$HOST_BRIDGE" 2>/dev/null
ip route del unreachable "$SERVICE_CIDR" 2>/dev/null
# Deepest first. FUSE mounts of killed sidecars answer "transport endpoint is not connected":
# a lazy unmount detaches them anyway.
findmnt -rn -o TARGET | grep -E '^/var/lib/kubelet(/|$)|^/run/containerd/|^/run/netns/|^/var/lib/containerd/' \
  | sort -r | while read -r m; do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null; done
rm -f /run/netns/cni-* 2>/dev/null
# The shared mounts and directories cluster-up.sh made for the runtimes' state dirs.
if [ -f "$RUN/shared-mounts" ]; then
  tac "$RUN/shared-mounts" | while read -r d; do umount "$d" 2>/dev/null || umount -l "$d" 2>/dev/null; done
  rm -f "$RUN/shared-mounts"
fi
if [ -f "$RUN/created-dirs" ]; then
  while read -r d; do rmdir "$d" 2>/dev/null; done < "$RUN/created-dirs"
  rm -f "$RUN/created-dirs"
fi
ip link del cni0 2>/dev/null
# iptables: back to the snapshot cluster-up.sh took. iptables-restore only rewrites the tables
# the snapshot names (none when it was empty), so every table is first reset to empty with
# ACCEPT policies; the snapshot then puts back what was there before the cluster.
restore_tables() { # CMD SAVED_FILE
  local t c
  [ -f "$2" ] || return 0
  for t in filter nat mangle raw; do
    "$1" -t "$t" -S >/dev/null 2>&1 || continue
    "$1" -t "$t" -F
    "$1" -t "$t" -X
    for c in $("$1" -t "$t" -S | awk '/^-P/{print $2}'); do "$1" -t "$t" -P "$c" ACCEPT; done
  done
  "$1-restore" < "$2" && rm -f "$2"
}
restore_tables iptables "$RUN/iptables.saved"
restore_tables ip6tables "$RUN/ip6tables.saved"
if [ -f "$RUN/sysctl.saved" ]; then
  while IFS= read -r kv; do sysctl -qw "$kv" >/dev/null 2>&1; done < "$RUN/sysctl.saved"
  rm -f "$RUN/sysctl.saved"
fi
if [ -f "$RUN/br_netfilter.loaded" ] && [ -z "$(ip link show type bridge 2>/dev/null)" ]; then
  modprobe -r br_netfilter 2>/dev/null && rm -f "$RUN/br_netfilter.loaded"
fi
for c in /sys/fs/cgroup/*/kubepods; do
  [ -d "$c" ] && find "$c" -depth -type d -exec rmdir {} \; 2>/dev/null
done

step "remove cluster state"
rm -rf "$CLUSTER_DIR/etcd" /var/lib/cni/networks/gcsfuse-csi-bridge
if findmnt -rn -o TARGET | grep -qE '^/var/lib/kubelet(/|$)'; then
  echo "WARNING: mounts left under /var/lib/kubelet; not removing it:" >&2
  findmnt -rn -o TARGET | grep -E '^/var/lib/kubelet(/|$)' >&2
else
  rm -rf /var/lib/kubelet
fi
# Container logs the kubelet wrote (the pods are gone; their logs were saved above).
rm -rf /var/log/pods /var/log/containers
if [ -d "$LOGS" ]; then
  rm -rf "$CLUSTER_DIR/logs.last"
  mv "$LOGS" "$CLUSTER_DIR/logs.last"
fi
step "cluster down done (logs of this run: $CLUSTER_DIR/logs.last)"
