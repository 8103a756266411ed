package podwatch

import (
	"context"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/lifecycle"
)

// fullHandler also implements every optional extension.
type fullHandler struct{ *recordingHandler }

func (h fullHandler) WorkloadTerminating(pod *corev1.Pod, d lifecycle.Decision) {
	h.add(call{kind: "terminating", pod: pod, decision: d})
}
func (h fullHandler) PodDeleting(pod *corev1.Pod) { h.add(call{kind: "deleting", pod: pod}) }
func (h fullHandler) InitContainersSucceeded(pod *corev1.Pod) {
	h.add(call{kind: "init-done", pod: pod})
}

// nativeJob is a native-sidecar pod whose regular init container "fetch" uses the mount.
func nativeJob(name string, uid types.UID) *corev1.Pod {
	p := jobPod(name, uid, node)
	always := corev1.ContainerRestartPolicyAlways
	p.Spec.Containers = p.Spec.Containers[:1]
	p.Spec.InitContainers = []corev1.Container{{Name: contract.SidecarContainerName, RestartPolicy: &always}, {Name: "fetch"}}
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "main", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "PodInitializing"}}}}
	p.Status.InitContainerStatuses = []corev1.ContainerStatus{
		{Name: contract.SidecarContainerName, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}},
		{Name: "fetch", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}},
	}
	return p
}

func markDeleted(p *corev1.Pod, grace int64) *corev1.Pod {
	now := metav1.Now()
	p.DeletionTimestamp, p.DeletionGracePeriodSeconds = &now, &grace
	return p
}

// Deletions reach the handler: PodDeleting for every pod using the driver,
// WorkloadTerminating for a legacy pod whose app still runs and for a native pod deleted
// during its init phase, never for a native pod past its init phase; and the end of a native
// pod's init phase is reported.
func TestWatcherReportsDeletionsAndInitPhase(t *testing.T) {
	ctx := context.Background()
	client, watching := newClient()
	h := fullHandler{newRecordingHandler()}
	w := New(client, node, h, WithLogger(quiet))
	if _, ok := w.PodByUID("uid-legacy"); ok {
		t.Fatal("PodByUID answered before the watcher ran")
	}
	stop := startWatcher(t, w)
	waitClosed(t, watching, "pod watch")
	pods := client.CoreV1().Pods(ns)
	update := func(p *corev1.Pod) {
		t.Helper()
		if _, err := pods.Update(ctx, p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	legacy := jobPod("legacy", "uid-legacy", node)
	legacy.Status.ContainerStatuses = nil // deleted before any status reached the API
	nativeInit := nativeJob("native-init", "uid-native-init")
	nativeDone := nativeJob("native-done", "uid-native-done")
	nativeDone.Status.InitContainerStatuses[1].State = exited(0, "")
	nativeDone.Status.ContainerStatuses[0].State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
	for _, p := range []*corev1.Pod{legacy, nativeInit, nativeDone} {
		if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	h.waitFor(t, "init-done", "native-done", "uid-native-done")
	got, ok := w.PodByUID("uid-legacy")
	if !ok || got.Name != "legacy" || got.Namespace != ns {
		t.Fatalf("PodByUID(uid-legacy) = %v, %v", got, ok)
	}
	if _, ok := w.PodByUID("uid-nobody"); ok {
		t.Fatal("PodByUID found an unknown UID")
	}

	update(markDeleted(legacy, 7))
	update(markDeleted(nativeInit, 9))
	update(markDeleted(nativeDone, 11))
	lt := h.waitFor(t, "terminating", "legacy", "uid-legacy")
	if lt.decision.Rule != lifecycle.RuleDeletingWorkloadRunning {
		t.Errorf("legacy terminating rule = %q", lt.decision.Rule)
	}
	nt := h.waitFor(t, "terminating", "native-init", "uid-native-init")
	if nt.decision.Rule != lifecycle.RuleDeletingInitRunning || nt.decision.Mode != contract.ModeNative {
		t.Errorf("native terminating decision = %+v", nt.decision)
	}
	// A native pod deleted while its app runs is followed too: the sidecar is told the
	// moment the app has exited, not when the kubelet gets round to stopping it.
	if nd := h.waitFor(t, "terminating", "native-done", "uid-native-done"); nd.decision.Rule != lifecycle.RuleDeletingWorkloadRunning {
		t.Errorf("native (app running) terminating decision = %+v", nd.decision)
	}
	d := h.waitFor(t, "deleting", "native-done", "uid-native-done")
	if g := d.pod.DeletionGracePeriodSeconds; g == nil || *g != 11 {
		t.Errorf("PodDeleting got deletionGracePeriodSeconds %v, want 11", g)
	}
	h.waitFor(t, "deleting", "legacy", "uid-legacy")
	h.waitFor(t, "deleting", "native-init", "uid-native-init")

	// More updates of the same pods report the same (the handler dedupes), nothing new.
	legacy.Status.Phase = corev1.PodRunning
	update(legacy)
	update(nativeInit)
	update(nativeDone)
	// Barrier: a later pod's callback means the updates above were processed.
	if _, err := pods.Create(ctx, markDeleted(jobPod("sentinel", "uid-sentinel", node), 1), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.waitFor(t, "terminating", "sentinel", "uid-sentinel")
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if _, ok := w.PodByUID("uid-legacy"); ok {
		t.Error("PodByUID answered from a stopped watcher's cache")
	}
	want := map[string]bool{
		"init-done:uid-native-done": true,
		"deleting:uid-legacy":       true, "deleting:uid-native-init": true, "deleting:uid-native-done": true, "deleting:uid-sentinel": true,
		"terminating:uid-legacy": true, "terminating:uid-native-init": true, "terminating:uid-native-done": true, "terminating:uid-sentinel": true,
	}
	if got := h.reported(); !reflect.DeepEqual(got, want) {
		t.Errorf("callbacks = %v, want %v", got, want)
	}
}
