#!/usr/bin/env bash
# Deploys the driver onto the running local cluster and waits until it serves: by default
# the Helm chart (deploy/chart/gcsfuse-csi, values deploy/overlays/local/values.yaml) plus the
# emulator (deploy/overlays/local/emulator); DEPLOY_WITH=kustomize applies the kustomize
# overlay instead (deploy/overlays/local; DEPLOY_OVERLAY to change):
#   1. a CA and the webhook's serving certificate (openssl, cached in $PKI/webhook),
#   2. the manifests, the TLS Secret and the webhook's caBundle (on an API server older than
#      1.30, without the ValidatingAdmissionPolicy, which needs admissionregistration.k8s.io/v1),
#   3. rollouts of the node plugin, the webhook, the controller (the dynamic provisioner),
#      the shared mounter (both wherever the manifests have them: the previous release's
#      have neither) and the emulator,
#      and the driver registered with the kubelet (listed in the node's CSINode object).
# The images are $IMAGE_REPO/<name>:$IMAGE_TAG (cluster-lib.sh), the ones images.sh built:
# the chart gets them as values (node, webhook, controller and the sidecar the webhook
# injects); the kustomize overlays name the default ones, rewritten on the way to the API
# server.
# DEPLOY_RELEASE_DIR=DIR installs from the release artifacts hack/release.sh wrote there
# (RELEASE_VERSION and RELEASE_REPO as it was given them) instead of the source tree: each
# image's OCI archive imported into containerd, named by tag and by digest, and the packaged
# chart, whose images are pinned by digest, with the local values.
# Idempotent: re-running re-applies and restarts nothing that did not change.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/cluster-lib.sh"

overlay=${DEPLOY_OVERLAY:-$REPO_ROOT/deploy/overlays/local}
ns=gcsfuse-csi
svc=gcsfuse-webhook
wpki=$PKI/webhook

if [ ! -f "$wpki/tls.crt" ]; then
  step "webhook CA and serving certificate"
  mkdir -p "$wpki"
  (
    cd "$wpki" || exit 1
    openssl genrsa -out ca.key 2048 2>/dev/null
    openssl req -x509 -new -nodes -key ca.key -subj "/CN=gcsfuse-webhook-ca" -days 3650 -out ca.crt
    openssl genrsa -out tls.key 2048 2>/dev/null
    openssl req -new -key tls.key -subj "/CN=$svc.$ns.svc" -out tls.csr
    printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\nsubjectAltName=DNS:%s,DNS:%s.%s,DNS:%s.%s.svc,DNS:%s.%s.svc.cluster.local\n' \
      "$svc" "$svc" "$ns" "$svc" "$ns" "$svc" "$ns" > tls.ext
    openssl x509 -req -in tls.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 -extfile tls.ext -out tls.crt 2>/dev/null
    rm -f tls.csr tls.ext
  )
fi

# The ValidatingAdmissionPolicy that guards native sidecars (deploy/base/webhook/
# validating-policy.yaml) is admissionregistration.k8s.io/v1, served from Kubernetes 1.30 on.
# An older API server (1.28, 1.29: v1beta1 there, off by default) cannot take it: there the
# manifests are applied without it, and the output says so. Where v1 is served it is always
# applied.
vap_served() {
  local res
  res=$(kctl get --raw /apis/admissionregistration.k8s.io/v1) || {
    echo "cannot list admissionregistration.k8s.io/v1 on the API server" >&2
    exit 1
  }
  [[ $res == *'"name":"validatingadmissionpolicies"'* ]]
}
# without_vap: the kustomize output on stdin minus the policy and its binding.
without_vap() {
  awk '
    function flush() { if (doc != "" && !drop) printf "%s", (n++ ? "---\n" : "") doc; doc = ""; drop = 0 }
    /^---$/ { flush(); next }
    /^kind: ValidatingAdmissionPolicy(Binding)?$/ { drop = 1 }
    { doc = doc $0 "\n" }
    END { flush() }'
}
# local_images: the manifests on stdin with the overlays' default image names
# (gcsfuse-csi.local/<name>:e2e) replaced by $IMAGE_REPO/<name>:$IMAGE_TAG.
local_images() {
  sed -E "s#gcsfuse-csi\.local/([a-z]+):e2e\b#$IMAGE_REPO/\1:$IMAGE_TAG#g"
}
image_values=()
for img in node webhook sidecar controller; do
  image_values+=(--set "images.$img.repository=$IMAGE_REPO/$img" --set-string "images.$img.tag=$IMAGE_TAG")
done
ca=$(base64 -w0 < "$wpki/ca.crt")
tls_secret() {
  kctl -n "$ns" create secret tls gcsfuse-webhook-tls --cert="$wpki/tls.crt" --key="$wpki/tls.key" \
    --dry-run=client -o yaml | kctl apply -f -
}
server=$(kctl version -o json | sed -n 's/.*"gitVersion": *"\([^"]*\)".*/\1/p' | tail -1)
no_vap="the API server ($server) does not serve admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy (Kubernetes 1.30+); native sidecars injected on this cluster are not guarded against later webhooks"
if [ "${DEPLOY_WITH:-helm}" = helm ]; then
  ensure_helm
  chart=$REPO_ROOT/deploy/chart/gcsfuse-csi
  values=$REPO_ROOT/deploy/overlays/local/values.yaml
  if [ -n "${DEPLOY_RELEASE_DIR:-}" ]; then
    : "${RELEASE_VERSION:?RELEASE_VERSION: the version hack/release.sh built}" "${RELEASE_REPO:?RELEASE_REPO: its IMAGE_REPO}"
    chart=$DEPLOY_RELEASE_DIR/gcsfuse-csi-${RELEASE_VERSION#v}.tgz
    step "the release's images (${DEPLOY_RELEASE_DIR}/images), imported with their digest names"
    (cd "$DEPLOY_RELEASE_DIR" && sha256sum -c --quiet SHA256SUMS)
    for a in "$DEPLOY_RELEASE_DIR"/images/*.oci.tar; do ctr_each -n k8s.io images import "$a" >/dev/null; done
    # Named after each archive's io.containerd.image.name (repo:tag); the kubelet asks for
    # repo:tag@digest, which the runtime looks up as repo@digest: that name too (on every
    # node; the digest is the archive's, the same on each).
    for img in node webhook sidecar controller; do
      ref=$RELEASE_REPO/$img:$RELEASE_VERSION
      digest=$(ctr -n k8s.io images ls | awk -v r="$ref" '$1 == r { print $3 }')
      [ -n "$digest" ] || { echo "$ref was not imported from $DEPLOY_RELEASE_DIR/images" >&2; exit 1; }
      ctr_each -n k8s.io images tag --force "$ref" "$RELEASE_REPO/$img@$digest" >/dev/null
    done
    # The packaged chart pins each image by digest; its repository and tag are the
    # release's, which the local values' (the source tree's images) must not replace.
    image_values=()
    for img in node webhook sidecar controller; do
      image_values+=(--set "images.$img.repository=$RELEASE_REPO/$img" --set-string "images.$img.tag=$RELEASE_VERSION")
    done
  elif [ "${DEPLOY_RELEASE:-}" = previous ]; then
    # The previous release's own chart and local values (hack/previous-release.sh), with
    # its images, for the upgrade e2e test; running this script again without
    # DEPLOY_RELEASE is the upgrade.
    chart=$PREVIOUS_RELEASE_DIR/src/deploy/chart/gcsfuse-csi
    values=$PREVIOUS_RELEASE_DIR/src/deploy/overlays/local/values.yaml
    [ -d "$chart" ] || { echo "no previous release in $PREVIOUS_RELEASE_DIR: run hack/previous-release.sh" >&2; exit 1; }
    # Its images, under the names its own images.sh gave them. No controller: 0.1.0 had none,
    # and its values schema refuses an images.controller.
    image_values=()
    for img in node webhook sidecar; do
      image_values+=(--set "images.$img.repository=$PREVIOUS_RELEASE_REPO/$img" --set-string "images.$img.tag=$PREVIOUS_RELEASE")
    done
  fi
  # Helm keeps its release record in the namespace, so the namespace comes first, with the
  # Pod Security label the privileged node plugin needs (the chart's createNamespace is
  # for kustomize's rendering).
  kctl create namespace "$ns" --dry-run=client -o yaml | kctl apply -f - >/dev/null
  kctl label namespace "$ns" pod-security.kubernetes.io/enforce=privileged app.kubernetes.io/part-of=gcsfuse-csi --overwrite >/dev/null
  tls_secret
  set_vap=()
  if vap_served; then
    step "helm upgrade --install gcsfuse-csi ${chart#"$REPO_ROOT"/} -f ${values#"$REPO_ROOT"/} ${image_values[*]}"
  else
    step "helm upgrade --install gcsfuse-csi ${chart#"$REPO_ROOT"/} -f ${values#"$REPO_ROOT"/} ${image_values[*]} --set admissionPolicy.enabled=false: $no_vap"
    set_vap=(--set admissionPolicy.enabled=false)
  fi
  "$HELM_DIR/helm" upgrade --install gcsfuse-csi "$chart" --kubeconfig "$KUBECONFIG" --namespace "$ns" \
    -f "$values" "${image_values[@]}" --set webhook.tls.caBundle="$ca" "${set_vap[@]}"
  step "kubectl apply -k deploy/overlays/local/emulator ($IMAGE_REPO/emulator:$IMAGE_TAG)"
  kctl kustomize "$REPO_ROOT/deploy/overlays/local/emulator" | local_images | kctl apply -f -
else
  if vap_served; then
    step "kubectl apply -k ${overlay#"$REPO_ROOT"/} (images $IMAGE_REPO/<name>:$IMAGE_TAG)"
    kctl kustomize "$overlay" | local_images | kctl apply -f -
  else
    step "kubectl apply -k ${overlay#"$REPO_ROOT"/} (images $IMAGE_REPO/<name>:$IMAGE_TAG) WITHOUT the ValidatingAdmissionPolicy gcsfuse-native-sidecar and its binding: $no_vap"
    kctl kustomize "$overlay" | without_vap | local_images | kctl apply -f -
  fi
  tls_secret
  kctl patch mutatingwebhookconfiguration gcsfuse-webhook --type=json \
    -p "[{\"op\":\"add\",\"path\":\"/webhooks/0/clientConfig/caBundle\",\"value\":\"$ca\"},{\"op\":\"add\",\"path\":\"/webhooks/1/clientConfig/caBundle\",\"value\":\"$ca\"}]" >/dev/null
fi

step "wait for rollouts"
kctl -n "$ns" rollout status daemonset/gcsfuse-csi-node --timeout=120s
kctl -n "$ns" rollout status deployment/gcsfuse-webhook --timeout=120s
# The controller is in this tree's chart and overlays, not in the previous release's: waited
# for where the manifests just applied made it (e2e TestImages checks it runs in this tree's).
if kctl -n "$ns" get deployment gcsfuse-csi-controller >/dev/null 2>&1; then
  kctl -n "$ns" rollout status deployment/gcsfuse-csi-controller --timeout=120s
fi
# The shared mounter likewise: not in the previous release, and not where the chart's
# mounter.enabled=false left it out. Its DaemonSet is OnDelete (an upgrade never replaces a
# mounter under the shared mounts it serves: docs/upgrade.md), so there is no rollout to
# wait for: a pod of an older template is replaced here, on this local cluster, by the
# procedure a fleet follows once the node is drained (delete it, the DaemonSet makes the
# new one), then its pods are waited for until every node's is ready.
if kctl -n "$ns" get daemonset gcsfuse-csi-mounter >/dev/null 2>&1; then
  # The template's generation, which each pod carries as its pod-template-generation label
  # (metadata.generation also counts changes outside the template).
  gen=$(kctl -n "$ns" get daemonset gcsfuse-csi-mounter -o jsonpath='{.metadata.annotations.deprecated\.daemonset\.template\.generation}')
  old=$(kctl -n "$ns" get pods -l app=gcsfuse-csi-mounter -o jsonpath="{range .items[?(@.metadata.labels.pod-template-generation!='$gen')]}{.metadata.name}{' '}{end}")
  if [ -n "$gen" ] && [ -n "$old" ]; then
    step "the shared mounter's pods of an older template (generation $gen is current), replaced: $old"
    # Its grace (mounter.terminationGracePeriodSeconds, 300 s) if shared mounts are in use.
    # shellcheck disable=SC2086
    kctl -n "$ns" delete pod $old --wait=true --timeout=360s
  fi
  mounter_ready() {
    local st
    st=$(kctl -n "$ns" get daemonset gcsfuse-csi-mounter -o jsonpath='{.status.desiredNumberScheduled} {.status.numberReady} {.status.updatedNumberScheduled}')
    read -r desired ready updated <<<"$st"
    [ "${desired:-0}" -gt 0 ] && [ "$ready" = "$desired" ] && [ "$updated" = "$desired" ]
  }
  deadline=$(( $(date +%s) + 120 ))
  until mounter_ready; do
    [ "$(date +%s)" -lt "$deadline" ] || { echo "the shared mounter's pods are not all ready and current after 120 s:" >&2; kctl -n "$ns" get pods -l app=gcsfuse-csi-mounter -o wide >&2; exit 1; }
    sleep 1
  done
  step "the shared mounter ready on every node"
fi
if kctl -n "$ns" get deployment gcs-emulator >/dev/null 2>&1; then
  kctl -n "$ns" rollout status deployment/gcs-emulator --timeout=120s
fi
# On every node: each kubelet lists the driver in its CSINode.
registered() {
  local node
  for node in $(kctl get nodes -o jsonpath='{.items[*].metadata.name}'); do
    kctl get csinode "$node" -o jsonpath='{.spec.drivers[*].name}' | grep -qw gcsfuse.csi.storage || return 1
  done
}
waitfor "driver gcsfuse.csi.storage registered with every node's kubelet (CSINode)" 60 registered
step "driver deployed"
