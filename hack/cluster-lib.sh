# shellcheck shell=bash disable=SC2034 # variables are used by the scripts that source this file
# Shared by the cluster scripts (source after lib.sh; do not run): versions, directories and
# small helpers for the local single-node Kubernetes cluster.
K8S_VERSION=${K8S_VERSION:-1.34.4}
K8S_VERSION=${K8S_VERSION#v}
K8S_DIR=$GCSFUSE_CSI_CACHE/k8s-$K8S_VERSION
K8S_BIN=$K8S_DIR/bin
# Cluster state (etcd data, configs, logs, pids). Removed by cluster-down.sh, except the PKI,
# which is kept so a warm `up` skips openssl (it is cheap either way).
CLUSTER_DIR=${CLUSTER_DIR:-$GCSFUSE_CSI_CACHE/cluster}
PKI=$CLUSTER_DIR/pki
LOGS=$CLUSTER_DIR/logs
RUN=$CLUSTER_DIR/run
ETC=$CLUSTER_DIR/etc
IMAGES_DIR=$GCSFUSE_CSI_CACHE/images
export KUBECONFIG=${E2E_KUBECONFIG:-$PKI/admin.kubeconfig}
# Tag of every image we build; pods use imagePullPolicy Never.
IMAGE_TAG=${IMAGE_TAG:-e2e}
IMAGE_REPO=gcsfuse-csi.local
NODE_NAME=$(hostname)
NODE_IP=$(ip -4 route get 1.1.1.1 2>/dev/null | awk '{for(i=1;i<=NF;i++) if($i=="src") print $(i+1)}')

kctl() { "$K8S_BIN/kubectl" "$@"; }

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
