#!/usr/bin/env bash
# Runs Kubernetes' own storage e2e suite (e2e.test of $K8S_VERSION, the External Storage
# tests) against this driver on the running local cluster (hack/cluster-up.sh, hack/deploy.sh;
# `E2E_CONFORMANCE=only hack/e2e.sh` brings one up, runs this and tears it down), and prints
# passed / failed / skipped with the reason of each skip and the total time.
#
#   1. e2e.test and agnhost of $K8S_VERSION (hack/conformance-build.sh, cached),
#   2. the suite's test images, busybox and agnhost, built here and imported into the cluster's
#      containerd, and the registry mapping that points the suite at them
#      (hack/conformance-images.sh, KUBE_TEST_REPO_LIST),
#   3. the bucket of test/conformance/driver.yaml in the cluster's GCS emulator, and a check
#      that a pod of the suite's default Pod Security level (restricted) with this driver's
#      inline volume is admitted with the injected sidecar,
#   4. e2e.test -storage.testdriver=test/conformance/driver.yaml with CONFORMANCE_FOCUS and
#      CONFORMANCE_SKIP (defaults below), JUnit report in $CONFORMANCE_OUT,
#   5. the table (test/conformance/report; kept in $CONFORMANCE_OUT/table.md, the generated
#      block "conformance" of README.md and docs/conformance.md) and the exit code: non-zero
#      on any failure that test/conformance/known-failures.txt does not list with its
#      upstream reason.
#
# Env: K8S_VERSION (default 1.34.4), CONFORMANCE_FOCUS, CONFORMANCE_SKIP, CONFORMANCE_OUT
# (default $GCSFUSE_CSI_CACHE/conformance), CONFORMANCE_DRIVER_DEF (another driver definition,
# e.g. with shorter Timeouts to watch a broken driver fail fast), GCSFUSE_CSI_CACHE.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/cluster-lib.sh"
hack=$REPO_ROOT/hack
start=$(date +%s)

DRIVER=gcsfuse.csi.storage
driver_def=${CONFORMANCE_DRIVER_DEF:-$REPO_ROOT/test/conformance/driver.yaml}
# Every External Storage test of this driver...
FOCUS=${CONFORMANCE_FOCUS:-'External.Storage \[Driver: gcsfuse\.csi\.storage\]'}
# ...but those that disrupt or serialise the cluster (kubelet restarts, node reboots: one
# node here, shared with nothing), the slow ones (stress and performance runs), and those of
# alpha/beta features or feature gates the local cluster does not turn on.
SKIP=${CONFORMANCE_SKIP:-'\[Disruptive\]|\[Serial\]|\[Slow\]|\[Flaky\]|\[Feature:[^]]+\]|\[FeatureGate:[^]]+\]|\[Alpha\]|\[Beta\]'}
# The suite's own bound for the whole run; each test's waits are the framework's.
SUITE_TIMEOUT=40m
# Bound of each call to the emulator and the API server made here.
CALL_TIMEOUT=30
OUT=${CONFORMANCE_OUT:-$GCSFUSE_CSI_CACHE/conformance}
E2E_TEST=$K8S_DIR/e2e/e2e.test
bucket=$(grep -oE 'bucketName: *[a-z0-9._-]+' "$driver_def" | head -1 | sed 's/.*: *//')
gcs_url=${E2E_GCS_URL:-http://$NODE_IP:14443}
[ -n "$bucket" ] || { echo "no bucketName in $driver_def" >&2; exit 1; }

kctl get --raw /readyz >/dev/null 2>&1 || {
  echo "no cluster answers at $KUBECONFIG: run hack/cluster-up.sh and hack/deploy.sh first, or E2E_CONFORMANCE=only hack/e2e.sh" >&2
  exit 1
}

"$hack/conformance-build.sh"
"$hack/conformance-images.sh"
repo_list=$K8S_DIR/e2e/images/repo-list.yaml

step "bucket $bucket in the emulator ($gcs_url)"
code=$(curl -sS --max-time "$CALL_TIMEOUT" -o /dev/null -w '%{http_code}' -X POST -H 'Content-Type: application/json' \
  --data "{\"name\":\"$bucket\"}" "$gcs_url/storage/v1/b?project=conformance")
case $code in
  200 | 409) ;; # created, or there from an earlier run on this cluster
  *) echo "creating bucket $bucket: HTTP $code" >&2; exit 1 ;;
esac

# The framework gives each test's namespace the Pod Security level the test suite asks for,
# restricted unless it says otherwise (framework.go); the ephemeral suite asks privileged.
# A pod of the restricted level with the driver's inline volume must still be admitted, the
# injected sidecar included: checked on the server (webhooks and Pod Security admission
# run on a dry-run create).
step "Pod Security: a restricted pod with the driver's inline volume is admitted, with the sidecar"
psa_ns=conformance-psa-restricted
kctl apply --request-timeout="${CALL_TIMEOUT}s" -f - >/dev/null <<EOF
apiVersion: v1
kind: Namespace
metadata:
  name: $psa_ns
  labels: {pod-security.kubernetes.io/enforce: restricted}
EOF
containers=$(kctl -n "$psa_ns" create --request-timeout="${CALL_TIMEOUT}s" --dry-run=server -o jsonpath='{range .spec.initContainers[*]}{.name}{" "}{end}{range .spec.containers[*]}{.name}{" "}{end}' -f - <<EOF
apiVersion: v1
kind: Pod
metadata: {name: restricted-inline}
spec:
  securityContext: {runAsNonRoot: true, runAsUser: 1000, seccompProfile: {type: RuntimeDefault}}
  containers:
    - name: app
      image: gcsfuse-csi.local/e2e-test-images/busybox
      command: [sleep, "1"]
      securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}
      volumeMounts: [{name: data, mountPath: /data}]
  volumes:
    - name: data
      csi: {driver: $DRIVER, volumeAttributes: {bucketName: $bucket}}
EOF
) || true
kctl delete namespace "$psa_ns" --request-timeout="${CALL_TIMEOUT}s" --wait=false >/dev/null
# A failed check fails the run at the end; the suite still runs, to show what else it breaks.
psa_rc=0
if ! echo " $containers " | grep -q " app "; then
  echo "FAILED: the restricted pod was not admitted" >&2; psa_rc=1
elif [ "$(echo "$containers" | wc -w)" -lt 2 ]; then
  echo "FAILED: the restricted pod was admitted without the sidecar (containers: $containers)" >&2; psa_rc=1
else
  echo "    admitted under enforce=restricted, containers: $containers"
fi

rm -rf "$OUT"
mkdir -p "$OUT"
step "e2e.test v$K8S_VERSION: focus '$FOCUS', skip '$SKIP' (log $OUT/e2e.log)"
suite_start=$(date +%s)
rc=0
KUBE_TEST_REPO_LIST=$repo_list "$E2E_TEST" \
  -kubeconfig="$KUBECONFIG" \
  -storage.testdriver="$driver_def" \
  -ginkgo.focus="$FOCUS" -ginkgo.skip="$SKIP" \
  -ginkgo.timeout="$SUITE_TIMEOUT" -ginkgo.no-color -ginkgo.v \
  -report-dir="$OUT" > "$OUT/e2e.log" 2>&1 || rc=$?
suite_secs=$(( $(date +%s) - suite_start ))
grep -E '^(Ran |FAIL|SUCCESS|PASS)|^\s*\[FAIL\]' "$OUT/e2e.log" | tail -20 || true
[ -f "$OUT/junit_01.xml" ] || { echo "e2e.test wrote no JUnit report (rc=$rc); see $OUT/e2e.log:" >&2; tail -30 "$OUT/e2e.log" >&2; exit 1; }

echo
echo "=== Kubernetes v$K8S_VERSION storage e2e suite (e2e.test), External Storage [Driver: $DRIVER]"
echo "    focus: $FOCUS"
echo "    skip:  $SKIP"
report_rc=0
(cd "$REPO_ROOT" && go run ./test/conformance/report -junit "$OUT/junit_01.xml" -driver "$DRIVER" \
  -skip "$SKIP" -known "$REPO_ROOT/test/conformance/known-failures.txt") | tee "$OUT/table.md" || report_rc=$?
echo "suite ${suite_secs} s, total $(( $(date +%s) - start )) s (e2e.test rc=$rc; report $OUT/junit_01.xml; table $OUT/table.md, the README's block: go run ./hack/readme -block conformance -file README.md < $OUT/table.md)"
[ "$psa_rc" = 0 ] || echo "FAILED: the Pod Security check before the suite (above)" >&2
# e2e.test fails the run on a failed test, known ones included: the report decides.
[ "$report_rc" = 0 ] && [ "$psa_rc" = 0 ]
