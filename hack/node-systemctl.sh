#!/usr/bin/env bash
# systemctl for a local cluster's node (node GCSFUSE_CSI_NODE, 1 unless set), as hack/nodessh
# runs it for the storage testsuites' disruptive tests (`systemctl stop|start|restart
# kubelet`, `systemctl show kubelet --property ActiveState --value`, `systemctl is-active
# kubelet`; the same of containerd, which the chaos soak restarts; and `systemctl reboot` of
# a node above 1): the kubelet and containerd here are processes of the node (its namespaces
# under hack/nodeinit) that hack/cluster-up.sh (hack/node-up.sh) started from
# $N_RUN/kubelet.sh and containerd.sh, with their pids on this machine in $N_RUN/*.pid, not
# units.
# Anything else is refused (exit 1, saying so). Also sudo (a link named sudo): runs its arguments as
# they are, with this PATH (on a node above 1, in its namespaces).
source "$(dirname "$(readlink -f "$0")")/lib.sh"
source "$(dirname "$(readlink -f "$0")")/cluster-lib.sh"
case ${GCSFUSE_CSI_NODE:-1} in
  [1-4]) node_vars "${GCSFUSE_CSI_NODE:-1}" ;;
  *) echo "GCSFUSE_CSI_NODE=$GCSFUSE_CSI_NODE: want 1 to $MAX_NODES" >&2; exit 1 ;;
esac
# STOP_TIMEOUT bounds the wait for a stopped kubelet or containerd to exit, in seconds.
STOP_TIMEOUT=30

if [ "$(basename "$0")" = sudo ]; then
  [ "${1:-}" = --version ] && { echo "sudo: the local cluster node's stand-in (hack/node-systemctl.sh)"; exit 0; }
  # Node 1's mounts reach this machine, so its commands run here; a node above 1 keeps its
  # own (nodeinit -private): they run in its namespaces. systemctl (this script) stays here,
  # where the pids of $N_RUN are.
  if [ "$N_INDEX" != 1 ] && [ "${1:-}" != systemctl ]; then
    # Without the stand-ins: in the node's PID namespace $N_RUN's pids mean nothing.
    exec env PATH="${PATH#"$N_RUN/ssh/bin:"}" nsenter -t "$(node_init_pid)" -a -- "$@"
  fi
  exec "$@"
fi

# One verb at a time per node: a start racing a stop would leave a pid file naming no kubelet.
# The wait is bounded, and what a verb starts does not inherit the lock (9>&- below): it
# would hold it for its life.
LOCK_TIMEOUT=180 # above a reboot's (node-down's 40 s, node-up's images and kubelet)
exec 9>>"$N_RUN/systemctl.lock"
flock -w "$LOCK_TIMEOUT" 9 || { echo "systemctl $*: node $N_INDEX's lock ($N_RUN/systemctl.lock) still held after ${LOCK_TIMEOUT}s (open by pids: $(fuser "$N_RUN/systemctl.lock" 2>/dev/null | tr -s ' '))" >&2; exit 1; }
# active UNIT: the pid file names a live UNIT (not a pid reused since).
active() {
  [ -f "$N_RUN/$1.pid" ] && [ "$(basename "$(readlink "/proc/$(cat "$N_RUN/$1.pid")/exe" 2>/dev/null)")" = "$1" ]
}
stop_unit() {
  active "$1" || return 0
  local pid i
  pid=$(cat "$N_RUN/$1.pid")
  kill "$pid"
  for ((i = 0; i < STOP_TIMEOUT * 10; i++)); do
    kill -0 "$pid" 2>/dev/null || { rm -f "$N_RUN/$1.pid"; return 0; }
    sleep 0.1
  done
  echo "$1 (pid $pid) still running ${STOP_TIMEOUT}s after SIGTERM" >&2
  return 1
}
# As hack/cluster-up.sh starts it (cluster-lib.sh's unit_up wrote $N_RUN/UNIT.sh): a process
# of the node, in a session of its own: one started from a test must not be in the test
# run's process group, which hack/e2e.sh stops on an interrupt before cluster-down.sh needs
# the kubelet to delete the pods. A containerd stopped leaves its containers running (their
# shims stay), as on a node.
start_unit() {
  active "$1" && return 0
  node_start "$1" "$N_LOGS/$1.log" bash "$N_RUN/$1.sh" 9>&-
}
unit=${2:-}
case "$unit" in
  kubelet | containerd) ;;
  *) [ "$*" = reboot ] || { echo "systemctl $*: not supported on the local cluster's node (hack/node-systemctl.sh): units kubelet and containerd" >&2; exit 1; } ;;
esac
case "$*" in
  "stop $unit") stop_unit "$unit" ;;
  "start $unit") start_unit "$unit" ;;
  "restart $unit") stop_unit "$unit" && start_unit "$unit" ;;
  "show $unit --property ActiveState --value") if active "$unit"; then echo active; else echo inactive; fi ;;
  "is-active $unit") if active "$unit"; then echo active; else echo inactive; exit 3; fi ;;
  # The node whole (hack/node-down.sh, then node-up.sh): returns once it is back and Ready,
  # where a real `systemctl reboot` never returns. Not node 1, which carries the control
  # plane.
  reboot)
    [ "$N_INDEX" != 1 ] || { echo "systemctl reboot: node 1 carries the control plane; only nodes above 1 reboot (GCSFUSE_CSI_NODE)" >&2; exit 1; }
    # From this machine only: over the node's own SSH endpoint it would stop that endpoint,
    # and itself with it, half way.
    [ -z "$(ip netns identify "$BASHPID" 2>/dev/null)" ] ||
      { echo "systemctl reboot: run it on this machine (GCSFUSE_CSI_NODE=$N_INDEX hack/node-systemctl.sh reboot), not over the node's SSH endpoint" >&2; exit 1; }
    # Without the lock: the node's processes node-up.sh starts would hold it for life.
    "$REPO_ROOT/hack/node-down.sh" "$N_INDEX" 9>&- && "$REPO_ROOT/hack/node-up.sh" "$N_INDEX" 9>&- ;;
  *) echo "systemctl $*: not supported on the local cluster's node (hack/node-systemctl.sh)" >&2; exit 1 ;;
esac
