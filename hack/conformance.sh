#!/usr/bin/env bash
# Runs Kubernetes' own storage testsuites (of $K8S_VERSION) against this driver, through its
# Go test driver (test/conformance/storage: pre-provisioned PVs, one emulator bucket per test,
# and CSI inline volumes), on the running local cluster (hack/cluster-up.sh, hack/deploy.sh;
# `E2E_CONFORMANCE=only hack/e2e.sh` brings one up, runs this and tears it down), and prints
# passed / failed / skipped with the reason of each skip and the total time.
#
#   1. storage-e2e.test and agnhost of $K8S_VERSION (hack/conformance-build.sh, cached),
#   2. the suite's test images, busybox and agnhost, built here and imported into the cluster's
#      containerd, and the registry mapping that points the suite at them
#      (hack/conformance-images.sh, KUBE_TEST_REPO_LIST),
#   3. a check that a pod of the suite's default Pod Security level (restricted) with this
#      driver's inline volume is admitted with the injected sidecar,
#   4. storage-e2e.test -gcsfuse.emulator=<the emulator, as this host reaches it> with
#      CONFORMANCE_FOCUS and CONFORMANCE_SKIP (defaults below), in five shards at once, then
#      the [Disruptive] tests alone (they stop and start the kubelet over SSH: hack/nodessh,
#      hack/node-systemctl.sh), JUnit reports in $CONFORMANCE_OUT; the driver makes and
#      deletes each test's buckets,
#   5. the tables (test/conformance/report: a row per testsuite, then each test, skips grouped
#      by reason; kept in $CONFORMANCE_OUT/table.md, the generated block "conformance" of
#      docs/conformance.md) and the exit code: non-zero on any failure that
#      test/conformance/known-failures.txt does not list with its upstream reason, and on a
#      skip without a reason.
#
# Env: K8S_VERSION (default 1.34.4), CONFORMANCE_FOCUS, CONFORMANCE_SKIP,
# CONFORMANCE_DISRUPTIVE_SKIP, CONFORMANCE_SHARDS, CONFORMANCE_ALONGSIDE (a command run
# beside the shards), CONFORMANCE_OUT (default $GCSFUSE_CSI_CACHE/conformance),
# CONFORMANCE_PART (all, the default: 1-5; beside: 1-4 up to the disruptive tests, for a
# caller that runs other tests that disrupt nothing meanwhile, as hack/e2e.sh does beside its
# parallel tests; disruptive: the disruptive tests and 5, once that caller's tests are over;
# the two parts pass their results on in $CONFORMANCE_OUT/beside.env), GCSFUSE_CSI_CACHE.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/cluster-lib.sh"
hack=$REPO_ROOT/hack
start=$(date +%s)

DRIVER=gcsfuse.csi.storage
# Every test of this driver's...
FOCUS=${CONFORMANCE_FOCUS:-'\[Driver: gcsfuse\.csi\.storage\]'}
# ...but those that disrupt the node (they stop the kubelet with systemctl over SSH: run
# apart, below, through hack/nodessh and hack/node-systemctl.sh), need it alone ([Serial]:
# shards run at once), and
# those of alpha/beta features or feature gates the local cluster does not turn on. [Slow]
# ones run: on a bucket they take seconds to two minutes, not the disks' many minutes.
SKIP=${CONFORMANCE_SKIP:-'\[Disruptive\]|\[Serial\]|\[Flaky\]|\[Feature:[^]]+\]|\[FeatureGate:[^]]+\]|\[Alpha\]|\[Beta\]'}
# The disruptive tests run after the others, alone (below): these are left out of them.
DISRUPTIVE_SKIP=${CONFORMANCE_DISRUPTIVE_SKIP:-'\[Flaky\]|\[Feature:[^]]+\]|\[FeatureGate:[^]]+\]|\[Alpha\]|\[Beta\]'}
# The node's SSH key (hack/cluster-up.sh starts hack/nodessh with it).
SSH_KEY=$RUN/ssh/id_ed25519
# The suite's own bound for the whole run; each test's waits are the framework's.
SUITE_TIMEOUT=40m
# Bound of each call to the emulator and the API server made here.
CALL_TIMEOUT=30
OUT=${CONFORMANCE_OUT:-$GCSFUSE_CSI_CACHE/conformance}
PART=${CONFORMANCE_PART:-all}
case $PART in
  all | beside | disruptive) ;;
  *) echo "CONFORMANCE_PART=$PART: all, beside or disruptive" >&2; exit 2 ;;
esac
# What the part beside the other tests hands to the disruptive part.
BESIDE_ENV=$OUT/beside.env
E2E_TEST=$K8S_DIR/e2e/storage-e2e.test
# The Pod Security check's pod names a bucket; a dry run mounts nothing.
bucket=gcsfuse-csi-conformance
gcs_url=${E2E_GCS_URL:-http://$NODE_IP:14443}

kctl get --raw /readyz >/dev/null 2>&1 || {
  echo "no cluster answers at $KUBECONFIG: run hack/cluster-up.sh and hack/deploy.sh first, or E2E_CONFORMANCE=only hack/e2e.sh" >&2
  exit 1
}

repo_list=$K8S_DIR/e2e/images/repo-list.yaml
if [ "$PART" != disruptive ]; then
"$hack/conformance-build.sh"
"$hack/conformance-images.sh"

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
fi
# Shards run at once on the cluster: the tests mostly wait (pods starting, containers
# restarting, claims binding), so several shorten the wall time without crowding 2 cores.
# Shard k runs the tests matching SHARDS[k] and none of the earlier shards'; the last runs the
# rest. The six container-restart tests (~95 s each: their waits are the kubelet's restart
# back-off) are spread over the first two; the Dynamic PV subPath tests (13-33 s each, the
# most numerous) over the next two: from the tests' times in one run (2026-12-05), each
# shard needs about 130-180 s. Each
# shard writes its own JUnit report; the report merges them. CONFORMANCE_SHARDS (patterns
# separated by ";;") replaces the list.
SHARDS=('subPath should support restarting containers using directory|volumeMode|CSI Ephemeral-volume'
  'subPath should support restarting containers using file|\] volumes should'
  'Dynamic PV.*subPath should (fail|support (existing|non-existent|readOnly))'
  'Dynamic PV.*(subPath|volumeIO)')
if [ -n "${CONFORMANCE_SHARDS:-}" ]; then
  mapfile -t SHARDS < <(printf '%s\n' "${CONFORMANCE_SHARDS//;;/$'\n'}")
fi
nshards=$(( ${#SHARDS[@]} + 1 ))
run_shard() { # N FOCUS SKIP [FLAG...]
  local n=$1 focus=$2 skip=$3
  shift 3
  mkdir -p "$OUT/shard$n"
  KUBE_TEST_REPO_LIST=$repo_list "$E2E_TEST" \
    -kubeconfig="$KUBECONFIG" \
    -gcsfuse.emulator="$gcs_url" \
    -ginkgo.focus="$focus" -ginkgo.skip="$skip" "$@" \
    -ginkgo.timeout="$SUITE_TIMEOUT" -ginkgo.no-color -ginkgo.v \
    -report-dir="$OUT/shard$n" > "$OUT/e2e-$n.log" 2>&1
}
if [ "$PART" != disruptive ]; then
step "storage-e2e.test v$K8S_VERSION: focus '$FOCUS', skip '$SKIP', in $nshards shards at once (logs $OUT/e2e-N.log)"
suite_start=$(date +%s)
shard_pids=()
earlier=
for i in "${!SHARDS[@]}"; do
  run_shard $(( i + 1 )) "$FOCUS.*(${SHARDS[$i]})" "$SKIP${earlier:+|$earlier}" &
  shard_pids+=($!)
  earlier=${earlier:+$earlier|}${SHARDS[$i]}
done
# CONFORMANCE_ALONGSIDE: a command run beside the shards (hack/e2e.sh puts gcsfuse's
# integration tests through pods' volumes there), waited for before the disruptive tests
# stop the kubelet; its failure fails the run. Its output: $OUT/alongside.log.
alongside_pid=
if [ -n "${CONFORMANCE_ALONGSIDE:-}" ]; then
  step "beside the shards: $CONFORMANCE_ALONGSIDE (log $OUT/alongside.log)"
  bash -c "$CONFORMANCE_ALONGSIDE" >"$OUT/alongside.log" 2>&1 &
  alongside_pid=$!
fi
rc=0
run_shard "$nshards" "$FOCUS" "$SKIP|$earlier" || rc=$?
for pid in "${shard_pids[@]}"; do
  wait "$pid" || { r=$?; rc=$(( r > rc ? r : rc )); }
done
step "the $nshards shards took $(( $(date +%s) - suite_start )) s"
alongside_rc=0
if [ -n "$alongside_pid" ]; then
  wait "$alongside_pid" || alongside_rc=$?
  grep -E '^(===|---|suite|total|[a-z_/]+ +[0-9]+ +[0-9]+)' "$OUT/alongside.log" | tail -20 || true
  [ "$alongside_rc" = 0 ] || { tail -30 "$OUT/alongside.log" >&2; echo "FAILED: $CONFORMANCE_ALONGSIDE (rc=$alongside_rc; log $OUT/alongside.log)" >&2; }
fi
fi
if [ "$PART" = beside ]; then
  printf 'psa_rc=%d\nrc=%d\nalongside_rc=%d\nbeside_secs=%d\n' "$psa_rc" "$rc" "$alongside_rc" "$(( $(date +%s) - suite_start ))" >"$BESIDE_ENV"
  step "the part beside other tests is over (CONFORMANCE_PART=beside): the disruptive tests and the report follow with CONFORMANCE_PART=disruptive"
  exit 0
fi
if [ "$PART" = disruptive ]; then
  [ -f "$BESIDE_ENV" ] || { echo "no $BESIDE_ENV: CONFORMANCE_PART=disruptive follows a CONFORMANCE_PART=beside run of the same CONFORMANCE_OUT" >&2; exit 1; }
  psa_rc=1 rc=1 alongside_rc=1 beside_secs=0
  # shellcheck source=/dev/null
  source "$BESIDE_ENV"
  # The suite's time is its two parts', not the wait between them.
  suite_start=$(( $(date +%s) - beside_secs ))
fi
# Then the disruptive tests that fit one node, alone: they stop and start the kubelet over
# SSH (hack/nodessh on NODE_IP:22, the key cluster-up.sh made; hack/node-systemctl.sh) and
# read the node's mounts, so nothing else may run meanwhile. Those of features the cluster
# does not turn on (SELinux) stay out.
step "storage-e2e.test: the [Disruptive] tests, alone (log $OUT/e2e-$(( nshards + 1 )).log)"
[ -f "$SSH_KEY" ] || { echo "no SSH key at $SSH_KEY: the cluster was not started by this tree's hack/cluster-up.sh (hack/nodessh)" >&2; exit 1; }
disruptive=$(( nshards + 1 ))
rc3=0
KUBE_SSH_KEY_PATH=$SSH_KEY KUBE_SSH_USER=root run_shard "$disruptive" "$FOCUS" "$DISRUPTIVE_SKIP" -ginkgo.label-filter=Disruptive || rc3=$?
rc=$(( rc > rc3 ? rc : rc3 ))
suite_secs=$(( $(date +%s) - suite_start ))
junits=
for n in $(seq 1 "$disruptive"); do
  grep -E '^(Ran |FAIL|SUCCESS|PASS)|^\s*\[FAIL\]' "$OUT/e2e-$n.log" | tail -10 || true
  [ -f "$OUT/shard$n/junit_01.xml" ] || { echo "storage-e2e.test shard $n wrote no JUnit report; see $OUT/e2e-$n.log:" >&2; tail -30 "$OUT/e2e-$n.log" >&2; exit 1; }
  junits=${junits:+$junits,}$OUT/shard$n/junit_01.xml
done

echo
echo "=== Kubernetes v$K8S_VERSION storage testsuites through the Go test driver (storage-e2e.test), [Driver: $DRIVER]"
echo "    focus: $FOCUS"
echo "    skip:  $SKIP"
report_rc=0
(cd "$REPO_ROOT" && go run ./test/conformance/report -junit "$junits" -driver "$DRIVER" \
  -focus "$FOCUS" -skip "$SKIP" -known "$REPO_ROOT/test/conformance/known-failures.txt") | tee "$OUT/table.md" || report_rc=$?
echo "suite ${suite_secs} s, total $(( $(date +%s) - start )) s (storage-e2e.test rc=$rc, disruptive $rc3; reports $junits; table $OUT/table.md, docs/conformance.md's block: go run ./hack/readme -block conformance -file docs/conformance.md < $OUT/table.md)"
[ "$psa_rc" = 0 ] || echo "FAILED: the Pod Security check before the suite (above)" >&2
# storage-e2e.test fails the run on a failed test, known ones included: the report decides.
[ "$report_rc" = 0 ] && [ "$psa_rc" = 0 ] && [ "$alongside_rc" = 0 ]
