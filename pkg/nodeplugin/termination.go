package nodeplugin

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/lifecycle"
)

// RuleDeletingRuntimeExited is the exit file's rule when the runtime, not the API, showed
// that a deleted pod's workload containers have exited.
const RuleDeletingRuntimeExited = "deleting-runtime-exited"

// terminations follows deleted legacy pods in the container runtime until their workload
// containers have exited. The kubelet stops every container of a deleted pod at once and
// reports none of them until all have stopped, so without this a legacy sidecar would wait
// for its drain deadline (most of the grace period) although the app is long gone.
//
// It asks the runtime of this node every interval, only for pods being deleted, only until
// their grace period ends: the API offers no event for this, and the CRI runtimes of
// Kubernetes 1.29-era nodes (containerd 1.6) do not stream container events.
type terminations struct {
	mu      sync.Mutex
	pods    map[types.UID]bool
	wg      sync.WaitGroup
	stop    chan struct{}
	stopped bool
}

// WorkloadTerminating starts following a deleted legacy pod (podwatch.TerminationHandler).
func (l *Lifecycle) WorkloadTerminating(pod *corev1.Pod, d lifecycle.Decision) {
	if d.Mode != contract.ModeLegacy || l.Runtime == nil {
		return
	}
	t := &l.terms
	t.mu.Lock()
	if t.pods == nil {
		t.pods, t.stop = map[types.UID]bool{}, make(chan struct{})
	}
	if t.stopped || t.pods[pod.UID] {
		t.mu.Unlock()
		return
	}
	t.pods[pod.UID] = true
	t.wg.Add(1)
	t.mu.Unlock()

	ids := runningWorkloadIDs(pod)
	grace := int64(contract.DefaultGraceSeconds)
	if g := pod.Spec.TerminationGracePeriodSeconds; g != nil {
		grace = *g
	}
	deadline := time.Now().Add(time.Duration(grace)*time.Second + 5*time.Second)
	log := l.Log.With("pod", pod.Namespace+"/"+pod.Name, "podUID", pod.UID)
	log.Info("legacy pod deleted; following its workload containers in the runtime", "containers", len(ids))
	go func() { // owned by l.terms: ends on exit, deadline or Close
		defer t.wg.Done()
		defer func() {
			t.mu.Lock()
			delete(t.pods, pod.UID)
			t.mu.Unlock()
		}()
		if l.waitExited(ids, deadline, t.stop, log) {
			l.requestExit(pod, lifecycle.Decision{Mode: contract.ModeLegacy, Rule: RuleDeletingRuntimeExited,
				Reason:             fmt.Sprintf("pod is being deleted and the runtime reports its %d workload containers exited", len(ids)),
				WorkloadFinishedAt: time.Now()})
		}
	}()
}

// runningWorkloadIDs lists the runtime IDs of the workload containers not yet terminated.
func runningWorkloadIDs(pod *corev1.Pod) []string {
	workload := map[string]bool{}
	for _, n := range lifecycle.WorkloadContainers(pod) {
		workload[n] = true
	}
	var ids []string
	for _, s := range pod.Status.ContainerStatuses {
		if workload[s.Name] && s.State.Terminated == nil && s.ContainerID != "" {
			ids = append(ids, s.ContainerID)
		}
	}
	return ids
}

func (l *Lifecycle) waitExited(ids []string, deadline time.Time, stop <-chan struct{}, log *slog.Logger) bool {
	interval := l.PollInterval
	if interval <= 0 {
		interval = 100 * time.Millisecond
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	warned := false
	for {
		remaining := ids[:0]
		for _, id := range ids {
			exited, err := l.Runtime.Exited(ctx, id)
			if err != nil && !warned {
				log.Warn("cannot ask the runtime about a container; retrying", "container", id, "err", err)
				warned = true
			}
			if !exited {
				remaining = append(remaining, id)
			}
		}
		ids = remaining
		if len(ids) == 0 {
			return true
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			log.Warn("workload containers still running at the end of the grace period", "containers", ids)
			return false
		case <-stop:
			return false
		}
	}
}

// Close stops following pods and waits for the followers, at most d.
func (l *Lifecycle) Close(d time.Duration) {
	t := &l.terms
	t.mu.Lock()
	if !t.stopped {
		t.stopped = true
		if t.stop != nil {
			close(t.stop)
		}
	}
	t.mu.Unlock()
	done := make(chan struct{})
	go func() { t.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
	}
}
