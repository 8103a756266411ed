#!/usr/bin/env bash
# systemctl for a local cluster's node (node GCSFUSE_CSI_NODE, 1 unless set), as hack/nodessh
# runs it for the storage testsuites' disruptive tests (`systemctl stop|start|restart
# kubelet`, `systemctl show kubelet --property ActiveState --value`, `systemctl is-active
# kubelet`, and `systemctl reboot` of a node above 1): the kubelet here is a process of the
# node (its namespaces under hack/nodeinit) that hack/cluster-up.sh (hack/node-up.sh) started
# from $N_RUN/kubelet.sh, with its pid on this machine in $N_RUN/kubelet.pid, not a unit.
# Anything else is refused (exit 1, saying so). Also sudo (a link named sudo): runs its arguments as
# they are, with this PATH (on a node above 1, in its namespaces).
source "$(dirname "$(readlink -f "$0")")/lib.sh"
source "$(dirname "$(readlink -f "$0")")/cluster-lib.sh"
case ${GCSFUSE_CSI_NODE:-1} in
  [1-4]) node_vars "${GCSFUSE_CSI_NODE:-1}" ;;
  *) echo "GCSFUSE_CSI_NODE=$GCSFUSE_CSI_NODE: want 1 to $MAX_NODES" >&2; exit 1 ;;
esac
# KUBELET_STOP_TIMEOUT bounds the wait for a stopped kubelet to exit, in seconds.
KUBELET_STOP_TIMEOUT=30

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
# The wait is bounded (a verb takes at most KUBELET_STOP_TIMEOUT), and the kubelet a start
# launches does not inherit the lock (9>&- below): it would hold it for its life.
LOCK_TIMEOUT=60
exec 9>>"$N_RUN/systemctl.lock"
flock -w "$LOCK_TIMEOUT" 9 || { echo "systemctl $*: node $N_INDEX's lock ($N_RUN/systemctl.lock) still held after ${LOCK_TIMEOUT}s (by: $(fuser "$N_RUN/systemctl.lock" 2>&1 | tr -s ' '))" >&2; exit 1; }
# active: the pid file names a live kubelet (not a pid reused since).
active() {
  [ -f "$N_RUN/kubelet.pid" ] && [ "$(basename "$(readlink "/proc/$(cat "$N_RUN/kubelet.pid")/exe" 2>/dev/null)")" = kubelet ]
}
stop_kubelet() {
  active || return 0
  local pid i
  pid=$(cat "$N_RUN/kubelet.pid")
  kill "$pid"
  for ((i = 0; i < KUBELET_STOP_TIMEOUT * 10; i++)); do
    kill -0 "$pid" 2>/dev/null || { rm -f "$N_RUN/kubelet.pid"; return 0; }
    sleep 0.1
  done
  echo "kubelet (pid $pid) still running ${KUBELET_STOP_TIMEOUT}s after SIGTERM" >&2
  return 1
}
# As hack/cluster-up.sh starts it: a process of the node (cluster-lib.sh's node_start), in a
# session of its own: a kubelet started from a test must not be in the test run's process
# group, which hack/e2e.sh stops on an interrupt before cluster-down.sh needs the kubelet to
# delete the pods.
start_kubelet() {
  active && return 0
  node_start kubelet "$N_LOGS/kubelet.log" bash "$N_RUN/kubelet.sh" 9>&-
}

case "$*" in
  "stop kubelet") stop_kubelet ;;
  "start kubelet") start_kubelet ;;
  "restart kubelet") stop_kubelet && start_kubelet ;;
  "show kubelet --property ActiveState --value") if active; then echo active; else echo inactive; fi ;;
  "is-active kubelet") if active; then echo active; else echo inactive; exit 3; fi ;;
  # The node whole (hack/node-down.sh, then node-up.sh): returns once it is back and Ready,
  # where a real `systemctl reboot` never returns. Not node 1, which carries the control
  # plane.
  reboot)
    [ "$N_INDEX" != 1 ] || { echo "systemctl reboot: node 1 carries the control plane; only nodes above 1 reboot (GCSFUSE_CSI_NODE)" >&2; exit 1; }
    # From this machine only: over the node's own SSH endpoint it would stop that endpoint,
    # and itself with it, half way.
    [ -z "$(ip netns identify "$BASHPID" 2>/dev/null)" ] ||
      { echo "systemctl reboot: run it on this machine (GCSFUSE_CSI_NODE=$N_INDEX hack/node-systemctl.sh reboot), not over the node's SSH endpoint" >&2; exit 1; }
    "$REPO_ROOT/hack/node-down.sh" "$N_INDEX" && "$REPO_ROOT/hack/node-up.sh" "$N_INDEX" ;;
  *) echo "systemctl $*: not supported on the local cluster's node (hack/node-systemctl.sh)" >&2; exit 1 ;;
esac
