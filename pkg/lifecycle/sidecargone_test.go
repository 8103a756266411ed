package lifecycle

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
)

func TestSidecarGone(t *testing.T) {
	sc := contract.SidecarContainerName
	tests := []struct {
		name string
		pod  *corev1.Pod
		want bool
	}{
		{"no sidecar status yet", legacyPod([]string{"app"}, deleting()), false},
		{"sidecar running, pod deleted", legacyPod([]string{"app"}, deleting(), statuses(running(sc))), false},
		{"sidecar waiting after a run, pod deleted: only a terminated state counts",
			legacyPod([]string{"app"}, deleting(), statuses(backOff(sc, 1, t1))), false},
		{"terminated, pod deleted", legacyPod([]string{"app"}, restart(corev1.RestartPolicyAlways), deleting(), statuses(terminated(sc, 1, t1))), true},
		{"terminated, restartPolicy Never, any code", legacyPod([]string{"app"}, statuses(terminated(sc, 1, t1))), true},
		{"terminated, phase Succeeded", legacyPod([]string{"app"}, restart(corev1.RestartPolicyAlways), phase(corev1.PodSucceeded), statuses(terminated(sc, 0, t1))), true},
		{"terminated, phase Failed", legacyPod([]string{"app"}, restart(corev1.RestartPolicyOnFailure), phase(corev1.PodFailed), statuses(terminated(sc, 1, t1))), true},
		{"terminated 0 under OnFailure", legacyPod([]string{"app"}, restart(corev1.RestartPolicyOnFailure), statuses(terminated(sc, 0, t1))), true},
		{"terminated 1 under OnFailure: restarted", legacyPod([]string{"app"}, restart(corev1.RestartPolicyOnFailure), statuses(terminated(sc, 1, t1))), false},
		{"terminated under Always: restarted", legacyPod([]string{"app"}, restart(corev1.RestartPolicyAlways), statuses(terminated(sc, 0, t1))), false},
		{"native sidecar terminated, pod deleted", nativePod([]string{"app"}, deleting(), initStatuses(terminated(sc, 0, t1))), true},
		{"native sidecar terminated under Always: restarted", nativePod([]string{"app"}, restart(corev1.RestartPolicyAlways), initStatuses(terminated(sc, 0, t1))), false},
		{"another container terminated, pod deleted", legacyPod([]string{"app"}, deleting(), statuses(terminated("app", 0, t1), running(sc))), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := tt.pod.DeepCopy()
			if got := SidecarGone(tt.pod); got != tt.want {
				t.Fatalf("SidecarGone = %v, want %v", got, tt.want)
			}
			if !equalPods(before, tt.pod) {
				t.Error("SidecarGone mutated the pod")
			}
		})
	}
}
