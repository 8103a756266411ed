package exitcoord

import (
	"cmp"
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/containerexit"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/lifecycle"
)

// ContainersChanged is the runtime watch's callback (runtimewatch.Config.OnChange): the
// containers of the pod with podUID changed in the runtime. The pod's spec comes from the
// pod watch's cache (restart policy, containers, deletion); its containers' states come from
// the runtime, which knows of an exit a second or more before the API does. When
// lifecycle.Decide, on the pod with those states, finds the workload done, the sidecar is
// told at once, in both modes: a native sidecar that exits by itself the moment its
// workload has exited costs a Job ~0.2 s, one the kubelet has to stop ~2 s. A follower of a
// stopping pod, if any, looks again now.
//
// It runs on the watch's goroutine, which must not block, while deciding may ask the
// runtime for exit codes (ContainerStatus, up to exitCodesBudget): so the decision runs in
// an owned goroutine, one per pod at a time; a change that comes meanwhile makes that
// goroutine decide once more when it is done.
func (l *ExitCoordinator) ContainersChanged(podUID string) {
	uid := types.UID(podUID)
	l.wakeFollower(uid)
	if l.Pods == nil || l.Runtime == nil {
		return
	}
	if pod, ok := l.Pods.PodByUID(uid); !ok || lifecycle.SidecarMode(pod) == "" {
		return // not a pod with our sidecar (or not known yet): no record
	}
	start := false
	l.record(uid, func(r *podRecord) {
		if r.deciding {
			r.decideAgain = true // being decided: it looks again when done
			return
		}
		r.deciding, start = true, true
	})
	if !start {
		return
	}
	if !l.goOwned(func(ctx context.Context) {
		for {
			l.decideFromRuntime(ctx, uid)
			if !l.decideAgain(uid) {
				return
			}
		}
	}) {
		l.record(uid, func(r *podRecord) { r.deciding, r.decideAgain = false, false })
	}
}

// decideAgain reports whether the pod's containers changed while it was decided (and keeps
// it deciding), or ends its decision.
func (l *ExitCoordinator) decideAgain(uid types.UID) (again bool) {
	l.record(uid, func(r *podRecord) {
		again, r.decideAgain = r.decideAgain, false
		r.deciding = again
	})
	return again
}

// decideFromRuntime decides about the pod uid from its containers' runtime states and tells
// its sidecar when its workload is done.
func (l *ExitCoordinator) decideFromRuntime(ctx context.Context, uid types.UID) {
	podUID := string(uid)
	pod, ok := l.Pods.PodByUID(uid)
	if !ok || lifecycle.SidecarMode(pod) == "" {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, exitCodesBudget)
	defer cancel()
	cs, err := l.Runtime.PodContainers(ctx, podUID)
	if err != nil {
		l.Log.Debug("no runtime view of the pod", "pod", pod.Namespace+"/"+pod.Name, "err", err)
		return
	}
	view := l.runtimeView(ctx, pod, cs)
	d := lifecycle.Decide(view)
	if !d.Done {
		return
	}
	d.Reason = "the container runtime shows it: " + d.Reason
	l.workloadDone(view, d)
}

// runtimeView is pod as lifecycle.WithRuntimeStates shows it from the runtime's listing cs,
// once the exit codes the listing lacks have been asked of the runtime (exitOf), for the
// containers the view takes from the runtime only.
func (l *ExitCoordinator) runtimeView(ctx context.Context, pod *corev1.Pod, cs []containerexit.Container) *corev1.Pod {
	latest := lifecycle.LatestAttempts(runtimeContainers(cs))
	for _, name := range lifecycle.RuntimeViewContainers(pod) {
		if c, ok := latest[name]; ok && c.Exited {
			c.ExitCode, c.FinishedAt = l.exitOf(ctx, c)
			c.ExitKnown = true
			latest[name] = c
		}
	}
	return lifecycle.WithRuntimeStates(pod, latest)
}

// exitOf returns an exited container's exit code and finish time, asking the runtime when
// its listing did not carry them: lifecycle.UnknownExitCode when the runtime cannot give the
// code, now when it gives no time.
func (l *ExitCoordinator) exitOf(ctx context.Context, c lifecycle.RuntimeContainer) (int32, time.Time) {
	if !c.ExitKnown {
		st, err := l.Runtime.Status(ctx, c.ID)
		if err != nil || !st.ExitKnown {
			l.Log.Debug("no exit code from the runtime; counted as a failure", "container", c.Name, "err", err)
			return lifecycle.UnknownExitCode, cmp.Or(c.FinishedAt, time.Now())
		}
		c = runtimeContainer(st)
	}
	if c.FinishedAt.IsZero() {
		return c.ExitCode, time.Now()
	}
	return c.ExitCode, c.FinishedAt
}

// runtimeContainer is c as the lifecycle rules take it.
func runtimeContainer(c containerexit.Container) lifecycle.RuntimeContainer {
	return lifecycle.RuntimeContainer{Name: c.Name, ID: c.ID, Attempt: c.Attempt, State: c.State.String(), Exited: !c.State.Active(),
		CreatedAt: c.CreatedAt, ExitCode: c.ExitCode, ExitKnown: c.ExitKnown, FinishedAt: c.FinishedAt}
}

// runtimeContainers is cs as the lifecycle rules take them.
func runtimeContainers(cs []containerexit.Container) []lifecycle.RuntimeContainer {
	out := make([]lifecycle.RuntimeContainer, len(cs))
	for i, c := range cs {
		out[i] = runtimeContainer(c)
	}
	return out
}
