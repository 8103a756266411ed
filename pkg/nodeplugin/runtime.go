package nodeplugin

import (
	"cmp"
	"context"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gcsfuse-csi/gcsfuse-csi/internal/expiring"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/containerexit"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/lifecycle"
)

// runtimeDoneMemory is how long a pod released from the runtime's view is remembered, so
// that the later changes of its containers (the sidecar's exit, removals) do not ask again.
const runtimeDoneMemory = 10 * time.Minute

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
	l.follows.wake(uid)
	if l.Pods == nil || l.Runtime == nil {
		return
	}
	if !l.deciding.start(uid) {
		return // being decided: it looks again when done
	}
	if !l.goOwned(func(ctx context.Context) {
		for {
			l.decideFromRuntime(ctx, uid)
			if !l.deciding.again(uid) {
				return
			}
		}
	}) {
		l.deciding.stop(uid)
	}
}

// runtimeDecisions holds the pods whose runtime view is being decided (ContainersChanged),
// and whether a change came meanwhile.
type runtimeDecisions struct {
	mu      sync.Mutex
	pending map[types.UID]bool // in progress; true: changed again since it started
}

// start marks uid in progress; false (and a note to decide again) if it already is.
func (r *runtimeDecisions) start(uid types.UID) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pending == nil {
		r.pending = map[types.UID]bool{}
	}
	if _, busy := r.pending[uid]; busy {
		r.pending[uid] = true
		return false
	}
	r.pending[uid] = false
	return true
}

// again reports whether uid changed while it was decided (and keeps it in progress), or
// ends it.
func (r *runtimeDecisions) again(uid types.UID) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pending[uid] {
		r.pending[uid] = false
		return true
	}
	delete(r.pending, uid)
	return false
}

// stop ends uid's decision.
func (r *runtimeDecisions) stop(uid types.UID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.pending, uid)
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
	l.releasedOnce.Do(func() { l.released = expiring.New[types.UID](runtimeDoneMemory) })
	if !l.released.Add(uid, time.Now()) {
		return
	}
	d.Reason = "the container runtime shows it: " + d.Reason
	l.Metrics.PodDone(d.Rule)
	l.requestExit(view, d)
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
