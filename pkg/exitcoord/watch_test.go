package exitcoord

import (
	"context"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/csidriver"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podfiles"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podwatch"
)

const node = "node-a"

// runWatcher runs a pod watcher on a fake API with l as its handler and lookup, and returns
// the client once the watch is established (the fake does not replay what it missed).
func runWatcher(t *testing.T, l *ExitCoordinator) *fake.Clientset {
	t.Helper()
	client := fake.NewClientset()
	watching := make(chan struct{})
	var once sync.Once
	client.PrependWatchReactor("pods", func(action k8stesting.Action) (bool, watch.Interface, error) {
		w, err := client.Tracker().Watch(action.GetResource(), action.GetNamespace())
		if err != nil {
			return false, nil, err
		}
		once.Do(func() { close(watching) })
		return true, w, nil
	})
	w := podwatch.New(client, node, l, podwatch.WithLogger(quiet))
	l.Pods = w
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(testTimeout):
			t.Error("pod watcher did not stop")
		}
	})
	select {
	case <-watching:
	case <-time.After(testTimeout):
		t.Fatal("pod watch not established")
	}
	return client
}

func waitFile(t *testing.T, p string) []byte {
	t.Helper()
	for start := time.Now(); ; time.Sleep(5 * time.Millisecond) {
		if b, err := os.ReadFile(p); err == nil {
			return b
		}
		if time.Since(start) > testTimeout {
			t.Fatalf("%s not written within %s", p, testTimeout)
		}
	}
}

// Through the pod watcher: a deleted legacy pod gets its terminating file with the
// deletion's grace, the watch and every volume's StateTerminating start one follower
// together, and the sidecar is released when the app exits in the runtime; a native pod
// gets its init-done file once its init containers succeeded.
func TestWatcherAndSidecarStartOneFollowerPerPod(t *testing.T) {
	e := newEnv(t)
	client := runWatcher(t, e.l)
	pods := client.CoreV1().Pods("ns")
	ctx := context.Background()

	const uid types.UID = "uid-watched"
	e.mkEmptyDir(uid)
	pod := legacyPod(uid)
	pod.Spec.NodeName = node
	pod.Status.Phase = corev1.PodRunning
	if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.rt.Set(ctr(uid, contract.SidecarContainerName, 0, running), ctr(uid, "app", 0, running))

	const nuid types.UID = "uid-native-init"
	e.mkEmptyDir(nuid)
	native := nativePod(nuid)
	native.Spec.NodeName = node
	native.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: "fetch", State: corev1.ContainerState{
		Terminated: &corev1.ContainerStateTerminated{ExitCode: 0}}}}
	if _, err := pods.Create(ctx, native, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFile(t, podfiles.At(e.emptyDir(nuid)).InitDoneFile())

	if _, err := pods.Update(ctx, deletedAt(pod, 7), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	ref := csidriver.PodRef{Namespace: "ns", Name: pod.Name, UID: string(uid)}
	var wg sync.WaitGroup
	for range 3 { // one StateTerminating per volume, racing the watch
		wg.Go(func() { e.l.SidecarTerminating(ref) })
	}
	wg.Wait()
	if b := waitFile(t, podfiles.At(e.emptyDir(uid)).TerminatingFile()); !strings.Contains(string(b), `"graceSeconds":7`) {
		t.Errorf("terminating file = %s, want the deletion's grace 7", b)
	}
	e.hold(uid, holdFor, "the app runs")
	e.rt.SetState(id(uid, "app", 0), exited, 0)
	e.waitExit(uid, releaseBound)
	e.waitFollowsEnded(1)
	time.Sleep(2 * FollowPollInterval)
	if total, _ := e.follows(); total != 1 {
		t.Errorf("%v follows for one pod, want 1", total)
	}
}
