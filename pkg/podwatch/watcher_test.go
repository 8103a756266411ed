package podwatch

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/metricstest"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/metricscatalog"

	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/syncbuf"
	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/waitfor"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/lifecycle"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

const (
	node      = "node-a"
	otherNode = "node-b"
	ns        = "default"
	// deadline bounds every wait in these tests; generous because -race on 2 shared cores is slow.
	deadline = 15 * time.Second
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// call is one handler invocation.
type call struct {
	kind     string // "done" or "failed"
	pod      *corev1.Pod
	decision lifecycle.Decision
	code     int32
	msg      string
	run      string
}

// recordingHandler records calls and signals each one, so a test can wait for a call.
type recordingHandler struct {
	mu     sync.Mutex
	calls  []call
	notify chan struct{}
}

func newRecordingHandler() *recordingHandler {
	return &recordingHandler{notify: make(chan struct{}, 1)}
}

func (h *recordingHandler) WorkloadDone(pod *corev1.Pod, d lifecycle.Decision) {
	h.add(call{kind: "done", pod: pod, decision: d})
}

func (h *recordingHandler) SidecarFailed(pod *corev1.Pod, run string, code int32, msg string) {
	h.add(call{kind: "failed", pod: pod, code: code, msg: msg, run: run})
}

// reported returns the distinct (kind, UID) pairs of the calls so far: the watcher reports
// a pod at each update, and the handler tells a repeat from news.
func (h *recordingHandler) reported() map[string]bool {
	out := map[string]bool{}
	for _, c := range h.all() {
		out[c.kind+":"+string(c.pod.UID)] = true
	}
	return out
}

func (h *recordingHandler) add(c call) {
	h.mu.Lock()
	h.calls = append(h.calls, c)
	h.mu.Unlock()
	select {
	case h.notify <- struct{}{}:
	default: // a wake-up is already pending
	}
}

func (h *recordingHandler) all() []call {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]call(nil), h.calls...)
}

// waitFor returns the first call of kind for pod name (and uid, if not empty), failing the
// test if none comes within the deadline.
func (h *recordingHandler) waitFor(t *testing.T, kind, name string, uid types.UID) call {
	t.Helper()
	timer := time.NewTimer(deadline)
	defer timer.Stop()
	for {
		for _, c := range h.all() {
			if c.kind == kind && c.pod.Name == name && (uid == "" || c.pod.UID == uid) {
				return c
			}
		}
		select {
		case <-h.notify:
		case <-timer.C:
			t.Fatalf("no %s callback for pod %s (uid %q) within %s; calls so far: %s", kind, name, uid, deadline, describe(h.all()))
			return call{}
		}
	}
}

func describe(calls []call) string {
	var b strings.Builder
	for _, c := range calls {
		b.WriteString(c.kind + ":" + c.pod.Name + "/" + string(c.pod.UID) + " ")
	}
	return b.String()
}

// newClient returns a fake clientset and a channel closed once the pod watch is established.
// The fake does not replay objects created between the informer's list and its watch, so a
// test must wait for the watch before creating pods it expects to be seen through it.
func newClient(objs ...runtime.Object) (*fake.Clientset, <-chan struct{}) {
	client := fake.NewClientset(objs...)
	watching := make(chan struct{})
	var once sync.Once
	client.PrependWatchReactor("pods", func(action k8stesting.Action) (bool, watch.Interface, error) {
		var opts metav1.ListOptions
		if wa, ok := action.(k8stesting.WatchActionImpl); ok {
			opts = wa.ListOptions
		}
		w, err := client.Tracker().Watch(action.GetResource(), action.GetNamespace(), opts)
		if err != nil {
			return false, nil, err
		}
		once.Do(func() { close(watching) })
		return true, w, nil
	})
	return client, watching
}

func waitClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(deadline):
		t.Fatalf("%s did not happen within %s", what, deadline)
	}
}

// startWatcher runs w in the background; the returned function cancels it and returns Run's
// result, failing the test if Run does not return in time.
func startWatcher(t *testing.T, w *Watcher) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	errCh := make(chan error, 1)
	go func() { errCh <- w.Run(ctx) }()
	var once sync.Once
	var result error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case result = <-errCh:
			case <-time.After(deadline):
				t.Fatalf("Run did not return within %s of cancel", deadline)
			}
		})
		return result
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

var t1 = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)

// jobPod is a legacy-sidecar pod with restartPolicy Never on nodeName, carrying the kind of
// bulk (managedFields, labels, images, env, foreign annotations) the transform must drop.
func jobPod(name string, uid types.UID, nodeName string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: ns, UID: uid,
			Labels: map[string]string{"app": "job"},
			Annotations: map[string]string{
				contract.AnnotationInject:                          "true",
				"kubectl.kubernetes.io/last-applied-configuration": strings.Repeat("x", 1000),
			},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationUpdate}},
		},
		Spec: corev1.PodSpec{
			NodeName:      nodeName,
			RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{
				{Name: "main", Image: "busybox", Env: []corev1.EnvVar{{Name: "A", Value: "b"}}},
				{Name: contract.SidecarContainerName, Image: "gcsfuse"},
			},
			Volumes: []corev1.Volume{
				{Name: "data", VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{
					Driver: contract.DriverName, VolumeAttributes: map[string]string{contract.AttrBucketName: "b"}}}},
				{Name: contract.TmpVolumeName, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			},
		},
		Status: corev1.PodStatus{
			Phase: corev1.PodRunning,
			ContainerStatuses: []corev1.ContainerStatus{
				{Name: "main", Image: "busybox", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}},
				{Name: contract.SidecarContainerName, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}},
			},
		},
	}
}

func setState(p *corev1.Pod, container string, st corev1.ContainerState) *corev1.Pod {
	for i := range p.Status.ContainerStatuses {
		if p.Status.ContainerStatuses[i].Name == container {
			p.Status.ContainerStatuses[i].State = st
		}
	}
	return p
}

func exited(code int32, msg string) corev1.ContainerState {
	return corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
		ExitCode: code, Message: msg, FinishedAt: metav1.Time{Time: t1}}}
}

// The watcher reports each pod of this node that uses the driver, by UID, and nothing of
// other pods; a new pod reusing a name is reported as itself.
func TestWatcherReportsEachPodUID(t *testing.T) {
	ctx := context.Background()
	// Already finished before the node plugin starts: found through the initial list.
	preDone := setState(jobPod("pre-done", "uid-pre", node), "main", exited(0, ""))
	client, watching := newClient(preDone)
	h := newRecordingHandler()
	reg := prometheus.NewRegistry()
	metrics, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	stop := startWatcher(t, New(client, node, h, WithLogger(quiet), WithMetrics(metrics)))
	waitClosed(t, watching, "pod watch")
	h.waitFor(t, "done", "pre-done", "uid-pre")

	pods := client.CoreV1().Pods(ns)
	mustCreate := func(p *corev1.Pod) {
		t.Helper()
		if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	mustUpdate := func(p *corev1.Pod) {
		t.Helper()
		if _, err := pods.UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	job := jobPod("job", "uid-job-1", node)
	mustCreate(job)
	// Same pod on another node: the fake ignores the field selector, the watcher must not.
	mustCreate(setState(jobPod("elsewhere", "uid-elsewhere", otherNode), "main", exited(0, "")))
	// A finished pod on this node that does not use the driver.
	plain := setState(jobPod("plain", "uid-plain", node), "main", exited(0, ""))
	plain.Spec.Containers = plain.Spec.Containers[:1]
	plain.Spec.Volumes = nil
	mustCreate(plain)
	// A long-running pod whose sidecar failed.
	failing := setState(jobPod("failing", "uid-failing", node), contract.SidecarContainerName, exited(1, "bucket \"b\" does not exist"))
	failing.Spec.RestartPolicy = corev1.RestartPolicyAlways
	mustCreate(failing)

	// The workload finishes: the sidecar must be told to exit.
	job = setState(job, "main", exited(0, ""))
	mustUpdate(job)
	c := h.waitFor(t, "done", "job", "uid-job-1")
	if c.decision.Rule != lifecycle.RuleNeverAllTerminated || !c.decision.WorkloadFinishedAt.Equal(t1) {
		t.Errorf("decision = %+v, want rule %q finished at %v", c.decision, lifecycle.RuleNeverAllTerminated, t1)
	}
	// What the handler gets was trimmed by the transform.
	if c.pod.ManagedFields != nil || c.pod.Labels != nil || c.pod.Spec.Containers[0].Image != "" ||
		c.pod.Spec.Containers[0].Env != nil || len(c.pod.Annotations) != 1 || c.pod.Annotations[contract.AnnotationInject] != "true" {
		t.Errorf("handler got an untrimmed pod: %+v", c.pod)
	}

	f := h.waitFor(t, "failed", "failing", "uid-failing")
	if f.code != 1 || f.msg != `bucket "b" does not exist` {
		t.Errorf("SidecarFailed(code=%d, msg=%q), want (1, %q)", f.code, f.msg, `bucket "b" does not exist`)
	}

	// Later updates of handled pods report the same findings (the handler dedupes).
	job = setState(job, contract.SidecarContainerName, exited(0, ""))
	mustUpdate(job)
	failing.Status.ContainerStatuses[0].State = exited(0, "")
	mustUpdate(failing)
	mustUpdate(setState(jobPod("elsewhere", "uid-elsewhere", otherNode), "main", exited(2, "")))

	// A new pod reusing the name of a deleted one is a new UID: it gets its own callback.
	if err := pods.Delete(ctx, "job", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	mustCreate(setState(jobPod("job", "uid-job-2", node), "main", exited(3, "")))
	h.waitFor(t, "done", "job", "uid-job-2")

	// Barrier: every event before the sentinel's has reached the queue, and Run drains the
	// queue before it returns, so the counts below are final.
	mustCreate(setState(jobPod("sentinel", "uid-sentinel", node), "main", exited(0, "")))
	h.waitFor(t, "done", "sentinel", "uid-sentinel")
	if err := stop(); err != nil {
		t.Fatalf("Run() = %v, want nil after cancel", err)
	}

	want := map[string]bool{
		"done:uid-pre": true, "done:uid-job-1": true, "done:uid-job-2": true, "done:uid-sentinel": true,
		"failed:uid-failing": true,
	}
	if got := h.reported(); !reflect.DeepEqual(got, want) {
		t.Errorf("callbacks = %v, want %v", got, want)
	}

	// The API server, unlike the fake, filters by node: check that we asked it to.
	var selectors []string
	for _, a := range client.Actions() {
		if l, ok := a.(k8stesting.ListActionImpl); ok && a.GetResource().Resource == "pods" {
			selectors = append(selectors, l.GetListRestrictions().Fields.String())
		}
	}
	if len(selectors) == 0 || selectors[0] != "spec.nodeName="+node {
		t.Errorf("pod list field selectors = %q, want [spec.nodeName=%s]", selectors, node)
	}
}

func gaugeValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	return findMetric(t, reg, name, nil).GetGauge().GetValue()
}

// errorCount is the failed requests counted for op, 0 if none yet.
func errorCount(reg *prometheus.Registry, op string) float64 {
	families, _ := reg.Gather()
	for _, f := range families {
		if f.GetName() != metricscatalog.WatchErrors.Name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "op" && lp.GetValue() == op {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// runInBackground starts w.Run and returns its result channel and a cancel function.
func runInBackground(w *Watcher) (<-chan error, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	errCh := make(chan error, 1)
	go func() { errCh <- w.Run(ctx) }()
	return errCh, cancel
}

func requireRunning(t *testing.T, errCh <-chan error, when string) {
	t.Helper()
	select {
	case err := <-errCh:
		t.Fatalf("Run returned %v %s; it must keep retrying (the node plugin would exit)", err, when)
	default:
	}
}

func requireCleanStop(t *testing.T, errCh <-chan error, cancel context.CancelFunc) {
	t.Helper()
	cancel()
	select {
	case err := <-errCh:
		if err != nil {
			t.Fatalf("Run() = %v after cancel, want nil", err)
		}
	case <-time.After(deadline):
		t.Fatalf("Run did not return within %s of cancel", deadline)
	}
}

// The API server does not answer when the node plugin starts: Run must not give up (the
// node plugin would exit and take NodePublishVolume down with it). It warns at the sync
// timeout, keeps retrying, and once the API answers handles the pods it lists.
func TestRunWaitsForTheAPIServerThenProcessesPods(t *testing.T) {
	client := fake.NewClientset(setState(jobPod("job", "uid-1", node), "main", exited(0, "")))
	var apiUp atomic.Bool
	client.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		if apiUp.Load() {
			return false, nil, nil // the tracker answers
		}
		return true, nil, errors.New("apiserver unavailable")
	})
	logs := &syncbuf.Buffer{}
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	h := newRecordingHandler()
	w := New(client, node, h, WithLogger(slog.New(slog.NewTextHandler(logs, nil))), WithMetrics(m),
		WithSyncTimeout(100*time.Millisecond))
	errCh, cancel := runInBackground(w)
	defer cancel()

	waitfor.Until(t, deadline, "the not-synced warning", func() bool { return strings.Contains(logs.String(), "pod cache not synced") })
	// The reflector retries with a backoff of about a second: a second failed list shows
	// that the watch goes on retrying past the sync timeout.
	waitfor.Until(t, deadline, "a second failed list", func() bool { return errorCount(reg, "list") >= 2 })
	requireRunning(t, errCh, "while the API server was down")
	if g := gaugeValue(t, reg, metricscatalog.WatchSynced.Name); g != 0 {
		t.Errorf("%s = %v while the API server is down, want 0", metricscatalog.WatchSynced.Name, g)
	}
	if calls := h.all(); len(calls) != 0 {
		t.Fatalf("handler called before the pods could be listed: %s", describe(calls))
	}

	apiUp.Store(true)
	h.waitFor(t, "done", "job", "uid-1")
	waitfor.Until(t, deadline, "the synced log line", func() bool { return strings.Contains(logs.String(), "pod cache synced") })
	if g := gaugeValue(t, reg, metricscatalog.WatchSynced.Name); g != 1 {
		t.Errorf("%s = %v once synced, want 1", metricscatalog.WatchSynced.Name, g)
	}
	requireCleanStop(t, errCh, cancel)
}

// The API server goes away after the cache synced, and a pod finishes meanwhile: the watch
// reports the outage, keeps retrying, and the relist after the API comes back delivers the
// finished pod.
func TestRunEvaluatesPodsThatFinishedWhileTheAPIServerWasDown(t *testing.T) {
	client := fake.NewClientset(jobPod("job", "uid-1", node))
	var apiUp atomic.Bool
	apiUp.Store(true)
	var mu sync.Mutex
	var current watch.Interface
	client.PrependWatchReactor("pods", func(action k8stesting.Action) (bool, watch.Interface, error) {
		if !apiUp.Load() {
			return true, nil, errors.New("apiserver unavailable")
		}
		var opts metav1.ListOptions
		if wa, ok := action.(k8stesting.WatchActionImpl); ok {
			opts = wa.ListOptions
		}
		wi, err := client.Tracker().Watch(action.GetResource(), action.GetNamespace(), opts)
		if err != nil {
			return true, nil, err
		}
		mu.Lock()
		current = wi
		mu.Unlock()
		return true, wi, nil
	})
	client.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		if apiUp.Load() {
			return false, nil, nil
		}
		return true, nil, errors.New("apiserver unavailable")
	})
	logs := &syncbuf.Buffer{}
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	h := newRecordingHandler()
	w := New(client, node, h, WithLogger(slog.New(slog.NewTextHandler(logs, nil))), WithMetrics(m))
	errCh, cancel := runInBackground(w)
	defer cancel()
	waitfor.Until(t, deadline, "the watch", func() bool { mu.Lock(); defer mu.Unlock(); return current != nil })
	waitfor.Until(t, deadline, "the synced gauge", func() bool { return gaugeValue(t, reg, metricscatalog.WatchSynced.Name) == 1 })

	// The API server goes away: its watch connection ends, and it answers nothing.
	apiUp.Store(false)
	mu.Lock()
	current.Stop()
	mu.Unlock()
	waitfor.Until(t, deadline, "the outage to show", func() bool { return gaugeValue(t, reg, metricscatalog.WatchSynced.Name) == 0 })
	done := setState(jobPod("job", "uid-1", node), "main", exited(0, ""))
	if err := client.Tracker().Update(corev1.SchemeGroupVersion.WithResource("pods"), done, ns); err != nil {
		t.Fatal(err)
	}
	requireRunning(t, errCh, "while the API server was down")
	if calls := h.all(); len(calls) != 0 {
		t.Fatalf("handler called although the API server was down: %s", describe(calls))
	}
	if !strings.Contains(logs.String(), "pod watch lost the API server") {
		t.Errorf("the outage was not logged:\n%s", logs.String())
	}

	apiUp.Store(true)
	h.waitFor(t, "done", "job", "uid-1")
	waitfor.Until(t, deadline, "the synced gauge after the outage", func() bool { return gaugeValue(t, reg, metricscatalog.WatchSynced.Name) == 1 })
	if errorCount(reg, "list")+errorCount(reg, "watch") == 0 {
		t.Errorf("no failed request counted in %s", metricscatalog.WatchErrors.Name)
	}
	if !strings.Contains(logs.String(), "in step with the API server again") {
		t.Errorf("the recovery was not logged:\n%s", logs.String())
	}
	requireCleanStop(t, errCh, cancel)
}

func TestRunReturnsWhenCancelledDuringSync(t *testing.T) {
	client := fake.NewClientset()
	listed := make(chan struct{})
	var once sync.Once
	client.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		once.Do(func() { close(listed) })
		return true, nil, errors.New("apiserver unavailable")
	})
	w := New(client, node, newRecordingHandler(), WithLogger(quiet))
	errCh, cancel := runInBackground(w)
	waitClosed(t, listed, "first pod list")
	requireCleanStop(t, errCh, cancel)
}

// blockingHandler blocks in WorkloadDone until release is closed.
type blockingHandler struct {
	entered chan struct{}
	release chan struct{}
	once    sync.Once
}

func (h *blockingHandler) WorkloadDone(*corev1.Pod, lifecycle.Decision) {
	h.once.Do(func() { close(h.entered) })
	<-h.release
}

func (h *blockingHandler) SidecarFailed(*corev1.Pod, string, int32, string) {}

func TestRunDoesNotHangOnAStuckHandler(t *testing.T) {
	client, _ := newClient(setState(jobPod("job", "uid-1", node), "main", exited(0, "")))
	h := &blockingHandler{entered: make(chan struct{}), release: make(chan struct{})}
	defer close(h.release) // lets the worker goroutine finish
	w := New(client, node, h, WithLogger(quiet), WithShutdownTimeout(200*time.Millisecond))
	stop := startWatcher(t, w)
	waitClosed(t, h.entered, "handler call")
	start := time.Now()
	err := stop()
	if err == nil || !strings.Contains(err.Error(), "still running") {
		t.Errorf("Run() = %v, want a shutdown-timeout error", err)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Errorf("Run took %s to return with a stuck handler, want about the 200ms shutdown timeout", el)
	}
}

func TestRunTwiceFails(t *testing.T) {
	client, _ := newClient(setState(jobPod("job", "uid-1", node), "main", exited(0, "")))
	h := newRecordingHandler()
	w := New(client, node, h, WithLogger(quiet))
	stop := startWatcher(t, w)
	h.waitFor(t, "done", "job", "uid-1") // the cache has synced: callbacks start only then
	if err := w.Run(context.Background()); err == nil {
		t.Error("second Run() = nil, want an error")
	}
	if err := stop(); err != nil {
		t.Errorf("Run() = %v after cancel, want nil", err)
	}
}

// While the API server hangs, recording Events (a sidecar failure, an exit request) must
// neither block the caller, nor pile up without bound, nor hold up shutdown.
func TestEventsDoNotBlockWhileTheAPIServerHangs(t *testing.T) {
	const events = 3000 // more than the broadcaster queues: the surplus is dropped, not waited for
	client := fake.NewClientset()
	hang := make(chan struct{})
	defer close(hang)
	var writes atomic.Int32
	client.PrependReactor("*", "events", func(k8stesting.Action) (bool, runtime.Object, error) {
		writes.Add(1)
		<-hang
		return true, nil, errors.New("apiserver unavailable")
	})
	rec, stop := NewEventRecorder(client, node)
	pod := jobPod("p", "uid-ev", node)
	start := time.Now()
	for i := range events {
		rec.Eventf(pod, corev1.EventTypeWarning, contract.EventSidecarExitFailed, "attempt %d", i)
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Fatalf("recording %d Events took %s with the API server hanging", events, el)
	}
	waitfor.Until(t, deadline, "the first Event write", func() bool { return writes.Load() > 0 })
	stopped := make(chan struct{})
	go func() { stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(2 * time.Second):
		t.Fatal("stopping the Event recorder waited for the hanging API server")
	}
}

// A restarted sidecar that fails again has news for the user (for example the volumes its
// predecessor lost): each failed run is reported as its own run, so the handler can tell it
// from a repeat.
func TestWatcherReportsEachFailedSidecarRun(t *testing.T) {
	ctx := context.Background()
	client, watching := newClient()
	h := newRecordingHandler()
	stop := startWatcher(t, New(client, node, h, WithLogger(quiet)))
	defer stop()
	waitClosed(t, watching, "pod watch")
	pods := client.CoreV1().Pods(ns)

	p := jobPod("restarted", "uid-restarted", node)
	p.Spec.RestartPolicy = corev1.RestartPolicyOnFailure
	p = setState(p, contract.SidecarContainerName, exited(137, "killed"))
	if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.waitFor(t, "failed", "restarted", "")
	count := func() (n int, msgs []string) {
		seen := map[string]bool{}
		for _, c := range h.all() {
			if c.kind == "failed" && c.pod.Name == "restarted" && !seen[c.run] {
				seen[c.run] = true
				n++
				msgs = append(msgs, c.msg)
			}
		}
		return n, msgs
	}

	// Restarted and running: the first run is now the last termination state; no news.
	st := &p.Status.ContainerStatuses[0]
	for i := range p.Status.ContainerStatuses {
		if p.Status.ContainerStatuses[i].Name == contract.SidecarContainerName {
			st = &p.Status.ContainerStatuses[i]
		}
	}
	st.LastTerminationState = st.State
	st.State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Time{Time: t1.Add(time.Second)}}}
	st.RestartCount = 1
	if _, err := pods.UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The second run fails with its own report.
	st.LastTerminationState = corev1.ContainerState{}
	st.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1,
		Message:   "volume v lost with a previous container",
		StartedAt: metav1.Time{Time: t1.Add(time.Second)}, FinishedAt: metav1.Time{Time: t1.Add(20 * time.Second)}}}
	if _, err := pods.UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	deadlineAt := time.Now().Add(deadline)
	for {
		if n, _ := count(); n >= 2 || time.Now().After(deadlineAt) {
			break
		}
		select {
		case <-h.notify:
		case <-time.After(50 * time.Millisecond):
		}
	}
	// The same run seen again (restart back-off: it moves to the last termination state).
	st.LastTerminationState = st.State
	st.State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}
	if _, err := pods.UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	n, msgs := count()
	if n != 2 || msgs[1] != "volume v lost with a previous container" {
		t.Fatalf("failed reports %d %q, want 2: the 137 and the restarted run's own reason", n, msgs)
	}
}

// TestErrorSeriesExistFromTheStart: both ops of the watch errors counter are exported at 0
// before any error, so the dashboard's watch-health panel shows 0 instead of no data.
func TestErrorSeriesExistFromTheStart(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := NewMetrics(reg); err != nil {
		t.Fatal(err)
	}
	if n := metricstest.SeriesOf(reg, metricscatalog.WatchErrors.Name); n != 2 {
		t.Fatalf("%s has %d series before any error, want 2 (list, watch)", metricscatalog.WatchErrors.Name, n)
	}
}
