package lifecycle

import (
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// UnknownExitCode stands for an exit code the runtime could not give: under restartPolicy
// OnFailure Decide counts it as a failure, so the sidecar is not released for a container
// that may be restarted.
const UnknownExitCode int32 = -1

// RuntimeContainer is one container of a pod as the node's container runtime lists it,
// with what the rules read of it (the node plugin converts containerexit.Container).
type RuntimeContainer struct {
	// Name is the pod spec's container name.
	Name string
	// ID is the runtime's container ID, without the "<runtime>://" prefix of the API.
	ID string
	// Attempt counts the kubelet's restarts of that container, from 0.
	Attempt uint32
	// State is the runtime's state in words (created, running, exited, unknown), for
	// reasons.
	State string
	// Exited: the container has exited. Any other state (created, running, unknown) may
	// still use the pod's volumes.
	Exited bool
	// CreatedAt orders containers of the same name when attempts tie.
	CreatedAt time.Time
	// ExitCode and FinishedAt are an exited container's, when ExitKnown.
	ExitCode   int32
	ExitKnown  bool
	FinishedAt time.Time
}

// LatestAttempts keeps, per container name, the latest attempt: the highest Attempt, then
// the latest CreatedAt; of two that tie on both, the first listed.
func LatestAttempts(cs []RuntimeContainer) map[string]RuntimeContainer {
	latest := map[string]RuntimeContainer{}
	for _, c := range cs {
		if p, ok := latest[c.Name]; !ok || c.Attempt > p.Attempt || (c.Attempt == p.Attempt && c.CreatedAt.After(p.CreatedAt)) {
			latest[c.Name] = c
		}
	}
	return latest
}

// RuntimeViewContainers returns, in the order WithRuntimeStates visits them, the
// containers whose statuses it takes from the runtime: the workload containers
// (WorkloadContainers), then the pod's other native sidecars (OtherNativeSidecars). The
// node plugin asks the runtime for the exit codes of those of them that exited, and of no
// other container.
func RuntimeViewContainers(pod *corev1.Pod) []string {
	return append(WorkloadContainers(pod), OtherNativeSidecars(pod)...)
}

// WithRuntimeStates returns a copy of pod in which the statuses of its workload containers,
// and those of its other native sidecars (RuntimeViewContainers), are replaced by their
// latest runtime containers (latest, as LatestAttempts returns it): an exited one as
// terminated, with its ExitCode and FinishedAt as they are (the caller fills those the
// listing lacked, UnknownExitCode when the runtime cannot give one), every other state as
// running since CreatedAt. A container latest does not list keeps its API status (not
// created yet, or already removed), and one the API has no status for gets one, after the
// others; its last termination state is the API's. The sidecar's own status, and those of
// ignored and regular init containers, are left as the API has them. Decide on the copy
// decides from the runtime's view, which knows of an exit before the API does. pod is not
// modified.
func WithRuntimeStates(pod *corev1.Pod, latest map[string]RuntimeContainer) *corev1.Pod {
	view := pod.DeepCopy()
	for _, set := range []struct {
		names    []string
		statuses *[]corev1.ContainerStatus
	}{
		{WorkloadContainers(pod), &view.Status.ContainerStatuses},
		{OtherNativeSidecars(pod), &view.Status.InitContainerStatuses},
	} {
		for _, name := range set.names {
			c, ok := latest[name]
			if !ok {
				continue
			}
			st := corev1.ContainerStatus{Name: name, ContainerID: "cri://" + c.ID, RestartCount: int32(c.Attempt)}
			if c.Exited {
				st.State.Terminated = &corev1.ContainerStateTerminated{ExitCode: c.ExitCode, FinishedAt: metav1.NewTime(c.FinishedAt)}
			} else {
				st.State.Running = &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(c.CreatedAt)}
			}
			list := *set.statuses
			i := slices.IndexFunc(list, func(s corev1.ContainerStatus) bool { return s.Name == name })
			if i < 0 {
				*set.statuses = append(list, st)
				continue
			}
			st.LastTerminationState = list[i].LastTerminationState
			list[i] = st
		}
	}
	return view
}
