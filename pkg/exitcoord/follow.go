package exitcoord

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/containerexit"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/csidriver"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/lifecycle"
)

// Why a pod is followed: the trigger, in logs and as a metric label.
type FollowWhy string

const (
	// WhyDeleted: the pod watcher saw the pod deleted while containers may use its mounts.
	WhyDeleted FollowWhy = "deleted"
	// WhySidecarTerminating: the sidecar reported handoff.StateTerminating: the kubelet is
	// stopping the pod, whatever the cause (deletion, eviction, activeDeadlineSeconds,
	// node shutdown).
	WhySidecarTerminating FollowWhy = "sidecar-terminating"
)

// Follow tuning. A follower reads the runtime watch's node-wide state (Runtime), so a look
// costs no runtime call; it looks on every change the watch reports, and every interval.
const (
	// FollowPollInterval is how often a followed pod's containers are looked at without a
	// change: the least time between the looks that release a pod (lifecycle.ReleaseGap),
	// so that a pod no change wakes for is released after ReleaseLooks polls.
	FollowPollInterval = lifecycle.ReleaseGap
	// followMargin is added to the pod's grace period to bound a follow: by then the
	// kubelet has SIGKILLed every container, and the sidecar has reached its drain deadline.
	followMargin = 5 * time.Second
	// exitCodesBudget bounds the ContainerStatus calls that put exit codes into the reason.
	exitCodesBudget = 250 * time.Millisecond
)

// Follow results, as a metric label.
const (
	followReleased = "released" // the exit file was requested
	followDeadline = "deadline" // grace + margin passed with containers still running
	followStopped  = "stopped"  // the node plugin is shutting down
)

// PodLookup finds a pod in the pod watcher's cache (podwatch.Watcher.PodByUID).
type PodLookup interface {
	PodByUID(uid types.UID) (*corev1.Pod, bool)
}

// workers owns the ExitCoordinator's goroutines (followers, exit and pod file retries,
// runtime decisions, record sweeps): Close cancels their context, which also aborts a
// runtime call in flight, and waits for them.
type workers struct {
	mu      sync.Mutex
	wg      sync.WaitGroup
	ctx     context.Context // made on first use, so that an ExitCoordinator literal works
	cancel  context.CancelFunc
	stopped bool
}

// follower is one pod being followed; the pod's record holds it.
type follower struct {
	// terminating records that the kubelet is stopping the pod (the sidecar got SIGTERM):
	// from then on it creates no container for the pod, so a container absent from the
	// runtime will never run.
	terminating atomic.Bool
	// finished is when the follow ended (zero while it runs); guarded by podRecords.mu.
	finished time.Time
	// wake makes the follower look at the runtime now: its containers changed.
	wake chan struct{}
}

// wakeFollower tells the follower of uid, if one runs, that its containers changed. It
// makes no record: a pod without one has no follower.
func (l *ExitCoordinator) wakeFollower(uid types.UID) {
	l.pods.mu.Lock()
	var f *follower
	if r := l.pods.pods[uid]; r != nil {
		f = r.follower
	}
	l.pods.mu.Unlock()
	if f == nil {
		return
	}
	select {
	case f.wake <- struct{}{}:
	default: // a wake-up is already pending
	}
}

// target is what a follower watches.
type target struct {
	pod *corev1.Pod // trimmed pod; for a pod unknown to the cache, only its identity
	// names are the containers that can use the mounts; nil with allButSidecar.
	names []string
	// allButSidecar: the pod is not in the cache, so every container the runtime lists
	// except the sidecar is followed.
	allButSidecar bool
	grace         time.Duration
}

// WorkloadTerminating starts following a pod deleted while containers may still use its
// mounts (podwatch.TerminationHandler).
func (l *ExitCoordinator) WorkloadTerminating(pod *corev1.Pod, d lifecycle.Decision) {
	l.Follow(pod, WhyDeleted)
}

// SidecarTerminating is the CSI driver's hook for a sidecar that reported
// handoff.StateTerminating (once per volume); it returns whether this is the pod's first
// report, for the SidecarDraining Event. The pod is looked up in the pod watcher's cache;
// when it is not there (API unreachable, or the cache not synced yet), every container of
// the pod but the sidecar is followed, in the runtime alone.
func (l *ExitCoordinator) SidecarTerminating(ref csidriver.PodRef) (first bool) {
	uid := types.UID(ref.UID)
	l.record(uid, func(r *podRecord) { first, r.drainingReported = !r.drainingReported, true })
	if l.Pods != nil {
		if pod, ok := l.Pods.PodByUID(uid); ok && lifecycle.SidecarMode(pod) != "" {
			l.Follow(pod, WhySidecarTerminating)
			return first
		}
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ref.Namespace, Name: ref.Name, UID: uid}}
	l.start(pod, target{pod: pod, allButSidecar: true, grace: contract.DefaultGraceSeconds * time.Second}, WhySidecarTerminating)
	return first
}

// Follow starts following pod in the container runtime, once per pod UID, until no
// container that can use its mounts (lifecycle.MountUsers) runs any more, then writes the
// exit file; or until its grace period plus a margin has passed. A second call for the same
// pod starts nothing; with WhySidecarTerminating it tells the running follower that the
// kubelet is stopping the pod. It reports whether a follower was started.
func (l *ExitCoordinator) Follow(pod *corev1.Pod, why FollowWhy) bool {
	if lifecycle.SidecarMode(pod) == "" {
		return false
	}
	return l.start(pod, target{pod: pod, names: lifecycle.MountUsers(pod), grace: lifecycle.AppliedGrace(pod)}, why)
}

func (l *ExitCoordinator) start(pod *corev1.Pod, t target, why FollowWhy) bool {
	log := l.Log.With("pod", pod.Namespace+"/"+pod.Name, "podUID", pod.UID, "why", why)
	if l.Runtime == nil {
		log.Debug("no container runtime configured; the sidecar ends at its drain deadline")
		return false
	}
	var f *follower
	l.record(pod.UID, func(r *podRecord) {
		if r.follower != nil {
			if why == WhySidecarTerminating && r.follower.terminating.CompareAndSwap(false, true) {
				log.Info("the kubelet is stopping the followed pod; containers not in the runtime will not start")
			}
			return
		}
		f = &follower{wake: make(chan struct{}, 1)}
		f.terminating.Store(why == WhySidecarTerminating)
		r.follower = f
	})
	if f == nil {
		return false
	}
	now := time.Now()
	started := l.goOwned(func(ctx context.Context) { // ends on release, deadline or Close
		result := l.follow(ctx, f, t, log)
		l.pods.mu.Lock()
		f.finished = time.Now()
		l.pods.mu.Unlock()
		l.Metrics.ObserveFollow(string(why), result, time.Since(now))
	})
	if !started {
		l.pods.mu.Lock()
		f.finished = time.Now()
		l.pods.mu.Unlock()
	}
	return started
}

// follow polls the runtime until the containers have exited (then requests the exit), the
// deadline passes or parent is cancelled; it returns the result.
func (l *ExitCoordinator) follow(parent context.Context, f *follower, t target, log *slog.Logger) string {
	start := time.Now()
	deadline := start.Add(t.grace + followMargin)
	followed := "every container but the sidecar"
	if !t.allButSidecar {
		followed = strings.Join(t.names, ",")
	}
	log.Info("following the pod's containers in the runtime", "containers", followed, "terminating", f.terminating.Load(),
		"deadline", deadline.Format(time.RFC3339))
	ctx, cancel := context.WithDeadline(parent, deadline)
	defer cancel()
	tick := time.NewTicker(FollowPollInterval)
	defer tick.Stop()

	var confirm lifecycle.ReleaseConfirmation
	waitingFor, lastErr := "", ""
	for {
		cs, err := l.Runtime.PodContainers(ctx, string(t.pod.UID))
		switch {
		case err != nil:
			confirm.Reset()
			if msg := err.Error(); msg != lastErr && ctx.Err() == nil {
				log.Warn("cannot list the pod's containers; retrying", "err", err)
				lastErr = msg
			}
		default:
			lastErr = ""
			done, awaited := lifecycle.FollowVerdict(lifecycle.FollowLook{Pod: t.pod, Followed: t.names, AllButSidecar: t.allButSidecar,
				Terminating: f.terminating.Load(), Listed: runtimeContainers(cs)})
			release, doneSince := confirm.Look(done, time.Now())
			if !done {
				if awaited != waitingFor {
					log.Debug("waiting for containers", "for", awaited)
					waitingFor = awaited
				}
				break
			}
			if release {
				l.release(parent, t, cs, doneSince, log)
				log.Info("stopped following the pod: containers exited", "result", followReleased,
					"durationMs", time.Since(start).Milliseconds())
				return followReleased
			}
		}
		select {
		case <-tick.C:
		case <-f.wake:
		case <-ctx.Done():
			if parent.Err() != nil {
				log.Info("stopped following the pod: node plugin stopping", "result", followStopped,
					"durationMs", time.Since(start).Milliseconds())
				return followStopped
			}
			log.Warn("stopped following the pod: containers still running at the end of the grace period; the sidecar ends at its drain deadline",
				"result", followDeadline, "waitingFor", waitingFor, "durationMs", time.Since(start).Milliseconds())
			return followDeadline
		}
	}
}

// release writes the exit file through requestExit, with a reason naming the containers.
func (l *ExitCoordinator) release(parent context.Context, t target, cs []containerexit.Container, doneSince time.Time, log *slog.Logger) {
	latest := lifecycle.LatestAttempts(runtimeContainers(cs))
	names := slices.Clone(t.names)
	if t.allButSidecar {
		for name := range latest {
			if name != contract.SidecarContainerName {
				names = append(names, name)
			}
		}
		slices.Sort(names)
	}
	ctx, cancel := context.WithTimeout(parent, exitCodesBudget)
	defer cancel()
	parts := make([]string, 0, len(names))
	for _, name := range names {
		c, ok := latest[name]
		switch {
		case !ok:
			parts = append(parts, name+" (never started)")
		default:
			if st, err := l.Runtime.Status(ctx, c.ID); err == nil && st.ExitKnown {
				parts = append(parts, fmt.Sprintf("%s (exit %d)", name, st.ExitCode))
			} else {
				log.Debug("no exit code for the reason", "container", name, "err", err)
				parts = append(parts, name+" (exited)")
			}
		}
	}
	reason := "the container runtime reports that every container that can use the volumes has exited"
	if len(parts) > 0 {
		reason += ": " + strings.Join(parts, ", ")
	}
	l.requestExit(t.pod, lifecycle.Decision{
		Done: true, Mode: lifecycle.SidecarMode(t.pod), Rule: lifecycle.RuleRuntimeContainersExited,
		Reason: reason, WorkloadFinishedAt: doneSince,
	})
}

// Close stops the coordinator's goroutines (followers, retries, decisions) and waits for
// them, at most d.
func (l *ExitCoordinator) Close(d time.Duration) {
	w := &l.workers
	w.mu.Lock()
	if !w.stopped {
		w.stopped = true
		if w.cancel != nil {
			w.cancel()
		}
	}
	w.mu.Unlock()
	done := make(chan struct{})
	go func() { w.wg.Wait(); close(done) }() // ends once every goroutine saw stop
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		l.Log.Warn("node plugin goroutines still running after stop", "waited", d)
	}
}
