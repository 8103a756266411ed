#!/usr/bin/env bash
# Builds the Kubernetes binaries the local cluster needs (kube-apiserver,
# kube-controller-manager, kube-scheduler, kubelet, kubectl, kube-proxy) from the k8s.io/kubernetes
# module at $K8S_VERSION, into $GCSFUSE_CSI_CACHE/k8s-<ver>/bin. No registry or release download is
# reachable here, only the Go module proxy, so we build from source.
# k8s.io/kubernetes cannot be built with `go install ...@v`: a scratch module requires it
# (k8s_scratch_module in lib.sh).
# Idempotent: skipped when the cached kubelet already reports the wanted version.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/cluster-lib.sh"

K8S_BINS=(kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl kube-proxy)

if bins_cached "$K8S_BIN" "$K8S_VERSION" "${K8S_BINS[@]}"; then
  step "kubernetes v$K8S_VERSION binaries cached in $K8S_BIN"
  exit 0
fi

mod=$K8S_DIR/mod
mkdir -p "$mod" "$K8S_BIN"
cd "$mod" || exit 1
step "kubernetes v$K8S_VERSION: download module"
k8s_scratch_module gcsfuse-csi.local/k8sbuild
{
  printf '//go:build tools\n\npackage tools\n\nimport (\n'
  for b in "${K8S_BINS[@]}"; do printf '\t_ "k8s.io/kubernetes/cmd/%s"\n' "$b"; done
  printf ')\n'
} > tools.go
step "kubernetes v$K8S_VERSION: go mod tidy ($(grep -c '=> k8s.io' go.mod) staging replaces)"
GOFLAGS=-mod=mod go mod tidy

ld=$(k8s_version_ldflags)
pkgs=()
for b in "${K8S_BINS[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$b"); done
step "kubernetes v$K8S_VERSION: go build (~12 min cold on 2 idle cores)"
CGO_ENABLED=0 go build -trimpath -ldflags "$ld" -o "$K8S_BIN/" "${pkgs[@]}"
touch "$K8S_BIN/.built-v$K8S_VERSION"
"$K8S_BIN/kubelet" --version
step "kubernetes v$K8S_VERSION built"
