#!/usr/bin/env bash
# The Helm chart (deploy/chart/gcsfuse-csi) is the one source of the driver's manifests:
# deploy/base, the kustomize base, is its output with the default values. Its checks are Go
# tests beside it (deploy/chart: helm lint, renders with edge values, refused values, drift of
# deploy/base); this runs them with the pinned helm (HELM_VERSION, lib.sh, built into
# $HELM_DIR), which hack/test.sh gives them too.
#   hack/chart.sh [go test flags]   go test ./deploy/chart
#   hack/chart.sh generate          write deploy/base from the chart (the drift test, -update)
source "$(dirname "$0")/lib.sh"
set -euo pipefail
cd "$REPO_ROOT"
ensure_helm
export HELM=$HELM_DIR/helm
if [ "${1:-}" = generate ]; then
  step "deploy/base from the chart"
  exec go test -count=1 -run '^TestBaseIsChartOutput$' ./deploy/chart -update
fi
step "the chart's checks (go test ./deploy/chart, helm v$HELM_VERSION)"
exec go test -count=1 "$@" ./deploy/chart
