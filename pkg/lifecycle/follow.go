package lifecycle

import (
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
)

// RuleRuntimeContainersExited is the exit file's rule when the container runtime, not the
// API, showed that every container that can use a stopping pod's mounts has exited: a
// follower of the pod released it (FollowVerdict, ReleaseConfirmation).
const RuleRuntimeContainersExited Rule = "runtime-containers-exited"

// FollowLook is what a follower of a stopping pod sees in one look at the runtime.
type FollowLook struct {
	// Pod is the pod as the node plugin's cache has it, whose API statuses FollowVerdict
	// reads; with AllButSidecar, only its identity.
	Pod *corev1.Pod
	// Followed are the containers that can use the mounts (MountUsers); unused with
	// AllButSidecar.
	Followed []string
	// AllButSidecar: the pod is not in the cache, so every container the runtime lists
	// except the sidecar is followed.
	AllButSidecar bool
	// Terminating: the kubelet is known to be stopping the pod (the sidecar got SIGTERM):
	// from then on it creates no container for the pod, so a container absent from the
	// runtime will never run.
	Terminating bool
	// Listed is every container the runtime lists for the pod, every attempt.
	Listed []RuntimeContainer
}

// FollowVerdict decides from one look whether no container that can use the mounts may run
// any more, so that the follower may release the pod (after ReleaseConfirmation). Not
// releasable: the runtime lists no container of the pod at all (a runtime that does not
// know the pod yet, or the wrong runtime, must not release it); a followed container is
// created, running or unknown (not Exited); or a followed container is not in the runtime
// while it may still be started: the kubelet is not known to be stopping the pod and the
// API does not show it finished for good (terminated, or waiting after having run: the pod
// is stopping, so it will not run again). awaited says what the follower waits for.
func FollowVerdict(look FollowLook) (release bool, awaited string) {
	if len(look.Listed) == 0 {
		return false, "the runtime lists no container of the pod"
	}
	followed := func(name string) bool {
		if look.AllButSidecar {
			return name != contract.SidecarContainerName
		}
		return slices.Contains(look.Followed, name)
	}
	present := map[string]bool{}
	for _, c := range look.Listed {
		present[c.Name] = true
		if followed(c.Name) && !c.Exited {
			return false, fmt.Sprintf("container %q is %s", c.Name, c.State)
		}
	}
	if !look.AllButSidecar && !look.Terminating {
		for _, name := range look.Followed {
			if !present[name] && !stoppedForGood(look.Pod, name) {
				return false, fmt.Sprintf("container %q is not in the runtime yet", name)
			}
		}
	}
	return true, ""
}

// stoppedForGood reports whether the API status of the container name (a regular
// container's, else an init container's) shows it finished for good, as a stopping pod's
// container: terminated, or waiting after having run (terminatedState, afterRun).
func stoppedForGood(pod *corev1.Pod, name string) bool {
	st := findStatus(pod.Status.ContainerStatuses, name)
	if st == nil {
		st = findStatus(pod.Status.InitContainerStatuses, name)
	}
	return terminatedState(st, true) != nil
}

// How a follower makes sure that a releasable look is not a listing's race.
const (
	// ReleaseLooks is how many consecutive looks must find a followed pod releasable
	// (FollowVerdict) before it is released, so that a container the kubelet is creating
	// at that very moment (listed only once created) is seen before the mounts go away.
	ReleaseLooks = 2
	// ReleaseGap is the least time between the first and the last of those looks: a
	// wake-up from the runtime watch may come right after a look, and a container the
	// kubelet creates at that moment must still be seen.
	ReleaseGap = 100 * time.Millisecond
)

// ReleaseConfirmation counts a follower's consecutive looks that found its pod releasable.
// The zero value has counted none.
type ReleaseConfirmation struct {
	looks int
	since time.Time
}

// Look records a look, at now, that found the pod releasable or not. It reports whether the
// pod may be released now: ReleaseLooks consecutive releasable looks, the first at least
// ReleaseGap before now; and since when the looks have found it releasable (the exit
// file's WorkloadFinishedAt).
func (c *ReleaseConfirmation) Look(releasable bool, now time.Time) (release bool, since time.Time) {
	if !releasable {
		*c = ReleaseConfirmation{}
		return false, time.Time{}
	}
	if c.looks == 0 {
		c.since = now
	}
	c.looks++
	return c.looks >= ReleaseLooks && now.Sub(c.since) >= ReleaseGap, c.since
}

// Reset forgets the looks so far: a look that could not list the runtime breaks the run.
func (c *ReleaseConfirmation) Reset() { *c = ReleaseConfirmation{} }
