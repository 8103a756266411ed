# Shared by the hack/ scripts: the cache directory, pinned versions and timed steps.
# Source it; do not run it.
set -euo pipefail
export GCSFUSE_CSI_CACHE=${GCSFUSE_CSI_CACHE:-/var/cache/gcsfuse-csi}
# Go caches live in one place that every script and CI reuse.
export GOMODCACHE=${GOMODCACHE:-$(go env GOMODCACHE)}
export GOCACHE=${GOCACHE:-$(go env GOCACHE)}
# Every build of the scripts with the release images' flags (static, -trimpath; hack/images
# builds the product so), so that each package is compiled once for all of them: the e2e
# tests, go vet, the tools run with go run, helm. With go's defaults instead (cgo on, no
# -trimpath), the e2e build of a cold run compiled its ~1,100 dependencies a second time:
# 368 s against 165 s after the images' build on this 2-core machine (2026-12-07, modules
# cached). The race detector needs cgo: hack/units.sh and TestReleasePush (hack/checks.sh)
# set CGO_ENABLED=1 for it.
export CGO_ENABLED=0
case " ${GOFLAGS:-} " in
  *" -trimpath "*) ;;
  *) export GOFLAGS="${GOFLAGS:+$GOFLAGS }-trimpath" ;;
esac
GCSFUSE_VERSION=3.13.0
GCSFUSE_TOOLCHAIN=go1.27.2
# containerd of the local cluster (hack/containerd-build.sh builds it from its Go module).
# v2.4.2: the newest release the module proxy has. cgroup v1, which this machine runs
# (cgroupfs driver), is deprecated since containerd 2.2 but still supported by every 2.x
# release here: removal is planned for no earlier than May 2029 (its RELEASES.md); 2.2+ only
# logs a deprecation warning. Checked by running the cluster on it (hack/cluster-up.sh).
CONTAINERD_VERSION=${CONTAINERD_VERSION:-2.4.2}
CONTAINERD_VERSION=${CONTAINERD_VERSION#v}
# etcd of the local cluster (hack/etcd-build.sh builds it from its Go module), by Kubernetes
# minor version: the etcd each release pins in its build/dependencies.yaml (1.28.15: 3.5.15,
# 1.34.4: 3.6.5, 1.37.2: 3.7.0; the nearest pin below for releases in between). Debian's
# etcd-server 3.4.23 is too old: below 3.4.31 / 3.5.13 the API server (1.34 here) does not
# use etcd's watch progress requests (a bug of earlier releases), so its watch cache of a
# quiet resource lags behind etcd: a fresh watch or consistent read waits 3 s and fails ("Too
# large resource version"), logged every second; and kubeadm of 1.34 wants at least 3.5.24.
# ETCD_VERSION=X.Y.Z overrides the choice.
etcd_version_for() { # K8S_MINOR
  if [ "$1" -ge 37 ]; then echo 3.7.0
  elif [ "$1" -ge 34 ]; then echo 3.6.5
  else echo 3.5.15
  fi
}
REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# background_start VAR LOG WORDS...: runs WORDS as a bash command behind everything else on
# the machine, in a session and process group of its own (background_stop stops it), output
# to LOG, and sets the variable VAR to its pid (the group's id): at nice 19, and with that
# session's scheduler autogroup at nice 19 too, since with sched_autogroup_enabled (1 here)
# the kernel weighs each session's group against the others whatever its tasks' nice (a
# setsid'd build at nice 19 took half the cores). The job writes its exit code to LOG.rc:
# `wait PID` forgets a job that ended long before once bash forks a child that reuses its pid
# (pid_max is 32768 here, and a CI run's builds fork that many in minutes), and then answers
# 127, "not a child of this shell": a CI run of ca4bdae failed so with every test green.
# A function run in this shell, so that the job is this shell's child.
background_start() {
  local var=$1 log=$2
  shift 2
  rm -f "$log.rc"
  BACKGROUND_RC=$log.rc setsid bash -c 'echo 19 >/proc/self/autogroup 2>/dev/null || true
nice -n 19 bash -c "$*"
rc=$?
echo "$rc" >"$BACKGROUND_RC"
exit "$rc"' _ "$@" >"$log" 2>&1 &
  printf -v "$var" '%s' "$!"
}
# background_stop PID: stops such a job and everything under it (nothing if PID is empty).
background_stop() {
  if [ -n "$1" ]; then kill -- "-$1" 2>/dev/null || true; fi
}
# background_wait_var VAR LOG WHAT: background_wait for the job whose pid is in the variable
# VAR, cleared only once the job has ended: a TERM during the wait runs the caller's EXIT
# trap, which must still find the pid to stop the job.
background_wait_var() {
  local rc=0
  background_wait "${!1}" "$2" "$3" || rc=$?
  printf -v "$1" ''
  return "$rc"
}
# background_wait PID LOG WHAT: waits for a job of background_start, prints its steps, and
# when it failed the end of its log, naming WHAT failed; returns its exit code: the one it
# wrote to LOG.rc, else (stopped by a signal before it could) the one wait gives.
background_wait() {
  local rc=0
  wait "$1" 2>/dev/null || rc=$?
  if [ -s "$2.rc" ]; then rc=$(<"$2.rc"); fi
  grep '^===' "$2" || true
  if [ "$rc" != 0 ]; then
    tail -20 "$2" >&2
    echo "$3 failed (rc=$rc; log $2)" >&2
  fi
  return "$rc"
}
BIN=$GCSFUSE_CSI_CACHE/bin
mkdir -p "$BIN"
_t0=$(date +%s%N)
step() { local n; n=$(( ($(date +%s%N) - _t0) / 100000000 )); printf "=== [%4d.%ds] %s\n" $((n / 10)) $((n % 10)) "$*"; }

# The machine's heavy-build lock: builds that take both cores for minutes (the storage suites'
# binary, gcsfuse's test binaries, the previous release, hack/checks.sh's checks) take it, so
# that those running beside an e2e run queue rather than share the cores (hack/e2e.sh's
# prebuild_start says in which order).
HEAVY_LOCK=/tmp/gcsfuse-heavy.lock
HEAVY_LOCK_WAIT=3600
# CI's time limit. CI stops a run at 90 minutes and lands nothing, whatever it was doing; a run
# on course to pass CI_BUDGET_SECONDS (.ci/run sets 4800, 80 min) fails before that, with a
# line that names the step and the time (budget_check, budget_run), so the limit is never what
# ends it. Unset (hack/test.sh by hand), neither does anything.
CI_BUDGET_SECONDS=${CI_BUDGET_SECONDS:-}
# How long budget_run lets a stopped step clean up before KILL: cluster-down takes 12-70 s,
# more on a slow day, and hack/e2e.sh's clean-up ignores the TERM (80 min + 5 < CI's 90).
CI_BUDGET_GRACE=300
# ci_elapsed: whole seconds since this script's step clock began (_t0).
ci_elapsed() { echo $(( ($(date +%s%N) - _t0) / 1000000000 )); }
# budget_check WHAT LEAST: fails (exit 1, saying so) when the time so far plus LEAST, the
# seconds that WHAT and everything after it take at the least (their warm figures), passes
# CI_BUDGET_SECONDS: such a run cannot end in time, and failing at once says why.
budget_check() {
  [ -n "$CI_BUDGET_SECONDS" ] || return 0
  local now
  now=$(ci_elapsed)
  if (( now + $2 > CI_BUDGET_SECONDS )); then
    echo "CI budget: at $now s, before \"$1\", which with what follows takes at least $2 s warm: on course to pass $(( CI_BUDGET_SECONDS / 60 )) min (CI stops runs at 90 and lands nothing); failing now. Where the time went: the \"=== [s]\" lines above." >&2
    exit 1
  fi
}
# budget_run WHAT CMD...: runs CMD, stopped (TERM to its process group, KILL CI_BUDGET_GRACE
# s later) when the run reaches CI_BUDGET_SECONDS, saying so; returns CMD's exit code.
budget_run() {
  local what=$1 left rc=0
  shift
  if [ -z "$CI_BUDGET_SECONDS" ]; then
    "$@"
    return
  fi
  left=$(( CI_BUDGET_SECONDS - $(ci_elapsed) ))
  if (( left <= 0 )); then
    echo "CI budget: $(( CI_BUDGET_SECONDS / 60 )) min used up before \"$what\"; failing now" >&2
    return 1
  fi
  # timeout puts the step in a process group of its own, which a Ctrl-C or a TERM sent to this
  # script's group no longer reaches: in the background, with both forwarded to that group.
  # The caller's own INT/TERM traps are put back after the step; a signal that arrived during
  # it is sent to this script again then, so that it still ends the script.
  local saved caught=""
  saved=$(trap -p INT TERM)
  timeout --kill-after="$CI_BUDGET_GRACE" "$left" "$@" &
  local pid=$!
  # shellcheck disable=SC2064 # the pid is this call's
  trap "caught=INT; kill -TERM -- -$pid 2>/dev/null || true" INT
  # shellcheck disable=SC2064
  trap "caught=TERM; kill -TERM -- -$pid 2>/dev/null || true" TERM
  # wait returns early when a forwarded signal arrives: wait again until the step has ended
  # (127: it had been waited for already).
  while true; do
    wait "$pid" && rc=0 || rc=$?
    [ "$rc" != 127 ] || break
    kill -0 "$pid" 2>/dev/null || break
  done
  trap - INT TERM
  eval "$saved"
  if [ -n "$caught" ]; then
    kill -s "$caught" $$
  fi
  budget_stopped "$rc" "$what"
  return "$rc"
}
# budget_stopped RC WHAT: says so when WHAT ended with RC because the budget stopped it (the
# exit codes of timeout, with the budget used up).
budget_stopped() {
  if [ -n "$CI_BUDGET_SECONDS" ] && { [ "$1" = 124 ] || [ "$1" = 137 ]; } && (( $(ci_elapsed) >= CI_BUDGET_SECONDS )); then
    echo "CI budget: \"$2\" was still running at $(( CI_BUDGET_SECONDS / 60 )) min ($(ci_elapsed) s into the run); stopped it so that CI's 90-minute limit is not what ends the run" >&2
  fi
}

# The figures of a CI run, for its README block (hack/test.sh with CI_MARKDOWN=FILE; the
# format is hack/citiming's): when $CI_RECORDS names a file, the scripts append one line per
# figure to it, tab-separated, KIND first; when it is unset, nothing is written.
# ci_record KIND FIELD...: appends one such line (no field holds a tab or a newline).
ci_record() {
  [ -n "${CI_RECORDS:-}" ] || return 0
  local IFS=$'\t'
  printf '%s\n' "$*" >>"$CI_RECORDS"
}
# cpu_busy_ms: the time the machine's cores have been busy since boot (user, nice, system,
# irq, softirq and steal of /proc/stat's cpu line, every core summed), in ms: over a step, its
# difference says how much of the machine the step and whatever ran beside it used.
cpu_busy_ms() {
  awk -v hz="$(getconf CLK_TCK)" '$1 == "cpu" { printf "%.0f\n", ($2 + $3 + $4 + $7 + $8 + $9) * 1000 / hz; exit }' /proc/stat
}
# ci_record_start FIELD...: the start record, stamped with the scripts' clock zero ($_t0), and
# a cpu record of that moment (the whole run's cores busy).
ci_record_start() {
  [ -n "${CI_RECORDS:-}" ] || return 0
  ci_record start "$_t0" "$@"
  ci_record cpu "$_t0" "$(cpu_busy_ms)"
}
# ci_record_at KIND [FIELD...]: the record KIND stamped with the time now, after a cpu record
# of the same moment (CI_MARKDOWN's "cores busy" of each step; before it, since the end
# record must be the last).
ci_record_at() {
  [ -n "${CI_RECORDS:-}" ] || return 0
  local kind=$1 now
  shift
  now=$(date +%s%N)
  ci_record cpu "$now" "$(cpu_busy_ms)"
  ci_record "$kind" "$now" "$@"
}
# ci_record_tests PHASE LOG: the results of `go test -v` in LOG, as the counts of PHASE: the
# top-level tests that passed, failed and were skipped, then the subtests that passed.
ci_record_tests() {
  [ -n "${CI_RECORDS:-}" ] || return 0
  ci_record tests "$1" "$(grep -c '^--- PASS: ' "$2" || true)" "$(grep -c '^--- FAIL: ' "$2" || true)" \
    "$(grep -c '^--- SKIP: ' "$2" || true)" "$(grep -cE '^\s+--- PASS: ' "$2" || true)"
}
# ci_record_suite PHASE TABLE: the counts of Kubernetes' storage suite (PHASE), from the line
# "passed N, failed N (...), skipped N, of N tests" of test/conformance/report's TABLE; the
# suite has no subtests (-). Nothing when TABLE has no such line.
ci_record_suite() {
  [ -n "${CI_RECORDS:-}" ] || return 0
  local counts
  counts=$(sed -nE 's/^passed ([0-9]+), failed ([0-9]+)[^0-9].*, skipped ([0-9]+), of [0-9]+ tests.*/\1 \2 \3/p' "$2" 2>/dev/null | tail -1 || true)
  [ -n "$counts" ] || return 0
  # shellcheck disable=SC2086 # three numbers, split on purpose
  ci_record tests "$1" $counts -
}
STATICCHECK_VERSION=v0.8.2
DEADCODE_VERSION=v0.52.0
# Helm renders and lints the chart (the Go tests in deploy/chart, given it as $HELM) and
# installs the driver on the local cluster; v4 is the maintained major; built from its
# module like the other tools.
HELM_VERSION=4.3.2
# The release before this tree: hack/previous-release.sh builds its images from this commit
# (its own hack/images.sh, tag = its version) and hack/e2e.sh (UPGRADE_FROM=previous)
# installs its chart, then upgrades to this tree (docs/upgrade.md).
PREVIOUS_RELEASE=0.1.0
PREVIOUS_RELEASE_COMMIT=22f65cf8d44a87a1cc36656a30fc9d8db57ea795
# The repository its hack/images.sh names its images with (gcsfuse-csi.local/<name>:<version>).
PREVIOUS_RELEASE_REPO=gcsfuse-csi.local
PREVIOUS_RELEASE_DIR=$GCSFUSE_CSI_CACHE/release-$PREVIOUS_RELEASE
HELM_DIR=$GCSFUSE_CSI_CACHE/helm-$HELM_VERSION
# ensure_helm: build helm into $HELM_DIR unless it is there (~3 min cold).
ensure_helm() {
  bins_cached "$HELM_DIR" "$HELM_VERSION" helm && return 0
  step "go install helm v$HELM_VERSION"
  mkdir -p "$HELM_DIR"
  GOBIN=$HELM_DIR CGO_ENABLED=0 go install "helm.sh/helm/v4/cmd/helm@v$HELM_VERSION" || return 1
  touch "$HELM_DIR/.built-v$HELM_VERSION"
}

# bins_cached DIR VERSION BIN...: true when every BIN is an executable in DIR and DIR records a
# build of VERSION (.built-vVERSION, written last by the build scripts).
bins_cached() {
  local dir=$1 version=$2 b
  shift 2
  for b in "$@"; do [ -x "$dir/$b" ] || return 1; done
  [ -f "$dir/.built-v$version" ]
}

# k8s_scratch_module NAME: writes ./go.mod of a scratch module NAME that requires
# k8s.io/kubernetes at $K8S_VERSION (downloaded first). k8s.io/kubernetes' own go.mod replaces
# its staging modules with ./staging/... paths, which makes building its packages from the
# module refuse; mapping each to its published v0.<minor>.<patch> tag builds fine. Same go /
# godebug lines as upstream, so what is built behaves like upstream's.
k8s_scratch_module() {
  local gomod staging
  go mod download "k8s.io/kubernetes@v$K8S_VERSION"
  gomod=$(go env GOMODCACHE)/cache/download/k8s.io/kubernetes/@v/v$K8S_VERSION.mod
  staging=v0.${K8S_VERSION#1.}
  {
    printf 'module %s\n\n' "$1"
    grep -E '^(go|godebug) ' "$gomod"
    printf '\nrequire k8s.io/kubernetes v%s\n\nreplace (\n' "$K8S_VERSION"
    grep -E '^\s+k8s\.io/[a-z0-9-]+ => \./staging/' "$gomod" | awk -v sv="$staging" '{print "\t"$1" => "$1" "sv}'
    printf ')\n'
  } > go.mod
}

# k8s_version_ldflags: the -ldflags that stamp $K8S_VERSION into Kubernetes binaries, as its
# release builds do (stripped).
k8s_version_ldflags() {
  local minor ld="-s -w" pkg
  minor=$(echo "$K8S_VERSION" | cut -d. -f2)
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld="$ld -X $pkg.gitVersion=v$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
  done
  echo "$ld"
}
