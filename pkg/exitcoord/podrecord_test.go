package exitcoord

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/metricstest"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/csidriver"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/lifecycle"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/metricscatalog"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podfiles"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podwatch"
)

// An exit request given up (its effort spent while the kubelet directory was unusable) is
// not the end: the next report of the pod's done workload, from the API or the runtime,
// tries again, and the sidecar is told once the directory is back. The failure is
// reported once across both efforts.
func TestGivenUpExitRetriedByALaterReport(t *testing.T) {
	root := t.TempDir()
	events := &eventLog{}
	l := newCoordinator(root, events, 100*time.Millisecond)
	defer l.Close(time.Second)
	pod := donePod(t, root) // no emptyDir yet
	l.API = fake.NewClientset(pod.DeepCopy()).CoreV1()

	l.WorkloadDone(pod, decision)
	if !idle(l, eventuallyWait) {
		t.Fatal("the effort did not end within its budget")
	}
	if n := events.Count(contract.EventSidecarExitFailed); n != 1 {
		t.Fatalf("%s recorded %d times after the first effort, want 1", contract.EventSidecarExitFailed, n)
	}
	makeEmptyDir(t, root, pod)
	l.WorkloadDone(pod, decision) // the pod watch's next update of the pod
	requireExitFile(t, root, pod)
	if !idle(l, eventuallyWait) {
		t.Fatal("goroutines still running after the exit file was written")
	}
	if events.Count(contract.EventSidecarExitFailed) != 1 || events.Count(contract.EventSidecarExitRequested) != 1 {
		t.Fatalf("events = %+v, want one %s and one %s", events.Events(), contract.EventSidecarExitFailed, contract.EventSidecarExitRequested)
	}
}

func gather(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var mf *dto.MetricFamily
	for _, f := range families {
		if f.GetName() == name {
			mf = f
		}
	}
	sum, _ := metricstest.Sum(mf, labels)
	return sum
}

// The pod watch reports a pod at each of its updates: the record makes each finding act
// once (one Event, one count), tells a new failed run of the sidecar from a repeat, and
// writes the terminating file again only when a second deletion changed its grace.
func TestRepeatedReportsActOnce(t *testing.T) {
	root := t.TempDir()
	events := &eventLog{}
	l := newCoordinator(root, events, time.Second)
	defer l.Close(time.Second)
	reg := prometheus.NewRegistry()
	m, err := podwatch.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	l.Metrics = m
	told := 0
	l.OnSidecarFailed = func(*corev1.Pod) { told++ } // the node service: once per failed run
	pod := donePod(t, root)
	makeEmptyDir(t, root, pod)

	for range 3 {
		l.WorkloadDone(pod, decision)
		l.SidecarFailed(pod, "run-1", 1, "bucket missing")
		l.SidecarExited(pod, contract.ModeLegacy, 2*time.Second)
	}
	l.SidecarFailed(pod, "run-2", 1, "bucket still missing")
	l.SidecarFailed(pod, "run-2", 1, "bucket still missing")
	if told != 2 {
		t.Errorf("OnSidecarFailed told %d times, want once per failed run (2)", told)
	}
	ref := csidriver.PodRef{Namespace: pod.Namespace, Name: pod.Name, UID: string(pod.UID)}
	if first, second := l.SidecarTerminating(ref), l.SidecarTerminating(ref); !first || second {
		t.Errorf("SidecarTerminating of two volumes = %v, %v; want the first only (one SidecarDraining Event)", first, second)
	}
	if n := events.Count(contract.EventSidecarExitRequested); n != 1 {
		t.Errorf("%s recorded %d times, want 1", contract.EventSidecarExitRequested, n)
	}
	// Each Event is on the pod, of the right type, and says why.
	for _, e := range events.Events() {
		if e.Pod != ref {
			t.Errorf("%s recorded on %+v, want %+v", e.Reason, e.Pod, ref)
		}
		switch e.Reason {
		case contract.EventSidecarExitRequested:
			if e.Warning || !strings.Contains(e.Msg, decision.Reason) {
				t.Errorf("%s: warning=%v %q; want Normal, saying %q", e.Reason, e.Warning, e.Msg, decision.Reason)
			}
		case contract.EventSidecarFailed:
			if !e.Warning || !strings.Contains(e.Msg, contract.SidecarContainerName+" exited with code 1: bucket") {
				t.Errorf("%s: warning=%v %q; want a Warning naming the sidecar, its exit code and message", e.Reason, e.Warning, e.Msg)
			}
		}
	}
	// The exit request written is settled: the record holds no work, and goes with the pod.
	l.pods.mu.Lock()
	if r := l.pods.pods[pod.UID]; r == nil || r.exit != exitSettled || r.busy() {
		t.Errorf("record after the exit file was written: %+v, want settled and not busy", r)
	}
	l.pods.mu.Unlock()
	if n := events.Count(contract.EventSidecarFailed); n != 2 {
		t.Errorf("%s recorded %d times for two failed runs, want 2", contract.EventSidecarFailed, n)
	}
	if v := gather(t, reg, metricscatalog.PodsDone.Name, map[string]string{"rule": string(decision.Rule)}); v != 1 {
		t.Errorf("%s = %v, want 1", metricscatalog.PodsDone.Name, v)
	}
	if v := gather(t, reg, metricscatalog.SidecarFailures.Name, nil); v != 2 {
		t.Errorf("%s = %v, want 2", metricscatalog.SidecarFailures.Name, v)
	}
	if v := gather(t, reg, metricscatalog.ExitLatency.Name, nil); v != 1 {
		t.Errorf("%s observed %v times, want 1", metricscatalog.ExitLatency.Name, v)
	}

	deleted := func(grace int64) *corev1.Pod {
		p := pod.DeepCopy()
		ts := metav1.NewTime(time.Date(2026, 12, 5, 6, 0, 0, 0, time.UTC).Add(time.Duration(grace) * time.Second))
		p.DeletionTimestamp, p.DeletionGracePeriodSeconds = &ts, &grace
		return p
	}
	readGrace := func() int64 {
		t.Helper()
		dir, err := podfiles.OpenTmpDir(root, string(pod.UID))
		if err != nil {
			t.Fatal(err)
		}
		defer dir.Close()
		term, err := podfiles.ReadTerminating(dir)
		if err != nil {
			t.Fatal(err)
		}
		return term.GraceSeconds
	}
	l.PodDeleting(deleted(30))
	if g := readGrace(); g != 30 {
		t.Fatalf("terminating file grace = %d, want 30", g)
	}
	// A repeat is not written again: a file changed under it stays as it is.
	path := podfiles.At(emptyDirPath(root, pod)).TerminatingFile()
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	l.PodDeleting(deleted(30))
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("the same deletion reported again wrote the file again (stat: %v)", err)
	}
	// kubectl delete --grace-period=5 after the first deletion: the sidecar must learn it.
	l.PodDeleting(deleted(5))
	if g := readGrace(); g != 5 {
		t.Fatalf("terminating file grace after a shorter deletion = %d, want 5", g)
	}
}

// A record lives until its pod's directory is gone: the sweep drops the records of gone
// pods with no work under way, and keeps the others (a pod still here, a young record, a
// pod whose exit request is still being retried, a pod whose pod file's write is).
func TestRecordsLastUntilThePodDirectoryIsGone(t *testing.T) {
	root := t.TempDir()
	l := newCoordinator(root, &eventLog{}, time.Second)
	defer l.Close(time.Second)
	mkPod := func(uid string) types.UID {
		if err := os.MkdirAll(podfiles.PodDir(root, uid), 0o755); err != nil {
			t.Fatal(err)
		}
		return types.UID(uid)
	}
	here, gone, busy, young, writing := mkPod("here"), mkPod("gone"), mkPod("busy"), mkPod("young"), mkPod("writing")
	old := time.Now().Add(-2 * recordMinAge)
	for _, uid := range []types.UID{here, gone, busy, writing} {
		l.record(uid, func(r *podRecord) { r.created = old; r.doneReported = true })
	}
	l.record(busy, func(r *podRecord) { r.exit = exitActive })
	l.record(writing, func(r *podRecord) { r.files = map[string]*podFile{"exit": {gen: 1, want: "x", busy: true}} })
	l.record(young, func(r *podRecord) { r.doneReported = true })
	for _, uid := range []types.UID{gone, busy, young, writing} {
		if err := os.RemoveAll(podfiles.PodDir(root, string(uid))); err != nil {
			t.Fatal(err)
		}
	}
	if !idle(l, eventuallyWait) {
		t.Fatal("a sweep did not end")
	}
	// The next record made once a sweep is due starts one.
	l.pods.mu.Lock()
	l.pods.lastSweep = time.Now().Add(-2 * recordSweepEvery)
	l.pods.mu.Unlock()
	l.record(mkPod("new"), func(*podRecord) {})
	if !idle(l, eventuallyWait) {
		t.Fatal("the sweep did not end")
	}
	l.pods.mu.Lock()
	defer l.pods.mu.Unlock()
	for uid, want := range map[types.UID]bool{here: true, gone: false, busy: true, young: true, writing: true, "new": true} {
		if _, have := l.pods.pods[uid]; have != want {
			t.Errorf("record of %s kept = %v, want %v", uid, have, want)
		}
	}
}

// A pod the runtime reports that has no sidecar of ours (another driver's, or not known to
// the pod watch) gets no record: a node's other pods cost nothing.
func TestRuntimeChangesOfOtherPodsMakeNoRecord(t *testing.T) {
	root := t.TempDir()
	l := newCoordinator(root, &eventLog{}, time.Second)
	defer l.Close(time.Second)
	plain := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "plain", Namespace: "ns", UID: "uid-plain"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app"}}}}
	l.Pods = podCache{plain.UID: plain}
	l.Runtime = hangingRuntime{release: make(chan struct{})}
	l.ContainersChanged("uid-plain")
	l.ContainersChanged("uid-unknown")
	if n := l.pods.len(); n != 0 {
		t.Fatalf("%d records after runtime changes of pods without our sidecar, want 0", n)
	}
	if lifecycle.SidecarMode(plain) != "" {
		t.Fatal("the plain pod has a sidecar mode: the test checks nothing")
	}
}

// A gone pod's record is kept while its follower runs and dropped once the follow ended.
func TestSweepKeepsAFollowedPod(t *testing.T) {
	root := t.TempDir()
	l := newCoordinator(root, &eventLog{}, time.Second)
	defer l.Close(time.Second)
	old := time.Now().Add(-2 * recordMinAge)
	l.record("following", func(r *podRecord) { r.created = old; r.follower = &follower{} })
	l.record("followed", func(r *podRecord) { r.created = old; r.follower = &follower{finished: time.Now()} })
	idle(l, eventuallyWait)
	l.pods.sweepGone(context.Background(), root) // neither pod has a directory
	l.pods.mu.Lock()
	defer l.pods.mu.Unlock()
	if _, ok := l.pods.pods["following"]; !ok {
		t.Error("the record of a pod whose follower runs was dropped")
	}
	if _, ok := l.pods.pods["followed"]; ok {
		t.Error("the record of a gone pod whose follow ended was kept")
	}
}
