package nodeplugin

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/lifecycle"
)

// fakeRuntime reports a container exited once it has been asked about it `after` times.
type fakeRuntime struct {
	mu    sync.Mutex
	after int
	asked map[string]int
}

func (f *fakeRuntime) Exited(_ context.Context, id string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked[id]++
	return f.asked[id] > f.after, nil
}

func deletedLegacyPod(t *testing.T, root string) *corev1.Pod {
	uid := "uid-" + t.Name()
	if err := os.MkdirAll(filepath.Join(root, "pods", uid, "volumes", "kubernetes.io~empty-dir", contract.TmpVolumeName), 0o755); err != nil {
		t.Fatal(err)
	}
	now := metav1.Now()
	grace := int64(2)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: types.UID(uid), DeletionTimestamp: &now},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: &grace,
			Containers:                    []corev1.Container{{Name: contract.SidecarContainerName}, {Name: "app"}},
		},
		Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{
			{Name: contract.SidecarContainerName, ContainerID: "containerd://side", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}},
			{Name: "app", ContainerID: "containerd://app", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}},
		}},
	}
}

func exitFilePath(root string, pod *corev1.Pod) string {
	return filepath.Join(root, "pods", string(pod.UID), "volumes", "kubernetes.io~empty-dir", contract.TmpVolumeName, contract.ExitFile)
}

func waitFile(p string, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(p); err == nil {
			return true
		}
		time.Sleep(5 * time.Millisecond)
	}
	return false
}

func TestDeletedLegacyPodEndsWhenRuntimeSaysExited(t *testing.T) {
	root := t.TempDir()
	rt := &fakeRuntime{after: 3, asked: map[string]int{}}
	l := &Lifecycle{KubeletRoot: root, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Runtime: rt, PollInterval: 5 * time.Millisecond}
	defer l.Close(time.Second)
	pod := deletedLegacyPod(t, root)
	l.WorkloadTerminating(pod, lifecycle.Decision{Mode: contract.ModeLegacy, Rule: lifecycle.RuleDeletingWorkloadRunning})
	l.WorkloadTerminating(pod, lifecycle.Decision{Mode: contract.ModeLegacy, Rule: lifecycle.RuleDeletingWorkloadRunning}) // once per UID
	if !waitFile(exitFilePath(root, pod), 2*time.Second) {
		t.Fatal("no exit file after the runtime reported the app exited")
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.asked["containerd://app"] != 4 {
		t.Errorf("runtime asked %d times about the app, want 4 (exited on the 4th)", rt.asked["containerd://app"])
	}
	if rt.asked["containerd://side"] != 0 {
		t.Errorf("the sidecar container was followed: %v", rt.asked)
	}
}

func TestNativeOrStoppedFollowsNothing(t *testing.T) {
	root := t.TempDir()
	rt := &fakeRuntime{after: 1 << 30, asked: map[string]int{}}
	l := &Lifecycle{KubeletRoot: root, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Runtime: rt, PollInterval: 5 * time.Millisecond}
	pod := deletedLegacyPod(t, root)
	l.WorkloadTerminating(pod, lifecycle.Decision{Mode: contract.ModeNative})
	l.Close(time.Second) // stops followers; later calls start none
	l.WorkloadTerminating(pod, lifecycle.Decision{Mode: contract.ModeLegacy})
	time.Sleep(50 * time.Millisecond)
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if len(rt.asked) != 0 {
		t.Fatalf("runtime was asked: %v", rt.asked)
	}
	if _, err := os.Stat(exitFilePath(root, pod)); err == nil {
		t.Fatal("exit file written")
	}
}

func TestFollowerGivesUpAtGraceDeadline(t *testing.T) {
	root := t.TempDir()
	rt := &fakeRuntime{after: 1 << 30, asked: map[string]int{}}
	l := &Lifecycle{KubeletRoot: root, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Runtime: rt, PollInterval: 5 * time.Millisecond}
	pod := deletedLegacyPod(t, root)
	zero := int64(0)
	pod.Spec.TerminationGracePeriodSeconds = &zero
	done := make(chan struct{})
	go func() {
		l.WorkloadTerminating(pod, lifecycle.Decision{Mode: contract.ModeLegacy})
		l.terms.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("follower did not stop at grace + 5 s")
	}
	if _, err := os.Stat(exitFilePath(root, pod)); err == nil {
		t.Fatal("exit file written although the app never exited")
	}
}
