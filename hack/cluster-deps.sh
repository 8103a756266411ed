#!/usr/bin/env bash
# Installs what the local single-node cluster runs on, from Debian packages: runc and
# containerd 1.6 (the runtime of CONTAINERD=1.6), the CNI plugins (bridge, host-local,
# portmap, loopback in /usr/lib/cni), and the network tools the kubelet and kube-proxy call
# (iptables, conntrack, ethtool, socat), and Prometheus (e2e TestPrometheusDashboard scrapes
# the node plugin with it); then, for the default runtime, containerd
# $CONTAINERD_VERSION built from its Go module (containerd-build.sh, cached), and etcd
# $ETCD_VERSION, the one Kubernetes $K8S_VERSION pins, built from its Go module
# (etcd-build.sh, cached; Debian's etcd-server 3.4 is too old, see lib.sh).
# Idempotent: apt runs only when a tool is missing.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/cluster-lib.sh"

declare -A need=(
  [containerd]=containerd [runc]=runc [iptables]=iptables
  [conntrack]=conntrack [ethtool]=ethtool [socat]=socat [openssl]=openssl [curl]=curl
  [prometheus]=prometheus
)
missing=()
for tool in "${!need[@]}"; do
  command -v "$tool" >/dev/null || missing+=("${need[$tool]}")
done
[ -x /usr/lib/cni/bridge ] || missing+=(containernetworking-plugins)
if [ ${#missing[@]} -gt 0 ]; then
  step "apt-get install ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# Debian's postinst may start the packaged daemons where an init system exists; the cluster
# runs its own instances with its own configuration, so nothing else may hold their ports.
step "Debian packages ready: containerd (CONTAINERD=1.6) $(/usr/bin/containerd --version | awk '{print $3}'), runc $("$RUNC" --version | awk 'NR==1{print $3}')"
# One build after the other (each takes both cores).
if [ "$CONTAINERD" = 2 ]; then
  "$REPO_ROOT/hack/containerd-build.sh"
fi
"$REPO_ROOT/hack/etcd-build.sh"
