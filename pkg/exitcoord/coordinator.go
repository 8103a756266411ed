// Package exitcoord is the node plugin's exit coordinator: the effects of pkg/lifecycle's
// rules. It tells each sidecar when its pod's workload is done (the exit file, the pod files),
// follows stopping pods in the container runtime, keeps one record per pod of what it did,
// and records the Events that tell users why. pkg/nodeplugin wires it to the pod watch and
// the runtime watch.
package exitcoord

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/containerexit"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/csidriver"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/lifecycle"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podwatch"
)

// Events adapts a client-go EventRecorder to csidriver.EventSink.
type Events struct{ Recorder record.EventRecorder }

// PodEvent records an Event on the pod.
func (e Events) PodEvent(pod csidriver.PodRef, warning bool, reason, message string) {
	typ := corev1.EventTypeNormal
	if warning {
		typ = corev1.EventTypeWarning
	}
	e.Recorder.Event(&corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: pod.Namespace, Name: pod.Name, UID: podUID(pod.UID)}, typ, reason, message)
}

// ExitCoordinator acts on the pod watcher's decisions (podwatch.Handler): it tells each
// sidecar when to exit (the exit file), follows stopping pods in the runtime, and records the
// Events that say why. The rules it acts on are pkg/lifecycle's; this is the part with I/O.
type ExitCoordinator struct {
	KubeletRoot string
	Events      csidriver.EventSink
	Log         *slog.Logger
	// Runtime, if set, lets the sidecar of a stopping pod end as soon as the runtime reports
	// that the containers that can use its mounts have exited (see Follow). Without it the
	// sidecar serves until its drain deadline.
	Runtime containerexit.Runtime
	// Pods finds the pod of a sidecar that reported it is terminating; nil: the runtime alone.
	Pods PodLookup
	// Metrics counts done pods, follows, exit latencies and sidecar failures; nil counts
	// nothing.
	Metrics *podwatch.Metrics
	// OnSidecarFailed, if set, is told once per failed run of a pod's sidecar (the node
	// service answers the offers a sidecar that will not come back never took); it is
	// called from the pod watch and must be bounded.
	OnSidecarFailed func(pod *corev1.Pod)

	// workers owns the goroutines: followers, exit retries, runtime decisions, sweeps.
	workers workers
	// API, if set, lets a retried exit request ask the API whether the pod or its sidecar
	// is gone, so that it stops without a false SidecarExitFailed. Without it only the
	// pod status the watcher passed in and the emptyDir are consulted.
	API corev1client.PodsGetter

	exitRetry exitRetryPolicy // zero: the Exit* constants
	// pods is what the node plugin remembers of each pod (podrecord.go).
	pods podRecords
}

// The pod watcher's callbacks ExitCoordinator implements.
var (
	_ podwatch.Handler            = (*ExitCoordinator)(nil)
	_ podwatch.TerminationHandler = (*ExitCoordinator)(nil)
	_ podwatch.DeletionHandler    = (*ExitCoordinator)(nil)
	_ podwatch.InitHandler        = (*ExitCoordinator)(nil)
	_ podwatch.LatencyHandler     = (*ExitCoordinator)(nil)
)

// WorkloadDone writes the exit file, in both modes: the API reported the workload done.
// With a runtime watch the sidecar has usually been told already (ContainersChanged); this
// is the path without one, and a backstop. A native sidecar told before the kubelet stops it
// ends the pod sooner than the kubelet's SIGTERM would. The pod watch reports a done pod at
// each of its updates: the first report is logged and counted, and a request given up
// before is tried again.
func (l *ExitCoordinator) WorkloadDone(pod *corev1.Pod, d lifecycle.Decision) {
	l.workloadDone(pod, d)
}

// workloadDone logs and counts the first report of the pod's done workload, from the API or
// the runtime, and asks its sidecar to exit.
func (l *ExitCoordinator) workloadDone(pod *corev1.Pod, d lifecycle.Decision) {
	first := false
	l.record(pod.UID, func(r *podRecord) { first, r.doneReported = !r.doneReported, true })
	if first {
		l.Log.Info("workload done, sidecar must exit", "pod", pod.Namespace+"/"+pod.Name, "podUID", pod.UID, "rule", d.Rule,
			"mode", d.Mode, "reason", d.Reason, "workloadFinishedAt", d.WorkloadFinishedAt)
		l.Metrics.PodDone(d.Rule)
	}
	l.requestExit(pod, d)
}

// requestExit tells a legacy sidecar to exit by writing the exit file in its emptyDir.
//
// It is idempotent, because the pod watcher reports done pods again after a node plugin
// restart and the runtime follower may decide about a pod the watcher decides about too: an
// exit file already present is success, and no Event is recorded again. A sidecar whose
// status shows it ended for good needs nothing (its emptyDir is usually gone with it). A
// write that fails is retried in a goroutine owned by l (see retryExit) until it succeeds,
// the sidecar is gone, or ExitRetryFor passes; only then, and only for a sidecar that may
// still run, is SidecarExitFailed recorded, once. The first attempt is made at once on the
// caller's goroutine: it is a small local write, and the common case needs no goroutine.
func (l *ExitCoordinator) requestExit(pod *corev1.Pod, d lifecycle.Decision) {
	log := l.Log.With("pod", pod.Namespace+"/"+pod.Name, "podUID", pod.UID, "rule", d.Rule, "mode", d.Mode)
	if lifecycle.SidecarGone(pod) {
		log.Info("workload done; the sidecar has already ended, nothing to tell")
		return
	}
	if !l.claimExit(pod.UID) {
		log.Debug("exit already requested for this pod")
		return
	}
	outcome, err := l.tryExit(pod, d)
	switch outcome {
	case exitWritten:
		l.endExit(pod.UID, true)
		l.exitRequested(pod, d, log)
		return
	case exitPresent:
		l.endExit(pod.UID, true)
		log.Info("workload done; exit file already present, the sidecar was told")
		return
	}
	log.Warn("cannot ask the sidecar to exit yet; retrying", "err", err)
	if !l.goOwned(func(ctx context.Context) { l.retryExit(ctx, pod, d, outcome == exitFailed, err, log) }) {
		l.endExit(pod.UID, false)
		log.Warn("node plugin stopping; the exit request is not retried", "err", err)
	}
}

// SidecarFailed records a Warning Event naming the sidecar's reason, once per failed run
// of the sidecar (run, lifecycle.SidecarFailedRun): the pod watch reports it at each update.
func (l *ExitCoordinator) SidecarFailed(pod *corev1.Pod, run string, code int32, message string) {
	first := false
	l.record(pod.UID, func(r *podRecord) { first, r.failedRun = r.failedRun != run, run })
	if !first {
		return
	}
	l.Log.Warn("sidecar failed", "pod", pod.Namespace+"/"+pod.Name, "code", code, "message", message)
	l.Metrics.SidecarFailure()
	l.event(pod, true, contract.EventSidecarFailed, fmt.Sprintf("%s exited with code %d: %s", contract.SidecarContainerName, code, message))
	if l.OnSidecarFailed != nil {
		l.OnSidecarFailed(pod)
	}
}

// SidecarExited counts, once per pod, how long its sidecar took to exit after the
// workload (podwatch.LatencyHandler).
func (l *ExitCoordinator) SidecarExited(pod *corev1.Pod, mode string, latency time.Duration) {
	first := false
	l.record(pod.UID, func(r *podRecord) { first, r.latencyObserved = !r.latencyObserved, true })
	if first {
		l.Log.Info("sidecar exited after the workload", "pod", pod.Namespace+"/"+pod.Name, "mode", mode, "latency", latency.String())
		l.Metrics.ObserveExitLatency(mode, latency)
	}
}

func (l *ExitCoordinator) event(pod *corev1.Pod, warning bool, reason, msg string) {
	if l.Events != nil {
		l.Events.PodEvent(csidriver.PodRef{Namespace: pod.Namespace, Name: pod.Name, UID: string(pod.UID)}, warning, reason, msg)
	}
}

func podUID(s string) types.UID { return types.UID(s) }
