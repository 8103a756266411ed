package exitcoord

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/gcsfuse-csi/gcsfuse-csi/internal/backoff"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/lifecycle"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podfiles"
)

// How a failed exit request is retried. A write can fail for a while for reasons that pass
// (the emptyDir not set up yet, a full or read-only disk, a kubelet replacing a directory),
// and a legacy sidecar that is never told keeps the pod running until someone deletes it: so
// it is retried, with a backoff that stays cheap for the node, for a bounded time.
const (
	// ExitRetryFirst is the wait before the first retry; each later wait doubles it.
	ExitRetryFirst = 250 * time.Millisecond
	// ExitRetryMax caps the wait between two attempts.
	ExitRetryMax = 10 * time.Second
	// ExitRetryFor is how long the effort runs before a sidecar still alive is reported
	// with a SidecarExitFailed Event. Trying goes on after it, every ExitRetryLate: a
	// kubelet directory full or read-only for longer than this usually comes back, and a
	// legacy Job that is never told runs forever (nothing else decides about it again).
	ExitRetryFor = 2 * time.Minute
	// ExitRetryLate is the pace of the attempts after ExitRetryFor.
	ExitRetryLate = 30 * time.Second
	// ExitRetryLongest bounds one effort: after it the request is given up, until a later
	// report of the pod's done workload (the API, the runtime) starts another.
	ExitRetryLongest = 24 * time.Hour
	// ExitAPITimeout bounds each question to the API server about the pod.
	ExitAPITimeout = 5 * time.Second
)

// exitRetryPolicy holds the retry timings; tests shorten them.
type exitRetryPolicy struct {
	first, max, total, late, longest, apiTimeout time.Duration
}

func (p exitRetryPolicy) orDefaults() exitRetryPolicy {
	if p.first <= 0 {
		p.first = ExitRetryFirst
	}
	if p.max <= 0 {
		p.max = ExitRetryMax
	}
	if p.total <= 0 {
		p.total = ExitRetryFor
	}
	if p.late <= 0 {
		p.late = ExitRetryLate
	}
	if p.longest < p.total {
		p.longest = max(p.total, ExitRetryLongest)
	}
	if p.apiTimeout <= 0 {
		p.apiTimeout = ExitAPITimeout
	}
	return p
}

// claimExit marks the pod's exit request in progress: false if it already is, or its
// sidecar was told or is gone. A request given up before is claimed again: any later report of a done
// workload retries it.
func (l *ExitCoordinator) claimExit(uid types.UID) (claimed bool) {
	l.record(uid, func(r *podRecord) {
		if r.exit != exitActive && r.exit != exitSettled {
			r.exit, claimed = exitActive, true
		}
	})
	return claimed
}

// endExit ends the pod's exit request: settled (told, or nothing to tell), or not (given
// up, or stopped).
func (l *ExitCoordinator) endExit(uid types.UID, settled bool) {
	l.record(uid, func(r *podRecord) {
		if settled {
			r.exit = exitSettled
		} else {
			r.exit = exitGaveUp
		}
	})
}

// exitFailedOnce reports whether SidecarExitFailed is still to be recorded for the pod,
// and marks it recorded: at most one per pod, however many efforts it takes.
func (l *ExitCoordinator) exitFailedOnce(uid types.UID) (first bool) {
	l.record(uid, func(r *podRecord) {
		first = !r.exitFailedReported
		r.exitFailedReported = true
	})
	return first
}

// exitOutcome is the result of one attempt to write the exit file.
type exitOutcome int

const (
	exitWritten exitOutcome = iota // written now: the sidecar is told
	exitPresent                    // already there: told before (by us or a previous node plugin)
	exitNoDir                      // the pod's gcsfuse-tmp emptyDir does not exist
	exitFailed                     // the emptyDir exists but the file could not be written
)

// tryExit makes one attempt: it writes the exit file unless one is already there.
func (l *ExitCoordinator) tryExit(pod *corev1.Pod, d lifecycle.Decision) (exitOutcome, error) {
	dir, err := podfiles.OpenTmpDir(l.KubeletRoot, string(pod.UID))
	if errors.Is(err, os.ErrNotExist) {
		return exitNoDir, err
	}
	if err != nil {
		return exitFailed, err
	}
	defer dir.Close()
	if present, err := podfiles.Present(dir); err != nil {
		return exitFailed, err
	} else if present {
		return exitPresent, nil
	}
	err = podfiles.WriteIn(dir, podfiles.Reason{Rule: string(d.Rule), Message: d.Reason, WorkloadFinishedAt: d.WorkloadFinishedAt})
	switch {
	case errors.Is(err, os.ErrNotExist):
		return exitNoDir, err // removed while we wrote
	case err != nil:
		return exitFailed, err
	}
	return exitWritten, nil
}

// askAPI asks the API server whether the pod's sidecar is gone: the pod no longer exists
// (or its name now belongs to another pod), or its status shows the sidecar ended for good.
// known is false when the API could not answer (no client, unreachable, timeout).
func (l *ExitCoordinator) askAPI(ctx context.Context, pod *corev1.Pod, timeout time.Duration) (gone, known bool) {
	if l.API == nil {
		return false, false
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// A list by name on this node rather than a get: every pod read of the node plugin then
	// carries spec.nodeName, so an authorizer that sees field selectors (Kubernetes >= 1.31)
	// can confine it to its own node's pods (docs/architecture.md, "Node-scoped reads").
	list, err := l.API.Pods(pod.Namespace).List(ctx, metav1.ListOptions{FieldSelector: PodOnNodeSelector(pod.Name, pod.Spec.NodeName)})
	if err != nil {
		return false, false
	}
	for i := range list.Items {
		if cur := &list.Items[i]; cur.Name == pod.Name && cur.UID == pod.UID {
			return lifecycle.SidecarGone(cur), true
		}
	}
	return true, true // gone, or its name now belongs to another pod
}

// PodOnNodeSelector is the field selector of the pod named name on node (any pod named name
// when node is ""), the form of every single-pod read of the node plugin.
func PodOnNodeSelector(name, node string) string {
	sel := fields.Set{"metadata.name": name}
	if node != "" {
		sel["spec.nodeName"] = node
	}
	return sel.AsSelector().String()
}

// retryExit retries an exit request until the sidecar is told or gone, ctx ends (Close), or
// the longest effort is spent. After the retry budget (total), a sidecar that may still be
// alive is reported once with a SidecarExitFailed Event, and attempts go on at the late
// pace: a directory that comes back then still gets its exit file. sawDir says whether an
// earlier attempt found the emptyDir: once seen, its disappearance means the kubelet tore
// the pod's volumes down, sidecar included.
func (l *ExitCoordinator) retryExit(ctx context.Context, pod *corev1.Pod, d lifecycle.Decision, sawDir bool, lastErr error, log *slog.Logger) {
	p := l.exitRetry.orDefaults()
	settled := true // told, or nothing to tell; false when stopped or given up
	defer func() { l.endExit(pod.UID, settled) }()
	start := time.Now()
	reportAt, end := start.Add(p.total), start.Add(p.longest)
	reported := false
	pace := backoff.Doubling(p.first, p.max)
	attempts := 1
	for {
		now := time.Now()
		if !reported && !now.Before(reportAt) {
			// The budget is spent. Report only a sidecar that may still be running: the
			// API's word if it answers, otherwise the last status the watcher saw
			// (checked in requestExit).
			if gone, _ := l.askAPI(ctx, pod, p.apiTimeout); gone {
				log.Info("the API reports the sidecar gone; nothing to tell", "attempts", attempts, "err", lastErr)
				return
			}
			if ctx.Err() != nil {
				settled = false
				return
			}
			reported = true
			log.Error("cannot ask the sidecar to exit; still trying", "attempts", attempts, "for", p.total.String(),
				"every", p.late.String(), "until", p.longest.String(), "err", lastErr)
			if l.exitFailedOnce(pod.UID) {
				l.event(pod, true, contract.EventSidecarExitFailed, fmt.Sprintf("cannot ask %s to exit after %d attempts over %s: %v; still trying every %s", contract.SidecarContainerName, attempts, p.total, lastErr, p.late))
			}
		}
		if !now.Before(end) {
			break
		}
		wait := p.late
		if !reported {
			wait = min(pace.Step(), reportAt.Sub(now))
		}
		if !sleep(ctx, min(wait, end.Sub(now))) {
			settled = false
			log.Info("node plugin stopping; no longer trying to ask the sidecar to exit", "attempts", attempts, "err", lastErr)
			return
		}
		attempts++
		outcome, err := l.tryExit(pod, d)
		switch outcome {
		case exitWritten:
			l.exitRequested(pod, d, log, "attempts", attempts, "after", time.Since(start).Round(time.Millisecond).String())
			return
		case exitPresent:
			log.Info("exit file already present; the sidecar was told", "attempts", attempts)
			return
		case exitNoDir:
			if sawDir {
				log.Info("the pod's emptyDir is gone, and its sidecar with it; nothing to tell", "attempts", attempts)
				return
			}
		case exitFailed:
			sawDir = true
		}
		lastErr = err
		if gone, _ := l.askAPI(ctx, pod, p.apiTimeout); gone {
			log.Info("the API reports the sidecar gone; nothing to tell", "attempts", attempts, "err", lastErr)
			return
		}
	}
	settled = false
	if ctx.Err() != nil {
		return
	}
	log.Error("cannot ask the sidecar to exit; giving up until the workload's end is reported again", "attempts", attempts, "for", p.longest.String(), "err", lastErr)
}

// sleep waits d, or until ctx ends; false when ctx ended first (the retries' way to stop).
func sleep(ctx context.Context, d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
		return true
	}
}

// exitRequested logs and reports an exit file just written.
func (l *ExitCoordinator) exitRequested(pod *corev1.Pod, d lifecycle.Decision, log *slog.Logger, attrs ...any) {
	lag := time.Duration(0)
	if !d.WorkloadFinishedAt.IsZero() {
		lag = time.Since(d.WorkloadFinishedAt)
	}
	log.Info("workload done; asked the sidecar to exit", append([]any{"reason", d.Reason, "sinceWorkloadDoneMs", lag.Milliseconds()}, attrs...)...)
	l.event(pod, false, contract.EventSidecarExitRequested, fmt.Sprintf("asked %s to exit: %s", contract.SidecarContainerName, d.Reason))
}

// goOwned runs f in a goroutine that ExitCoordinator.Close stops (it cancels f's ctx) and
// waits for, within Close's bound. It returns false, without running f, once Close has
// begun.
func (l *ExitCoordinator) goOwned(f func(ctx context.Context)) bool {
	w := &l.workers
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return false
	}
	if w.ctx == nil {
		w.ctx, w.cancel = context.WithCancel(context.Background())
	}
	parent := w.ctx
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		ctx, cancel := context.WithCancel(parent)
		defer cancel()
		f(ctx)
	}()
	return true
}
