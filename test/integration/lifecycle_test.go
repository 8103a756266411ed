package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/exitcoord"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podfiles"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podwatch"
	"github.com/gcsfuse-csi/gcsfuse-csi/test/internal/testenv"
)

// writeFiles writes n files of size bytes through the mount from n goroutines, each closing
// its file, and returns their contents by object name.
func writeFiles(t *testing.T, dir, prefix string, n, size int) map[string][]byte {
	t.Helper()
	want := map[string][]byte{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprintf("%s-%03d.bin", prefix, i)
			data := randomBytes(t, size)
			if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
				errs <- err
				return
			}
			mu.Lock()
			want[name] = data
			mu.Unlock()
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("writer: %v", err)
	}
	return want
}

func requireAll(t *testing.T, bucket string, want map[string][]byte) {
	t.Helper()
	for name, data := range want {
		requireObject(t, bucket, name, data)
	}
}

// The sidecar ends with code 0 at once on its trigger, and every file closed before it is in
// the bucket: native by the kubelet's SIGTERM (sent after the workload exited), legacy by
// the exit file the node plugin writes.
func TestTriggerEndsSidecarPromptly(t *testing.T) {
	for _, tt := range []struct {
		mode, trigger string
		fire          func(e *testenv.Env, pod *testenv.Pod, sc *testenv.Sidecar) error
	}{
		{contract.ModeNative, "SIGTERM", func(_ *testenv.Env, _ *testenv.Pod, sc *testenv.Sidecar) error {
			return sc.Signal(syscall.SIGTERM)
		}},
		{contract.ModeLegacy, "exit file", func(e *testenv.Env, pod *testenv.Pod, _ *testenv.Sidecar) error {
			return podfiles.Write(e.Root, pod.UID, podfiles.Reason{Rule: "test", Message: "workload done"})
		}},
	} {
		t.Run(tt.mode, func(t *testing.T) {
			bucket := "bkt-trigger-" + tt.mode
			e := newEnv(t, bucket)
			pod, sc, target := mounted(t, e, tt.mode, bucket)
			want := writeFiles(t, target, tt.mode, 8, 256<<10)
			t0 := time.Now()
			if err := tt.fire(e, pod, sc); err != nil {
				t.Fatal(err)
			}
			code, err := sc.Wait(10 * time.Second)
			if err != nil || code != 0 {
				t.Fatalf("sidecar exit = %d, %v\n%s", code, err, sc.Output())
			}
			took := sc.Exited.Sub(t0)
			t.Logf("%s: %s -> sidecar exit %s", tt.mode, tt.trigger, took)
			if took > 2*time.Second {
				t.Errorf("%s sidecar took %s to exit after the %s (the incumbent takes 5 s or more; target 100 ms)", tt.mode, took, tt.trigger)
			}
			waitNoGcsfuse(t, pod, 2*time.Second)
			requireAll(t, bucket, want)
		})
	}
}

// Pod deletion with a legacy sidecar: SIGTERM reaches the app and the sidecar together. The
// app's last writes after SIGTERM must still land; the sidecar ends on the exit file.
func TestLegacySIGTERMKeepsServingUntilWorkloadDone(t *testing.T) {
	e := newEnv(t, "bkt-drain")
	pod, sc, target := mounted(t, e, contract.ModeLegacy, "bkt-drain")
	if err := sc.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // the app is still flushing its results
	select {
	case <-sc.Done():
		t.Fatalf("legacy sidecar exited on SIGTERM while the app may still write:\n%s", sc.Output())
	default:
	}
	want := writeFiles(t, target, "after-sigterm", 4, 1<<20)
	if err := podfiles.Write(e.Root, pod.UID, podfiles.Reason{Rule: "deleting-all-terminated"}); err != nil {
		t.Fatal(err)
	}
	if code, err := sc.Wait(10 * time.Second); err != nil || code != 0 {
		t.Fatalf("sidecar exit = %d, %v", code, err)
	}
	requireAll(t, "bkt-drain", want)
}

// Several volumes stop in parallel on one signal.
func TestManyVolumesStopTogether(t *testing.T) {
	e := newEnv(t, "bkt-m1", "bkt-m2", "bkt-m3")
	pod, err := e.NewPod()
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 3; i++ {
		if err := pod.Publish(ctx(t), fmt.Sprintf("v%d", i), fmt.Sprintf("bkt-m%d", i), "", false); err != nil {
			t.Fatal(err)
		}
	}
	sc, err := pod.StartSidecar(contract.ModeNative, 30, echo(t))
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 3; i++ {
		if _, err := testenv.WaitReady(pod.Target(fmt.Sprintf("v%d", i)), 20*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	t0 := time.Now()
	_ = sc.Signal(syscall.SIGTERM)
	if code, err := sc.Wait(5 * time.Second); err != nil || code != 0 {
		t.Fatalf("exit = %d, %v", code, err)
	}
	t.Logf("3 volumes: SIGTERM -> sidecar exit %s", sc.Exited.Sub(t0))
	waitNoGcsfuse(t, pod, 2*time.Second)
}

// The node plugin's pod watcher decides from pod status that a legacy workload is done and
// the real sidecar exits: the same code path as in a cluster, with the API server replaced
// by client-go's fake clientset fed the status updates a kubelet would write.
func TestPodWatcherEndsLegacySidecar(t *testing.T) {
	e := newEnv(t, "bkt-watch")
	pod, sc, target := mounted(t, e, contract.ModeLegacy, "bkt-watch")
	want := writeFiles(t, target, "watched", 4, 64<<10)

	k8sPod := pod.PodObject(corev1.RestartPolicyNever)
	client := fake.NewClientset(k8sPod)
	w := podwatch.New(client, "test-node", &exitcoord.ExitCoordinator{KubeletRoot: e.Root, Log: testLogger(t)}, podwatch.WithLogger(testLogger(t)))
	wctx, cancel := context.WithCancel(context.Background())
	werr := make(chan error, 1)
	go func() { werr <- w.Run(wctx) }()
	defer func() {
		cancel()
		if err := <-werr; err != nil {
			t.Errorf("watcher: %v", err)
		}
	}()

	time.Sleep(200 * time.Millisecond)
	select {
	case <-sc.Done():
		t.Fatal("sidecar exited while the app was running")
	default:
	}
	testenv.AppTerminated(k8sPod, 0, time.Now())
	t0 := time.Now()
	if _, err := client.CoreV1().Pods("default").UpdateStatus(context.Background(), k8sPod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	code, err := sc.Wait(10 * time.Second)
	if err != nil || code != 0 {
		t.Fatalf("sidecar exit = %d, %v\n%s", code, err, sc.Output())
	}
	t.Logf("status update -> sidecar exit %s", sc.Exited.Sub(t0))
	requireAll(t, "bkt-watch", want)
}
