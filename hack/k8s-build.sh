#!/usr/bin/env bash
# Builds the Kubernetes binaries the local cluster needs (kube-apiserver,
# kube-controller-manager, kube-scheduler, kubelet, kubectl, kube-proxy) from the k8s.io/kubernetes
# module at $K8S_VERSION, into $GCSFUSE_CSI_CACHE/k8s-<ver>/bin. No registry or release download is
# reachable here, only the Go module proxy, so we build from source.
#
# k8s.io/kubernetes' own go.mod replaces its staging modules with ./staging/... paths, which makes
# `go install k8s.io/kubernetes/cmd/...@v` refuse it. A scratch module that requires it and maps
# every staging module to its published v0.<minor>.<patch> tag builds fine.
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
go mod download "k8s.io/kubernetes@v$K8S_VERSION"
gomod=$(go env GOMODCACHE)/cache/download/k8s.io/kubernetes/@v/v$K8S_VERSION.mod
staging=v0.${K8S_VERSION#1.}
{
  printf 'module gcsfuse-csi.local/k8sbuild\n\n'
  # Same go / godebug lines as k8s.io/kubernetes, so the binaries behave like upstream's.
  grep -E '^(go|godebug) ' "$gomod"
  printf '\nrequire k8s.io/kubernetes v%s\n\nreplace (\n' "$K8S_VERSION"
  grep -E '^\s+k8s\.io/[a-z0-9-]+ => \./staging/' "$gomod" | awk -v sv="$staging" '{print "\t"$1" => "$1" "sv}'
  printf ')\n'
} > go.mod
{
  printf '//go:build tools\n\npackage tools\n\nimport (\n'
  for b in "${K8S_BINS[@]}"; do printf '\t_ "k8s.io/kubernetes/cmd/%s"\n' "$b"; done
  printf ')\n'
} > tools.go
step "kubernetes v$K8S_VERSION: go mod tidy ($(grep -c '=> k8s.io' go.mod) staging replaces)"
GOFLAGS=-mod=mod go mod tidy

minor=$(echo "$K8S_VERSION" | cut -d. -f2)
ld="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ld="$ld -X $pkg.gitVersion=v$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
done
pkgs=()
for b in "${K8S_BINS[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$b"); done
step "kubernetes v$K8S_VERSION: go build (~12 min cold on 2 idle cores)"
CGO_ENABLED=0 go build -trimpath -ldflags "$ld" -o "$K8S_BIN/" "${pkgs[@]}"
touch "$K8S_BIN/.built-v$K8S_VERSION"
"$K8S_BIN/kubelet" --version
step "kubernetes v$K8S_VERSION built"
