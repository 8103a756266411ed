#!/usr/bin/env bash
# hack/node-down.sh [--remove] N: stops node N (2 to MAX_NODES) that hack/node-up.sh started,
# whole, as a machine powers off: its init gives every process of the node (kubelet,
# containerd, kube-proxy, the pods' containers, their gcsfuse) SIGTERM, then SIGKILL past
# NODE_STOP_GRACE_SECONDS; its mounts, pod network namespaces and /run go with it. What a
# disk keeps stays: its kubelet's directory, its containerd's root, its network namespace
# and address, so hack/node-up.sh N starts it again as after a reboot. The Node object stays
# (NotReady), as for a machine that is off.
# --remove also removes the node from this machine: its network namespace, its routes on
# the other nodes, its state directories and cgroups (hack/cluster-down.sh). Best effort,
# never fails half way.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/cluster-lib.sh"
set +e +o pipefail

remove=0
if [ "${1:-}" = --remove ]; then
  remove=1
  shift
fi
n=${1:-}
if ! [[ $n =~ ^[0-9]+$ ]] || [ "$n" -lt 2 ] || [ "$n" -gt "$MAX_NODES" ]; then
  echo "usage: hack/node-down.sh [--remove] N (2 to $MAX_NODES)" >&2
  exit 2
fi
node_vars "$n"

if [ -f "$N_RUN/nodessh.pid" ]; then
  kill "$(cat "$N_RUN/nodessh.pid")" 2>/dev/null
  rm -f "$N_RUN/nodessh.pid"
fi
# Removed, it need not give its containers their grace (the shared mounter holds SIGTERM
# while mounts are in use; containerd 1.6's shims outlive it): killed first, as
# cluster-down.sh kills node 1's.
if [ "$remove" = 1 ] && node_running; then
  for id in $(ctr -n k8s.io tasks ls -q 2>/dev/null); do ctr -n k8s.io tasks kill -s SIGKILL "$id" >/dev/null 2>&1; done
fi
# Its directories are mounted in its namespace while any of it lives: a node that does not
# end keeps its state (removing it would detach a live node's mounts).
node_power_off || { echo "node $n: its state is left in place" >&2; exit 1; }
for f in nodeinit node-unshare containerd kubelet kube-proxy; do rm -f "$N_RUN/$f.pid"; done
# Its pods' cgroups, empty now, deepest first (the kubelet makes them again).
for c in /sys/fs/cgroup/*/"$N_CGROUP" "/sys/fs/cgroup/$N_CGROUP"; do
  [ -d "$c" ] && find "$c" -depth -type d -exec rmdir {} \; 2>/dev/null
done

[ "$remove" = 1 ] || exit 0
# The Node object too (a cluster that goes on with fewer nodes must not count it).
if [ -f "$RUN/kube-apiserver.pid" ] && kill -0 "$(cat "$RUN/kube-apiserver.pid")" 2>/dev/null; then
  kctl --request-timeout=10s delete node "$N_NAME" --wait=false >/dev/null 2>&1
fi
for ((i = 1; i <= MAX_NODES; i++)); do
  [ "$i" = "$n" ] && continue
  (
    pods=$N_POD_CIDR
    node_vars "$i"
    [ -e "/run/netns/$N_NETNS" ] && ip -n "$N_NETNS" route del "$pods" 2>/dev/null
  )
done
if [ -e "/run/netns/$N_NETNS" ]; then
  ip netns del "$N_NETNS" 2>/dev/null || umount -l "/run/netns/$N_NETNS" 2>/dev/null
  rm -f "/run/netns/$N_NETNS"
fi
ip link del "$N_HOST_VETH" 2>/dev/null
# Its mounts were the node's own (nodeinit -private): none is left here to unmount, unless
# this machine mounted something there itself.
if findmnt -rn -o TARGET | grep -qF "$N_STATE/"; then
  echo "WARNING: mounts left under $N_STATE; not removing it" >&2
else
  rm -rf "$N_STATE"
fi
# Its logs stay in $LOGS/nodeN, which cluster-down.sh keeps with node 1's.
rm -rf "$N_RUN" "$N_ETC"
step "node $n removed"
