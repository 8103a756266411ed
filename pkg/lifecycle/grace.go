package lifecycle

import (
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
)

// AppliedGraceSeconds is the grace period the kubelet applies to a stopping pod: the
// deletion's (deletionGracePeriodSeconds: kubectl delete --grace-period sets it), else the
// spec's terminationGracePeriodSeconds, else Kubernetes' default
// (contract.DefaultGraceSeconds); never negative. The node plugin writes it into the
// terminating file and bounds a runtime follow with it. It is not the grace the webhook
// gives the sidecar at admission (GCSFUSE_GRACE_SECONDS, the spec's alone): a deletion may
// apply another one.
func AppliedGraceSeconds(pod *corev1.Pod) int64 {
	switch {
	case pod.DeletionGracePeriodSeconds != nil:
		return max(*pod.DeletionGracePeriodSeconds, 0)
	case pod.Spec.TerminationGracePeriodSeconds != nil:
		return max(*pod.Spec.TerminationGracePeriodSeconds, 0)
	}
	return contract.DefaultGraceSeconds
}

// AppliedGrace is AppliedGraceSeconds as a duration.
func AppliedGrace(pod *corev1.Pod) time.Duration {
	return time.Duration(AppliedGraceSeconds(pod)) * time.Second
}
