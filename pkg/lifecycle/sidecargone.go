package lifecycle

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
)

// SidecarGone reports whether pod's API status shows a sidecar that has ended for good: it
// terminated and the kubelet will not start it again (the pod is being deleted or has
// reached a final phase, its restartPolicy is Never, or OnFailure after a clean exit). Such
// a sidecar needs no exit file, and a restarted node plugin, which reports done pods again,
// must not complain that it cannot tell it: its emptyDir is usually gone with it. A status
// named like the sidecar counts in either list (regular or init container statuses).
func SidecarGone(pod *corev1.Pod) bool {
	for _, statuses := range [][]corev1.ContainerStatus{pod.Status.ContainerStatuses, pod.Status.InitContainerStatuses} {
		for i := range statuses {
			t := statuses[i].State.Terminated
			if statuses[i].Name != contract.SidecarContainerName || t == nil {
				continue
			}
			switch {
			case pod.DeletionTimestamp != nil, pod.Spec.RestartPolicy == corev1.RestartPolicyNever,
				pod.Status.Phase == corev1.PodSucceeded, pod.Status.Phase == corev1.PodFailed:
				return true
			case pod.Spec.RestartPolicy == corev1.RestartPolicyOnFailure && t.ExitCode == 0:
				return true
			}
		}
	}
	return false
}
