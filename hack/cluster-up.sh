#!/usr/bin/env bash
# Starts a Kubernetes cluster on this machine (NODES nodes, 1 by default; cluster-lib.sh):
# containerd, etcd $ETCD_VERSION (the
# one Kubernetes $K8S_VERSION pins, built by etcd-build.sh), kube-apiserver,
# kube-controller-manager, kube-scheduler, kubelet and kube-proxy (built by k8s-build.sh at
# $K8S_VERSION). Imports the images from images.sh. Prints the versions of every component,
# then the KUBECONFIG. Fails if the API server's watch cache lags behind etcd ("Too large
# resource version", the symptom of an etcd too old for it). Nodes 2 and up are
# hack/node-up.sh's, started once node 1 is Ready.
#
# Runtime: containerd $CONTAINERD_VERSION (lib.sh; built by containerd-build.sh, configuration
# version 3) by default; `CONTAINERD=1.6 hack/cluster-up.sh` runs Debian's containerd 1.6 with
# the version 2 configuration instead. Both run Debian's runc. Switching wipes containerd's
# root and state dirs (only images are there; they are imported again).
# The kubelet takes up to $MAX_PODS pods (default 250; hack/scale.sh fills the node up to it).
# Every component runs in the network namespace $NETNS (cluster-lib.sh): the node's address
# is $NODE_IP on a veth, reachable from this machine only through its host end.
#
# Idempotent: a component already running (pid file + live process) is left alone. On failure
# everything started so far is stopped again by cluster-down.sh. Every wait has a timeout.
# Configuration that this VM needs (see /work/shared/research/local-cluster.md):
# containerd restrict_oom_score_adj (no CAP_SYS_RESOURCE), cgroupfs driver on cgroup v1,
# kubelet failSwapOn/failCgroupV1 (1.31+) false, /run/containerd and /run/crio shared mounts
# (/ is private here).
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/cluster-lib.sh"

for b in kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl; do
  [ -x "$K8S_BIN/$b" ] || { echo "missing $K8S_BIN/$b: run hack/k8s-build.sh" >&2; exit 1; }
done
for b in containerd containerd-shim-runc-v2 ctr; do
  [ -x "$CTRD_DIR/$b" ] || { echo "missing $CTRD_DIR/$b: run hack/cluster-deps.sh" >&2; exit 1; }
done
[ -x "$RUNC" ] || { echo "missing $RUNC: run hack/cluster-deps.sh" >&2; exit 1; }
[ -x "$ETCD_BIN/etcd" ] || { echo "missing $ETCD_BIN/etcd: run hack/cluster-deps.sh" >&2; exit 1; }
command -v iptables-save >/dev/null || { echo "missing iptables-save: run hack/cluster-deps.sh" >&2; exit 1; }
command -v ip >/dev/null || { echo "missing ip (iproute2)" >&2; exit 1; }
nodes_check || exit 1
disk_preflight || exit 1

up_ok=0
on_exit() {
  if [ "$up_ok" != 1 ]; then
    echo "cluster-up failed; last log lines:" >&2
    for f in "$LOGS"/*.log; do [ -f "$f" ] && { echo "--- $f" >&2; tail -n 15 "$f" >&2; }; done
    "$REPO_ROOT/hack/cluster-down.sh" >&2 || true
  fi
}
trap on_exit EXIT

mkdir -p "$PKI" "$LOGS" "$RUN" "$ETC/cni" "$CLUSTER_DIR/etcd"
chmod 700 "$CLUSTER_DIR/etcd" # etcd warns about a data dir that others can read

# ---------------------------------------------------------------------------- certificates
pki() {
  # The kubeconfigs name the PKI directory by its absolute path: a cache moved elsewhere
  # (GCSFUSE_CSI_CACHE changed) gets new ones, or every component fails to read its certificate.
  [ -f "$PKI/admin.kubeconfig" ] && [ -f "$PKI/.node-$NODE_IP" ] &&
    grep -qF "certificate-authority: $PKI/ca.crt}" "$PKI/admin.kubeconfig" && return
  step "PKI: CA and component certificates (openssl)"
  rm -rf "${PKI:?}"/*
  (
    cd "$PKI" || exit 1
    openssl genrsa -out ca.key 2048 2>/dev/null
    openssl req -x509 -new -nodes -key ca.key -subj "/CN=gcsfuse-csi-local-ca" -days 3650 -out ca.crt
    pki_cert apiserver kube-apiserver "" "DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,IP:127.0.0.1,IP:10.96.0.1,IP:$NODE_IP"
    pki_cert admin admin system:masters
    pki_cert apiserver-kubelet-client kube-apiserver-kubelet-client system:masters
    pki_cert kubelet-client "system:node:$NODE_NAME" system:nodes
    pki_cert kubelet-server "$NODE_NAME" "" "DNS:$NODE_NAME,DNS:localhost,IP:127.0.0.1,IP:$NODE_IP"
    pki_cert controller-manager system:kube-controller-manager
    pki_cert scheduler system:kube-scheduler
    pki_cert kube-proxy system:kube-proxy
    openssl genrsa -out sa.key 2048 2>/dev/null
    openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
    # The components reach the API server on the namespace's loopback; kubectl and the tests,
    # outside it, on the node's address.
    for u in admin:admin kubelet:kubelet-client controller-manager:controller-manager scheduler:scheduler kube-proxy:kube-proxy; do
      server=https://127.0.0.1:6443
      [ "${u%%:*}" = admin ] && server=https://$NODE_IP:6443
      pki_kubeconfig "${u%%:*}" "${u#*:}" "$server"
    done
    touch ".node-$NODE_IP"
  )
}

# ---------------------------------------------------------------------------- configuration
configs() {
  if [ "$CONTAINERD" = 1.6 ]; then
    cat > "$ETC/containerd.toml" <<EOF2
version = 2
root = "/var/lib/containerd"
state = "/run/containerd"
[grpc]
  address = "$CONTAINERD_SOCK"
[plugins]
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = "$IMAGE_REPO/pause:$IMAGE_TAG"
    # This VM's root lacks CAP_SYS_RESOURCE: lowering oom_score_adj fails in runc without it.
    restrict_oom_score_adj = true
    [plugins."io.containerd.grpc.v1.cri".containerd]
      snapshotter = "overlayfs"
      default_runtime_name = "runc"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        runtime_path = "$CTRD_DIR/containerd-shim-runc-v2"
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
          SystemdCgroup = false
          BinaryName = "$RUNC"
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "/usr/lib/cni"
      conf_dir = "$ETC/cni"
EOF2
  else
    # containerd 2.x: the same settings as the 1.6 configuration above. From configuration
    # version 3 on, the CRI plugin is split in an "images" and a "runtime" plugin; version 4
    # (containerd 2.3+; it reads 3 with a warning) moves the gRPC server into a plugin too.
    # 2.x also reads /etc/containerd/conf.d/*.toml (a default a file cannot remove; nothing
    # installs any there); never /etc/containerd/config.toml, like 1.6 given --config.
    local ver grpc='[plugins."io.containerd.server.v1.grpc"]'
    ver=$("$CTRD_DIR/containerd" config default 2>/dev/null | awk '$1 == "version" {print $3; exit}')
    [ "${ver:-3}" -ge 4 ] || { ver=3; grpc='[grpc]'; }
    cat > "$ETC/containerd.toml" <<EOF2
version = $ver
root = "/var/lib/containerd"
state = "/run/containerd"
$grpc
  address = "$CONTAINERD_SOCK"
  [plugins."io.containerd.cri.v1.images"]
    snapshotter = "overlayfs"
    [plugins."io.containerd.cri.v1.images".pinned_images]
      sandbox = "$IMAGE_REPO/pause:$IMAGE_TAG"
  [plugins."io.containerd.cri.v1.runtime"]
    # This VM's root lacks CAP_SYS_RESOURCE: lowering oom_score_adj fails in runc without it.
    restrict_oom_score_adj = true
    [plugins."io.containerd.cri.v1.runtime".containerd]
      default_runtime_name = "runc"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        runtime_path = "$CTRD_DIR/containerd-shim-runc-v2"
        [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
          SystemdCgroup = false
          BinaryName = "$RUNC"
    [plugins."io.containerd.cri.v1.runtime".cni]
      bin_dirs = ["/usr/lib/cni"]
      conf_dir = "$ETC/cni"
EOF2
  fi
  cni_conf "$ETC/cni" "$N_POD_CIDR"
  # No cluster DNS: pods reach the API server by the kubernetes Service IP (kube-proxy).
  printf 'nameserver 127.0.0.1\n' > "$ETC/resolv.conf"
  # Fields by release: failCgroupV1 exists from 1.31 on (cgroup v1 in maintenance mode; this
  # machine runs v1); earlier kubelets run on cgroup v1 without being asked.
  local kubelet_extra=""
  if [ "$K8S_MINOR" -ge 31 ]; then kubelet_extra="failCgroupV1: false"; fi
  cat > "$ETC/kubelet.yaml" <<EOF2
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
cgroupDriver: cgroupfs
failSwapOn: false
$kubelet_extra
address: 0.0.0.0
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
authentication: {anonymous: {enabled: false}, webhook: {enabled: true}, x509: {clientCAFile: $PKI/ca.crt}}
authorization: {mode: Webhook}
tlsCertFile: $PKI/kubelet-server.crt
tlsPrivateKeyFile: $PKI/kubelet-server.key
clusterDomain: cluster.local
clusterDNS: [10.96.0.10]
resolvConf: $ETC/resolv.conf
evictionHard: {memory.available: "100Mi", nodefs.available: "$EVICTION_NODEFS_PERCENT%", nodefs.inodesFree: "1%", imagefs.available: "$EVICTION_NODEFS_PERCENT%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
nodeStatusReportFrequency: 10s
syncFrequency: 10s
maxPods: ${MAX_PODS:-250}
EOF2
}

# ---------------------------------------------------------------------------- processes
running() { [ -f "$RUN/$1.pid" ] && kill -0 "$(cat "$RUN/$1.pid")" 2>/dev/null; }
start() { # NAME CMD...: start in the background, remember the pid
  local n=$1
  shift
  running "$n" && return 0
  nohup "$@" > "$LOGS/$n.log" 2>&1 &
  echo $! > "$RUN/$n.pid"
}

# Host state the kubelet and kube-proxy change, saved once so cluster-down.sh restores it.
save_host_state() {
  [ -f "$RUN/sysctl.saved" ] && return
  local s
  : > "$RUN/sysctl.saved.tmp"
  # The bridge CNI plugin and kube-proxy need br_netfilter; unloaded again by down if we
  # loaded it.
  if [ ! -d /sys/module/br_netfilter ] && modprobe br_netfilter 2>/dev/null; then
    touch "$RUN/br_netfilter.loaded"
  fi
  for s in net.ipv4.ip_forward net.bridge.bridge-nf-call-iptables vm.overcommit_memory \
    kernel.panic kernel.panic_on_oops net.ipv4.conf.all.route_localnet; do
    sysctl -n "$s" >/dev/null 2>&1 && echo "$s=$(sysctl -n "$s")" >> "$RUN/sysctl.saved.tmp"
  done
  iptables-save > "$RUN/iptables.saved"
  ip6tables-save > "$RUN/ip6tables.saved" 2>/dev/null || true
  mv "$RUN/sysctl.saved.tmp" "$RUN/sysctl.saved"
}

if running containerd && [ "$(cat "$RUN/ctr" 2>/dev/null)" != "$CTRD_DIR/ctr" ]; then
  echo "the running containerd is not $CTRD_DIR/containerd (CONTAINERD=$CONTAINERD); run hack/cluster-down.sh first" >&2
  up_ok=1 # leave that cluster alone
  exit 1
fi
# A cluster started before the nodes' bridge (HOST_IP on node 1's veth itself) is left alone.
if netns_exists && ! ip -o link show "$HOST_VETH" 2>/dev/null | grep -q "master $HOST_BRIDGE"; then
  echo "the running cluster's network predates the nodes' bridge ($HOST_VETH is not a port of $HOST_BRIDGE): run hack/cluster-down.sh first" >&2
  up_ok=1 # leave that cluster alone
  exit 1
fi
pki
configs
node_netns_up
if ! running kube-apiserver; then
  for port in 2379 2380 6443 10250 10257 10259; do
    if nsexec ss -Hltn "sport = :$port" | grep -q .; then
      echo "port $port is busy in $NETNS: $(nsexec ss -Hltnp "sport = :$port")" >&2
      exit 1
    fi
  done
fi
save_host_state

# versions: one block naming every component this cluster runs.
versions() {
  local cg=v2
  [ "$(stat -fc %T /sys/fs/cgroup)" = cgroup2fs ] || cg="v1 (cgroupfs driver$([ -d /sys/fs/cgroup/unified ] && echo ', hybrid'))"
  echo "=== component versions:"
  printf '    %-14s %s\n' \
    containerd "$("$CTRD_DIR/containerd" --version | awk '{print $3}') ($CTRD_DIR/containerd, CONTAINERD=$CONTAINERD)" \
    runc "$("$RUNC" --version | awk 'NR==1{print $3}') ($RUNC)" \
    etcd "$("$ETCD_BIN/etcd" --version | awk 'NR==1{print $3}') ($ETCD_BIN/etcd)" \
    kubernetes "apiserver $("$K8S_BIN/kube-apiserver" --version | awk '{print $2}'), kubelet $("$K8S_BIN/kubelet" --version | awk '{print $2}') ($K8S_BIN)" \
    cni-plugins "$(dpkg-query -W -f '${Version}' containernetworking-plugins 2>/dev/null || echo unknown) (/usr/lib/cni)" \
    kernel "$(uname -r)" \
    cgroup "$cg"
}

# containerd's root and state dirs as written by one runtime may not be readable by the other
# (2.x migrates 1.6's metadata forward; 1.6 does not read 2.x's back), so switching runtimes
# (or versions) wipes them: they hold only the images, which are imported again below. The
# runtime that wrote them is named in $CTRD_MARK.
CTRD_MARK=/var/lib/containerd/.gcsfuse-csi-runtime
containerd_state() {
  local want have=""
  want="$("$CTRD_DIR/containerd" --version | awk '{print $3}')"
  [ -f "$CTRD_MARK" ] && have=$(cat "$CTRD_MARK")
  [ "$have" = "$want" ] && return
  if [ -n "$(find /var/lib/containerd /run/containerd -mindepth 1 -maxdepth 1 2>/dev/null | head -1)" ]; then
    if findmnt -rn -o TARGET | grep -qE '^/(var/lib|run)/containerd/'; then
      echo "mounts left under /var/lib/containerd or /run/containerd: run hack/cluster-down.sh" >&2
      exit 1
    fi
    step "containerd state was written by ${have:-another containerd}; wiping it for $want"
    rm -rf /var/lib/containerd
    find /run/containerd -mindepth 1 -maxdepth 1 -exec rm -rf {} + 2>/dev/null || true
  fi
  mkdir -p /var/lib/containerd
  echo "$want" > "$CTRD_MARK"
}

# The node's state dirs (NODE_SHARED_DIRS: the kubelet's, the runtimes') are shared mounts
# on this side before the node starts (a bind mount of each onto itself where it is not in a
# shared or slave mount: / is private on this VM), so that the node's copies are their peers;
# once the node runs, this side's copies of those binds become slaves (node_up), receiving
# every mount the node makes there (the volumes, the driver's FUSE mounts, the containers'
# root file systems) while nothing mounted here under them reaches the node. Undone by
# cluster-down.sh. On a host whose / is shared (systemd), nothing is bound and the node's
# mounts stay two-way peers of this side's, as they were when the node shared its mount
# namespace. Inside the node every other mount keeps its propagation (unshare --propagation
# unchanged): the node plugin's HostToContainer and Bidirectional mounts are all under them.
shared_dirs() {
  local d
  for d in "${NODE_SHARED_DIRS[@]}"; do
    [ -d "$d" ] || { mkdir -p "$d" && echo "$d" >> "$RUN/created-dirs"; }
    findmnt -n -o PROPAGATION --target "$d" | grep -qE 'shared|slave' && continue
    mount --bind "$d" "$d"
    mount --make-shared "$d"
    echo "$d" >> "$RUN/shared-mounts"
    step "$d: a shared mount (/ is $(findmnt -n -o PROPAGATION /))"
  done
}

running containerd || containerd_state
if ! node_running; then
  left=$(node_leftovers)
  if [ -n "$left" ]; then
    echo "the node is not running but a previous one left its state in $RUN:$left; run hack/cluster-down.sh first" >&2
    exit 1
  fi
  shared_dirs
  node_boot
  # This side's copies of the node's state dirs receive what the node mounts there (and
  # send nothing).
  if [ -f "$RUN/shared-mounts" ]; then
    while read -r d; do
      mount --make-rslave "$d"
    done <"$RUN/shared-mounts"
  fi
fi
versions
step "start containerd ($CTRD_DIR/containerd)"
containerd_up "$ETC/containerd.toml"
echo "$CTRD_DIR/ctr" > "$RUN/ctr"
waitfor containerd 30 ctr version
# The CRI container event stream (GetContainerEvents): served by 2.x, unimplemented in 1.6.
(cd "$REPO_ROOT" && go build -o "$RUN/crievents" ./hack/crievents)
step "CRI $("$RUN/crievents" -endpoint "unix://$CONTAINERD_SOCK" -wait 500ms || true)"
step "import images"
shopt -s nullglob
imgs=("$IMAGES_DIR"/*.tar)
[ ${#imgs[@]} -gt 0 ] || { echo "no images in $IMAGES_DIR: run hack/images.sh" >&2; exit 1; }
import_images "${imgs[@]}"

step "start etcd ($ETCD_BIN/etcd)"
# etcd reads ETCD_<FLAG> variables as flags: ETCD_VERSION (our override, lib.sh) would be its
# --version.
start etcd "${NSEXEC[@]}" env -u ETCD_VERSION "$ETCD_BIN/etcd" --name local --data-dir "$CLUSTER_DIR/etcd" \
  --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
  --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
  --initial-cluster local=http://127.0.0.1:2380 --listen-metrics-urls http://127.0.0.1:2381
waitfor etcd 30 nsexec curl -sf http://127.0.0.1:2379/health

# Authorization: from 1.32 the structured configuration of deploy/authorization (Node, the
# node plugin's reads confined to its node, RBAC), which TestNodeScopedReads checks; before,
# Node and RBAC only.
authz=(--authorization-mode=Node,RBAC)
if [ "$K8S_MINOR" -ge 32 ]; then
  cat >"$PKI/deny.kubeconfig" <<DENY
apiVersion: v1
kind: Config
clusters: [{name: deny, cluster: {server: "https://127.0.0.1:1", insecure-skip-tls-verify: true}}]
users: [{name: deny, user: {}}]
contexts: [{name: deny, context: {cluster: deny, user: deny}}]
current-context: deny
DENY
  sed "s|/etc/kubernetes/deny.kubeconfig|$PKI/deny.kubeconfig|" "$REPO_ROOT/deploy/authorization/node-scoped-reads.yaml" >"$PKI/authorization.yaml"
  authz=(--authorization-config="$PKI/authorization.yaml")
fi

step "start kube-apiserver"
start kube-apiserver "${NSEXEC[@]}" "$K8S_BIN/kube-apiserver" --etcd-servers=http://127.0.0.1:2379 \
  --bind-address=0.0.0.0 --advertise-address="$NODE_IP" --secure-port=6443 \
  --tls-cert-file="$PKI/apiserver.crt" --tls-private-key-file="$PKI/apiserver.key" --client-ca-file="$PKI/ca.crt" \
  --kubelet-client-certificate="$PKI/apiserver-kubelet-client.crt" --kubelet-client-key="$PKI/apiserver-kubelet-client.key" \
  --kubelet-preferred-address-types=InternalIP,Hostname \
  --service-account-issuer=https://kubernetes.default.svc.cluster.local \
  --service-account-key-file="$PKI/sa.pub" --service-account-signing-key-file="$PKI/sa.key" \
  --service-cluster-ip-range="$SERVICE_CIDR" "${authz[@]}" \
  --enable-admission-plugins=NodeRestriction --allow-privileged=true --profiling=false
waitfor kube-apiserver 120 nsexec curl -sf --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" https://127.0.0.1:6443/readyz
# The watch cache check, in the background while the node comes up (checked at the end by
# watch_cache_check): a fresh watch (no resourceVersion) of pods in a namespace that has none,
# which the API server serves once its watch cache has caught up with etcd. With an etcd whose
# watch progress requests it does not use (Debian's 3.4) the cache of a resource without writes
# never catches up: the watch fails after 3 s with "Too large resource version" (and the API
# server logs that error every second from about a minute on). Bounded: 5 s on the server, 20 s
# in kubectl.
watch_probe_log=$LOGS/watch-probe.log
(
  t0=$(date +%s%N)
  rc=0
  kctl --request-timeout=20s get --raw "/api/v1/namespaces/gcsfuse-csi-no-pods/pods?watch=1&timeoutSeconds=5" > "$watch_probe_log" 2>&1 || rc=$?
  echo "$(( ($(date +%s%N) - t0) / 1000000 )) ms, rc=$rc" > "$RUN/watch-probe.result"
) &
watch_probe=$!
watch_cache_check() {
  local res
  wait "$watch_probe" || true
  res=$(cat "$RUN/watch-probe.result" 2>/dev/null || echo "no result")
  if grep -q "Too large resource version" "$watch_probe_log" "$LOGS/kube-apiserver.log"; then
    echo "kube-apiserver: \"Too large resource version\": its watch cache lags behind etcd $ETCD_VERSION ($ETCD_BIN/etcd), so fresh watches and consistent reads fail after 3 s; Kubernetes v$K8S_VERSION wants the etcd it pins (etcd_version_for in hack/lib.sh; ETCD_VERSION overrides it):" >&2
    grep -h "Too large resource version" "$watch_probe_log" "$LOGS/kube-apiserver.log" | head -3 | cut -c1-300 >&2
    exit 1
  fi
  if [[ $res != *", rc=0" ]] || [ -s "$watch_probe_log" ]; then
    echo "a fresh watch of pods in a namespace without any failed or saw something ($res):" >&2
    head -c 500 "$watch_probe_log" >&2
    exit 1
  fi
  step "watch cache in step with etcd: a fresh watch ran its 5 s ($res); no \"Too large resource version\" logged"
}

step "start controller-manager, scheduler, kubelet, kube-proxy"
# --pvclaimbinder-sync-period=2s: a claim made before its pre-provisioned PV (as the storage
# testsuites make them) is bound at the binder's next pass, 2 s rather than the default 15 s.
start kube-controller-manager "${NSEXEC[@]}" "$K8S_BIN/kube-controller-manager" --kubeconfig="$PKI/controller-manager.kubeconfig" \
  --authentication-kubeconfig="$PKI/controller-manager.kubeconfig" --authorization-kubeconfig="$PKI/controller-manager.kubeconfig" \
  --bind-address=127.0.0.1 --leader-elect=false --use-service-account-credentials=true \
  --service-account-private-key-file="$PKI/sa.key" --root-ca-file="$PKI/ca.crt" \
  --cluster-signing-cert-file="$PKI/ca.crt" --cluster-signing-key-file="$PKI/ca.key" \
  --pvclaimbinder-sync-period=2s
start kube-scheduler "${NSEXEC[@]}" "$K8S_BIN/kube-scheduler" --kubeconfig="$PKI/scheduler.kubeconfig" \
  --authentication-kubeconfig="$PKI/scheduler.kubeconfig" --authorization-kubeconfig="$PKI/scheduler.kubeconfig" \
  --bind-address=127.0.0.1 --leader-elect=false
# The kubelet (cluster-lib.sh's kubelet_up keeps its command for hack/node-systemctl.sh).
kubelet_up --config="$ETC/kubelet.yaml" --kubeconfig="$PKI/kubelet.kubeconfig" \
  --node-ip="$NODE_IP" --hostname-override="$NODE_NAME" --root-dir=/var/lib/kubelet
# The node's SSH endpoint for those tests (hack/nodessh): NODE_IP:22 inside the cluster's
# network namespace, the key in $RUN/ssh (KUBE_SSH_KEY_PATH for storage-e2e.test), systemctl
# and sudo standing in from $RUN/ssh/bin.
mkdir -p "$RUN/ssh/bin"
ln -sf "$REPO_ROOT/hack/node-systemctl.sh" "$RUN/ssh/bin/systemctl"
ln -sf "$REPO_ROOT/hack/node-systemctl.sh" "$RUN/ssh/bin/sudo"
(cd "$REPO_ROOT" && go build -o "$RUN/nodessh" ./hack/nodessh)
start nodessh "${NSEXEC[@]}" "$RUN/nodessh" -listen "$NODE_IP:22" -key "$RUN/ssh/id_ed25519" -path "$RUN/ssh/bin"
running kube-proxy || node_start kube-proxy "$LOGS/kube-proxy.log" "$K8S_BIN/kube-proxy" --kubeconfig="$PKI/kube-proxy.kubeconfig" --hostname-override="$NODE_NAME" \
  --cluster-cidr="$CLUSTER_CIDR" --proxy-mode=iptables --conntrack-max-per-core=0 \
  --metrics-bind-address=127.0.0.1:10249 --healthz-bind-address=127.0.0.1:10256
node_ready() {
  kctl get node "$NODE_NAME" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' | grep -q True
}
waitfor "node $NODE_NAME" 180 node_ready
# Nodes above NODES from an earlier run go (the tests count the nodes they are given).
for n in $(extra_nodes); do
  [ "$n" -le "$NODES" ] || "$REPO_ROOT/hack/node-down.sh" --remove "$n"
done
for ((n = 2; n <= NODES; n++)); do "$REPO_ROOT/hack/node-up.sh" "$n"; done
waitfor "default service account" 60 kctl -n default get serviceaccount default
watch_cache_check
up_ok=1
step "cluster v$K8S_VERSION up ($(kctl get node "$NODE_NAME" -o jsonpath='{.status.nodeInfo.containerRuntimeVersion}')); export KUBECONFIG=$KUBECONFIG"
