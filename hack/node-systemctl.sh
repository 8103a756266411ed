#!/usr/bin/env bash
# systemctl for the local cluster's node, as hack/nodessh runs it for the storage testsuites'
# disruptive tests (`systemctl stop|start|restart kubelet`, `systemctl show kubelet --property
# ActiveState --value`, `systemctl is-active kubelet`): the kubelet here is a process of the
# node (its namespaces under hack/nodeinit) that hack/cluster-up.sh started from
# $RUN/kubelet.sh, with its pid on this machine in $RUN/kubelet.pid, not a unit. Anything
# else is refused (exit 1, saying so). Also sudo (a link named sudo): runs its arguments as
# they are, with this PATH.
source "$(dirname "$(readlink -f "$0")")/lib.sh"
source "$(dirname "$(readlink -f "$0")")/cluster-lib.sh"
# KUBELET_STOP_TIMEOUT bounds the wait for a stopped kubelet to exit, in seconds.
KUBELET_STOP_TIMEOUT=30

if [ "$(basename "$0")" = sudo ]; then
  [ "${1:-}" = --version ] && { echo "sudo: the local cluster node's stand-in (hack/node-systemctl.sh)"; exit 0; }
  exec "$@"
fi

active() { [ -f "$RUN/kubelet.pid" ] && kill -0 "$(cat "$RUN/kubelet.pid")" 2>/dev/null; }
stop_kubelet() {
  active || return 0
  local pid i
  pid=$(cat "$RUN/kubelet.pid")
  kill "$pid"
  for ((i = 0; i < KUBELET_STOP_TIMEOUT * 10; i++)); do
    kill -0 "$pid" 2>/dev/null || { rm -f "$RUN/kubelet.pid"; return 0; }
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
  node_start kubelet "$LOGS/kubelet.log" bash "$RUN/kubelet.sh"
}

case "$*" in
  "stop kubelet") stop_kubelet ;;
  "start kubelet") start_kubelet ;;
  "restart kubelet") stop_kubelet && start_kubelet ;;
  "show kubelet --property ActiveState --value") if active; then echo active; else echo inactive; fi ;;
  "is-active kubelet") if active; then echo active; else echo inactive; exit 3; fi ;;
  *) echo "systemctl $*: not supported on the local cluster's node (hack/node-systemctl.sh)" >&2; exit 1 ;;
esac
