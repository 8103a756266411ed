// Package nodeplugin wires the node plugin's parts together: the CSI services, the pod
// watcher that decides when a workload is done, and the Events that tell users why.
package nodeplugin

import (
	"fmt"
	"log/slog"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/containerexit"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/csidriver"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/exitfile"
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

// Lifecycle acts on the pod watcher's decisions (podwatch.Handler).
type Lifecycle struct {
	KubeletRoot string
	Events      csidriver.EventSink
	Log         *slog.Logger
	// Runtime, if set, lets the sidecar of a stopping pod end as soon as the runtime reports
	// that the containers that can use its mounts have exited (see Follow). Without it the
	// sidecar serves until its drain deadline.
	Runtime containerexit.Runtime
	// Pods finds the pod of a sidecar that reported it is terminating; nil: the runtime alone.
	Pods PodLookup
	// Metrics counts the follows; nil counts nothing.
	Metrics *podwatch.Metrics

	follows followers
}

// The pod watcher's callbacks Lifecycle implements.
var (
	_ podwatch.Handler            = (*Lifecycle)(nil)
	_ podwatch.TerminationHandler = (*Lifecycle)(nil)
	_ podwatch.DeletionHandler    = (*Lifecycle)(nil)
	_ podwatch.InitHandler        = (*Lifecycle)(nil)
)

// WorkloadDone writes the exit file for a legacy sidecar. A native sidecar needs nothing:
// the kubelet sends it SIGTERM once the regular containers have exited.
func (l *Lifecycle) WorkloadDone(pod *corev1.Pod, d lifecycle.Decision) {
	if d.Mode != contract.ModeLegacy {
		l.Log.Info("workload done; the kubelet stops the native sidecar", "pod", pod.Namespace+"/"+pod.Name, "rule", d.Rule, "reason", d.Reason)
		return
	}
	l.requestExit(pod, d)
}

// requestExit writes the exit file that ends a legacy sidecar.
func (l *Lifecycle) requestExit(pod *corev1.Pod, d lifecycle.Decision) {
	log := l.Log.With("pod", pod.Namespace+"/"+pod.Name, "podUID", pod.UID, "rule", d.Rule, "mode", d.Mode)
	err := exitfile.Write(l.KubeletRoot, string(pod.UID), exitfile.Reason{
		Rule: string(d.Rule), Message: d.Reason, WorkloadFinishedAt: d.WorkloadFinishedAt,
	})
	if err != nil {
		log.Error("cannot ask the sidecar to exit", "err", err)
		l.event(pod, true, contract.EventSidecarExitFailed, fmt.Sprintf("cannot ask %s to exit: %v", contract.SidecarContainerName, err))
		return
	}
	lag := time.Duration(0)
	if !d.WorkloadFinishedAt.IsZero() {
		lag = time.Since(d.WorkloadFinishedAt)
	}
	log.Info("workload done; asked the sidecar to exit", "reason", d.Reason, "sinceWorkloadDoneMs", lag.Milliseconds())
	l.event(pod, false, contract.EventSidecarExitRequested, fmt.Sprintf("asked %s to exit: %s", contract.SidecarContainerName, d.Reason))
}

// SidecarFailed records a Warning Event naming the sidecar's reason.
func (l *Lifecycle) SidecarFailed(pod *corev1.Pod, code int32, message string) {
	l.Log.Warn("sidecar failed", "pod", pod.Namespace+"/"+pod.Name, "code", code, "message", message)
	l.event(pod, true, contract.EventSidecarFailed, fmt.Sprintf("%s exited with code %d: %s", contract.SidecarContainerName, code, message))
}

func (l *Lifecycle) event(pod *corev1.Pod, warning bool, reason, msg string) {
	if l.Events != nil {
		l.Events.PodEvent(csidriver.PodRef{Namespace: pod.Namespace, Name: pod.Name, UID: string(pod.UID)}, warning, reason, msg)
	}
}

func podUID(s string) types.UID { return types.UID(s) }
