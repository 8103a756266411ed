#!/usr/bin/env bash
# Uninstalling the driver leaves nothing of it running or mounted on the node, and nothing of
# its shared mode on disk: as docs/upgrade.md says, the mounter's DaemonSet deleted, then
# helm uninstall (the release hack/deploy.sh installed), then, once
# the node plugin's and the mounter's pods are gone (bounded), this machine is checked: no
# gcsfuse mount (fuse.gcsfuse) and no mount under the driver's kubelet plugin directory, no
# gcsfuse, sidecar, mounter or node plugin process, and no shared directory (the node plugin
# removes it when it stops with no mount and no mounter left, csidriver.CleanUpShared).
# Exit 1 naming what is left. Run by hack/e2e.sh with E2E_UNINSTALL=1 after the tests (CI's
# first e2e run, after every shared-mode fault its tests make, and its upgrade run). The
# tests' pods are waited for first (their volumes' mounts gone, bounded), as a user drains
# the nodes before uninstalling.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/cluster-lib.sh"
ns=gcsfuse-csi
driver=gcsfuse.csi.storage
plugin_dir=$KUBELET_ROOT/plugins/$driver
ensure_helm

# The shared directory is there to be removed (the mounter runs with this chart): a check
# of a directory that never existed would pass whatever the node plugin does.
[ -d "$plugin_dir/shared/mounter" ] || { echo "no shared directory before the uninstall: $plugin_dir/shared/mounter" >&2; exit 1; }
# The nodes drained first (docs/upgrade.md): no pod's volume of the driver still mounted.
step "no pod volume of the driver mounted (the tests' pods gone)"
deadline=$(( $(date +%s) + 300 ))
while :; do
  busy=$(awk -v d="$KUBELET_ROOT/pods/" '{ for (i = 7; i <= NF && $i != "-"; i++); t = $(i + 1) } index($5, d) == 1 && index($5, "/volumes/kubernetes.io~csi/") && t ~ /^fuse/ { print $5 }' /proc/self/mountinfo)
  [ -n "$busy" ] || break
  (( $(date +%s) < deadline )) || { echo "pod volumes still mounted 300 s after the tests:" >&2; echo "$busy" >&2; kctl get pods -A -o wide >&2; exit 1; }
  sleep 2
done
step "kubectl delete daemonset gcsfuse-csi-mounter, then helm uninstall gcsfuse-csi (docs/upgrade.md)"
kctl -n "$ns" delete daemonset gcsfuse-csi-mounter --cascade=foreground --wait --timeout=360s
"$HELM_DIR/helm" uninstall gcsfuse-csi --kubeconfig "$KUBECONFIG" --namespace "$ns" --wait --timeout 360s
deadline=$(( $(date +%s) + 360 ))
while [ -n "$(kctl -n "$ns" get pods -l 'app in (gcsfuse-csi-node,gcsfuse-csi-mounter)' -o name 2>/dev/null)" ]; do
  (( $(date +%s) < deadline )) || { echo "the node plugin's or the mounter's pods still there 360 s after helm uninstall" >&2; kctl -n "$ns" get pods -o wide >&2; exit 1; }
  sleep 1
done
# Their containers end with their pods, which the kubelet reports gone once they have.
step "what the driver left on the node"
left=()
# mountinfo: the mount point is field 5; the type is the first field after " - " (the
# optional fields before it vary in number).
mounts=$(awk -v d="$plugin_dir/" '{ for (i = 7; i <= NF && $i != "-"; i++); t = $(i + 1) } t == "fuse.gcsfuse" || index($5, d) == 1 { print $5 " (" t ")" }' /proc/self/mountinfo)
[ -z "$mounts" ] || left+=("mounts: $mounts")
for p in gcsfuse gcsfuse-sidecar gcsfuse-csi-node; do # comm: the first 15 characters
  pids=$(pgrep -x "${p:0:15}" | tr '\n' ' ' || true)
  [ -z "$pids" ] || left+=("$p processes: $pids")
done
[ ! -e "$plugin_dir/shared" ] || left+=("the shared directory $plugin_dir/shared: $(find "$plugin_dir/shared" | head -20 | tr '\n' ' ')")
if [ -d "$plugin_dir" ]; then
  echo "left in $plugin_dir (the kubelet's plugin directory of the driver, not the shared mode's):"
  find "$plugin_dir" -maxdepth 2 | sed 's/^/  /'
fi
if [ "${#left[@]}" -gt 0 ]; then
  printf 'uninstall left: %s\n' "${left[@]}" >&2
  exit 1
fi
echo "uninstall left no mount, no process and no shared directory"
