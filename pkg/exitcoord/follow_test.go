package exitcoord

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/containerexittest"
	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/podevents"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/containerexit"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/csidriver"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/lifecycle"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/metricscatalog"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podfiles"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podwatch"
)

const (
	running = runtimeapi.ContainerState_CONTAINER_RUNNING
	created = runtimeapi.ContainerState_CONTAINER_CREATED
	exited  = runtimeapi.ContainerState_CONTAINER_EXITED
	unknown = runtimeapi.ContainerState_CONTAINER_UNKNOWN

	// releaseBound is how soon after the last container exits the exit file must appear:
	// two polls of FollowPollInterval, plus scheduling slack for -race on shared cores.
	releaseBound = 800 * time.Millisecond
	// holdFor is how long a test watches that nothing is released: several polls.
	holdFor = 500 * time.Millisecond
	// testTimeout bounds every other wait.
	testTimeout = 15 * time.Second
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// cacheMiss is a pod watcher that knows no pod (API unreachable).
type cacheMiss struct{}

func (cacheMiss) PodByUID(types.UID) (*corev1.Pod, bool) { return nil, false }

// podCache is a pod watcher cache of fixed pods.
type podCache map[types.UID]*corev1.Pod

func (c podCache) PodByUID(uid types.UID) (*corev1.Pod, bool) {
	p, ok := c[uid]
	if ok {
		p = p.DeepCopy()
	}
	return p, ok
}

type env struct {
	t      *testing.T
	root   string
	rt     *containerexittest.Server
	l      *ExitCoordinator
	events *podevents.Recorder
	reg    *prometheus.Registry
}

func newEnv(t *testing.T) *env {
	t.Helper()
	srv := containerexittest.NewServer(t)
	cri, err := containerexit.Dial(srv.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cri.Close() })
	reg := prometheus.NewRegistry()
	metrics, err := podwatch.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, root: t.TempDir(), rt: srv, events: &podevents.Recorder{}, reg: reg}
	e.l = &ExitCoordinator{KubeletRoot: e.root, Events: e.events, Log: quiet, Runtime: cri, Metrics: metrics}
	t.Cleanup(func() { e.l.Close(testTimeout) })
	return e
}

func (e *env) emptyDir(uid types.UID) string {
	return podfiles.TmpDirPath(e.root, string(uid))
}

func (e *env) mkEmptyDir(uid types.UID) {
	e.t.Helper()
	if err := os.MkdirAll(e.emptyDir(uid), 0o755); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) exitWritten(uid types.UID) bool {
	_, err := os.Stat(podfiles.At(e.emptyDir(uid)).ExitFile())
	return err == nil
}

// waitExit waits for the exit file and returns its reason and how long it took.
func (e *env) waitExit(uid types.UID, within time.Duration) (podfiles.Reason, time.Duration) {
	e.t.Helper()
	start := time.Now()
	for !e.exitWritten(uid) {
		if time.Since(start) > within {
			e.t.Fatalf("no exit file for pod %s within %s", uid, within)
		}
		time.Sleep(5 * time.Millisecond)
	}
	took := time.Since(start)
	dir, err := os.Open(e.emptyDir(uid))
	if err != nil {
		e.t.Fatal(err)
	}
	defer dir.Close()
	r, err := podfiles.Read(dir)
	if err != nil {
		e.t.Fatal(err)
	}
	return r, took
}

// hold fails the test if the exit file appears within d.
func (e *env) hold(uid types.UID, d time.Duration, why string) {
	e.t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if e.exitWritten(uid) {
			e.t.Fatalf("sidecar released although %s", why)
		}
	}
}

// follows returns the follow counter's total, and per result.
func (e *env) follows() (total float64, byResult map[string]float64) {
	e.t.Helper()
	byResult = map[string]float64{}
	mfs, err := e.reg.Gather()
	if err != nil {
		e.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != metricscatalog.RuntimeFollows.Name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "result" {
					byResult[lp.GetValue()] += m.GetCounter().GetValue()
				}
			}
			total += m.GetCounter().GetValue()
		}
	}
	return total, byResult
}

// waitFollowsEnded waits until n follows have ended.
func (e *env) waitFollowsEnded(n float64) map[string]float64 {
	e.t.Helper()
	for start := time.Now(); ; time.Sleep(10 * time.Millisecond) {
		if total, by := e.follows(); total >= n {
			return by
		}
		if time.Since(start) > testTimeout {
			e.t.Fatalf("fewer than %v follows ended within %s", n, testTimeout)
		}
	}
}

func deletedAt(p *corev1.Pod, grace int64) *corev1.Pod {
	now := metav1.Now()
	p.DeletionTimestamp, p.DeletionGracePeriodSeconds = &now, &grace
	return p
}

// legacyPod is a legacy-sidecar pod with an "app" container.
func legacyPod(uid types.UID) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p-" + string(uid), Namespace: "ns", UID: uid},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyAlways,
			Containers:    []corev1.Container{{Name: contract.SidecarContainerName}, {Name: "app"}},
		},
	}
}

// nativePod is a native-sidecar pod: the gcsfuse sidecar, another native sidecar
// ("istio-proxy"), the regular init container "fetch" and the container "main".
func nativePod(uid types.UID) *corev1.Pod {
	always := corev1.ContainerRestartPolicyAlways
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p-" + string(uid), Namespace: "ns", UID: uid},
		Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{
				{Name: contract.SidecarContainerName, RestartPolicy: &always},
				{Name: "istio-proxy", RestartPolicy: &always},
				{Name: "fetch"},
			},
			Containers: []corev1.Container{{Name: "main"}},
		},
	}
}

func ctr(uid types.UID, name string, attempt uint32, state runtimeapi.ContainerState) containerexittest.Container {
	return containerexittest.Container{ID: string(uid) + "-" + name + "-" + strconv.Itoa(int(attempt)), PodUID: string(uid), Name: name, Attempt: attempt, State: state}
}

func id(uid types.UID, name string, attempt uint32) string { return ctr(uid, name, attempt, 0).ID }

// (i) A pod deleted before its container IDs reached the API: the API says nothing, the
// runtime says the app runs. The sidecar is held while the app runs and released within
// two polls of its exit, with one ListContainers call per poll.
func TestDeletedPodWithoutContainerIDsIsHeldUntilTheAppExits(t *testing.T) {
	e := newEnv(t)
	const uid = "uid-noids"
	e.mkEmptyDir(uid)
	pod := deletedAt(legacyPod(uid), 30) // no status at all
	e.rt.Set(ctr(uid, contract.SidecarContainerName, 0, running), ctr(uid, "app", 0, running))
	d, ok := lifecycle.NeedsRuntimeFollow(pod)
	if !ok {
		t.Fatal("NeedsRuntimeFollow: a deleted pod without status must be followed")
	}
	start := time.Now()
	e.l.WorkloadTerminating(pod, d)

	e.hold(uid, holdFor, "the app still runs in the runtime")
	e.rt.SetState(id(uid, "app", 0), exited, 0)
	r, took := e.waitExit(uid, testTimeout)
	t.Logf("released %s after the app exited", took)
	if took > releaseBound {
		t.Errorf("released %s after the app exited, want within %s", took, releaseBound)
	}
	if r.Rule != string(lifecycle.RuleRuntimeContainersExited) || !strings.Contains(r.Message, "app (exit 0)") {
		t.Errorf("exit reason = %+v, want rule %s naming app (exit 0)", r, lifecycle.RuleRuntimeContainersExited)
	}
	polls := int(time.Since(start)/FollowPollInterval) + 2
	if n := e.rt.Calls("ListContainers"); n > polls {
		t.Errorf("%d ListContainers calls in %s, want at most one per %s poll (%d)", n, time.Since(start), FollowPollInterval, polls)
	}
	if n := e.rt.Calls("ContainerStatus"); n != 1 {
		t.Errorf("%d ContainerStatus calls, want 1 (the app's exit code, once)", n)
	}
	if by := e.waitFollowsEnded(1); by[followReleased] != 1 {
		t.Errorf("follow results = %v, want one %q", by, followReleased)
	}
}

// (ii) A native pod deleted during its init phase: the kubelet stops "fetch" and the
// sidecar together. The sidecar is held while fetch runs and released once it has exited,
// although "main" never started and the sidecar and another native sidecar still run.
func TestNativePodDeletedDuringInitIsHeldUntilTheInitContainerExits(t *testing.T) {
	e := newEnv(t)
	const uid = "uid-native"
	e.mkEmptyDir(uid)
	pod := deletedAt(nativePod(uid), 30)
	pod.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: "fetch", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
	e.l.Pods = podCache{uid: pod}
	e.rt.Set(ctr(uid, contract.SidecarContainerName, 0, running), ctr(uid, "istio-proxy", 0, running), ctr(uid, "fetch", 0, running))

	d, ok := lifecycle.NeedsRuntimeFollow(pod)
	if !ok || d.Rule != lifecycle.RuleDeletingInitRunning {
		t.Fatalf("NeedsRuntimeFollow = %+v, %v", d, ok)
	}
	e.l.WorkloadTerminating(pod, d)                                                     // the watch
	e.l.SidecarTerminating(csidriver.PodRef{Namespace: "ns", Name: pod.Name, UID: uid}) // the sidecar's SIGTERM
	e.hold(uid, holdFor, "the init container fetch still runs")

	e.rt.SetState(id(uid, "fetch", 0), exited, 143)
	r, took := e.waitExit(uid, testTimeout)
	if took > releaseBound {
		t.Errorf("released %s after fetch exited, want within %s", took, releaseBound)
	}
	if !strings.Contains(r.Message, "fetch (exit 143)") || !strings.Contains(r.Message, "main (never started)") ||
		strings.Contains(r.Message, "istio-proxy") || strings.Contains(r.Message, contract.SidecarContainerName) {
		t.Errorf("exit reason %q: want fetch and main named, no native sidecar", r.Message)
	}
}

// A container that is in neither the runtime nor the API as terminated may still be
// started while the kubelet is not known to stop the pod: the pod is not done. Once the
// sidecar reports the kubelet's SIGTERM, nothing new starts and it is released. A runtime
// that lists no container of the pod at all never releases it.
func TestAbsentContainersAreNotTakenForExited(t *testing.T) {
	e := newEnv(t)
	const uid = "uid-absent"
	e.mkEmptyDir(uid)
	pod := deletedAt(nativePod(uid), 30)
	e.l.Pods = podCache{uid: pod}
	e.rt.Set(ctr(uid, contract.SidecarContainerName, 0, running), ctr(uid, "fetch", 0, exited))
	e.l.Follow(pod, WhyDeleted)
	e.hold(uid, holdFor, `"main" is not in the runtime yet and the kubelet may still start it`)
	e.l.SidecarTerminating(csidriver.PodRef{Namespace: "ns", Name: pod.Name, UID: uid})
	e.waitExit(uid, releaseBound)

	const empty = "uid-empty"
	e.mkEmptyDir(empty)
	e.l.SidecarTerminating(csidriver.PodRef{Namespace: "ns", Name: "p-empty", UID: empty}) // not in the cache either
	e.hold(empty, holdFor, "the runtime lists no container of the pod")
}

// (iii) A container created but not started (or in an unknown state) blocks the release,
// even when an earlier attempt of it has exited.
func TestCreatedOrUnknownContainerBlocksRelease(t *testing.T) {
	e := newEnv(t)
	const uid = "uid-created"
	e.mkEmptyDir(uid)
	pod := deletedAt(legacyPod(uid), 30)
	e.rt.Set(ctr(uid, contract.SidecarContainerName, 0, running), ctr(uid, "app", 0, exited), ctr(uid, "app", 1, created))
	e.l.Follow(pod, WhySidecarTerminating)
	e.hold(uid, holdFor, "app attempt 1 is created and about to start")
	e.rt.SetState(id(uid, "app", 1), unknown, 0)
	e.hold(uid, holdFor, "app attempt 1 is in an unknown state")
	e.rt.SetState(id(uid, "app", 1), exited, 2)
	r, _ := e.waitExit(uid, releaseBound)
	if !strings.Contains(r.Message, "app (exit 2)") {
		t.Errorf("exit reason %q, want the latest attempt's exit code", r.Message)
	}
}

// (iv) A sidecar's StateTerminating for a pod the cache does not know: every container the
// runtime lists for the pod, except the sidecar, is followed.
func TestSidecarTerminatingWithoutCacheFollowsEveryOtherContainer(t *testing.T) {
	e := newEnv(t)
	e.l.Pods = cacheMiss{}
	const uid = "uid-nocache"
	e.mkEmptyDir(uid)
	e.rt.Set(ctr(uid, contract.SidecarContainerName, 0, running), ctr(uid, "app", 0, running), ctr(uid, "helper", 0, running),
		ctr("uid-other", "app", 0, running)) // another pod's container is not followed
	ref := csidriver.PodRef{Namespace: "ns", Name: "web-1", UID: uid}
	e.l.SidecarTerminating(ref)

	e.hold(uid, holdFor, "app and helper run")
	e.rt.SetState(id(uid, "app", 0), exited, 0)
	e.hold(uid, holdFor, "helper runs")
	e.rt.SetState(id(uid, "helper", 0), exited, 1)
	r, _ := e.waitExit(uid, releaseBound)
	if !strings.Contains(r.Message, "app (exit 0), helper (exit 1)") {
		t.Errorf("exit reason %q, want app and helper named", r.Message)
	}
	e.waitFollowsEnded(1)
	if got := e.events.Events(); len(got) != 1 || got[0].Reason != contract.EventSidecarExitRequested || got[0].Pod != ref {
		t.Errorf("events = %+v, want %s on %+v", got, contract.EventSidecarExitRequested, ref)
	}
}

// A change the runtime reports wakes the pod's follower at once, without a pod cache too
// (a node plugin without the API: the follow started by the sidecar's report alone): the
// follower looks at the runtime again on each change rather than at its next poll.
func TestContainersChangedWakesTheFollowerWithoutACache(t *testing.T) {
	e := newEnv(t)
	const uid = "uid-wake"
	e.mkEmptyDir(uid)
	e.rt.Set(ctr(uid, contract.SidecarContainerName, 0, running), ctr(uid, "app", 0, running))
	e.l.SidecarTerminating(csidriver.PodRef{Namespace: "ns", Name: "web-1", UID: uid})
	deadline := time.Now().Add(testTimeout)
	for e.rt.Calls("ListContainers") == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	const changes = 40
	before, start := e.rt.Calls("ListContainers"), time.Now()
	for range changes {
		e.l.ContainersChanged(uid)
		time.Sleep(5 * time.Millisecond)
	}
	listed := e.rt.Calls("ListContainers") - before
	polls := int(time.Since(start)/FollowPollInterval) + 1
	if listed < polls+changes/4 {
		t.Errorf("%d changes reported: the follower listed the containers %d times in %s, about as often as it polls (%d): the changes did not wake it",
			changes, listed, time.Since(start).Round(time.Millisecond), polls)
	}
	e.rt.SetState(id(uid, "app", 0), exited, 0)
	e.waitExit(uid, testTimeout) // released at last (how soon is other tests' business)
}

// (v) Both triggers, repeated and concurrent, start one follower per pod; a trigger after
// the release starts none.
func TestOneFollowerPerPod(t *testing.T) {
	e := newEnv(t)
	const uid = "uid-once"
	e.mkEmptyDir(uid)
	pod := deletedAt(legacyPod(uid), 30)
	e.l.Pods = podCache{uid: pod}
	e.rt.Set(ctr(uid, contract.SidecarContainerName, 0, running), ctr(uid, "app", 0, running))
	ref := csidriver.PodRef{Namespace: "ns", Name: pod.Name, UID: uid}
	d, _ := lifecycle.NeedsRuntimeFollow(pod)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			if i%2 == 0 {
				e.l.WorkloadTerminating(pod.DeepCopy(), d)
			} else {
				e.l.SidecarTerminating(ref)
			}
		})
	}
	wg.Wait()
	start := time.Now()
	time.Sleep(holdFor)
	if n, max := e.rt.Calls("ListContainers"), int(time.Since(start)/FollowPollInterval)+2; n > max {
		t.Errorf("%d ListContainers calls in %s: more than one follower (want at most %d)", n, time.Since(start), max)
	}
	e.rt.SetState(id(uid, "app", 0), exited, 0)
	e.waitExit(uid, releaseBound)
	e.waitFollowsEnded(1)
	calls := e.rt.Calls("ListContainers")
	e.l.SidecarTerminating(ref) // one more volume's report, after the release
	e.l.WorkloadTerminating(pod, d)
	time.Sleep(3 * FollowPollInterval)
	if total, _ := e.follows(); total != 1 {
		t.Errorf("%v follows, want 1", total)
	}
	if n := e.rt.Calls("ListContainers"); n != calls {
		t.Errorf("a trigger after the release listed containers again (%d calls, then %d)", calls, n)
	}
}

// (vi) A follower ends at the deletion's grace period plus the margin, without releasing
// the sidecar, even when the spec's grace period is much longer.
func TestFollowerEndsAtDeadline(t *testing.T) {
	e := newEnv(t)
	const uid = "uid-deadline"
	e.mkEmptyDir(uid)
	pod := deletedAt(legacyPod(uid), 0) // kubectl delete --grace-period=0
	specGrace := int64(600)
	pod.Spec.TerminationGracePeriodSeconds = &specGrace
	e.rt.Set(ctr(uid, contract.SidecarContainerName, 0, running), ctr(uid, "app", 0, running))
	start := time.Now()
	if !e.l.Follow(pod, WhyDeleted) {
		t.Fatal("Follow started nothing")
	}
	by := e.waitFollowsEnded(1)
	took := time.Since(start)
	if by[followDeadline] != 1 {
		t.Errorf("follow results = %v, want one %q", by, followDeadline)
	}
	if took < followMargin-time.Second || took > followMargin+3*time.Second {
		t.Errorf("follower ended after %s, want about %s (deletion grace 0 + margin)", took, followMargin)
	}
	if e.exitWritten(uid) {
		t.Error("exit file written although the app never exited")
	}
	calls := e.rt.Calls("ListContainers")
	time.Sleep(3 * FollowPollInterval)
	if n := e.rt.Calls("ListContainers"); n != calls {
		t.Errorf("runtime still polled after the deadline (%d, then %d calls)", calls, n)
	}
}

// Close stops every follower and later triggers start none; an ExitCoordinator without a runtime
// follows nothing.
func TestCloseStopsFollowers(t *testing.T) {
	e := newEnv(t)
	const uid = "uid-close"
	e.mkEmptyDir(uid)
	pod := deletedAt(legacyPod(uid), 30)
	e.rt.Set(ctr(uid, contract.SidecarContainerName, 0, running), ctr(uid, "app", 0, running))
	e.l.Follow(pod, WhyDeleted)
	e.l.Close(testTimeout)
	if _, by := e.follows(); by[followStopped] != 1 {
		t.Errorf("follow results after Close = %v, want one %q", by, followStopped)
	}
	if e.l.Follow(legacyPod("uid-later"), WhyDeleted) {
		t.Error("Follow started a follower after Close")
	}
	if (&ExitCoordinator{Log: quiet}).Follow(pod, WhyDeleted) {
		t.Error("Follow started a follower without a runtime")
	}
}

// (vii) The files the sidecar reads: the deletion's grace period (not the spec's) with the
// deletion timestamp, and the end of a native pod's init phase.
func TestTerminatingAndInitDoneFiles(t *testing.T) {
	e := newEnv(t)
	const uid = "uid-files"
	e.mkEmptyDir(uid)
	pod := deletedAt(nativePod(uid), 7)
	specGrace := int64(30)
	pod.Spec.TerminationGracePeriodSeconds = &specGrace
	e.l.PodDeleting(pod)
	b, err := os.ReadFile(podfiles.At(e.emptyDir(uid)).TerminatingFile())
	if err != nil {
		t.Fatal(err)
	}
	var got podfiles.Terminating
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("terminating file %q: %v", b, err)
	}
	if got.GraceSeconds != 7 || !got.DeletionTimestamp.Equal(pod.DeletionTimestamp.Time) {
		t.Errorf("terminating file = %+v, want grace 7 at %v", got, pod.DeletionTimestamp.Time)
	}

	const specOnly = "uid-spec"
	e.mkEmptyDir(specOnly)
	p2 := nativePod(specOnly)
	p2.Spec.TerminationGracePeriodSeconds = &specGrace
	p2.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	e.l.PodDeleting(p2)
	b, _ = os.ReadFile(podfiles.At(e.emptyDir(specOnly)).TerminatingFile())
	if !strings.Contains(string(b), `"graceSeconds":30`) {
		t.Errorf("terminating file without a deletion grace = %s, want the spec's 30", b)
	}

	e.l.InitContainersSucceeded(pod)
	if _, err := os.Stat(podfiles.At(e.emptyDir(uid)).InitDoneFile()); err != nil {
		t.Errorf("init-done file: %v", err)
	}
	// A pod whose emptyDir is gone is skipped.
	gone := nativePod("uid-gone")
	e.l.PodDeleting(deletedAt(gone, 1))
	e.l.InitContainersSucceeded(gone)
	if _, err := os.Stat(e.emptyDir("uid-gone")); !os.IsNotExist(err) {
		t.Errorf("emptyDir of a gone pod: %v, want it still absent", err)
	}
}

// afterList runs a function after each PodContainers call, to change the runtime between
// two polls.
type afterList struct {
	containerexit.Runtime
	mu   sync.Mutex
	then func(err error)
}

func (a *afterList) PodContainers(ctx context.Context, uid string) ([]containerexit.Container, error) {
	cs, err := a.Runtime.PodContainers(ctx, uid)
	a.mu.Lock()
	defer a.mu.Unlock()
	a.then(err)
	return cs, err
}

// One poll that finds nothing running is not enough: a container the kubelet creates right
// after it (a restart, or the sync that raced the deletion) is seen by the next poll and
// holds the sidecar. A runtime that fails to answer holds it too.
func TestReleaseNeedsTwoConsecutivePolls(t *testing.T) {
	e := newEnv(t)
	const uid = "uid-twice"
	e.mkEmptyDir(uid)
	pod := deletedAt(legacyPod(uid), 30)
	e.rt.Set(ctr(uid, contract.SidecarContainerName, 0, running), ctr(uid, "app", 0, exited))
	e.rt.FailList(status.Error(codes.Unavailable, "runtime restarting"))
	added := false
	e.l.Runtime = &afterList{Runtime: e.l.Runtime, then: func(err error) {
		if err == nil && !added { // the first poll that succeeds finds the app exited; the next sees attempt 1
			e.rt.Set(ctr(uid, "app", 1, created))
			added = true
		}
	}}
	e.l.Follow(pod, WhyDeleted)
	time.Sleep(2 * FollowPollInterval)
	e.rt.FailList(nil)
	e.hold(uid, holdFor, "app attempt 1 was created between two polls")
	e.rt.SetState(id(uid, "app", 1), exited, 0)
	e.waitExit(uid, releaseBound)
}

// A follow whose first trigger is the sidecar's SIGTERM (the pod deleted before its app
// container was created) releases the sidecar without waiting for containers the runtime
// will never list.
func TestFollowStartedBySidecarTerminatingReleasesWithoutAbsentContainers(t *testing.T) {
	e := newEnv(t)
	const uid = "uid-term-first"
	e.mkEmptyDir(uid)
	pod := deletedAt(nativePod(uid), 30)
	e.l.Pods = podCache{uid: pod}
	e.rt.Set(ctr(uid, contract.SidecarContainerName, 0, running), ctr(uid, "fetch", 0, exited))
	// The first trigger is the sidecar's SIGTERM: "main" will never be created.
	e.l.SidecarTerminating(csidriver.PodRef{Namespace: "ns", Name: pod.Name, UID: uid})
	e.waitExit(uid, releaseBound)
}

// A pod without the driver's sidecar has nothing to release: it is not followed (no
// follower, no runtime call), while a pod with one is.
func TestPodWithoutTheSidecarIsNotFollowed(t *testing.T) {
	e := newEnv(t)
	const uid, other = "uid-plain", "uid-with-sidecar"
	plain := deletedAt(legacyPod(uid), 30)
	plain.Spec.Containers = plain.Spec.Containers[1:] // "app" alone
	if e.l.Follow(plain, WhyDeleted) {
		t.Error("Follow started a follower for a pod without the sidecar")
	}
	e.l.pods.mu.Lock()
	r := e.l.pods.pods[uid]
	e.l.pods.mu.Unlock()
	if r != nil && r.follower != nil {
		t.Error("the pod without the sidecar has a follower")
	}
	e.mkEmptyDir(other)
	e.rt.Set(ctr(other, contract.SidecarContainerName, 0, running), ctr(other, "app", 0, running))
	if !e.l.Follow(deletedAt(legacyPod(other), 30), WhyDeleted) {
		t.Error("Follow started no follower for a pod with the sidecar")
	}
}
