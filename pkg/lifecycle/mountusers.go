package lifecycle

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
)

// RuleDeletingInitRunning: a native-sidecar pod is being deleted during its init phase, while
// a regular init container (which may use the mounts) has not terminated. The kubelet then
// stops that container and the native sidecar together, so the sidecar must keep serving
// until the container has exited, which only the container runtime reports in time.
const RuleDeletingInitRunning Rule = "deleting-init-running"

// RegularInitContainers returns, in spec order, the names of the init containers that run
// to completion (restartPolicy not Always), except one named like the sidecar. In a
// native-sidecar pod those that start after the sidecar can use the mounts.
func RegularInitContainers(pod *corev1.Pod) []string {
	var names []string
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		if c.Name == contract.SidecarContainerName {
			continue
		}
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			continue // a native sidecar of its own (istio-proxy...): it serves, it does not use our mounts to finish
		}
		names = append(names, c.Name)
	}
	return names
}

// InitContainerUsers returns, in order, the regular (run-to-completion) init containers in
// after, the init containers that start after a native sidecar, that mount one of the
// driver's volumes (mounts says which do; the webhook resolves claims for it). The webhook
// gives them to the sidecar at admission in contract.EnvInitContainers: the sidecar keeps
// serving them when the pod is deleted during its init phase (sidecarrule.DrainDecision).
func InitContainerUsers(after []corev1.Container, mounts func(corev1.Container) bool) []string {
	var users []string
	for _, c := range after {
		if !restartable(c) && mounts(c) {
			users = append(users, c.Name)
		}
	}
	return users
}

// NativeSidecarUsers returns, in order, the user's own native sidecars (restartPolicy:
// Always, not ours) in after that mount one of the driver's volumes (mounts says which do).
// The webhook gives them to the sidecar at admission in contract.EnvSidecarUsers, which
// SidecarUsers reads back: the kubelet stops native sidecars in reverse order after the
// regular containers, so these stop before ours, and the workload is done only once they
// have exited (a log shipper flushing its last object into the bucket on SIGTERM).
func NativeSidecarUsers(after []corev1.Container, mounts func(corev1.Container) bool) []string {
	var users []string
	for _, c := range after {
		if restartable(c) && c.Name != contract.SidecarContainerName && mounts(c) {
			users = append(users, c.Name)
		}
	}
	return users
}

// restartable reports whether an init container is a native sidecar (restartPolicy:
// Always), which keeps running alongside the next containers instead of completing.
func restartable(c corev1.Container) bool {
	return c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways
}

// MountUsers returns the names of the containers whose exit the sidecar must wait for when
// the pod stops: for a legacy sidecar the workload containers (its init containers ran
// before the sidecar could serve); for a native sidecar also the regular init containers
// that mount a volume (InitUsers), which run while it serves, and the user's native
// sidecars that mount a volume (SidecarUsers), which the kubelet stops before ours. It
// returns nil for a pod without a sidecar.
func MountUsers(pod *corev1.Pod) []string {
	switch SidecarMode(pod) {
	case contract.ModeLegacy:
		return WorkloadContainers(pod)
	case contract.ModeNative:
		return append(append(InitUsers(pod), WorkloadContainers(pod)...), SidecarUsers(pod)...)
	}
	return nil
}

// InitUsers returns a native pod's regular init containers that mount a gcsfuse volume, as
// the webhook found them at admission (InitContainerUsers: after our sidecar, inline volumes
// and claims alike) and listed them in the native sidecar's contract.EnvInitContainers: the
// one computation the webhook, the sidecar and the node plugin share. A sidecar injected
// without that variable (by an older webhook) leaves every regular init container
// (RegularInitContainers): waiting for one that does not mount costs time, never data. It
// returns nil for a legacy pod.
func InitUsers(pod *corev1.Pod) []string {
	sidecar := nativeSidecar(pod)
	if sidecar == nil {
		return nil
	}
	if u, ok := readUsers(sidecar); ok {
		return u.Init
	}
	return RegularInitContainers(pod)
}

// InitContainersSucceeded reports, from the API status, that a native-sidecar pod has
// regular init containers and that every one of them terminated with exit code 0: its init
// phase is over, so from then on the kubelet stops the sidecar only after every container
// that can use the mounts has exited.
func InitContainersSucceeded(pod *corev1.Pod) bool {
	if SidecarMode(pod) != contract.ModeNative {
		return false
	}
	names := RegularInitContainers(pod)
	if len(names) == 0 {
		return false
	}
	for _, name := range names {
		st := findStatus(pod.Status.InitContainerStatuses, name)
		if st == nil || st.State.Terminated == nil || st.State.Terminated.ExitCode != 0 {
			return false
		}
	}
	return true
}

// NeedsRuntimeFollow reports whether pod is being deleted while containers that can use its
// mounts may still run, so that only the container runtime can say when they have exited
// (the kubelet reports no container status while it stops a pod). That is a pod, in either mode,
// whose workload has not terminated (Decide's RuleDeletingWorkloadRunning): a native sidecar
// told when it has spares the pod the kubelet's late SIGTERM; and a native pod deleted during
// its init phase (RuleDeletingInitRunning). The decision returned is not done; it
// says why the pod must be followed.
func NeedsRuntimeFollow(pod *corev1.Pod) (Decision, bool) {
	if pod.DeletionTimestamp == nil || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return Decision{}, false
	}
	mode := SidecarMode(pod)
	if mode == contract.ModeNative {
		for _, name := range InitUsers(pod) {
			if terminatedState(findStatus(pod.Status.InitContainerStatuses, name), true) == nil {
				return Decision{Mode: contract.ModeNative, Rule: RuleDeletingInitRunning,
					Reason: fmt.Sprintf("pod is being deleted during its init phase; init container %q has not terminated", name)}, true
			}
		}
	}
	if mode == "" {
		return Decision{}, false
	}
	d := Decide(pod)
	return d, d.Rule == RuleDeletingWorkloadRunning || d.Rule == RuleSidecarUserRunning
}
