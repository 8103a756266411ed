package exitcoord

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/podevents"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/containerexit"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/lifecycle"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podfiles"
)

// Bounds of the tests' waits.
const (
	eventuallyWait = 5 * time.Second
	quietWait      = 150 * time.Millisecond // how long "nothing happens" is watched
)

// fastRetry makes retries quick for tests; total is the retry budget, and the effort ends
// with it (no late attempts).
func fastRetry(total time.Duration) exitRetryPolicy {
	return exitRetryPolicy{first: 5 * time.Millisecond, max: 20 * time.Millisecond, total: total, longest: total, apiTimeout: time.Second}
}

// eventLog is an EventSink that remembers what was recorded.
type eventLog = podevents.Recorder

// donePod is a legacy pod whose workload is done and whose sidecar still runs. Its pod
// directory exists under root; its gcsfuse-tmp emptyDir does not (see makeEmptyDir).
func donePod(t *testing.T, root string) *corev1.Pod {
	t.Helper()
	uid := types.UID("uid-" + filepath.Base(t.Name()))
	if err := os.MkdirAll(filepath.Dir(podfiles.TmpDirPath(root, string(uid))), 0o755); err != nil {
		t.Fatal(err)
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: uid},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers:    []corev1.Container{{Name: contract.SidecarContainerName}, {Name: "app"}},
		},
		Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{
			{Name: contract.SidecarContainerName, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}},
			{Name: "app", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0}}},
		}},
	}
}

func emptyDirPath(root string, pod *corev1.Pod) string {
	return podfiles.TmpDirPath(root, string(pod.UID))
}

func makeEmptyDir(t *testing.T, root string, pod *corev1.Pod) {
	t.Helper()
	if err := os.Mkdir(emptyDirPath(root, pod), 0o777); err != nil {
		t.Fatal(err)
	}
}

// sidecarTerminated marks the pod's sidecar as ended (exit 0).
func sidecarTerminated(pod *corev1.Pod) *corev1.Pod {
	pod = pod.DeepCopy()
	pod.Status.ContainerStatuses[0].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0}}
	return pod
}

var decision = lifecycle.Decision{Mode: contract.ModeLegacy, Rule: "test-rule", Reason: "every workload container terminated"}

func newCoordinator(root string, events *eventLog, total time.Duration) *ExitCoordinator {
	return &ExitCoordinator{KubeletRoot: root, Events: events, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), exitRetry: fastRetry(total)}
}

// idle waits, at most d, until no goroutine of l runs; false if one still does.
func idle(l *ExitCoordinator, d time.Duration) bool {
	done := make(chan struct{})
	go func() { l.workers.wg.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

// readOnly makes dir read-only for everyone, root included (a read-only bind mount), and
// returns the function that makes it writable again.
func readOnly(t *testing.T, dir string) (writable func()) {
	t.Helper()
	if os.Geteuid() != 0 {
		if err := os.Chmod(dir, 0o555); err != nil {
			t.Fatal(err)
		}
		return func() { _ = os.Chmod(dir, 0o777) }
	}
	if err := unix.Mount(dir, dir, "", unix.MS_BIND, ""); err != nil {
		t.Skipf("cannot bind mount (needs CAP_SYS_ADMIN): %v", err)
	}
	if err := unix.Mount("", dir, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY, ""); err != nil {
		_ = unix.Unmount(dir, unix.MNT_DETACH)
		t.Skipf("cannot remount read-only: %v", err)
	}
	var once sync.Once
	undo := func() { once.Do(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) }) }
	t.Cleanup(undo)
	return undo
}

func requireExitFile(t *testing.T, root string, pod *corev1.Pod) {
	t.Helper()
	if !fileAppears(exitFilePath(root, pod), eventuallyWait) {
		t.Fatal("no exit file: the failed request was not retried")
	}
}

func TestExitRetriedUntilTheEmptyDirAppears(t *testing.T) {
	root := t.TempDir()
	events := &eventLog{}
	l := newCoordinator(root, events, time.Minute)
	defer l.Close(time.Second)
	pod := donePod(t, root)

	l.requestExit(pod, decision)
	time.Sleep(quietWait)
	if n := len(events.Events()); n != 0 {
		t.Fatalf("events before the sidecar could be told: %+v", events.Events())
	}
	makeEmptyDir(t, root, pod)
	requireExitFile(t, root, pod)
	if !idle(l, eventuallyWait) {
		t.Fatal("retry goroutine still running after the exit file was written")
	}
	if got := events.Events(); len(got) != 1 || got[0].Reason != contract.EventSidecarExitRequested || got[0].Warning {
		t.Fatalf("events = %+v, want one %s", got, contract.EventSidecarExitRequested)
	}
}

func TestExitRetriedUntilTheEmptyDirIsWritable(t *testing.T) {
	root := t.TempDir()
	events := &eventLog{}
	l := newCoordinator(root, events, time.Minute)
	defer l.Close(time.Second)
	pod := donePod(t, root)
	makeEmptyDir(t, root, pod)
	writable := readOnly(t, emptyDirPath(root, pod))

	l.requestExit(pod, decision)
	time.Sleep(quietWait)
	if _, err := os.Stat(exitFilePath(root, pod)); err == nil {
		t.Fatal("exit file written into a read-only emptyDir?")
	}
	writable()
	requireExitFile(t, root, pod)
	if !idle(l, eventuallyWait) {
		t.Fatal("retry goroutine still running after the exit file was written")
	}
	if events.Count(contract.EventSidecarExitRequested) != 1 || events.Count(contract.EventSidecarExitFailed) != 0 {
		t.Fatalf("events = %+v, want one %s", events.Events(), contract.EventSidecarExitRequested)
	}
}

// A restarted node plugin reports again the pods that are already done; their sidecar has
// ended and the kubelet has removed their emptyDir. Nothing is to be told, nothing reported.
func TestNoEventWhenTheSidecarIsGone(t *testing.T) {
	for _, tc := range []struct {
		name string
		// setup returns the pod as the watcher reports it, and an API client (or nil).
		setup func(t *testing.T, root string, pod *corev1.Pod) (*corev1.Pod, *fake.Clientset)
		// whileRetrying, if set, runs once requestExit has returned: its first attempt
		// is over, and it retries.
		whileRetrying func(t *testing.T, root string, pod *corev1.Pod)
	}{
		{name: "status shows the sidecar ended, emptyDir removed", setup: func(t *testing.T, root string, pod *corev1.Pod) (*corev1.Pod, *fake.Clientset) {
			return sidecarTerminated(pod), nil
		}},
		{name: "pod failed, sidecar exited 1 under OnFailure, emptyDir removed", setup: func(t *testing.T, root string, pod *corev1.Pod) (*corev1.Pod, *fake.Clientset) {
			pod = pod.DeepCopy()
			pod.Spec.RestartPolicy = corev1.RestartPolicyOnFailure
			pod.Status.Phase = corev1.PodFailed
			pod.Status.ContainerStatuses[0].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1}}
			return pod, fake.NewClientset(pod.DeepCopy()) // the API says the same
		}},
		{name: "emptyDir removed while retrying", setup: func(t *testing.T, root string, pod *corev1.Pod) (*corev1.Pod, *fake.Clientset) {
			// The first attempt finds the emptyDir and cannot write to it: from then on,
			// its disappearance means the kubelet tore the pod's volumes down.
			makeEmptyDir(t, root, pod)
			readOnly(t, emptyDirPath(root, pod))
			return pod, nil
		}, whileRetrying: func(t *testing.T, root string, pod *corev1.Pod) {
			dir := emptyDirPath(root, pod)
			if _, err := os.Stat(podfiles.At(dir).ExitFile()); err == nil {
				t.Fatal("exit file written into a read-only emptyDir?")
			}
			tearDown(t, dir)
		}},
		{name: "emptyDir appears read-only while retrying, then removed", setup: func(t *testing.T, root string, pod *corev1.Pod) (*corev1.Pod, *fake.Clientset) {
			return pod, nil // the first attempts find no emptyDir yet
		}, whileRetrying: func(t *testing.T, root string, pod *corev1.Pod) {
			time.Sleep(quietWait)
			makeEmptyDir(t, root, pod)
			readOnly(t, emptyDirPath(root, pod))
			time.Sleep(5 * quietWait) // retries (every 20 ms at most) find it and cannot write: from then on its end is the pod's
			tearDown(t, emptyDirPath(root, pod))
		}},
		{name: "emptyDir path unopenable (not a directory), then removed", setup: func(t *testing.T, root string, pod *corev1.Pod) (*corev1.Pod, *fake.Clientset) {
			// Something is there that cannot be opened as the emptyDir: the volume
			// exists, and its removal is the pod's, as for a read-only one.
			if err := os.WriteFile(emptyDirPath(root, pod), nil, 0o644); err != nil {
				t.Fatal(err)
			}
			return pod, nil
		}, whileRetrying: func(t *testing.T, root string, pod *corev1.Pod) {
			if err := os.Remove(emptyDirPath(root, pod)); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "API: pod deleted", setup: func(t *testing.T, root string, pod *corev1.Pod) (*corev1.Pod, *fake.Clientset) {
			return pod, fake.NewClientset()
		}},
		{name: "API: pod name reused by another pod", setup: func(t *testing.T, root string, pod *corev1.Pod) (*corev1.Pod, *fake.Clientset) {
			other := pod.DeepCopy()
			other.UID = "another-uid"
			return pod, fake.NewClientset(other)
		}},
		{name: "API: sidecar terminated", setup: func(t *testing.T, root string, pod *corev1.Pod) (*corev1.Pod, *fake.Clientset) {
			return pod, fake.NewClientset(sidecarTerminated(pod))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			events := &eventLog{}
			l := newCoordinator(root, events, time.Minute) // a budget the test never reaches
			defer l.Close(time.Second)
			pod, client := tc.setup(t, root, donePod(t, root))
			if client != nil {
				l.API = client.CoreV1()
			}
			l.requestExit(pod, decision)
			if tc.whileRetrying != nil {
				tc.whileRetrying(t, root, pod)
			}
			if !idle(l, eventuallyWait) {
				t.Fatal("still retrying although the sidecar is gone")
			}
			if got := events.Events(); len(got) != 0 {
				t.Fatalf("events for a sidecar that is gone: %+v", got)
			}
			if _, err := os.Stat(exitFilePath(root, pod)); err == nil {
				t.Fatal("exit file written for a sidecar that is gone")
			}
		})
	}
}

// tearDown removes a read-only emptyDir as the kubelet tears a pod's volume down: the path
// goes away at once, still read-only (making it writable before removing it would let a
// retry write the exit file in between).
func tearDown(t *testing.T, dir string) {
	t.Helper()
	parent := filepath.Dir(dir)
	if err := os.Rename(parent, parent+".gone"); err != nil {
		t.Fatal(err)
	}
	moved := filepath.Join(parent+".gone", filepath.Base(dir))
	_ = unix.Unmount(moved, unix.MNT_DETACH)
	_ = os.Chmod(moved, 0o777)
	_ = os.RemoveAll(parent + ".gone")
}

func TestExitRequestedOnceWhenCalledTwice(t *testing.T) {
	root := t.TempDir()
	events := &eventLog{}
	l := newCoordinator(root, events, time.Minute)
	defer l.Close(time.Second)
	pod := donePod(t, root)
	makeEmptyDir(t, root, pod)

	l.requestExit(pod, decision)
	first, err := os.Stat(exitFilePath(root, pod))
	if err != nil {
		t.Fatalf("no exit file: %v", err)
	}
	l.requestExit(pod, decision) // e.g. the API after the runtime, or a restarted plugin
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() { defer wg.Done(); l.requestExit(pod, decision) }()
	}
	wg.Wait()
	second, err := os.Stat(exitFilePath(root, pod))
	if err != nil {
		t.Fatal(err)
	}
	if first.Sys().(*syscall.Stat_t).Ino != second.Sys().(*syscall.Stat_t).Ino {
		t.Fatal("the exit file was written again")
	}
	if got := events.Events(); len(got) != 1 || got[0].Reason != contract.EventSidecarExitRequested {
		t.Fatalf("events = %+v, want exactly one %s", got, contract.EventSidecarExitRequested)
	}
}

// A sidecar the API still shows running but that cannot be told within the budget is
// reported once, however many times its exit is requested.
func TestExitFailedReportedOnceForALiveSidecar(t *testing.T) {
	root := t.TempDir()
	events := &eventLog{}
	l := newCoordinator(root, events, 200*time.Millisecond)
	defer l.Close(time.Second)
	pod := donePod(t, root) // no emptyDir, ever
	l.API = fake.NewClientset(pod.DeepCopy()).CoreV1()

	l.requestExit(pod, decision)
	if !idle(l, eventuallyWait) {
		t.Fatal("retries did not give up within their budget")
	}
	if got := events.Events(); len(got) != 1 || got[0].Reason != contract.EventSidecarExitFailed || !got[0].Warning {
		t.Fatalf("events = %+v, want one %s warning", got, contract.EventSidecarExitFailed)
	}
	l.requestExit(pod, decision)
	if !idle(l, eventuallyWait) {
		t.Fatal("second request still running")
	}
	if n := events.Count(contract.EventSidecarExitFailed); n != 1 {
		t.Fatalf("%s reported %d times, want once", contract.EventSidecarExitFailed, n)
	}
}

// A kubelet directory unusable for longer than the retry budget (a legacy Job's pod whose
// emptyDir was late, or whose disk was full or read-only for minutes) is reported once,
// and the exit file still comes when the directory does: nothing else would ever ask
// again, and the Job would run forever.
func TestExitFileComesAfterTheBudgetWhenTheDirectoryDoes(t *testing.T) {
	root := t.TempDir()
	events := &eventLog{}
	l := newCoordinator(root, events, 0)
	l.exitRetry = exitRetryPolicy{first: 5 * time.Millisecond, max: 20 * time.Millisecond, total: 100 * time.Millisecond,
		late: 20 * time.Millisecond, longest: time.Minute, apiTimeout: time.Second}
	defer l.Close(time.Second)
	pod := donePod(t, root) // no emptyDir yet
	l.API = fake.NewClientset(pod.DeepCopy()).CoreV1()

	l.requestExit(pod, decision)
	for start := time.Now(); events.Count(contract.EventSidecarExitFailed) == 0; time.Sleep(5 * time.Millisecond) {
		if time.Since(start) > eventuallyWait {
			t.Fatal("no SidecarExitFailed Event after the retry budget")
		}
	}
	if idle(l, quietWait) {
		t.Fatal("the request stopped at the retry budget: it is never asked again")
	}
	l.requestExit(pod, decision) // a second decision meanwhile: no second writer, no second Event
	makeEmptyDir(t, root, pod)
	requireExitFile(t, root, pod)
	if !idle(l, eventuallyWait) {
		t.Fatal("retry goroutine still running after the exit file was written")
	}
	if events.Count(contract.EventSidecarExitFailed) != 1 || events.Count(contract.EventSidecarExitRequested) != 1 {
		t.Fatalf("events = %+v, want one %s then one %s", events.Events(), contract.EventSidecarExitFailed, contract.EventSidecarExitRequested)
	}
}

func TestCloseStopsExitRetries(t *testing.T) {
	root := t.TempDir()
	events := &eventLog{}
	l := newCoordinator(root, events, time.Minute)
	pod := donePod(t, root)

	l.requestExit(pod, decision)
	start := time.Now()
	l.Close(eventuallyWait)
	if !idle(l, quietWait) || time.Since(start) > time.Second {
		t.Fatalf("Close did not stop the retries promptly (%s)", time.Since(start))
	}
	makeEmptyDir(t, root, pod)
	time.Sleep(quietWait)
	if _, err := os.Stat(exitFilePath(root, pod)); err == nil {
		t.Fatal("exit file written after Close")
	}
	if got := events.Events(); len(got) != 0 {
		t.Fatalf("events after Close: %+v", got)
	}
	l.requestExit(sidecarTerminated(pod), decision) // after Close: nothing starts
	l.requestExit(donePod(t, t.TempDir()), decision)
	if !idle(l, time.Second) {
		t.Fatal("a retry started after Close")
	}
}

func exitFilePath(root string, pod *corev1.Pod) string {
	return podfiles.At(podfiles.TmpDirPath(root, string(pod.UID))).ExitFile()
}

// fileAppears waits, at most d, for p to exist.
func fileAppears(p string, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(p); err == nil {
			return true
		}
		time.Sleep(10 * time.Millisecond)
	}
	return false
}

// The terminating file of a pod whose kubelet directory is read-only for a moment is
// retried until it can be written (the sidecar would otherwise drain on the spec's grace,
// not the deletion's); a newer deletion's file asked meanwhile wins over the older retry.
func TestTerminatingFileRetriedAndNewestWins(t *testing.T) {
	root := t.TempDir()
	l := newCoordinator(root, &eventLog{}, time.Minute)
	defer l.Close(time.Second)
	pod := donePod(t, root)
	makeEmptyDir(t, root, pod)
	writable := readOnly(t, emptyDirPath(root, pod))
	pod.DeletionGracePeriodSeconds = ptrTo(int64(40))
	l.PodDeleting(pod)
	file := podfiles.At(emptyDirPath(root, pod)).TerminatingFile()
	time.Sleep(quietWait)
	if _, err := os.Stat(file); err == nil {
		t.Fatal("terminating file written into a read-only emptyDir?")
	}
	writable()
	if !fileAppears(file, eventuallyWait) {
		t.Fatal("no terminating file once the emptyDir was writable: the failed write was not retried")
	}
	if !idle(l, eventuallyWait) {
		t.Fatal("retry still running after the file was written")
	}

	// Read-only again; a first write (grace 40) fails and is retried, then a newer one
	// (grace 3) is asked: the file ends with 3.
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	writable = readOnly(t, emptyDirPath(root, pod))
	l.PodDeleting(pod)
	newer := pod.DeepCopy()
	newer.DeletionGracePeriodSeconds = ptrTo(int64(3))
	l.PodDeleting(newer)
	writable()
	if !fileAppears(file, eventuallyWait) || !idle(l, eventuallyWait) {
		t.Fatal("no terminating file, or a retry still running")
	}
	d, err := os.Open(emptyDirPath(root, pod))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	got, err := podfiles.ReadTerminating(d)
	if err != nil || got.GraceSeconds != 3 {
		t.Fatalf("terminating file = %+v, %v; want the newer deletion's grace 3", got, err)
	}
}

// A pod file not written is forgotten, so that the pod's next report writes it: one
// reported before the kubelet made the emptyDir (skipped at once), and one whose retries ran
// out on a read-only directory (given up after the budget). Without that, the same content
// reads as "written, or being written" and the sidecar never gets its deadline.
func TestUnwrittenPodFileWrittenAtTheNextReport(t *testing.T) {
	root := t.TempDir()
	l := newCoordinator(root, &eventLog{}, 50*time.Millisecond)
	defer l.Close(time.Second)
	pod := donePod(t, root) // no emptyDir yet
	pod.DeletionGracePeriodSeconds = ptrTo(int64(20))
	file := podfiles.At(emptyDirPath(root, pod)).TerminatingFile()
	l.PodDeleting(pod)
	makeEmptyDir(t, root, pod)
	l.PodDeleting(pod) // the same deletion, reported again
	if _, err := os.Stat(file); err != nil {
		t.Fatalf("terminating file after a report that found the emptyDir: %v (the skipped write was remembered as done)", err)
	}

	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	other := donePod(t, root)
	other.UID = "uid-given-up"
	if err := os.MkdirAll(filepath.Dir(emptyDirPath(root, other)), 0o755); err != nil {
		t.Fatal(err)
	}
	other.DeletionGracePeriodSeconds = ptrTo(int64(20))
	makeEmptyDir(t, root, other)
	writable := readOnly(t, emptyDirPath(root, other))
	l.PodDeleting(other)
	if !idle(l, eventuallyWait) {
		t.Fatal("the retries did not give up after their budget")
	}
	writable()
	l.PodDeleting(other)
	if _, err := os.Stat(podfiles.At(emptyDirPath(root, other)).TerminatingFile()); err != nil {
		t.Fatalf("terminating file after the next report: %v (the given-up write was remembered as done)", err)
	}
}

func ptrTo[T any](v T) *T { return &v }

// hangingRuntime is a container runtime whose calls block until release is closed.
type hangingRuntime struct{ release chan struct{} }

func (h hangingRuntime) PodContainers(ctx context.Context, _ string) ([]containerexit.Container, error) {
	select {
	case <-h.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return nil, nil
}

func (h hangingRuntime) Status(ctx context.Context, _ string) (containerexit.Container, error) {
	_, err := h.PodContainers(ctx, "")
	return containerexit.Container{}, err
}

type onePod struct{ pod *corev1.Pod }

func (o onePod) PodByUID(uid types.UID) (*corev1.Pod, bool) { return o.pod, uid == o.pod.UID }

// The runtime watch calls ContainersChanged on its own goroutine, which must never wait for
// the runtime: with a runtime that does not answer, every call returns at once, and the
// decisions it started end with Close.
func TestContainersChangedNeverBlocksTheWatch(t *testing.T) {
	root := t.TempDir()
	l := newCoordinator(root, &eventLog{}, time.Minute)
	pod := donePod(t, root)
	l.Pods = onePod{pod}
	rt := hangingRuntime{release: make(chan struct{})}
	l.Runtime = rt
	returned := make(chan struct{})
	go func() {
		for range 100 {
			l.ContainersChanged(string(pod.UID))
		}
		close(returned)
	}()
	select {
	case <-returned:
	case <-time.After(eventuallyWait):
		close(rt.release)
		t.Fatal("ContainersChanged waited for the runtime on the watch's goroutine")
	}
	close(rt.release)
	l.Close(eventuallyWait)
	if !idle(l, eventuallyWait) {
		t.Fatal("decisions still running after Close")
	}
}

// TestAskAPIReadsItsNodeOnly: the node plugin's question about one pod is a list confined
// by field selector to that pod's name on its node, never a get, so an authorizer that sees
// field selectors can keep the node plugin to its own node's pods.
func TestAskAPIReadsItsNodeOnly(t *testing.T) {
	root := t.TempDir()
	l := newCoordinator(root, &eventLog{}, time.Minute)
	defer l.Close(time.Second)
	pod := donePod(t, root)
	pod.Spec.NodeName = "node-a"
	client := fake.NewClientset(sidecarTerminated(pod))
	var mu sync.Mutex
	var reads []string
	client.PrependReactor("*", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		switch a := a.(type) {
		case k8stesting.ListAction:
			reads = append(reads, "list "+a.GetListRestrictions().Fields.String())
		case k8stesting.GetAction:
			reads = append(reads, "get "+a.GetName())
		}
		return false, nil, nil
	})
	l.API = client.CoreV1()
	gone, known := l.askAPI(context.Background(), pod, time.Second)
	if !gone || !known {
		t.Fatalf("askAPI = gone %v, known %v; want the terminated sidecar seen", gone, known)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"list metadata.name=p,spec.nodeName=node-a"}; !slices.Equal(reads, want) {
		t.Fatalf("pod reads %q, want %q", reads, want)
	}
}

// An exit request is claimed once per effort: not again while active, again once given up,
// never once settled (the sidecar told, or gone).
func TestClaimExitOncePerEffort(t *testing.T) {
	l := newCoordinator(t.TempDir(), &eventLog{}, time.Second)
	defer l.Close(time.Second)
	const uid = "u"
	if !l.claimExit(uid) || l.claimExit(uid) {
		t.Fatal("want the first claim only while the request is active")
	}
	l.endExit(uid, false)
	if !l.claimExit(uid) {
		t.Fatal("a given-up request is not claimed again")
	}
	l.endExit(uid, true)
	if l.claimExit(uid) {
		t.Fatal("a settled request (sidecar told or gone) is claimed again")
	}
}

// An ExitCoordinator built without retry timings retries with the documented ones; timings
// a test gives are kept, and an effort never ends before its budget.
func TestExitRetryDefaults(t *testing.T) {
	want := exitRetryPolicy{first: ExitRetryFirst, max: ExitRetryMax, total: ExitRetryFor, late: ExitRetryLate,
		longest: ExitRetryLongest, apiTimeout: ExitAPITimeout}
	if got := (exitRetryPolicy{}).orDefaults(); got != want {
		t.Errorf("zero policy = %+v, want %+v", got, want)
	}
	given := exitRetryPolicy{first: 1, max: 1, total: 1, late: 1, longest: 1, apiTimeout: 1}
	if got := given.orDefaults(); got != given {
		t.Errorf("given policy %+v became %+v", given, got)
	}
	long := exitRetryPolicy{total: 48 * time.Hour, longest: time.Hour}
	if got := long.orDefaults(); got.longest != 48*time.Hour || got.total != 48*time.Hour {
		t.Errorf("a budget longer than the longest effort: %+v, want the effort as long as the budget", got)
	}
}
