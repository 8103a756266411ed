package podwatch

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
)

func TestSidecarExitLatency(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	term := func(code int32, at time.Time) corev1.ContainerState {
		return corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, FinishedAt: metav1.NewTime(at)}}
	}
	running := corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
	always := corev1.ContainerRestartPolicyAlways
	legacy := func(app, sc corev1.ContainerState) *corev1.Pod {
		return &corev1.Pod{
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: contract.SidecarContainerName}, {Name: "app"}}},
			Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{
				{Name: contract.SidecarContainerName, State: sc}, {Name: "app", State: app}}},
		}
	}
	native := &corev1.Pod{
		Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{{Name: contract.SidecarContainerName, RestartPolicy: &always}},
			Containers:     []corev1.Container{{Name: "app"}},
		},
		Status: corev1.PodStatus{
			InitContainerStatuses: []corev1.ContainerStatus{{Name: contract.SidecarContainerName, State: term(0, t0.Add(time.Second))}},
			ContainerStatuses:     []corev1.ContainerStatus{{Name: "app", State: term(0, t0)}},
		},
	}
	tests := []struct {
		name     string
		pod      *corev1.Pod
		wantMode string
		want     time.Duration
		ok       bool
	}{
		{"legacy done", legacy(term(1, t0), term(0, t0.Add(2*time.Second))), contract.ModeLegacy, 2 * time.Second, true},
		{"native done", native, contract.ModeNative, time.Second, true},
		{"app running", legacy(running, term(0, t0)), "", 0, false},
		{"sidecar running", legacy(term(0, t0), running), "", 0, false},
		{"sidecar failed", legacy(term(0, t0), term(1, t0)), "", 0, false},
	}
	for _, tt := range tests {
		mode, d, ok := sidecarExitLatency(tt.pod)
		if mode != tt.wantMode || d != tt.want || ok != tt.ok {
			t.Errorf("%s: got %q %s %v, want %q %s %v", tt.name, mode, d, ok, tt.wantMode, tt.want, tt.ok)
		}
	}
}
